"""UbuntuArchive: the stand-in noble archive as a real, signed apt archive (dists/ and pool/), published
month by month: `publish("two")` replaces what noble-updates and noble-security list, as Ubuntu's
archive does when a kernel SRU or a driver SRU is released (the pool keeps every file).

Hosts reach it as http://archive.ubuntu.com:PORT/ubuntu (the lab host maps that name to this machine):
its own host name keeps apt preferences by origin (the NVIDIA repository's stand-in is 10.0.2.2)
apart, as on a real laptop.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tests.standins.apt_archive import MonthlyArchive
from tests.standins.nvidia.debs import DebSpec

from . import packages
from .catalogue import MONTHS, SERIES

ARCHIVE_HOST = "archive.ubuntu.com"
POCKETS = ("", "-updates", "-security")
# the NVIDIA module and driver packages are in restricted (SOURCES.md), docker.io in universe, the kernels in main
COMPONENTS = {"main": lambda spec: not spec.section.startswith(("restricted", "universe")),
              "restricted": lambda spec: spec.section.startswith("restricted"),
              "universe": lambda spec: spec.section.startswith("universe")}
KEYRING = "/usr/share/keyrings/ubuntu-archive-keyring.gpg"


def month_packages(name: str) -> list[DebSpec]:
    """Every package the archive lists in month NAME (the newest version of each)."""
    month = MONTHS[name]
    specs = [spec for kernel in month.kernels for spec in packages.kernel_packages(kernel)]
    specs += packages.flavour_metas(month.newest, month.newest_with_module)
    return specs + packages.driver_packages(month.driver)


class UbuntuArchive(MonthlyArchive):
    """The archive under OUT_DIR/ubuntu, signed by a key made for it (`keyring` is its public half)."""

    def __init__(self, out_dir: Path) -> None:
        super().__init__(out_dir, "ubuntu", "Ubuntu Archive stand-in <archive@lab.invalid>")

    def publish(self, month: str, built: Sequence[DebSpec] = ()) -> list[DebSpec]:
        """List month MONTH's packages in every pocket (noble keeps month one's, as a release does), and
        BUILT: updates already in pool/MONTH (docker_io.repackaged_docker_io)."""
        specs = month_packages(month)
        self.build(month, specs)
        specs += built
        for pocket in POCKETS:
            if pocket == "" and (self.root / "dists" / SERIES / "Release").exists():
                continue  # the release pocket is frozen at release
            suite = f"{SERIES}{pocket}"
            self.list_suite(suite, month, COMPONENTS, specs, [
                "Origin: Ubuntu", "Label: Ubuntu", f"Suite: {suite}", f"Codename: {SERIES}", "Version: 24.04",
                "Description: Ubuntu Noble 24.04 (stand-in of the provision test lab)"])
        return specs
