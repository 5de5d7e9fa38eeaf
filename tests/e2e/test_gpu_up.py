"""`provision up` of the GPU stack on a fresh lab laptop (simulated RTX 5090 Laptop, nouveau loaded):
check mode exact, one real reboot, driver, CUDA, docker, container toolkit, host tuning; rerun 0
changed; then a new driver pin upgrades with exactly one more reboot."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.helpers import HELD_BY_UP, Run, provision, sh
from tests.lab import LabHost
from tests.standins.nvidia import HostTraits
from tests.standins.nvidia.catalogue import DRIVER_VERSIONS

pytestmark = pytest.mark.lab

GPU_STACK = "preflight,nvidia_driver,cuda_toolkit,docker,container_toolkit,host_tuning"
FIRST_DRIVER, NEXT_DRIVER = DRIVER_VERSIONS
REBOOT = "reboot for the NVIDIA driver"
BOOT_COUNTER = (  # test instrumentation: every boot of the host appends a line
    "printf '[Unit]\\nDescription=count boots (test)\\n[Service]\\nType=oneshot\\n"
    "ExecStart=/bin/sh -c \"echo boot >> /var/lib/test-boots\"\\n[Install]\\nWantedBy=multi-user.target\\n' "
    "> /etc/systemd/system/test-boot-counter.service && systemctl enable -q test-boot-counter.service")
# what provisioning changes; check mode must leave all of it alone
STATE = ("for d in /etc/apt/sources.list.d /etc/apt/preferences.d /etc/apt/apt.conf.d /etc/modprobe.d "
         "/etc/modules-load.d /etc/profile.d /etc/systemd/system /etc/docker; "
         "do echo \"$d: $(ls -A \"$d\" 2>/dev/null | tr '\\n' ' ')\"; done; "
         "dpkg-query -W -f='${Package} ${Version}\\n'; apt-mark showhold")


def up(inventory: Path, json_path: Path, *args: str) -> Run:
    """`provision up` of the GPU stack (the serving roles of site.yaml are not selected)."""
    return provision("up", str(inventory), "--tags", GPU_STACK, *args, json_path=json_path)


def boots(host: LabHost) -> int:
    return int(host.exec("cat /var/lib/test-boots 2>/dev/null | wc -l")[1].strip())


@pytest.fixture(scope="module")
def laptop(gpu_host, gpu_inventory, gpu_check_image, tmp_path_factory):
    """A fresh laptop: --check, the first run and the rerun, with what each left behind."""
    tmp = tmp_path_factory.mktemp("gpu-up")
    host = gpu_host(HostTraits(nouveau_at_boot=True), prefix="laptop")
    sh(host, BOOT_COUNTER)
    inventory = gpu_inventory(tmp / "inventory.yaml", [host], nvidia_driver_version=FIRST_DRIVER)
    before = host.exec(STATE)[1]
    check = up(inventory, tmp / "check.json", "--check")
    after_check = host.exec(STATE)[1]
    first = up(inventory, tmp / "first.json")
    boots_after_first = boots(host)
    second = up(inventory, tmp / "second.json")
    return {"host": host, "inventory": inventory, "tmp": tmp, "check": check, "first": first, "second": second,
            "untouched": before == after_check, "boots_after_first": boots_after_first,
            "boots_after_second": boots(host), "image": gpu_check_image}


def test_check_mode_changes_nothing(laptop):
    assert laptop["check"].returncode == 0, laptop["check"].output
    assert laptop["untouched"], "check mode changed the host"


def test_check_mode_predicts_the_first_run_exactly(laptop):
    name = laptop["host"].name
    predicted, done = laptop["check"].changed_tasks(name), laptop["first"].changed_tasks(name)
    assert predicted == done
    assert REBOOT in done and "NVIDIA open driver installed and held" in done and "restart docker" in done


def test_first_run_installs_the_driver_with_one_reboot(laptop):
    first, host = laptop["first"], laptop["host"]
    assert first.returncode == 0, first.output
    assert laptop["boots_after_first"] == 1
    summaries = {task["name"]: task["summary"] for task in first.host(host.name)["tasks"]}
    assert summaries[REBOOT] == "reboot (nouveau holds the GPU)"
    query = "nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader,nounits"
    assert sh(host, query) == f"NVIDIA GeForce RTX 5090 Laptop GPU, {FIRST_DRIVER}, 12.0, 24463"
    assert "Open Kernel Module" in sh(host, "cat /proc/driver/nvidia/version")
    assert sh(host, "test -d /sys/module/nouveau && echo loaded || echo gone") == "gone"
    assert sh(host, "apt-mark showhold").split() == HELD_BY_UP
    installed = sh(host, "dpkg-query -W -f='${Package}\\n' | sort").split()
    assert {"nvidia-kernel-open-dkms", "cuda-toolkit-12-9", "nvidia-container-toolkit"} <= set(installed)
    assert set(installed).isdisjoint({"nvidia-kernel-dkms", "cuda-drivers", "cuda", "cuda-12-9", "nvidia-open"})


def test_first_run_sets_up_cuda_docker_and_the_laptop(laptop):
    host = laptop["host"]
    assert "release 12.9," in sh(host, "bash -lc 'nvcc --version'")
    assert sh(host, "systemctl is-active docker nvidia-persistenced nvidia-dev-char-symlinks").split() == ["active"] * 3
    daemon_json = sh(host, "cat /etc/docker/daemon.json")
    assert '"nvidia"' in daemon_json and '"log-driver"' in daemon_json
    masked = sh(host, "systemctl is-enabled sleep.target suspend.target hibernate.target hybrid-sleep.target || true")
    assert masked.split() == ["masked"] * 4
    assert "HandleLidSwitch=ignore" in sh(host, "cat /etc/systemd/logind.conf.d/provision.conf")
    assert sh(host, "nvidia-smi -q | grep 'Persistence Mode'").split(":")[-1].strip() == "Enabled"
    assert sh(host, "systemctl --failed --no-legend") == ""


def test_a_container_sees_the_gpu(laptop):
    output = sh(laptop["host"], f"docker run --rm --gpus all {laptop['image']} nvidia-smi -L")
    assert output.startswith("GPU 0: NVIDIA GeForce RTX 5090 Laptop GPU")


def test_rerun_changes_nothing_and_does_not_reboot(laptop):
    second, name = laptop["second"], laptop["host"].name
    assert second.returncode == 0, second.output
    assert second.host(name)["changed"] == 0 and second.changed_tasks(name) == []
    assert laptop["boots_after_second"] == laptop["boots_after_first"]
    tasks = {task["name"]: task for task in second.host(name)["tasks"]}
    assert tasks["NVIDIA GPU found"]["summary"] == (
        f"0000:01:00.0 [10de:2c58]: NVIDIA GeForce RTX 5090 Laptop GPU, compute capability 12.0, 24463 MiB, "
        f"driver {FIRST_DRIVER} (open kernel module)")
    assert tasks["a container sees the GPU"]["status"] == "ok"
    assert second.host(name)["round_trips"] <= 5


@pytest.fixture(scope="module")
def upgraded(laptop):
    """The same laptop with the next driver release pinned: --check, the run, the rerun."""
    host, tmp = laptop["host"], laptop["tmp"]
    inventory = laptop["inventory"]
    inventory.write_text(inventory.read_text().replace(FIRST_DRIVER, NEXT_DRIVER))
    boots_before = boots(host)
    check = up(inventory, tmp / "upgrade-check.json", "--check")
    run = up(inventory, tmp / "upgrade.json")
    boots_after_run = boots(host)
    rerun = up(inventory, tmp / "upgrade-rerun.json")
    return {"host": host, "check": check, "run": run, "rerun": rerun, "reboots": boots_after_run - boots_before,
            "reboots_on_rerun": boots(host) - boots_after_run}


def test_a_new_driver_pin_upgrades_with_exactly_one_reboot(upgraded):
    run, host = upgraded["run"], upgraded["host"]
    assert run.returncode == 0, run.output
    expected = ["NVIDIA driver pinned to its release", "NVIDIA open driver installed and held", REBOOT]
    assert upgraded["check"].changed_tasks(host.name) == run.changed_tasks(host.name) == expected
    assert upgraded["reboots"] == 1
    assert sh(host, "nvidia-smi --query-gpu=driver_version --format=csv,noheader") == NEXT_DRIVER
    assert sh(host, "apt-mark showhold").split() == HELD_BY_UP


def test_after_the_upgrade_a_rerun_changes_nothing(upgraded):
    rerun, name = upgraded["rerun"], upgraded["host"].name
    assert rerun.returncode == 0, rerun.output
    assert rerun.changed_tasks(name) == [] and upgraded["reboots_on_rerun"] == 0
