"""Issue 9: the driver that is already on a laptop, on recorded facts.

A working open driver of an acceptable branch is adopted (0 driver package changes); the proprietary
modules or a too-old branch are replaced in one apt transaction; stray NVIDIA sources are moved aside.
"""

from __future__ import annotations

import re

from provision.facts import HostFacts
from provision.facts.model import AptSourceLine, InstalledPackage, OsInfo
from provision.gpu.model import KernelModules
from provision.gpu.parse import parse_nvidia_smi_pids
from tests.unit.test_roles_gpu_support import apt_specs, facts, render_tasks, site_play

H200 = "h200-driver580-nopackages.txt"  # recorded: driver 580.159.04 open, no package owns it
WORKING_UBUNTU = "rtx5090-laptop-ubuntu2404.txt"
INSTALL, ADOPTED, HELD = "NVIDIA open driver installed and held", "NVIDIA driver adopted", "adopted NVIDIA driver held"
DRIVER_TASKS = (INSTALL, "kernel headers and DKMS", "Canonical's signed NVIDIA kernel modules",
                "NVIDIA driver pinned to its release", "nouveau blacklisted",
                "initramfs updated for the nouveau blacklist", "NVIDIA driver loaded without a reboot",
                "reboot for the NVIDIA driver", "reboot required but not allowed")


def packages(*names: str, version: str = "580.95.05-0ubuntu0.24.04.2", held: bool = False) -> tuple:
    return tuple(InstalledPackage(name=name, version=version, held=held) for name in names)


# Ubuntu's archive, `ubuntu-drivers install` on 24.04 (names and version form as in the `dpkg -l` of
# NVIDIA/gpu-driver-container#186, Canonical's "-0ubuntu0.24.04.N" packaging)
UBUNTU_580_OPEN = packages("nvidia-driver-580-open", "nvidia-dkms-580-open", "nvidia-kernel-common-580",
                           "nvidia-kernel-source-580-open", "nvidia-utils-580", "nvidia-compute-utils-580",
                           "libnvidia-compute-580", "libnvidia-gl-580", "nvidia-firmware-580-580.95.05")
# what ubuntu-drivers recommends on an RTX 5090 Laptop: the proprietary 570 (the report)
UBUNTU_570_PROPRIETARY = packages("nvidia-driver-570", "nvidia-dkms-570", "nvidia-kernel-common-570",
                                  "nvidia-kernel-source-570", "nvidia-utils-570", "libnvidia-compute-570",
                                  "libnvidia-gl-570", "nvidia-firmware-570-570.195.03", "xserver-xorg-video-nvidia-570",
                                  version="570.195.03-0ubuntu0.24.04.1")


def active(rendered: dict, names: tuple[str, ...]) -> list[str]:
    return [name for name in names if rendered[name].active]


def test_the_real_h200s_driver_is_adopted_with_no_driver_package_change() -> None:
    rendered = render_tasks(facts(H200))
    assert active(rendered, DRIVER_TASKS) == []
    assert rendered[HELD].skipped  # no package owns the driver: nothing to hold
    assert rendered[ADOPTED].args.msg == ("driver 580.159.04 (open kernel module) kept as it is: installed outside "
                                          "apt (no package owns it): no driver package changes")
    driver_specs = [spec for spec in apt_specs(rendered) if spec.startswith(("nvidia", "libnvidia", "linux-", "dkms"))
                    and "container" not in spec]
    assert driver_specs == []
    verify = rendered["NVIDIA driver verified with nvidia-smi"].args.cmd
    assert "580.159.04) ;;" in verify


def test_a_working_open_driver_from_ubuntus_archive_is_kept_and_held() -> None:
    rendered = render_tasks(facts(WORKING_UBUNTU, nvidia_packages=UBUNTU_580_OPEN))
    assert active(rendered, DRIVER_TASKS) == []
    assert rendered[HELD].args.name == ["nvidia-driver-580-open", "nvidia-dkms-580-open", "nvidia-utils-580"]
    assert rendered[HELD].args.hold is True and rendered[HELD].args.state == "present"
    assert "9 driver packages kept and held" in rendered[ADOPTED].args.msg


def test_a_newer_open_branch_is_adopted_too() -> None:
    newer = facts(WORKING_UBUNTU, driver_version="590.44.01", loaded_module_version="590.44.01")
    assert render_tasks(newer)[INSTALL].skipped


