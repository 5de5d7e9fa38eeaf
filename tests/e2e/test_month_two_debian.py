"""Month two on a Debian 12 laptop and on a Debian 13 one (issue 21): the driver from NVIDIA's repository
is a DKMS module, held at its 580 release; a month's kernel update from -security is rebuilt for by the
real dkms through its kernel hooks while unattended-upgrades installs it, the reboot boots it and the
GPU serves with no run of ours. Month three's kernel, on which the held module's DKMS build fails
(pop-os/pop#3811): dkms's hook fails its headers package, which dpkg leaves half-configured
(unattended-upgrades says so in its own log only), and the next run stops naming the kernel before a
reboot would boot it, instead of on the errors of dpkg's repair in the first apt task.

Debian 13 walks the same months with its own kernels (6.12.<N>+deb13), its kernel packages' hooks (run
through linux-base's linux-run-hooks) and its dkms (3.2); tests/standins/debian/SOURCES.md says where
each name and script comes from.

The laptop is tests/lab/laptop.py: debian_laptop, fed by the stand-in security archive
(tests/standins/debian) and the NVIDIA stand-in repository built with a real DKMS source package
(build_repo(..., dkms=True)). dkms, apt, unattended-upgrades and systemd are the real ones. One module
fixture per Debian release walks the months; each test asserts one thing of what it left.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.month_walk_support import BOOT_ID, SMI, UNATTENDED_UPGRADES, Timer, model_started, reboot, sh, up
from tests.lab import Lab
from tests.lab.laptop import debian_laptop
from tests.lab.net import MACHINE_FROM_HOSTS, free_port
from tests.standins.debian import RELEASES, DebianSecurityArchive
from tests.standins.hub.cli import start_hub
from tests.standins.hub.server import HubOptions
from tests.standins.nvidia import HostTraits, build_repo, serve
from tests.standins.vllm.build import build_images

pytestmark = pytest.mark.lab

REPO = "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit"
HF_TOKEN = "hf_standin_" + secrets.token_hex(12)
FIRST_PORT = 19010
DRIVER = "580.105.08"  # the stand-in repository's newest 580 (tests/standins/nvidia/catalogue.py)
PACKAGES = ("dpkg-query -W -f='${Package} ${Version}\\n' 'nvidia-*' 'libnvidia-*' 'linux-image-*' "
            "'linux-headers-*' 2>/dev/null | grep -v ' $' | sort")
BOOTED = "cat /run/kernel-standin/booted-kernel"


@pytest.fixture(scope="module", params=["bookworm", "trixie"])
def months(request, lab: Lab, gpu_inventory, tmp_path_factory) -> Iterator[dict[str, Any]]:
    suite = request.param
    release = RELEASES[suite]
    tmp = tmp_path_factory.mktemp(f"month-two-{suite}")
    timer = Timer()
    archive = DebianSecurityArchive(tmp / "archive", suite)
    archive.publish("one")
    archive_port = free_port(FIRST_PORT, set())
    archive_server = serve(archive.root.parent, archive_port)
    repo_port = free_port(archive_port + 1, set())
    repo = build_repo(lab.dir / "standin-nvidia-repo-dkms", f"http://{MACHINE_FROM_HOSTS}:{repo_port}", dkms=True)
    repo_server = serve(repo.out_dir, repo_port)
    hub = start_hub(tmp / "hub", repo_id=REPO, options=HubOptions(token=HF_TOKEN))
    images = build_images(f"127.0.0.1:{lab.registry.port}", pull_registry=lab.registry.address_for_hosts,
                          behaviours=("ok",), env={"STANDIN_READY_DELAY": "1"}, log=lambda _: None)
    timer.mark("images")
    try:
        host = debian_laptop(lab, tmp / "traits", HostTraits(nouveau_at_boot=False), archive_port, archive.keyring,
                             prefix=f"deb{release.version}", suite=suite)
        timer.mark("laptop ready")
        inventory = gpu_inventory(
            tmp / "inventory.yaml", [host], nvidia_cuda_repo_base=repo.cuda_repos_base,
            nvidia_container_repo_base=repo.container_toolkit_base,
            # the headers meta of the flavour only: `uname -r` is this machine's kernel, which Debian's
            # archive has no headers for; dkms without build-essential (the stand-in build needs no
            # compiler, and dkms itself depends on gcc and make)
            nvidia_kernel_headers={"debian": ["linux-headers-amd64"], "ubuntu": []}, nvidia_dkms_packages=["dkms"],
            nvidia_reboot="auto", cuda_toolkit_enabled=False,
            nvidia_debian13_sha1_ok=True,  # Debian 13: the stand-in CUDA key is the lab's own (no SHA-1 binding)
            hf_endpoint=f"http://{MACHINE_FROM_HOSTS}:{hub.server.server_address[1]}", hf_token=HF_TOKEN,
            office_cache_trusted=True, vllm_image=images["ok"], vllm_ready_timeout=180, smoke_timeout=60)
        seen: dict[str, Any] = {"host": host, "release": release}
        # day one: the driver from NVIDIA's repository, DKMS-built for the installed kernel
        seen["day_one"] = day_one = up(inventory, host, tmp, "day-one", timer)
        assert day_one.returncode == 0, day_one.output[-6000:]
        seen["day_one_smi"] = sh(host, SMI)
        seen["day_one_dkms"] = sh(host, "dkms status")
        # a month later: -security has kernel ABI 41; unattended-upgrades installs it, dkms's hooks build
        archive.publish("two")
        sh(host, "apt-get update -qq")
        timer.mark("apt-get update")
        seen["upgrade_two"] = sh(host, "unattended-upgrade -v 2>&1")
        seen["before_reboot"] = sh(host, PACKAGES)
        seen["dkms_two"] = sh(host, "dkms status")
        timer.mark("unattended-upgrades")
        reboot(host)
        timer.mark("reboot")
        seen["booted"] = sh(host, BOOTED)
        seen["after_reboot_smi"] = host.exec(SMI)
        seen["model_after_reboot"] = host.exec("systemctl is-active vllm.service")[1].strip()
        seen["started_after_reboot"] = model_started(host)
        seen["month_two"] = up(inventory, host, tmp, "month-two", timer)
        seen["after_up"] = sh(host, PACKAGES)
        seen["started_after_up"] = model_started(host)
        # month three: ABI 42, on which the held 580's DKMS build fails
        archive.publish("three")
        three = release.months["three"].newest.release
        seen["upgrade_three"] = host.exec(UNATTENDED_UPGRADES + " 2>&1")
        seen["packages_three"] = sh(host, PACKAGES)
        seen["dpkg_log_three"] = host.exec("cat /var/log/unattended-upgrades/unattended-upgrades-dpkg.log")[1]
        seen["status_three"] = sh(host, f"dpkg-query -W -f='${{Package}} ${{Status}}\\n' 'linux-*-{three}'")
        seen["boot_id_three"] = sh(host, BOOT_ID)
        seen["month_three"] = up(inventory, host, tmp, "month-three", timer)
        seen["boot_id_after_three"] = sh(host, BOOT_ID)
        seen["booted_after_three"] = sh(host, BOOTED)
        print(f"\nDebian {release.version} month walk: {timer}")
        yield seen
    finally:
        hub.stop()
        repo_server.stop()
        archive_server.stop()
        archive.close()


def test_day_one_builds_the_driver_with_dkms_for_the_installed_kernel(months):
    assert months["day_one"].returncode == 0
    assert months["day_one_smi"] == DRIVER
    one = months["release"].months["one"].newest
    assert f"nvidia/{DRIVER}, {one.release}, x86_64: installed" in months["day_one_dkms"]


def test_after_the_months_kernel_update_and_reboot_the_gpu_serves_without_a_run_of_ours(months):
    two = months["release"].months["two"].newest
    # unattended-upgrades installed the new kernel and its headers; dkms's hook built the held module
    assert f"linux-image-{two.release} {two.version}" in months["before_reboot"], months["upgrade_two"]
    assert f"nvidia/{DRIVER}, {two.release}, x86_64: installed" in months["dkms_two"], months["upgrade_two"]
    assert f"nvidia-kernel-open-dkms {DRIVER}-1" in months["before_reboot"]
    assert months["booted"] == two.release
    assert months["after_reboot_smi"] == (0, f"{DRIVER}\n")
    assert months["model_after_reboot"] == "active"


def test_the_next_up_changes_nothing_and_does_not_restart_the_model(months):
    run, name = months["month_two"], months["host"].name
    assert run.returncode == 0, run.output[-6000:]
    assert run.changed_tasks(name) == []
    assert months["after_up"] == months["before_reboot"]
    assert months["started_after_up"] == months["started_after_reboot"]


def test_a_kernel_the_dkms_build_fails_on_stops_the_run_before_a_reboot(months):
    three = months["release"].months["three"].newest
    # the trap: dkms's hook fails the kernel's headers package, dpkg leaves it half-configured, and
    # unattended-upgrades, in the background, says so only in its own log
    assert f"linux-headers-{three.release} install ok half-configured" in months["status_three"]
    assert f"Bad return status for module build on kernel: {three.release}" in months["dpkg_log_three"]
    run = months["month_three"]
    assert run.returncode != 0
    assert f"DKMS could not build the NVIDIA module for kernel {three.release}" in run.output
    assert "Do not reboot into it" in run.output
    assert "repair interrupted dpkg" not in run.output
    assert months["boot_id_after_three"] == months["boot_id_three"]
    assert months["booted_after_three"] == months["release"].months["two"].newest.release
