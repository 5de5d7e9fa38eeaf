"""Preflight on lab hosts: each refusal exits non-zero with its own message and changes nothing; a
held dpkg lock is waited for, within its bound."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.e2e.helpers import Run, provision
from tests.standins.nvidia import HostTraits

pytestmark = pytest.mark.lab

GPU_STACK = "preflight,nvidia_driver,cuda_toolkit,docker,container_toolkit,host_tuning"
# what provisioning would change first; a refusal must leave all of it alone
STATE = ("for d in /etc/apt/sources.list.d /etc/apt/preferences.d /etc/apt/apt.conf.d /etc/modprobe.d "
         "/etc/modules-load.d; do echo \"$d: $(ls -A \"$d\" 2>/dev/null | tr '\\n' ' ')\"; done; "
         "dpkg-query -W -f='${Package} ${Version}\\n'; apt-mark showhold")
UBUNTU_2004 = ('PRETTY_NAME="Ubuntu 20.04.6 LTS"\\nNAME="Ubuntu"\\nVERSION_ID="20.04"\\n'
               'VERSION_CODENAME=focal\\nID=ubuntu\\nID_LIKE=debian\\n')
# host -> (the refusal, words of its message)
REFUSALS = {
    "nogpu": ("an NVIDIA GPU is on the PCI bus", "No NVIDIA GPU on the PCI bus"),
    "oldos": ("the operating system is supported", "Ubuntu 20.04.6 LTS is not supported"),
    "secureboot": ("Secure Boot allows the driver's kernel module", "Machine Owner Key"),
    "lowdisk": ("enough free disk for the image and the weights", "Not enough free disk"),
    "primeintel": ("PRIME does not switch the NVIDIA GPU off", "sudo prime-select nvidia"),
}


def hold_dpkg_lock(host, seconds: int) -> str:
    """Hold the dpkg frontend lock as apt does (an fcntl lock) for `seconds`; returns the holder's pid."""
    script = ("import fcntl, time; f = open('/var/lib/dpkg/lock-frontend', 'w'); "
              f"fcntl.lockf(f, fcntl.LOCK_EX); time.sleep({seconds})")
    rc, pid = host.exec(f'nohup python3 -c "{script}" >/dev/null 2>&1 & echo $!')
    assert rc == 0, pid
    time.sleep(0.5)
    return pid.strip()


@pytest.fixture(scope="module")
def refused(gpu_host, gpu_inventory, tmp_path_factory):
    """One host per refusal, all in one run (and one check-mode run), with their state before and after."""
    tmp = tmp_path_factory.mktemp("gpu-preflight")
    traits = {"nogpu": HostTraits(gpu=None), "oldos": HostTraits(), "secureboot": HostTraits(secure_boot=True),
              "lowdisk": HostTraits(), "primeintel": HostTraits(prime_profile="intel")}
    with ThreadPoolExecutor(len(traits)) as pool:  # started at once: one at a time took 5 host boots
        made = {key: pool.submit(gpu_host, trait, prefix=key) for key, trait in traits.items()}
        hosts = {key: future.result() for key, future in made.items()}
    # host state, not a setting: this host says it is Ubuntu 20.04
    hosts["oldos"].exec(f"rm /etc/os-release && printf '{UBUNTU_2004}' > /etc/os-release")
    inventory = gpu_inventory(tmp / "inventory.yaml", list(hosts.values()),
                              host_vars={hosts["lowdisk"].name: {"preflight_min_free_gib": 1_000_000}})
    before = {key: host.exec(STATE)[1] for key, host in hosts.items()}
    check = provision("up", str(inventory), "--tags", GPU_STACK, "--check", json_path=tmp / "check.json")
    run = provision("up", str(inventory), "--tags", GPU_STACK, json_path=tmp / "run.json")
    after = {key: host.exec(STATE)[1] for key, host in hosts.items()}
    return {"hosts": hosts, "inventory": inventory, "tmp": tmp, "check": check, "run": run,
            "changes": {key: changes(before[key], after[key]) for key in hosts}}


def changes(before: str, after: str) -> list[str]:
    """Lines of the host state that appeared or disappeared."""
    old, new = before.splitlines(), after.splitlines()
    return [f"-{line}" for line in old if line not in new] + [f"+{line}" for line in new if line not in old]


def failures(run: Run, host_name: str) -> list[tuple[str, str]]:
    return [(task["name"], task["error"]) for task in run.host(host_name)["tasks"] if task["status"] == "failed"]


@pytest.mark.parametrize("key", sorted(REFUSALS))
def test_each_refusal_has_its_own_message_and_changes_nothing(refused, key):
    name = refused["hosts"][key].name
    refusal, words = REFUSALS[key]
    for run in (refused["check"], refused["run"]):
        assert run.returncode == 1
        ((task, error),) = failures(run, name)
        assert task == refusal and words in error
        assert run.host(name)["changed"] == 0
    assert refused["changes"][key] == [], f"{key}: the refused host was changed"


def test_a_held_dpkg_lock_is_waited_for_within_its_bound(refused):
    host = refused["hosts"]["lowdisk"]
    args = ("up", str(refused["inventory"]), "--limit", host.name, "--tags", "preflight")
    fits = '{"preflight_min_free_gib": 0}'
    hold_dpkg_lock(host, 8)
    waited = provision(*args, "-e", fits, json_path=refused["tmp"] / "lock.json")
    assert waited.returncode == 0, waited.output
    tasks = {task["name"]: task for task in waited.host(host.name)["tasks"]}
    assert tasks["the dpkg lock is free"]["status"] == "ok" and tasks["the dpkg lock is free"]["elapsed"] > 3
    holder = hold_dpkg_lock(host, 120)
    bounded = provision(*args, "-e", '{"preflight_min_free_gib": 0, "preflight_dpkg_lock_timeout": 1}',
                        json_path=refused["tmp"] / "lock-bounded.json")
    host.exec(f"kill {holder}")
    assert bounded.returncode == 1
    ((task, error),) = failures(bounded, host.name)
    assert task == "the dpkg lock is free" and "still held by process" in error and "(python3)" in error
