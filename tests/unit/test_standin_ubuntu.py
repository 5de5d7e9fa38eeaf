"""The stand-in Ubuntu archive's packages behave as the real ones do where the month-two test relies on
it: the booted kernel's signed module loads under Secure Boot, a userspace newer than the loaded module
gives nvidia-smi's "Driver/library version mismatch" (18) until the reboot, a kernel without its module
boots without a driver (9). Unpacked into a directory that stands for the root (no host, no apt)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import cast

import pytest

from tests.standins.nvidia import HostTraits
from tests.standins.nvidia.debs import build_deb
from tests.standins.nvidia.repo import RepoInfo
from tests.standins.nvidia.sandbox import StandinRoot
from tests.standins.ubuntu import MONTHS
from tests.standins.ubuntu.archive import month_packages
from tests.standins.ubuntu.packages import BOOTED

SMI = ("/usr/bin/nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")


@pytest.fixture
def laptop(tmp_path: Path) -> StandinRoot:
    return StandinRoot(tmp_path / "root", cast(RepoInfo, None), HostTraits(secure_boot=True))


def install(root: StandinRoot, month: str, tmp: Path) -> None:
    """Unpack every package of MONTH's archive (files only, as an upgrade leaves them)."""
    debs = tmp / f"debs-{month}"
    debs.mkdir(exist_ok=True)
    for spec in month_packages(month):
        subprocess.run(["dpkg-deb", "-x", str(build_deb(spec, debs)), str(root.root)], check=True)


def boot(root: StandinRoot, kernel: str) -> None:
    root.reboot()  # empties /run; then the stand-in boot loader's choice, then the module loader
    root.write(BOOTED, kernel + "\n")
    assert root.run("/usr/lib/nvidia-standin/modload", "--boot", "nvidia").returncode == 0


def test_the_booted_kernels_signed_module_loads_and_moves_with_the_kernel(laptop, tmp_path) -> None:
    one, two, three = MONTHS["one"], MONTHS["two"], MONTHS["three"]
    install(laptop, "one", tmp_path)
    boot(laptop, one.newest.release)
    assert laptop.run(*SMI).stdout == f"{one.driver}\n"  # signed: loads with Secure Boot on
    install(laptop, "two", tmp_path)
    upgraded = laptop.run(*SMI)
    assert upgraded.returncode == 18 and "Driver/library version mismatch" in upgraded.stdout
    boot(laptop, two.newest.release)
    assert laptop.run(*SMI).stdout == f"{two.driver}\n"
    install(laptop, "three", tmp_path)
    boot(laptop, three.newest.release)  # no signed module for this kernel yet
    assert laptop.run(*SMI).returncode == 9


def test_an_unsigned_module_is_still_refused_under_secure_boot(laptop, tmp_path) -> None:
    install(laptop, "one", tmp_path)
    kernel = MONTHS["one"].newest.release
    laptop.write(f"/lib/modules/{kernel}/kernel/nvidia-580-open/nvidia.ko", "580.159.03 open\n")
    laptop.reboot()
    laptop.write(BOOTED, kernel + "\n")
    assert "Key was rejected by service" in laptop.run("/usr/lib/nvidia-standin/modload", "nvidia").stderr
