"""Month two on an Ubuntu laptop (issue 21): the GPU keeps serving through a kernel update, the 580
SRU that comes with it, unattended-upgrades and a reboot; month three's kernel without its signed
module stops the next run before a reboot would boot it. Through it all NVIDIA's repository has a
container toolkit newer than the one pinned (1.18.2-1 against 1.18.0-1, the issue's case): it is not
taken in the background, and the next run neither downgrades it back nor restarts docker and the model.
Month two also brings a docker.io update, which unattended-upgrades takes; the model serves through it
and the next run keeps it.

The laptop is Ubuntu-shaped (tests/lab/laptop.py: ubuntu_laptop) and fed by the stand-in noble archive
(tests/standins/ubuntu), which publishes what each month brings; unattended-upgrades is the real one.
One module fixture walks the months; each test asserts one thing of what it left.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.helpers import provision
from tests.e2e.month_walk_support import BOOT_ID, SMI, UNATTENDED_UPGRADES, Timer, model_started, reboot, sh, up
from tests.lab import Lab
from tests.lab.laptop import ubuntu_laptop
from tests.lab.net import MACHINE_FROM_HOSTS, free_port
from tests.standins.hub.cli import start_hub
from tests.standins.hub.server import HubOptions
from tests.standins.nvidia import HostTraits, serve
from tests.standins.ubuntu import MONTHS, UbuntuArchive
from tests.standins.ubuntu.docker_io import repackaged_docker_io
from tests.standins.vllm.build import build_images

pytestmark = pytest.mark.lab

REPO = "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit"
HF_TOKEN = "hf_standin_" + secrets.token_hex(12)
FIRST_ARCHIVE_PORT = 18990
TOOLKIT_PIN, TOOLKIT_NEWER = "1.18.0-1", "1.18.2-1"  # both in the NVIDIA stand-in repository (catalogue.py)
TOOLKIT = ("dpkg-query -W -f='${Version}\\n' nvidia-container-toolkit; apt-cache madison nvidia-container-toolkit; "
           "apt-mark showhold")
DOCKER_IO = "dpkg-query -W -f='${Version}' docker.io"
# the model answers (vLLM's /health needs no key); the stand-in is ready a second after its start
SERVES = ("for i in $(seq 60); do curl -sf -o /dev/null http://127.0.0.1:8000/health && exit 0; sleep 1; done; "
          "systemctl status vllm.service --no-pager; exit 1")
DRIVER = ("dpkg-query -W -f='${Package} ${Version}\\n' 'nvidia-*' 'libnvidia-*' 'linux-modules-nvidia-*' "
          "'linux-image-*' 2>/dev/null | grep -v ' $' | sort")


@pytest.fixture(scope="module")
def months(lab: Lab, gpu_inventory, tmp_path_factory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("month-two")
    timer = Timer()
    archive = UbuntuArchive(tmp / "archive")
    archive.publish("one")
    port = free_port(FIRST_ARCHIVE_PORT, set())
    server = serve(archive.root.parent, port)
    hub = start_hub(tmp / "hub", repo_id=REPO, options=HubOptions(token=HF_TOKEN))
    images = build_images(f"127.0.0.1:{lab.registry.port}", pull_registry=lab.registry.address_for_hosts,
                          behaviours=("ok",), env={"STANDIN_READY_DELAY": "1"}, log=lambda _: None)
    timer.mark("images")
    try:
        host = ubuntu_laptop(lab, tmp / "traits", HostTraits(secure_boot=True), port, archive.keyring)
        inventory = gpu_inventory(
            tmp / "inventory.yaml", [host], nvidia_driver_signed_modules=True, nvidia_reboot="auto",
            hf_endpoint=f"http://{MACHINE_FROM_HOSTS}:{hub.server.server_address[1]}", hf_token=HF_TOKEN,
            office_cache_trusted=True, vllm_image=images["ok"], vllm_ready_timeout=180, smoke_timeout=60,
            preflight_min_free_gib=5, nvidia_container_toolkit_version=TOOLKIT_PIN)
        seen: dict[str, Any] = {"host": host}
        timer.mark("laptop ready")

        # day one
        seen["day_one"] = day_one = up(inventory, host, tmp, "day-one", timer)
        assert day_one.returncode == 0, day_one.output[-6000:]
        seen["day_one_smi"] = sh(host, SMI)
        # a month later: -security has kernel ABI 41 and its signed modules, built against the 580 SRU,
        # and a docker.io update (the installed one repackaged with a higher version)
        docker_update = repackaged_docker_io(host, archive.pool / "two")
        seen["docker_update"] = docker_update.version
        archive.publish("two", [docker_update])
        seen["model_before_upgrade"] = model_started(host)
        seen["upgrade_two"] = sh(host, UNATTENDED_UPGRADES)
        seen["docker_two"] = sh(host, DOCKER_IO)
        seen["model_after_upgrade"] = host.exec("systemctl is-active vllm.service")[1].strip()
        seen["serves_after_upgrade"] = host.exec(SERVES)
        seen["model_restarted_by_upgrade"] = model_started(host)
        print(f"\ndocker.io {seen['docker_two']}: the model's container started {seen['model_before_upgrade']} "
              f"before the upgrade, {seen['model_restarted_by_upgrade']} after it")
        seen["before_reboot"] = sh(host, DRIVER)
        seen["toolkit_two"] = sh(host, TOOLKIT)
        timer.mark("unattended-upgrades")
        # the new userspace beside the old module: nvidia-smi exits 18 until the reboot; what would a run do?
        seen["smi_before_reboot"] = host.exec(SMI)
        seen["check_before_reboot"] = provision("up", str(inventory), "--check", json_path=tmp / "check.json")
        reboot(host)
        timer.mark("reboot")
        seen["booted"] = sh(host, "cat /run/ubuntu-standin/booted-kernel")
        seen["after_reboot_smi"] = host.exec(SMI)
        seen["model_after_reboot"] = host.exec("systemctl is-active vllm.service")[1].strip()
        seen["started_after_reboot"] = model_started(host)
        seen["serves_after_reboot"] = host.exec(SERVES)
        seen["month_two"] = up(inventory, host, tmp, "month-two", timer)
        seen["after_up"] = sh(host, DRIVER)
        seen["started_after_up"] = model_started(host)
        seen["docker_after_up"] = sh(host, DOCKER_IO)
        # month three: ABI 42 is out, its signed module is not
        archive.publish("three")
        sh(host, UNATTENDED_UPGRADES)
        seen["boot_id_three"] = sh(host, BOOT_ID)
        seen["month_three"] = up(inventory, host, tmp, "month-three", timer)
        seen["boot_id_after_three"] = sh(host, BOOT_ID)
        seen["booted_after_three"] = sh(host, "cat /run/ubuntu-standin/booted-kernel")
        print(f"\nmonth two walk: {timer}")
        yield seen
    finally:
        hub.stop()
        server.stop()
        archive.close()


def test_day_one_converges_on_canonicals_signed_modules(months):
    assert months["day_one"].returncode == 0
    # the running kernel's signed module loads at once (no nouveau here): no reboot on day one
    assert "reboot for the NVIDIA driver" not in months["day_one"].changed_tasks(months["host"].name)
    assert months["day_one_smi"] == MONTHS["one"].driver


def test_after_the_months_kernel_update_and_reboot_the_gpu_serves_without_a_run_of_ours(months):
    two = MONTHS["two"]
    # unattended-upgrades moved the kernel, its signed module and the branch's SRU together
    assert f"linux-modules-nvidia-580-open-{two.newest.release} " in months["before_reboot"]
    assert "libnvidia-compute-580 580.173.02" in months["before_reboot"]
    assert months["booted"] == two.newest.release
    assert months["after_reboot_smi"] == (0, f"{two.driver}\n"), months["upgrade_two"]
    assert months["model_after_reboot"] == "active"


def test_before_the_reboot_the_upgraded_driver_is_adopted_not_replaced(months):
    # nvidia-smi's rc 18 ("Driver/library version mismatch") is a working driver whose packages moved
    assert months["smi_before_reboot"][0] == 18, months["smi_before_reboot"]
    check, name = months["check_before_reboot"], months["host"].name
    assert check.returncode == 0, check.output[-4000:]
    planned = check.changed_tasks(name)
    assert "reboot for the NVIDIA driver" in planned
    assert "NVIDIA open driver installed and held" not in planned, planned


def test_the_next_up_downgrades_nothing_and_does_not_restart_the_model(months):
    run, name = months["month_two"], months["host"].name
    assert run.returncode == 0, run.output[-6000:]
    assert run.changed_tasks(name) == []
    assert months["after_up"] == months["before_reboot"]
    assert months["started_after_up"] == months["started_after_reboot"]


def test_the_newer_toolkit_is_not_taken_in_the_background_nor_flip_flopped_by_the_next_up(months):
    # NVIDIA's repository offers the newer one, the pinned one stays installed and held (trap 2)
    lines = months["toolkit_two"].splitlines()
    assert lines[0] == TOOLKIT_PIN
    assert any(line.split("|")[1].strip() == TOOLKIT_NEWER for line in lines if line.count("|") == 2), lines
    assert "nvidia-container-toolkit" in lines
    # after the next up (which changes nothing: the test above) the same toolkit is there
    assert f"nvidia-container-toolkit {TOOLKIT_PIN}" in months["after_up"]


def test_a_kernel_without_its_signed_module_stops_the_run_before_a_reboot(months):
    run = months["month_three"]
    assert run.returncode != 0
    assert "signed NVIDIA module for kernel 6.17.0-42-generic" in run.output
    assert months["boot_id_after_three"] == months["boot_id_three"]
    assert months["booted_after_three"] == MONTHS["two"].newest.release


def test_the_months_docker_update_is_taken_and_the_model_serves_through_it(months):
    # unattended-upgrades installs the docker.io update from -security, as it does Ubuntu's docker.io SRUs
    assert months["docker_two"] == months["docker_update"], months["upgrade_two"]
    # the package does not restart the running dockerd (Ubuntu's docker.io asks debconf docker.io/restart,
    # default false, LP: #1658691; Debian's scripts only start it): the model is not even restarted, and
    # the new dockerd runs from the reboot on
    assert months["model_restarted_by_upgrade"] == months["model_before_upgrade"]
    assert months["model_after_upgrade"] == "active"
    assert months["serves_after_upgrade"][0] == 0, months["serves_after_upgrade"]
    assert months["serves_after_reboot"][0] == 0, months["serves_after_reboot"]


def test_the_next_up_keeps_the_updated_docker(months):
    # docker.io is installed unpinned (roles/docker): the next up neither downgrades it nor restarts it
    # (it changes nothing at all: test_the_next_up_downgrades_nothing_and_does_not_restart_the_model)
    assert months["docker_after_up"] == months["docker_update"]
