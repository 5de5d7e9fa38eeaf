"""What the stand-in archive carries, month by month: the kernel ABIs of the generic-hwe-24.04 flavour
and the releases of the 580 branch, with Ubuntu's version strings (SOURCES.md: packages.ubuntu.com).

Day one the laptop has kernel 6.17.0-40 and driver 580.159.03. A month later -security brings ABI 41
with its signed modules built against the 580 SRU 580.173.02 (Canonical's 580 moved 580.95 -> 580.126
-> 580.159 -> 580.173 in a year). Month three brings ABI 42 before its signed module is published.
"""

from __future__ import annotations

from dataclasses import dataclass

BRANCH = "580"
FLAVOUR = "generic-hwe-24.04"
SERIES = "noble"
SERIES_VERSION = "24.04"


@dataclass(frozen=True)
class Kernel:
    """One kernel ABI of the HWE flavour: 6.17.0-40 -> linux-image-6.17.0-40-generic 6.17.0-40.40~24.04.1."""

    abi: str  # "6.17.0-40"
    with_nvidia: str | None  # the 580 release its signed module is built against; None: not published yet

    @property
    def release(self) -> str:
        """`uname -r` of this kernel."""
        return f"{self.abi}-generic"

    @property
    def version(self) -> str:
        """The Debian version of its packages (HWE backports carry ~24.04.1)."""
        upload = self.abi.rsplit("-", 1)[1]
        return f"{self.abi}.{upload}~{SERIES_VERSION}.1"


@dataclass(frozen=True)
class Month:
    """The archive as it stands one month: every kernel still listed, the newest last, and the driver."""

    name: str
    kernels: tuple[Kernel, ...]
    driver: str  # the 580 release of the userspace (nvidia-graphics-drivers-580)

    @property
    def newest(self) -> Kernel:
        return self.kernels[-1]

    @property
    def newest_with_module(self) -> Kernel:
        return [kernel for kernel in self.kernels if kernel.with_nvidia][-1]


def driver_version(release: str) -> str:
    """The Debian version of nvidia-graphics-drivers-580 on noble: 580.159.03-0ubuntu0.24.04.1."""
    return f"{release}-0ubuntu0.{SERIES_VERSION}.1"


K40 = Kernel("6.17.0-40", "580.159.03")
K41 = Kernel("6.17.0-41", "580.173.02")
K42 = Kernel("6.17.0-42", None)
MONTHS = {
    "one": Month("one", (K40,), "580.159.03"),
    "two": Month("two", (K40, K41), "580.173.02"),
    "three": Month("three", (K40, K41, K42), "580.173.02"),
}
