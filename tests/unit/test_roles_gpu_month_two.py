"""Issue 21, month two and three on the signed path, on recorded facts: Ubuntu's kernel ABIs pass 99
(the running kernel's signed module must not read as another driver branch), and a kernel whose
signed module is not published yet stops the run before a reboot boots it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from provision.facts.model import InstalledPackage
from provision.gpu.model import KernelModules
from tests.unit.test_roles_gpu_support import facts, render_tasks

WORKING_UBUNTU = "rtx5090-laptop-ubuntu2404.txt"
EVERY_KERNEL = "every installed kernel has Canonical's signed NVIDIA module"
INSTALL = "NVIDIA open driver installed and held"


def packages(*names: str, version: str) -> tuple[InstalledPackage, ...]:
    return tuple(InstalledPackage(name=name, version=version) for name in names)


# Ubuntu's noble GA kernel ABIs are three digits now (linux-image-6.8.0-100-generic onward); the module
# package of such a kernel (packages.ubuntu.com: linux-modules-nvidia-580-open-<ABI>-generic)
SIGNED_580 = packages("nvidia-headless-no-dkms-580-open", "nvidia-kernel-common-580", "libnvidia-compute-580",
                      "linux-modules-nvidia-580-open-6.8.0-136-generic", "linux-modules-nvidia-580-open-generic",
                      "linux-objects-nvidia-580-open-6.8.0-136-generic", version="580.159.03-0ubuntu0.24.04.1")


def test_the_running_kernels_signed_module_is_not_purged_once_the_abi_passes_99() -> None:
    # the driver is not adopted (nvidia-smi fails: e.g. nouveau holds the GPU); the role installs 580 again
    host = facts(WORKING_UBUNTU, nvidia_smi_ok=False, gpus=(), nvidia_smi_rc=9, nvidia_packages=(
        *SIGNED_580, *packages("libnvidia-compute-570", "linux-modules-nvidia-570-open-6.8.0-136-generic",
                               version="570.195.03-0ubuntu0.24.04.1")))
    rendered = render_tasks(host, nvidia_driver_source="ubuntu", nvidia_driver_signed_modules=True)
    replaced = rendered[INSTALL].args.replaces
    # another branch's packages go, whatever the kernel ABI in their names
    assert set(replaced) == {"libnvidia-compute-570", "linux-modules-nvidia-570-open-6.8.0-136-generic"}
    assert not any(name.startswith("linux-modules-nvidia-580") for name in replaced)


def signed_host(*kernels: tuple[str, bool]) -> object:
    adopted = packages("nvidia-headless-no-dkms-580-open", "nvidia-utils-580", "libnvidia-compute-580",
                       "linux-modules-nvidia-580-open-generic-hwe-24.04",
                       *(f"linux-modules-nvidia-580-open-{kernel}" for kernel, has in kernels if has),
                       version="580.173.02-0ubuntu0.24.04.1")
    return facts(WORKING_UBUNTU, nvidia_packages=adopted,
                 kernel_modules=tuple(KernelModules(kernel, has) for kernel, has in kernels))


def run_with_apt(cmd: str, tmp_path: Path, apt_rc: int) -> subprocess.CompletedProcess[str]:
    """Run the task's script with an apt-get that answers as apt does for a package the archive lacks."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    answer = "echo \"E: Unable to locate package ${@: -1}\" >&2" if apt_rc else "echo \"Setting up ${@: -1}\""
    (bin_dir / "apt-get").write_text(f"#!/bin/bash\n{answer}\nexit {apt_rc}\n")
    (bin_dir / "apt-get").chmod(0o755)
    return subprocess.run(["bash", "-euo", "pipefail", "-c", cmd], capture_output=True, text=True,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, check=False)


def test_a_newest_kernel_without_its_signed_module_stops_the_run_naming_it(tmp_path: Path) -> None:
    # unattended-upgrades installed 6.17.0-42 from -security; Canonical has not published its module yet
    host = signed_host(("6.17.0-40-generic", True), ("6.17.0-41-generic", True), ("6.17.0-42-generic", False))
    task = render_tasks(host)[EVERY_KERNEL]
    assert task.active
    assert "'linux-modules-nvidia-580-open-6.17.0-42-generic'" in task.args.cmd
    done = run_with_apt(task.args.cmd, tmp_path, apt_rc=100)
    assert done.returncode == 1
    assert "signed NVIDIA module for kernel 6.17.0-42-generic" in done.stderr
    assert "newest installed kernel" in done.stderr
    # once published, the same task installs it and goes on
    assert run_with_apt(task.args.cmd, tmp_path, apt_rc=0).returncode == 0


def test_an_older_kernel_without_its_module_is_said_not_fatal(tmp_path: Path) -> None:
    # sort -V, not text order: 6.17.0-100 is newer than 6.17.0-99
    host = signed_host(("6.17.0-99-generic", False), ("6.17.0-100-generic", True))
    done = run_with_apt(render_tasks(host)[EVERY_KERNEL].args.cmd, tmp_path, apt_rc=100)
    assert done.returncode == 0, done.stderr
    assert re.search(r"note: no signed NVIDIA module for the older kernel 6\.17\.0-99-generic", done.stdout)


def test_every_kernel_with_its_module_or_a_dkms_driver_plans_nothing() -> None:
    assert render_tasks(signed_host(("6.17.0-41-generic", True)))[EVERY_KERNEL].skipped
    # NVIDIA's DKMS driver builds for each kernel instead (its own task)
    dkms = packages("nvidia-driver-580-open", "nvidia-dkms-580-open", "nvidia-utils-580", version="580.95.05-1")
    host = facts(WORKING_UBUNTU, nvidia_packages=dkms, kernel_modules=(KernelModules("6.17.0-42-generic", False),))
    assert render_tasks(host)[EVERY_KERNEL].skipped


def test_a_module_published_since_the_last_package_list_is_found_after_reading_the_lists_again(tmp_path) -> None:
    host = signed_host(("6.17.0-41-generic", True), ("6.17.0-42-generic", False))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # apt-get knows the package only after `apt-get update`
    marker = tmp_path / "updated"
    (bin_dir / "apt-get").write_text(f"#!/bin/bash\nif [ \"$1\" = update ]; then touch {marker}; exit 0; fi\n"
                                     f"[ -e {marker} ] || {{ echo 'E: Unable to locate package' >&2; exit 100; }}\n")
    (bin_dir / "apt-get").chmod(0o755)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", render_tasks(host)[EVERY_KERNEL].args.cmd],
                          capture_output=True, text=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, check=False)
    assert done.returncode == 0, done.stderr
