"""What the stand-in Debian security archive carries, month by month, for Debian 12 (bookworm) and
Debian 13 (trixie): the kernel ABIs of the amd64 flavour, with Debian's names (bookworm:
linux-image-6.1.0-<ABI>-amd64; trixie: linux-image-6.12.<N>+deb13-amd64; the metas linux-image-amd64
and linux-headers-amd64 following the newest; SOURCES.md).

Day one the laptop has the first kernel; a month later -security brings the next, on which DKMS builds
the NVIDIA module; month three brings one whose headers lack an interface the held 580 module uses, so
its DKMS build fails (the stand-in of pop-os/pop#3811: 580.119.02 built on 6.17.4 and failed on 6.17.9).
"""

from __future__ import annotations

from dataclasses import dataclass

FLAVOUR = "amd64"


@dataclass(frozen=True)
class Kernel:
    """One kernel ABI: 6.1.0-40 -> linux-image-6.1.0-40-amd64 6.1.153-1 (Debian 13: 6.12.116+deb13 ->
    linux-image-6.12.116+deb13-amd64 6.12.116-1)."""

    abi: str  # "6.1.0-40", "6.12.116+deb13"
    upstream: str  # "6.1.153": the Debian version is upstream-1
    dkms_builds: bool  # its headers carry what the stand-in NVIDIA module's build needs
    debian: int = 12  # the Debian release it is built for: its maintainer scripts differ (packages.py)

    @property
    def release(self) -> str:
        """`uname -r` of this kernel."""
        return f"{self.abi}-{FLAVOUR}"

    @property
    def version(self) -> str:
        return f"{self.upstream}-1"


@dataclass(frozen=True)
class Month:
    """The archive as it stands one month: every kernel still listed, the newest last."""

    name: str
    kernels: tuple[Kernel, ...]

    @property
    def newest(self) -> Kernel:
        return self.kernels[-1]


@dataclass(frozen=True)
class Release:
    """One Debian release's security suite, month by month."""

    codename: str  # "bookworm"
    version: str  # "12"
    months: dict[str, Month]

    @property
    def suite(self) -> str:
        return f"{self.codename}-security"


def _months(first: Kernel, second: Kernel, third: Kernel) -> dict[str, Month]:
    return {"one": Month("one", (first,)), "two": Month("two", (first, second)),
            "three": Month("three", (first, second, third))}


# Debian 12: the ABI is its own number (6.1.0-<ABI>); versions shaped like Debian's, not copied
BOOKWORM = Release("bookworm", "12", _months(Kernel("6.1.0-40", "6.1.153", dkms_builds=True),
                                             Kernel("6.1.0-41", "6.1.158", dkms_builds=True),
                                             Kernel("6.1.0-42", "6.1.162", dkms_builds=False)))
# Debian 13: the ABI is the upstream version with +deb13 (a rebuild within one upstream adds .1:
# 6.12.115+deb13.1); these three are trixie's own, as its archive listed them (SOURCES.md)
TRIXIE = Release("trixie", "13", _months(Kernel("6.12.116+deb13", "6.12.116", dkms_builds=True, debian=13),
                                         Kernel("6.12.117+deb13", "6.12.117", dkms_builds=True, debian=13),
                                         Kernel("6.12.118+deb13", "6.12.118", dkms_builds=False, debian=13)))
RELEASES = {release.codename: release for release in (BOOKWORM, TRIXIE)}
MONTHS = BOOKWORM.months
