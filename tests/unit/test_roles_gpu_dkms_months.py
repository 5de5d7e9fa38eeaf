"""Issue 21 on Debian: a held DKMS driver and a kernel update it cannot build for. On Debian 12 dkms's
kernel hook fails the kernel's headers package, so dpkg is left interrupted, and every apt task repairs
an interrupted dpkg first (`dpkg --configure -a`, provision/ops/apt.py): that repair fails on the same
DKMS build with dpkg's errors. The role's own check, which names the kernel and says not to reboot into
it, must come first (seen for real in tests/e2e/test_month_two_debian.py)."""

from __future__ import annotations

from provision.gpu.model import KernelModules
from tests.unit.test_roles_gpu_support import facts, render_tasks

CONVERGED = "debian12-rtx5090-standin-converged.txt"
EVERY_KERNEL = "every installed kernel has the DKMS-built NVIDIA module"
AFTER_INSTALL = "every installed kernel has the new driver's DKMS-built NVIDIA module"
MONTH_THREE = (KernelModules("6.1.0-41-amd64", True), KernelModules("6.1.0-42-amd64", False))


def test_an_adopted_dkms_drivers_missing_kernel_is_checked_before_any_apt_task() -> None:
    host = facts(CONVERGED, kernel_modules=MONTH_THREE)
    rendered = render_tasks(host)
    order = list(rendered)
    check = rendered[EVERY_KERNEL]
    assert check.active and "dkms autoinstall -k '6.1.0-42-amd64'" in check.args.cmd
    apt_tasks = [name for name, item in rendered.items() if item.active and item.task.op == "apt"]
    assert apt_tasks, "no apt task to compare with"
    assert order.index(EVERY_KERNEL) < order.index(apt_tasks[0]), apt_tasks[0]
    assert rendered[AFTER_INSTALL].skipped
    assert "Do not reboot into it" in check.args.cmd
    assert "apt-get purge linux-image-6.1.0-42-amd64 linux-headers-6.1.0-42-amd64" in check.args.cmd


def test_a_driver_being_installed_builds_for_the_other_kernels_after_its_install() -> None:
    # a working driver that is replaced (an older branch): the new one builds after it is installed
    host = facts(CONVERGED, kernel_modules=MONTH_THREE, driver_version="570.195.03")
    rendered = render_tasks(host)
    order = list(rendered)
    assert rendered[EVERY_KERNEL].skipped
    assert rendered[AFTER_INSTALL].active
    assert order.index("NVIDIA open driver installed and held") < order.index(AFTER_INSTALL)
