"""DebianSecurityArchive: the stand-in of Debian's security archive (12 or 13) as a real, signed apt
archive (dists/<codename>-security, pool/), published month by month: `publish("two")` replaces what
the suite lists, as a kernel DSA does (the pool keeps every file).

Its Release says what Debian's says where unattended-upgrades looks (Origin: Debian, Label:
Debian-Security, Codename: bookworm-security or trixie-security), so Debian's stock 50unattended-upgrades
origins take it. Hosts reach it as http://security.debian.org:PORT/debian-security (the lab host maps that
name to this machine; the lab's real Debian mirror is reached under its own name).
"""

from __future__ import annotations

from pathlib import Path

from tests.standins.apt_archive import MonthlyArchive
from tests.standins.nvidia.debs import DebSpec

from . import packages
from .catalogue import RELEASES

ARCHIVE_HOST = "security.debian.org"


def month_packages(name: str, codename: str = "bookworm") -> list[DebSpec]:
    """Every package the archive of Debian CODENAME lists in month NAME."""
    month = RELEASES[codename].months[name]
    specs = [spec for kernel in month.kernels for spec in packages.kernel_packages(kernel)]
    return specs + packages.flavour_metas(month.newest)


class DebianSecurityArchive(MonthlyArchive):
    """The archive under OUT_DIR/debian-security for Debian CODENAME, signed by a key made for it
    (`keyring`: its public half)."""

    def __init__(self, out_dir: Path, codename: str = "bookworm") -> None:
        super().__init__(out_dir, "debian-security", "Debian Security Archive stand-in <security@lab.invalid>")
        self.release = RELEASES[codename]

    def publish(self, month: str) -> list[DebSpec]:
        """List month MONTH's packages in <codename>-security/main."""
        release = self.release
        specs = month_packages(month, release.codename)
        self.build(month, specs)
        self.list_suite(release.suite, month, {"main": lambda _: True}, specs, [
            "Origin: Debian", "Label: Debian-Security", "Suite: stable-security", f"Codename: {release.suite}",
            f"Version: {release.version}",
            f"Description: Debian {release.version} - Security Updates (stand-in of the provision test lab)"])
        return specs
