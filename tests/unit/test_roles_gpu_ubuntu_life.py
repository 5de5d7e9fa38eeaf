"""Issue 21: month two on a real Ubuntu laptop, on recorded facts and Canonical's archive relations.

Day one converges; these are the traps of the weeks after: a kernel update on the signed path, the
container toolkit upgraded in the background, Docker CE already there, Secure Boot with an older
working driver, a desktop on the NVIDIA GPU.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess

from provision.facts import parse_probe
from provision.facts.model import InstalledPackage, LoginSession, OsInfo
from provision.gpu.model import GpuProcess, KernelModules
from tests.unit.ops_support import plan, script_of
from tests.unit.test_roles_gpu_support import FIXTURES, facts, render_tasks

WORKING_UBUNTU = "rtx5090-laptop-ubuntu2404.txt"
SECURE_BOOT_FRESH = "rtx5090-fresh-secureboot.txt"
INSTALL, SIGNED, ADOPTED_HELD = ("NVIDIA open driver installed and held", "Canonical's signed NVIDIA kernel modules",
                                 "adopted NVIDIA driver held")
PIN, UNATTENDED = "NVIDIA driver pinned to its release", "NVIDIA driver kept out of unattended-upgrades"


def facts_text(name: str) -> str:
    return (FIXTURES / name).read_text()


def packages(*names: str, version: str, held: bool = False) -> tuple[InstalledPackage, ...]:
    return tuple(InstalledPackage(name=name, version=version, held=held) for name in names)


HWE_METAS = packages("linux-generic-hwe-24.04", "linux-image-generic-hwe-24.04", version="6.14.0-33.33~24.04.1")

# What a kernel update brings on the signed path, as Canonical's archive relates it (packages.ubuntu.com):
# the flavour meta of the new ABI depends on that ABI's module package and on the branch's current
# kernel-common ("linux-modules-nvidia-580-generic (6.17.0-40.40): dep: linux-modules-nvidia-580-6.17.0-40-generic
# (= 6.17.0-40.40), dep: nvidia-kernel-common-580 (>= 580.159.03)"), and the userspace depends on that exact
# release ("libnvidia-compute-580 580.159.03 depends on nvidia-kernel-common-580-580.159.03"): the whole
# branch moves in one transaction with the kernel.
SRU = "580.159.03-0ubuntu0.24.04.1"
MOVES_WITH_A_NEW_KERNEL = ("linux-modules-nvidia-580-open-6.14.0-37-generic",
                           "linux-modules-nvidia-580-open-generic-hwe-24.04", "nvidia-kernel-common-580",
                           "libnvidia-compute-580", "nvidia-utils-580", "nvidia-compute-utils-580",
                           "nvidia-headless-no-dkms-580-open", "nvidia-firmware-580-580.159.03")


def signed_plan(host=None, **host_vars):
    return render_tasks(host or facts(WORKING_UBUNTU, secure_boot="enabled", kernel_packages=HWE_METAS,
                                      prime_profile=None),
                        nvidia_driver_source="ubuntu", nvidia_driver_signed_modules=True, **host_vars)


def blocked_by_unattended_upgrades(content: str, names: tuple[str, ...]) -> list[str]:
    # the blacklist entries are regular expressions matched from the start of the package name
    patterns = re.findall(r'^    "([^"]+)";$', content.split("Origins-Pattern")[0], flags=re.MULTILINE)
    return [name for name in names if any(re.match(pattern, name) for pattern in patterns)]


def test_the_signed_driver_moves_within_its_branch_with_the_next_kernel() -> None:
    rendered = signed_plan()
    # nothing of the driver is held: apt can install the next kernel's module and the branch's SRU with it
    assert rendered[INSTALL].args.hold is False and rendered[SIGNED].args.hold is False
    assert rendered[SIGNED].args.name == ["linux-modules-nvidia-580-open-generic-hwe-24.04"]
    # unattended-upgrades (which installs the new kernel from -security) may move the driver with it
    assert blocked_by_unattended_upgrades(rendered[UNATTENDED].args.content, MOVES_WITH_A_NEW_KERNEL) == []
    # the apt preferences allow the branch's SRUs and forbid nothing of Ubuntu's
    preferences = rendered[PIN].args.content
    pins = re.findall(r"^Pin: version (\S+)$", preferences, flags=re.MULTILINE)
    assert pins == ["580.*"] and fnmatch.fnmatch(SRU, pins[0])
    assert "Pin: release o=Ubuntu" not in preferences


def test_a_hold_an_earlier_run_set_on_the_signed_driver_is_dropped() -> None:
    # the archive's 580 moves (580.95 -> 580.126 -> 580.159); a held userspace blocks the next kernel's modules
    held = ("pkg=nvidia-headless-no-dkms-580-open\t580.95.05-0ubuntu0.24.04.2\thi \n"
            "pkg=nvidia-utils-580\t580.95.05-0ubuntu0.24.04.2\thi \nnow=100\nlists_mtime=99\n")
    install = signed_plan()[INSTALL].args
    script = script_of(plan("apt", held, name=install.name, hold=install.hold))
    assert "apt-mark unhold 'nvidia-headless-no-dkms-580-open' 'nvidia-utils-580'" in script
    assert "apt-mark hold" not in script


def test_an_adopted_driver_on_canonicals_signed_modules_is_not_held_nor_blacklisted() -> None:
    # `ubuntu-drivers install` on 24.04 (Canonical's packaging): the userspace and the flavour's modules meta
    adopted = packages("nvidia-driver-580-open", "nvidia-kernel-common-580", "nvidia-utils-580",
                       "libnvidia-compute-580", "linux-modules-nvidia-580-open-6.14.0-33-generic",
                       "linux-modules-nvidia-580-open-generic-hwe-24.04",
                       version="580.95.05-0ubuntu0.24.04.2", held=True)
    rendered = render_tasks(facts(WORKING_UBUNTU, nvidia_packages=adopted, kernel_packages=HWE_METAS))
    assert rendered["NVIDIA driver adopted"].active
    assert rendered[ADOPTED_HELD].args.hold is False  # the holds of an earlier run are dropped
    assert blocked_by_unattended_upgrades(rendered[UNATTENDED].args.content, MOVES_WITH_A_NEW_KERNEL) == []
    # a DKMS driver from NVIDIA's repository is still held and kept out (nothing in it follows the kernel)
    repo = packages("nvidia-driver-580-open", "nvidia-dkms-580-open", "nvidia-utils-580", version="580.95.05-1")
    dkms = render_tasks(facts(WORKING_UBUNTU, nvidia_packages=repo))
    assert dkms[ADOPTED_HELD].args.hold is True
    assert blocked_by_unattended_upgrades(dkms[UNATTENDED].args.content, ("nvidia-utils-580",)) == ["nvidia-utils-580"]


def test_every_installed_kernel_flavour_gets_its_modules_meta() -> None:
    # GA and HWE metas both installed: both kernels are upgraded and either may boot
    both = packages("linux-image-generic", "linux-image-generic-hwe-24.04", version="6.8.0-90.91")
    assert signed_plan(facts(WORKING_UBUNTU, kernel_packages=both))[SIGNED].args.name == [
        "linux-modules-nvidia-580-open-generic", "linux-modules-nvidia-580-open-generic-hwe-24.04"]
    # 22.04 the same (its HWE 6.8 kernel booted): both flavours' metas, named as the role names every
    # flavour's (linux-modules-nvidia-<branch>-open-<flavour>), not `generic` alone
    jammy = facts(WORKING_UBUNTU, os=OsInfo("ubuntu", "22.04", "jammy", "Ubuntu 22.04.5 LTS"),
                  kernel="6.8.0-90-generic",
                  kernel_packages=packages("linux-image-generic", "linux-image-generic-hwe-22.04",
                                           version="6.8.0-90.91~22.04.1"))
    assert signed_plan(jammy)[SIGNED].args.name == [
        "linux-modules-nvidia-580-open-generic", "linux-modules-nvidia-580-open-generic-hwe-22.04"]
    # the OEM kernels' letter series (packages.ubuntu.com lists linux-modules-nvidia-570-open-oem-24.04a/b/c/d)
    oem = facts(WORKING_UBUNTU, kernel="6.11.0-1016-oem",
                kernel_packages=packages("linux-image-oem-24.04b", version="6.11.0-1016.16"))
    assert signed_plan(oem)[SIGNED].args.name == ["linux-modules-nvidia-580-open-oem-24.04b"]


def test_a_superseded_running_kernel_is_not_named_and_hwe_headers_go_onto_hwe_kernels() -> None:
    # the running kernel's module and header packages leave the archive once it is superseded
    rendered = signed_plan()
    assert not any("6.14.0-33" in name for name in rendered[SIGNED].args.name)
    dkms = render_tasks(facts(WORKING_UBUNTU, kernel_packages=HWE_METAS), nvidia_driver_source="nvidia")
    assert dkms["kernel headers and DKMS"].args.name[:2] == ["linux-headers-6.14.0-33-generic",
                                                            "linux-headers-generic-hwe-24.04"]


TOOLKIT = "NVIDIA Container Toolkit installed"
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                    "libnvidia-container1")


def test_the_pinned_container_toolkit_is_held_so_no_background_upgrade_flips_it() -> None:
    # NVIDIA's install guide installs the four packages `=${NVIDIA_CONTAINER_TOOLKIT_VERSION}`; a night's
    # unattended-upgrades moved them to 1.18.2/1.19 and the next run downgraded and restarted docker
    rendered = render_tasks(facts(WORKING_UBUNTU))
    install = rendered[TOOLKIT].args
    assert install.hold is True
    assert install.name == [f"{name}=1.18.2-1" for name in TOOLKIT_PACKAGES]
    # the unattended-upgrades settings no longer take NVIDIA's toolkit repository as an origin
    assert "nvidia.github.io" not in rendered[UNATTENDED].args.content
    # a run after the hold: the packages stay where they are, nothing to do, no restart
    held = "".join(f"pkg={name}\t1.18.2-1\thi \n" for name in TOOLKIT_PACKAGES) + "now=100\nlists_mtime=99\n"
    assert not plan("apt", held, name=install.name, hold=True).changed
    # unpinned (empty): the newest, not held, delivered in the background
    newest = render_tasks(facts(WORKING_UBUNTU), nvidia_container_toolkit_version="")
    assert newest[TOOLKIT].args.hold is False
    assert '"site=nvidia.github.io";' in newest[UNATTENDED].args.content


# `dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Version}\n'` on a laptop that followed Docker's
# install page (https://docs.docker.com/engine/install/ubuntu/): docker-ce and friends from Docker's repository
DOCKER_CE_DPKG = """ii  containerd.io 1.7.28-1~ubuntu.24.04~noble
ii  docker-buildx-plugin 0.29.1-1~ubuntu.24.04~noble
ii  docker-ce 5:28.5.1-1~ubuntu.24.04~noble
ii  docker-ce-cli 5:28.5.1-1~ubuntu.24.04~noble
ii  docker-compose-plugin 2.40.3-1~ubuntu.24.04~noble
ii  nvidia-driver-580-open 580.95.05-0ubuntu0.24.04.2"""


def test_docker_ce_already_installed_is_adopted_not_replaced_by_docker_io() -> None:
    host = parse_probe(facts_text(WORKING_UBUNTU) + "@@section nvidia-packages\n" + DOCKER_CE_DPKG + "\n")
    assert [p.name for p in host.nvidia_packages] == ["nvidia-driver-580-open"]
    assert "docker-ce" in [p.name for p in host.docker_packages]
    rendered = render_tasks(host)
    # docker.io conflicts with docker-ce (Docker's install page): installing it would remove docker-ce,
    # containerd.io and the compose plugin
    assert rendered["Docker engine installed"].skipped
    assert "docker.io" not in [spec for item in rendered.values() if item.active and item.task.op == "apt"
                               for spec in item.args.name]
    assert "Docker CE 5:28.5.1-1~ubuntu.24.04~noble is installed" in rendered["Docker CE adopted"].args.msg
    # a host with docker.io (or no engine) gets docker.io as before
    assert render_tasks(facts(WORKING_UBUNTU))["Docker engine installed"].args.name == ["docker.io"]


def test_docker_io_comes_without_its_recommends_where_the_release_is_known() -> None:
    # Debian 12's docker.io recommends git, needrestart and cgroupfs-mount (51 packages where 13 do;
    # benchmarks/RESULTS.md); apparmor stays: docker 20.10 fails a container without apparmor_parser
    # when the kernel has AppArmor on (moby/moby#44900)
    bookworm = OsInfo(id="debian", version_id="12", codename="bookworm")
    install = render_tasks(facts("debian12-rtx5090-standin-fresh.txt", os=bookworm))["Docker engine installed"].args
    assert install.install_recommends is False
    assert install.name == ["docker.io", "apparmor", "ca-certificates", "xz-utils", "pigz"]
    dpkg = "now=100\nlists_mtime=99\n"
    assert "--no-install-recommends" in script_of(plan("apt", dpkg, name=install.name, install_recommends=False))
    # Debian 13's docker.io only recommends its client (docker-cli): named, or no `docker` command
    trixie = OsInfo(id="debian", version_id="13", codename="trixie")
    install = render_tasks(facts("debian12-rtx5090-standin-fresh.txt", os=trixie))["Docker engine installed"].args
    assert install.install_recommends is False and "docker-cli" in install.name
    # a release whose package relations the role does not know: apt's default, Recommends included
    install = render_tasks(facts(WORKING_UBUNTU))["Docker engine installed"].args
    assert install.install_recommends is True and install.name == ["docker.io"]
    # Docker's own packages as Docker's install page installs them, Recommends included
    repo = render_tasks(facts(WORKING_UBUNTU), docker_source="docker")["Docker engine installed"].args
    assert repo.install_recommends is True and "docker-ce" in repo.name


def test_check_mode_on_a_host_without_docker_plans_the_path_of_the_docker_it_installs() -> None:
    # the real H200 (Ubuntu 24.04, no docker yet): its docker.io is 29, so CDI, not the cgroupfs workaround
    h200 = render_tasks(facts("h200-driver580-nopackages.txt"))
    assert h200["docker reads CDI specs"].active
    assert h200["docker keeps the containers' cgroups from systemd (cgroupfs driver)"].skipped
    assert h200["a container sees the GPU"].args.cmd.endswith("--device nvidia.com/gpu=all")
    # Debian 12's docker.io is 20.10: the cgroupfs driver, as the run itself will do
    bookworm = render_tasks(facts("debian12-rtx5090-standin-fresh.txt"))
    assert bookworm["docker keeps the containers' cgroups from systemd (cgroupfs driver)"].active


SECURE_BOOT_REFUSAL = "Secure Boot allows the driver's kernel module (Ubuntu)"


def test_secure_boot_with_a_working_older_signed_driver_is_refused_before_it_is_purged() -> None:
    # what `ubuntu-drivers install` put on an RTX 5090 laptop before 580: the signed 570 (Canonical's modules)
    signed_570 = packages("nvidia-driver-570-open", "nvidia-utils-570", "libnvidia-compute-570",
                          "linux-modules-nvidia-570-open-generic-hwe-24.04", version="570.195.03-0ubuntu0.24.04.1")
    host = facts(WORKING_UBUNTU, secure_boot="enabled", driver_version="570.195.03",
                 loaded_module_version="570.195.03", nvidia_packages=signed_570)
    rendered = render_tasks(host)
    assert rendered[SECURE_BOOT_REFUSAL].active
    assert "replace the working driver 570.195.03 here (Canonical's signed modules)" in rendered[
        SECURE_BOOT_REFUSAL].args.msg
    assert "nvidia_driver_signed_modules: true" in rendered[SECURE_BOOT_REFUSAL].args.msg
    # the signed path replaces it with Canonical's signed 580 instead: no refusal
    assert render_tasks(host, nvidia_driver_signed_modules=True)[SECURE_BOOT_REFUSAL].skipped
    # a working 580 is adopted: nothing is replaced, nothing refused
    assert render_tasks(facts(WORKING_UBUNTU, secure_boot="enabled"))[SECURE_BOOT_REFUSAL].skipped


def test_a_display_on_the_nvidia_gpu_gets_the_full_driver_not_the_headless_one() -> None:
    proprietary = packages("nvidia-driver-570", "nvidia-utils-570", "xserver-xorg-video-nvidia-570",
                           version="570.195.03-0ubuntu0.24.04.1")

    def driver_names(**overrides: object) -> list[str]:
        host = facts(WORKING_UBUNTU, **{"open_kernel_module": False, "nvidia_packages": proprietary, **overrides})
        return [spec.split("=")[0] for spec in render_tasks(host)[INSTALL].args.name]

    # prime-select answers (hybrid graphics: `nvidia` or `on-demand` outputs through the dGPU)
    assert driver_names(prime_profile="nvidia") == ["nvidia-driver-580-open"]
    assert driver_names(prime_profile="on-demand") == ["nvidia-driver-580-open"]
    # no nvidia-prime, but Xorg on the GPU (nvidia-smi -q) or a local Wayland session (loginctl)
    xorg = (GpuProcess(pid=1248, type="G", name="/usr/lib/xorg/Xorg", used_mib=2800),)
    assert driver_names(prime_profile=None, gpu_processes=xorg) == ["nvidia-driver-580-open"]
    wayland = (LoginSession(id="2", remote=False, session_class="user", type="wayland", state="active"),)
    assert driver_names(prime_profile=None, sessions=wayland) == ["nvidia-driver-580-open"]
    # a server: nobody at it, no display: the compute-only flavour
    ssh = (LoginSession(id="5", remote=True, session_class="user", type="tty", state="active"),)
    assert driver_names(prime_profile=None, sessions=ssh) == ["nvidia-headless-580-open", "nvidia-utils-580"]
    # the signed path takes the full driver over Canonical's modules too
    signed = signed_plan(facts(WORKING_UBUNTU, open_kernel_module=False, nvidia_packages=proprietary,
                               prime_profile="nvidia"))
    assert [spec.split("=")[0] for spec in signed[INSTALL].args.name] == ["nvidia-driver-580-open"]


def test_the_dev_char_links_are_made_before_docker_and_the_model_start() -> None:
    # NVIDIA's troubleshooting page: certain runc versions lose the GPU at a daemon-reload when the
    # /dev/char links are missing; at boot, docker and the model's unit must not start before them
    unit = render_tasks(facts(WORKING_UBUNTU), vllm_service_name="gemma")["/dev/char symlinks unit"].args.content
    before = re.search(r"^Before=(.*)$", unit, flags=re.MULTILINE)
    assert before is not None and set(before.group(1).split()) >= {"docker.service", "gemma.service"}


def test_a_driver_upgraded_but_not_yet_rebooted_is_adopted_and_rebooted_not_replaced() -> None:
    # the signed driver moved to the branch's SRU with the kernel; the old module is still loaded and
    # nvidia-smi exits 18 ("Failed to initialize NVML: Driver/library version mismatch")
    upgraded = packages("nvidia-driver-580-open", "nvidia-utils-580", "libnvidia-compute-580",
                        "linux-modules-nvidia-580-open-generic-hwe-24.04", version=SRU)
    host = facts(WORKING_UBUNTU, nvidia_smi_ok=False, gpus=(), nvidia_smi_rc=18, nvidia_packages=upgraded,
                 nvidia_smi_error="Failed to initialize NVML: Driver/library version mismatch")
    rendered = render_tasks(host)
    assert rendered["NVIDIA driver adopted"].active and rendered[INSTALL].skipped
    assert rendered["NVIDIA open driver installed and held"].skipped
    assert rendered["reboot for the NVIDIA driver"].active
    # after the reboot the branch's new release answers
    assert "580.*) ;;" in rendered["NVIDIA driver verified with nvidia-smi"].args.cmd


def test_an_enrolled_dkms_key_is_taken_from_mokutil_not_from_the_setting_alone() -> None:
    from provision.facts.parse import parse_dkms_key_enrolled

    # `mokutil --test-key` prints "<file> is already enrolled" or "<file> is not enrolled"
    def secure_boot(answer: str) -> str:
        return f"mokutil=SecureBoot enabled\nmok-test-key=/var/lib/dkms/mok.pub {answer}\nefi=yes\n"

    assert parse_dkms_key_enrolled(secure_boot("is already enrolled")) is True
    assert parse_dkms_key_enrolled(secure_boot("is not enrolled")) is False
    assert parse_dkms_key_enrolled("mokutil=SecureBoot enabled\n") is None  # no key yet
    fresh = facts(SECURE_BOOT_FRESH, prime_profile=None, dkms_key_enrolled=False)
    refusal = render_tasks(fresh, nvidia_driver_secure_boot_mok=True)[SECURE_BOOT_REFUSAL]
    assert refusal.active and "says the DKMS key is not enrolled" in refusal.args.msg
    enrolled = facts(SECURE_BOOT_FRESH, prime_profile=None, dkms_key_enrolled=True)
    assert render_tasks(enrolled, nvidia_driver_secure_boot_mok=True)[SECURE_BOOT_REFUSAL].skipped


def test_a_later_kernel_dkms_cannot_build_for_stops_the_run_before_it_is_booted(tmp_path) -> None:
    # a held DKMS 580 that does not build on a newer HWE kernel (pop-os/pop#3811): before, only a warning
    repo = packages("nvidia-driver-580-open", "nvidia-dkms-580-open", "nvidia-utils-580", version="580.95.05-1")
    host = facts(WORKING_UBUNTU, nvidia_packages=repo, kernel_modules=(
        KernelModules("6.14.0-33-generic", True), KernelModules("6.17.0-40-generic", False)))
    task = render_tasks(host)["every installed kernel has the DKMS-built NVIDIA module"]
    assert task.active and "dkms autoinstall -k '6.17.0-40-generic'" in task.args.cmd
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # DKMS's own words when the build fails
    (bin_dir / "dkms").write_text("#!/bin/sh\necho 'Error! Bad return status for module build on kernel: $3' >&2\n"
                                  "exit 10\n")
    (bin_dir / "dkms").chmod(0o755)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", task.args.cmd], capture_output=True, text=True,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, check=False)
    assert done.returncode == 1
    assert "could not build the NVIDIA module for kernel 6.17.0-40-generic" in done.stderr
    # Canonical's signed modules bring their own package per kernel: nothing to build
    assert signed_plan(host)["every installed kernel has the DKMS-built NVIDIA module"].skipped
