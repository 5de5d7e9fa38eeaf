"""The section format and the per-section parsers, including the odd outputs real hosts give."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.facts import parse_probe, split_sections
from provision.facts.parse import (
    parse_df,
    parse_docker,
    parse_installed_packages,
    parse_meminfo,
    parse_os_release,
    parse_root_encrypted,
    parse_secure_boot,
    parse_sessions,
)
from provision.gpu.parse import (
    parse_kernel_modules,
    parse_nvidia_smi,
    parse_nvidia_smi_rc,
    parse_open_kernel_module,
    parse_pci_gpus,
    parse_proc_driver_version,
)


def test_split_sections_keys_probe_and_runner_sections() -> None:
    output = "Welcome banner\n@@section kernel\n6.8.0\nx86_64\n@@task 3\nstate=ok\n\n@@section cpus\n8\n"
    assert split_sections(output) == {"kernel": "6.8.0\nx86_64", "task 3": "state=ok", "cpus": "8"}


def test_split_sections_accepts_the_runners_random_hex_markers() -> None:
    assert split_sections("@@section cpus\n2\n@@3fa9c0 0\nstate\n@@3fa9c0 end\n") == {
        "cpus": "2", "3fa9c0 0": "state", "3fa9c0 end": ""}


def test_split_sections_keeps_empty_sections_and_ignores_crlf() -> None:
    assert split_sections("@@section a\r\n@@section b\r\nx\r\n") == {"a": "", "b": "x"}


def test_parse_probe_ignores_unknown_sections() -> None:
    facts = parse_probe("@@section kernel\n6.8.0\nx86_64\n@@task 1\nanything\n@@section future-thing\n?\n")
    assert (facts.kernel, facts.arch) == ("6.8.0", "x86_64")


def test_missing_sections_give_unknown_values_not_errors() -> None:
    facts = parse_probe("@@section os-release\nID=debian\n@@section cpus\nnot a number\n")
    assert facts.os.id == "debian" and facts.cpus == 0 and facts.secure_boot == "unknown"
    assert facts.nvidia_smi_error == "nvidia-smi is not installed" and facts.disks == ()


@pytest.mark.parametrize("output", ["", "  \n", "bash: line 1: sudo: command not found\n"])
def test_parse_probe_refuses_output_that_is_not_a_probe(output: str) -> None:
    with pytest.raises(ValueError, match="probe"):
        parse_probe(output)


def test_os_release_quoting_and_codename_fallbacks() -> None:
    assert parse_os_release("ID='ubuntu'\nVERSION_ID=\"22.04\"\nUBUNTU_CODENAME=jammy\n").codename == "jammy"
    old_debian = parse_os_release('ID=debian\nVERSION_ID="10"\nVERSION="10 (buster)"\n')
    assert (old_debian.version_id, old_debian.codename) == ("10", "buster")
    assert parse_os_release('PRETTY_NAME="Broken\nID=Debian\n').id == "debian"


def test_meminfo_in_bytes() -> None:
    assert parse_meminfo("MemTotal:       1000 kB\nMemAvailable:    250 kB\n") == (1024000, 256000)
    assert parse_meminfo("garbage") == (0, 0)


def test_df_mount_points_with_spaces_and_duplicates() -> None:
    text = (
        "Filesystem 1024-blocks Used Available Capacity Mounted on\n"
        "/dev/sda1 100 40 60 40% /\n"
        "/dev/sdb1 200 50 150 25% /mnt/big disk\n"
        "/dev/sda1 100 40 60 40% /\n"
    )
    disks = parse_df(text)
    assert [(d.path, d.free_bytes, d.total_bytes) for d in disks] == [
        ("/", 60 * 1024, 100 * 1024), ("/mnt/big disk", 150 * 1024, 200 * 1024)]


def test_docker_version_only_when_the_daemon_answered() -> None:
    assert parse_docker("client=yes\nserver_rc=0\nserver=27.3.1") == (True, "27.3.1")
    assert parse_docker("client=yes\nserver_rc=1\nserver=") == (True, None)
    assert parse_docker("client=no") == (False, None)


def test_pci_keeps_nvidia_display_controllers_only() -> None:
    text = ("0000:01:00.0 0x10de 0x2C58 0x030000\n0000:01:00.1 0x10de 0x22e8 0x040300\n"
            "0000:00:02.0 0x8086 0x7d55 0x030000\nbroken line\n")
    devices = parse_pci_gpus(text)
    assert [(d.pci_address, d.vendor_id, d.device_id) for d in devices] == [("0000:01:00.0", "10de", "2c58")]


def test_nvidia_smi_rows_and_failures() -> None:
    gpus, error = parse_nvidia_smi("0, NVIDIA H200, 0x233510DE, 580.159.04, 9.0, 143771\n"
                                   "1, NVIDIA H200, 0x233510DE, 580.159.04, 9.0, 143771\n", 0)
    assert [g.index for g in gpus] == [0, 1] and gpus[1].pci_device_id == "2335" and error == ""
    gpus, error = parse_nvidia_smi("Failed to initialize NVML: Driver/library version mismatch\n", 18)
    assert gpus == () and error == "Failed to initialize NVML: Driver/library version mismatch"
    assert parse_nvidia_smi("No devices were found", 6) == ((), "No devices were found")
    assert parse_nvidia_smi("", 0) == ((), "nvidia-smi exited with code 0 and printed nothing")
    assert parse_nvidia_smi("0, X, 0x2c5810de, 580.95.05, [N/A], [N/A]", 0)[0][0].memory_total_mib == 0


def test_nvidia_smi_rc_absent_means_not_installed() -> None:
    assert parse_nvidia_smi_rc("absent") is None
    assert parse_nvidia_smi_rc("9") == 9


PROPRIETARY = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Wed Jan 22 2025\nGCC version: gcc 12\n"
OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)\n"


def test_open_or_proprietary_kernel_module() -> None:
    assert parse_open_kernel_module(OPEN) is True
    assert parse_open_kernel_module(PROPRIETARY) is False
    assert parse_open_kernel_module("") is None
    assert parse_proc_driver_version(OPEN) == "580.159.04"
    assert parse_proc_driver_version(PROPRIETARY) == "570.86.15"


def test_driver_version_falls_back_to_the_loaded_module() -> None:
    facts = parse_probe("@@section kernel\nk\n@@section nvidia-smi\nFailed to initialize NVML: Driver/library "
                        "version mismatch\n@@section nvidia-smi-rc\n18\n@@section nvidia-module-version\n"
                        "580.95.05\n")
    assert facts.driver_version == facts.loaded_module_version == "580.95.05"
    assert facts.nvidia_smi_ok is False and facts.nvidia_smi_rc == 18


@pytest.mark.parametrize(("section", "state"), [
    ("mokutil=SecureBoot enabled\nefi=yes\nefivars=yes\nefivar=6 0 0 0 1", "enabled"),
    # shim told not to validate (`mokutil --disable-validation`): mokutil still says "enabled" first,
    # but unsigned kernels and modules load (lcp/mokutil#9; askubuntu.com/questions/831574)
    ("mokutil=SecureBoot enabled\nmokutil=SecureBoot validation is disabled in shim\nefi=yes", "disabled"),
    ("mokutil=SecureBoot disabled\nefi=yes\nefivars=yes\nefivar=6 0 0 0 0", "disabled"),
    # booted without EFI: mokutil's words (lcp/mokutil src/mokutil.c; recorded in
    # fixtures/facts/firecracker-bios-mokutil.txt) and the probe's, or the probe's alone
    ("mokutil=EFI variables are not supported on this system\nefi=no", "bios"),
    ("efi=no", "bios"),
    # EFI with its runtime services off (efi=noruntime, e.g. a real-time kernel): mokutil says the same,
    # yet Secure Boot may be on
    ("mokutil=EFI variables are not supported on this system\nefi=yes\nefivars=no", "unknown"),
    ("efi=yes\nefivars=yes\nefivar=6 0 0 0 1", "enabled"),
    ("efi=yes\nefivars=yes\nefivar=6 0 0 0 0", "disabled"),
    # EFI firmware without a SecureBoot variable: mokutil's words (src/mokutil.c, since 0.4.0), or no variable
    ("mokutil=This system doesn't support Secure Boot\nefi=yes\nefivars=yes", "not_supported"),
    ("mokutil=This system doesn't support Secure Boot\nefi=yes\nefivars=no", "not_supported"),
    ("efi=yes\nefivars=yes", "not_supported"),
    ("efi=yes\nefivars=no", "unknown"),  # efivarfs not mounted: cannot tell
    ("", "unknown"),
])
def test_secure_boot_states(section: str, state: str) -> None:
    assert parse_secure_boot(section) == state


def test_issue_9_sections_of_the_recorded_h200() -> None:
    """The H200's driver is not from apt (no package), its GPU idle, its root not encrypted."""
    text = (Path(__file__).parent / "fixtures" / "facts" / "h200-driver580-nopackages.txt").read_text()
    facts = parse_probe(text)
    assert facts.nvidia_packages == () and facts.kernel_packages == () and not facts.nvidia_runfile
    assert facts.gpu_memory_used_mib == (0,) and facts.gpu_processes == ()
    assert facts.nvidia_apt_sources[0].line == "URIs: http://archive.ubuntu.com/ubuntu/"
    assert facts.root_encrypted is False and facts.sessions == () and facts.kernel_modules == ()


