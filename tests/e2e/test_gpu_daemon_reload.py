"""Containers keep the GPU after `systemctl daemon-reload` (NVIDIA/nvidia-container-toolkit#48; the
container toolkit's troubleshooting page "Containers losing access to GPUs with error: Failed to
initialize NVML: Unknown Error"). On a Debian 13 laptop (docker.io 26) the GPU site converges with
CDI; on Debian 12 (docker.io 20.10) with the legacy hook and docker's cgroupfs driver. In both, a
container started before a daemon-reload still lists the GPU after it, and the role's own check
(which runs a daemon-reload) passes; the old setup (`--gpus all` under systemd's cgroup management)
loses the GPU exactly as the real one does.

The same laptop has someone logged in (a real logind session, opened through PAM as a login does):
the run changes the lid settings and must leave that session alive (systemd-logind reloaded, never
restarted while a session is open: systemd/systemd#17308)."""

from __future__ import annotations

import pytest

from tests.e2e.helpers import provision
from tests.standins.nvidia import HostTraits

pytestmark = pytest.mark.lab

STACK = "preflight,nvidia_driver,docker,container_toolkit,host_tuning"
# a laptop's desktop install has pam_systemd (the lab image is minbase); then a PAM "login" session
LOG_IN = ("DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libpam-systemd >/dev/null 2>&1 && "
          "systemd-run --uid=1000 -p PAMName=login --unit=desk-session sleep infinity >/dev/null 2>&1 && sleep 1 && "
          "loginctl list-sessions --no-legend | awk '$3 == \"deploy\" { print $1 }' | sort")
LOST = "Failed to initialize NVML: Unknown Error"


def sh(host, command: str) -> tuple[int, str]:
    rc, output = host.exec(command)
    return rc, output.strip()


def survives_reload(host, image: str, *request: str) -> tuple[str, str]:
    """nvidia-smi -L in a container started before a `systemctl daemon-reload`, before and after it."""
    options = " ".join(request)
    rc, _ = sh(host, f"docker run -d --name reload-test {options} --entrypoint sleep {image} 300")
    assert rc == 0
    try:
        before = sh(host, "docker exec reload-test nvidia-smi -L")[1]
        sh(host, "systemctl daemon-reload")
        after = sh(host, "docker exec reload-test nvidia-smi -L")[1]
    finally:
        sh(host, "docker rm -f reload-test")
    return before, after


@pytest.fixture(scope="module")
def trixie(gpu_host, gpu_inventory, gpu_check_image, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("daemon-reload")
    host = gpu_host(HostTraits(nouveau_at_boot=False), prefix="trixie", suite="trixie")
    # the stand-in CUDA key is the lab's own (no SHA-1 binding): the Debian 13 escape of preflight holds
    # and CUDA 12.9 compiles nothing on its glibc 2.41 (preflight refuses it: NVIDIA/cuda-samples#378)
    inventory = gpu_inventory(tmp / "inventory.yaml", [host], nvidia_debian13_sha1_ok=True, cuda_toolkit_enabled=False)
    rc, sessions = sh(host, f"apt-get update -qq && {LOG_IN}")
    assert rc == 0 and sessions, f"no logind session: {sessions}"
    logind_pid = sh(host, "systemctl show -p MainPID --value systemd-logind")[1]
    first = provision("up", str(inventory), "--tags", STACK, json_path=tmp / "first.json")
    second = provision("up", str(inventory), "--tags", STACK, json_path=tmp / "second.json")
    return {"host": host, "first": first, "second": second, "image": gpu_check_image, "sessions": sessions,
            "logind_pid": logind_pid, "inventory": inventory}


def test_debian13_converges_with_cdi(trixie):
    first, second, host = trixie["first"], trixie["second"], trixie["host"]
    assert first.returncode == 0, first.output
    assert sh(host, "docker version --format '{{.Server.Version}}'")[1].startswith("26.")
    changed = first.changed_tasks(host.name)
    assert "docker reads CDI specs" in changed and "CDI spec for the running driver" in changed
    spec = sh(host, "cat /etc/cdi/nvidia.yaml")[1]
    assert "kind: nvidia.com/gpu" in spec and "- name: all" in spec
    driver = sh(host, "nvidia-smi --query-gpu=driver_version --format=csv,noheader")[1]
    assert f"libnvidia-ml.so.{driver}" in spec
    assert second.returncode == 0 and second.changed_tasks(host.name) == [], second.output
    tasks = {task["name"]: task for task in second.host(host.name)["tasks"]}
    check = tasks["a container sees the GPU"]
    assert check["status"] == "ok" and "after systemctl daemon-reload:" in check["summary"]
    assert check["summary"].split("; ")[-1].startswith("GPU 0: NVIDIA GeForce RTX 5090 Laptop GPU")
    # the first run's pass (its handler's, after docker's restart), on the same stack: no container started
    assert check["summary"].startswith("passed earlier on this boot")


def test_a_cdi_container_keeps_the_gpu_after_daemon_reload(trixie):
    before, after = survives_reload(trixie["host"], trixie["image"], "--device", "nvidia.com/gpu=all")
    assert before.startswith("GPU 0: NVIDIA GeForce RTX 5090 Laptop GPU") and after == before


def test_the_legacy_hook_under_systemd_loses_the_gpu_at_a_daemon_reload(trixie):
    """What the role replaced (`--gpus all`, docker managing cgroups through systemd): the trap."""
    before, after = survives_reload(trixie["host"], trixie["image"], "--gpus", "all")
    assert before.startswith("GPU 0:") and after == LOST
    rc, output = sh(trixie["host"], f"/usr/local/sbin/provision-gpu-in-container-check {trixie['image']} --gpus all")
    assert rc != 0 and output.splitlines()[-1] == LOST


def test_the_logged_in_session_survives_up(trixie):
    host, first = trixie["host"], trixie["first"]
    tasks = {task["name"]: task for task in first.host(host.name)["tasks"]}
    assert "HandleLidSwitch=ignore" in sh(host, "cat /etc/systemd/logind.conf.d/provision.conf")[1]
    assert "restarted" not in tasks["systemd-logind reloads its settings"]["summary"].replace("no restart", "")
    after = sh(host, "loginctl list-sessions --no-legend | awk '$3 == \"deploy\" { print $1 }' | sort")[1]
    assert after == trixie["sessions"]  # the same sessions, still open
    assert sh(host, "systemctl is-active desk-session")[1] == "active"
    assert sh(host, "systemctl show -p MainPID --value systemd-logind")[1] == trixie["logind_pid"]  # never restarted


def test_a_changed_toolkit_setting_makes_the_check_start_a_container_again(trixie, tmp_path):
    """The recorded pass holds only for the stack it was made on: a hand edit of the toolkit's config
    (which no task manages) and the rerun checks for real, reload included."""
    host = trixie["host"]
    config = "/etc/nvidia-container-runtime/config.toml"
    sh(host, f"mkdir -p {config.rsplit('/', 1)[0]} && echo '# edited by hand' >> {config}")
    third = provision("up", str(trixie["inventory"]), "--tags", STACK, json_path=tmp_path / "third.json")
    assert third.returncode == 0 and third.changed_tasks(host.name) == [], third.output
    check = {task["name"]: task for task in third.host(host.name)["tasks"]}["a container sees the GPU"]
    assert not check["summary"].startswith("passed earlier")
    assert "after systemctl daemon-reload:" in check["summary"]