def test_the_proprietary_driver_is_replaced_in_one_transaction() -> None:
    # Blackwell runs only the open modules (REFERENCE §3; NVIDIA's open-gpu-kernel-modules README)
    proprietary = facts(WORKING_UBUNTU, open_kernel_module=False, nvidia_packages=UBUNTU_570_PROPRIETARY,
                        driver_version="570.195.03", loaded_module_version="570.195.03")
    rendered = render_tasks(proprietary)
    assert rendered[ADOPTED].skipped and rendered[INSTALL].active
    install = rendered[INSTALL].args
    assert install.purge is True
    assert install.replaces == [package.name for package in UBUNTU_570_PROPRIETARY]
    assert rendered["reboot for the NVIDIA driver"].active


def test_the_proprietary_modules_of_the_same_branch_are_replaced_but_its_libraries_kept() -> None:
    same_branch = packages("nvidia-driver-580", "nvidia-dkms-580", "nvidia-kernel-source-580", "nvidia-utils-580",
                           "libnvidia-compute-580", "linux-modules-nvidia-580-generic")
    rendered = render_tasks(facts(WORKING_UBUNTU, open_kernel_module=False, nvidia_packages=same_branch))
    assert rendered[INSTALL].args.replaces == ["nvidia-driver-580", "nvidia-dkms-580", "nvidia-kernel-source-580",
                                               "linux-modules-nvidia-580-generic"]
    assert rendered["reboot for the NVIDIA driver"].args.reason.startswith("driver 580.95.05 is loaded")


def test_an_open_driver_too_old_for_the_image_is_replaced() -> None:
    old = facts(WORKING_UBUNTU, driver_version="570.195.03", loaded_module_version="570.195.03",
                nvidia_packages=packages("nvidia-driver-570-open", "libnvidia-compute-570",
                                         version="570.195.03-0ubuntu1"))
    rendered = render_tasks(old)
    assert rendered[INSTALL].args.replaces == ["nvidia-driver-570-open", "libnvidia-compute-570"]


def test_an_explicit_source_or_version_is_installed_even_over_a_working_driver() -> None:
    working = facts(WORKING_UBUNTU, nvidia_packages=UBUNTU_580_OPEN)
    assert render_tasks(working, nvidia_driver_source="nvidia")[INSTALL].active
    assert render_tasks(working, nvidia_driver_version="580.105.08")[INSTALL].active
    ubuntu = render_tasks(working, nvidia_driver_source="ubuntu")
    assert "Pin: origin developer.download.nvidia.com\nPin-Priority: -1" in ubuntu[
        "NVIDIA driver pinned to its release"].args.content
    nvidia = render_tasks(working, nvidia_driver_source="nvidia")
    assert "Pin: release o=Ubuntu\nPin-Priority: -1" in nvidia["NVIDIA driver pinned to its release"].args.content


def test_signed_modules_take_the_userspace_from_ubuntu_too() -> None:
    # Canonical's linux-modules-nvidia-* with NVIDIA's userspace of another point release gives
    # "Driver/library version mismatch" (issue 9, item 2): the preferences forbid NVIDIA's origin
    signed = render_tasks(facts(WORKING_UBUNTU), nvidia_driver_source="nvidia", nvidia_driver_signed_modules=True)
    assert "Pin: origin developer.download.nvidia.com" in signed["NVIDIA driver pinned to its release"].args.content


# The stray entries of a manual install before (NVIDIA/cuda-repo-management#4: "Conflicting values set
# for option Signed-By regarding source https://developer.download.nvidia.com/compute/cuda/repos/...")
def with_sources(*lines: tuple[str, str]) -> HostFacts:
    return facts(H200, nvidia_apt_sources=tuple(AptSourceLine(path=path, line=line) for path, line in lines))


STRAY = "stray NVIDIA CUDA sources of an earlier attempt disabled"