def test_issue_9_sections_parse_what_the_commands_print() -> None:
    packages = parse_installed_packages("hi  nvidia-driver-580-open 580.95.05-0ubuntu0.24.04.2\n"
                                        "ii  libnvidia-compute-580 580.95.05-0ubuntu0.24.04.2\n"
                                        "un  nvidia-libopencl1-dev \n"  # as the H200's dpkg-query printed it
                                        "rc  nvidia-dkms-570 570.195.03-0ubuntu0.24.04.1\n")
    assert [(p.name, p.held) for p in packages] == [("nvidia-driver-580-open", True), ("libnvidia-compute-580", False)]
    assert parse_root_encrypted("crypt \npart crypto_LUKS\ndisk \n") is True
    assert parse_root_encrypted("part ext4\ndisk \n") is False
    sessions = parse_sessions("2 Type=wayland Remote=no State=active Class=user \n"
                              "c1 Type=tty Remote=yes State=active Class=user \n")
    assert [(s.id, s.remote, s.type) for s in sessions] == [("2", False, "wayland"), ("c1", True, "tty")]
    assert [(k.kernel, k.nvidia) for k in parse_kernel_modules("6.8.0-45-generic yes\n6.8.0-47-generic no\n")] == [
        ("6.8.0-45-generic", True), ("6.8.0-47-generic", False)]
