"""Whole probe outputs (recorded on real hosts, or built by hand from REFERENCE.md) -> HostFacts."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.facts import DiskFree, HostFacts, OsInfo, parse_probe
from provision.gpu.model import GpuDevice, NvidiaSmiGpu

FIXTURES = Path(__file__).parent / "fixtures" / "facts"
GIB = 1024**3


def load(name: str) -> HostFacts:
    return parse_probe((FIXTURES / name).read_text())


def test_real_h200_host_with_driver_580() -> None:
    facts = load("h200-driver580.txt")
    assert facts.os == OsInfo(id="ubuntu", version_id="24.04", codename="noble", pretty="Ubuntu 24.04.3 LTS")
    assert (facts.kernel, facts.arch, facts.cpus) == ("6.18.44-fc-v657-gpu", "x86_64", 16)
    assert facts.pci_gpus == (GpuDevice(pci_address="0000:00:06.0", vendor_id="10de", device_id="2335"),)
    assert facts.nvidia_smi_ok and facts.nvidia_smi_rc == 0 and facts.nvidia_smi_error == ""
    assert facts.gpus == (
        NvidiaSmiGpu(index=0, name="NVIDIA H200", pci_device_id="2335", driver_version="580.159.04",
                     compute_cap="9.0", memory_total_mib=143771),
    )
    assert facts.driver_version == facts.loaded_module_version == "580.159.04"
    assert facts.open_kernel_module is True
    assert facts.nouveau_loaded is False
    assert facts.secure_boot == "bios"  # no EFI in that machine (a Firecracker VM's direct boot)
    assert (facts.systemd, facts.system_state) == (False, "unknown")
    assert (facts.docker_client, facts.docker_version) == (False, None)
    assert facts.boot_id == "e13966de-f997-4c42-a8a5-3da0c5e4f59c"
    assert facts.memory_total_bytes == 131981020 * 1024


def test_rtx5090_laptop_with_working_driver() -> None:
    facts = load("rtx5090-laptop-ubuntu2404.txt")
    assert (facts.os.id, facts.os.version_id, facts.os.codename) == ("ubuntu", "24.04", "noble")
    assert facts.pci_gpus[0].device_id == "2c58"
    gpu = facts.gpus[0]
    assert (gpu.name, gpu.driver_version, gpu.compute_cap, gpu.memory_total_mib) == (
        "NVIDIA GeForce RTX 5090 Laptop GPU", "580.95.05", "12.0", 24463)
    assert gpu.pci_device_id == facts.pci_gpus[0].device_id
    assert facts.open_kernel_module is True
    assert facts.secure_boot == "disabled"
    assert facts.prime_profile == "on-demand"
    assert (facts.systemd, facts.system_state, facts.docker_version) == (True, "running", "28.5.1")
    assert facts.cloud_init and not facts.dpkg_locked
    assert facts.disks == (DiskFree(path="/", free_bytes=1755548326 * 1024, total_bytes=1967924004 * 1024),)


def test_driver_installed_but_not_loaded_until_reboot() -> None:
    facts = load("rtx5090-installed-before-reboot.txt")
    assert facts.pci_gpus and not facts.gpus
    assert facts.nvidia_smi_ok is False
    assert facts.nvidia_smi_rc == 9
    assert "couldn't communicate with the NVIDIA driver" in facts.nvidia_smi_error
    assert facts.driver_version is None and facts.loaded_module_version is None
    assert facts.open_kernel_module is None
    assert facts.nouveau_loaded is True
    assert facts.reboot_marker_present is True
    assert facts.secure_boot == "disabled"  # from the EFI variable alone: no mokutil there


def test_fresh_laptop_that_preflight_must_refuse_or_wait_on() -> None:
    facts = load("rtx5090-fresh-secureboot.txt")
    assert facts.secure_boot == "enabled"
    assert facts.prime_profile == "intel"
    assert facts.dpkg_locked is True
    assert facts.nvidia_smi_rc is None and facts.nvidia_smi_error == "nvidia-smi is not installed"
    assert facts.system_state == "starting"
    assert facts.free_bytes("/root/.cache/huggingface") == 3270904 * 1024
    assert facts.free_bytes("/root/.cache/huggingface") < 20 * GIB


def test_debian_container_with_systemd_and_no_gpu() -> None:
    facts = load("debian12-nogpu.txt")
    assert facts.os == OsInfo(id="debian", version_id="12", codename="bookworm",
                              pretty="Debian GNU/Linux 12 (bookworm)")
    assert (facts.systemd, facts.system_state) == (True, "running")
    assert facts.pci_gpus == () and facts.gpus == ()
    assert facts.nvidia_smi_ok is False and facts.nvidia_smi_rc is None
    assert facts.reboot_marker_present is False and facts.dpkg_locked is False


def test_running_apt_holds_the_dpkg_lock_and_marker_is_seen() -> None:
    facts = load("debian12-nogpu-apt-running.txt")
    assert facts.dpkg_locked is True
    assert facts.reboot_marker_present is True


def test_machine_with_docker_and_a_separate_docker_mount() -> None:
    facts = load("debian12-nosystemd-docker.txt")
    assert (facts.systemd, facts.system_state) == (False, "offline")
    assert facts.docker_client is True and facts.docker_version == "20.10.24+dfsg1"
    assert [disk.path for disk in facts.disks] == ["/", "/var/lib/docker"]


@pytest.mark.parametrize("name", sorted(path.name for path in FIXTURES.glob("*.txt")))
def test_every_fixture_round_trips_to_plain_template_vars(name: str) -> None:
    variables = load(name).as_vars()
    assert variables["os"]["id"] in {"debian", "ubuntu"}
    assert isinstance(variables["pci_gpus"], list) and isinstance(variables["disks"], list)
    assert variables["memory_total_bytes"] > 0 and variables["boot_id"]


BIOS_MOKUTIL = FIXTURES.parent / "recorded" / "secure-boot-bios-mokutil.txt"


def test_a_bios_boot_with_mokutil_has_no_secure_boot_at_all() -> None:
    """`mokutil --sb-state` recorded on a machine booted without EFI: Secure Boot does not exist there."""
    assert "mokutil=EFI variables are not supported on this system" in BIOS_MOKUTIL.read_text()
    assert parse_probe(BIOS_MOKUTIL.read_text()).secure_boot == "bios"