def test_stray_nvidia_sources_are_moved_aside_and_said() -> None:
    repo = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/ /"
    host = with_sources(
        ("/etc/apt/sources.list.d/cuda.list", f"deb {repo}"),
        ("/etc/apt/sources.list", f"deb [arch=amd64] {repo}"),
        ("/etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list",
         f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {repo}"),
        ("/etc/apt/sources.list.d/ubuntu.sources", "Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg"))
    cmd = render_tasks(host)[STRAY].args.cmd
    assert "mv -f -- '/etc/apt/sources.list.d/cuda.list' '/etc/apt/sources.list.d/cuda.list.provision-disabled'" in cmd
    assert "sed -i.provision-disabled" in cmd and "moved aside /etc/apt/sources.list.d/cuda.list" in cmd
    assert "cuda-ubuntu2404-x86_64.list" not in cmd and "ubuntu.sources" not in cmd


def test_no_stray_sources_no_task() -> None:
    assert render_tasks(facts(H200))[STRAY].skipped


# Issue 9, item 9: preflight knows the real failures.
BEFORE_REBOOT_UBUNTU = "rtx5090-installed-before-reboot.txt"
REBOOT, NO_REBOOT = "reboot for the NVIDIA driver", "reboot required but not allowed"


def test_an_encrypted_root_stops_before_the_reboot_unless_the_user_chose_auto() -> None:
    encrypted = facts(BEFORE_REBOOT_UBUNTU, root_encrypted=True)
    asked = render_tasks(encrypted)
    assert asked[REBOOT].skipped and asked[NO_REBOOT].active
    assert "wait at the disk passphrase prompt" in asked[NO_REBOOT].args.msg
    assert "-e nvidia_reboot=auto" in asked[NO_REBOOT].args.msg
    assert "LUKS" in asked["a reboot of this host waits at the disk passphrase"].args.msg
    assert render_tasks(encrypted, nvidia_reboot="auto")[REBOOT].active
    plain = render_tasks(facts(BEFORE_REBOOT_UBUNTU))
    assert plain[REBOOT].active and plain["a reboot of this host waits at the disk passphrase"].skipped


def test_no_devices_found_with_the_open_module_points_at_resizable_bar_and_the_kernel_log() -> None:
    no_devices = facts(WORKING_UBUNTU, nvidia_smi_ok=False, gpus=(), nvidia_smi_rc=6,
                       nvidia_smi_error="No devices were found")
    refusal = render_tasks(no_devices)["the loaded NVIDIA driver finds the GPU"]
    assert refusal.active
    assert "Resizable BAR" in refusal.args.msg and "RmInitAdapter failed" in refusal.args.msg
    # the proprietary module on Blackwell says the same words: that is replaced, not refused
    proprietary = facts(WORKING_UBUNTU, nvidia_smi_ok=False, gpus=(), nvidia_smi_rc=6, open_kernel_module=False,
                        nvidia_smi_error="No devices were found")
    assert render_tasks(proprietary)["the loaded NVIDIA driver finds the GPU"].skipped


def test_a_desktop_holding_gpu_memory_is_refused_with_its_processes_named() -> None:
    # process lines as `nvidia-smi -q` prints them (NVIDIA/nvidia-docker#1264: Xorg and gnome-shell on the GPU)
    used, processes = parse_nvidia_smi_pids(DESKTOP_PIDS)
    assert used == (3210,) and [p.name for p in processes] == ["/usr/lib/xorg/Xorg", "/usr/bin/gnome-shell"]
    desktop = facts(WORKING_UBUNTU, gpu_memory_used_mib=used, gpu_processes=processes)
    refusal = render_tasks(desktop, gpu_memory_utilization=0.92)["GPU memory used by others leaves room for the model"]
    assert refusal.active
    assert "/usr/lib/xorg/Xorg (pid 1248, 2800 MiB)" in refusal.args.msg
    assert "prime-select on-demand" in refusal.args.msg
    assert render_tasks(desktop, gpu_memory_utilization=0.8)[
        "GPU memory used by others leaves room for the model"].skipped
    assert "3210 MiB in use" in render_tasks(desktop)["GPU memory in use"].args.msg


def test_a_kernel_without_an_nvidia_module_is_reported_before_it_is_booted() -> None:
    host = facts(WORKING_UBUNTU, kernel_modules=(KernelModules("6.14.0-33-generic", True),
                                                 KernelModules("6.14.0-35-generic", False)))
    warning = render_tasks(host)["every installed kernel has an NVIDIA module"]
    assert warning.active and "6.14.0-35-generic" in warning.args.msg
    assert render_tasks(facts(H200))["every installed kernel has an NVIDIA module"].skipped


def test_debian_13_is_refused_before_apt_fails_on_nvidias_sha1_key() -> None:
    trixie = facts("debian12-rtx5090-standin-fresh.txt",
                   os=OsInfo(id="debian", version_id="13", codename="trixie", pretty="Debian GNU/Linux 13 (trixie)"))
    refusal = render_tasks(trixie)["NVIDIA's repository key is accepted by this apt"]
    assert refusal.active and "sqv rejects the SHA-1 binding" in refusal.args.msg
    assert render_tasks(trixie, nvidia_debian13_sha1_ok=True)["NVIDIA's repository key is accepted by this apt"].skipped


def test_the_rtx_5090_d_has_a_profile() -> None:
    profiles = {pci: profile["name"] for profile in site_play().defaults["gpu_profiles"] for pci in profile["pci_ids"]}
    assert profiles["2b87"] == "NVIDIA GeForce RTX 5090 D"


DESKTOP_PIDS = """GPU 00000000:01:00.0
    FB Memory Usage
        Total                                          : 24463 MiB
        Reserved                                       : 412 MiB
        Used                                           : 3210 MiB
        Free                                           : 20841 MiB
    BAR1 Memory Usage
        Total                                          : 32768 MiB
        Used                                           : 5 MiB
        Free                                           : 32763 MiB
    Processes
        GPU instance ID                                : N/A
        Compute instance ID                            : N/A
        Process ID                                     : 1248
            Type                                       : G
            Name                                       : /usr/lib/xorg/Xorg
            Used GPU Memory                            : 2800 MiB
        GPU instance ID                                : N/A
        Compute instance ID                            : N/A
        Process ID                                     : 1535
            Type                                       : G
            Name                                       : /usr/bin/gnome-shell
            Used GPU Memory                            : 410 MiB
"""


def test_unattended_upgrades_keep_the_driver_and_the_pinned_container_toolkit_still() -> None:
    # the blacklist entries are Python regular expressions matched from the start of the package name
    # (stock 50unattended-upgrades: "linux-" matches all packages starting with linux-)
    content = render_tasks(facts(H200))["NVIDIA driver kept out of unattended-upgrades"].args.content
    patterns = re.findall(r'^    "([^"]+)";$', content.split("Origins-Pattern")[0], flags=re.MULTILINE)
    blocked = [name for name in ("nvidia-driver-580-open", "libnvidia-compute-580", "nvidia-utils-580",
                                 "nvidia-container-toolkit", "nvidia-container-toolkit-base",
                                 "libnvidia-container1", "libnvidia-container-tools")
               if any(re.match(pattern, name) for pattern in patterns)]
    assert blocked == ["nvidia-driver-580-open", "libnvidia-compute-580", "nvidia-utils-580"]
    assert "nvidia.github.io" not in content  # the pinned toolkit is held, not upgraded in the background (issue 21)


SIGNED = "Canonical's signed NVIDIA kernel modules"


def test_signed_modules_match_the_flavour_the_host_really_boots() -> None:
    # a desktop point release boots the HWE kernel (its meta-package linux-image-generic-hwe-24.04)
    hwe = facts(WORKING_UBUNTU, kernel_packages=packages("linux-generic-hwe-24.04", "linux-image-generic-hwe-24.04",
                                                          version="6.14.0-33.33~24.04.1"))
    rendered = render_tasks(hwe, nvidia_driver_source="ubuntu", nvidia_driver_signed_modules=True)
    assert rendered[SIGNED].args.name == ["linux-modules-nvidia-580-open-generic-hwe-24.04"]
    oem = facts(WORKING_UBUNTU, kernel="6.11.0-1016-oem",
                kernel_packages=packages("linux-image-oem-24.04", version="6.11.0-1016.16"))
    assert render_tasks(oem, nvidia_driver_source="ubuntu", nvidia_driver_signed_modules=True)[SIGNED].args.name == [
        "linux-modules-nvidia-580-open-oem-24.04"]
    ga = render_tasks(facts(WORKING_UBUNTU), nvidia_driver_source="ubuntu", nvidia_driver_signed_modules=True)
    assert ga[SIGNED].args.name[-1] == "linux-modules-nvidia-580-open-generic"


def test_the_container_toolkit_guides_list_file_and_a_mirrors_stray_entry_are_found_too() -> None:
    # NVIDIA's install guide writes nvidia-container-toolkit.list; ours is a .sources file with
    # another key path: "Conflicting values set for option Signed-By regarding source
    # https://nvidia.github.io/libnvidia-container/stable/..." (NVIDIA/libnvidia-container#194)
    toolkit = "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /"
    host = with_sources(
        ("/etc/apt/sources.list.d/nvidia-container-toolkit.list",
         f"deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] {toolkit}"),
        ("/etc/apt/sources.list.d/nvidia-container-toolkit-keyring.sources",
         "URIs: https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"),
        ("/etc/apt/sources.list.d/cuda-manual.list", "deb http://mirror.office:8080/cuda/repos/ubuntu2404/x86_64/ /"))
    cmd = render_tasks(host, nvidia_cuda_repo_base="http://mirror.office:8080/cuda/repos")[STRAY].args.cmd
    assert "moved aside /etc/apt/sources.list.d/nvidia-container-toolkit.list" in cmd
    assert "moved aside /etc/apt/sources.list.d/cuda-manual.list" in cmd
    assert "nvidia-container-toolkit-keyring.sources" not in cmd
