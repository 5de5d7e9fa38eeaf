"""What the stand-in Debian 12 security archive carries, month by month: the kernel ABIs of the amd64
flavour (Debian's names: linux-image-6.1.0-<ABI>-amd64, the metas linux-image-amd64 and
linux-headers-amd64 following the newest).

Day one the laptop has ABI 40; a month later -security brings ABI 41, on which DKMS builds the NVIDIA
module; month three brings ABI 42, whose headers lack an interface the held 580 module uses, so its DKMS
build fails (the stand-in of pop-os/pop#3811: 580.119.02 built on 6.17.4 and failed on 6.17.9).
"""

from __future__ import annotations

from dataclasses import dataclass

SUITE = "bookworm-security"
FLAVOUR = "amd64"


@dataclass(frozen=True)
class Kernel:
    """One kernel ABI: 6.1.0-40 -> linux-image-6.1.0-40-amd64 6.1.153-1."""

    abi: str  # "6.1.0-40"
    upstream: str  # "6.1.153": the Debian version is upstream-1
    dkms_builds: bool  # its headers carry what the stand-in NVIDIA module's build needs

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


K40 = Kernel("6.1.0-40", "6.1.153", dkms_builds=True)
K41 = Kernel("6.1.0-41", "6.1.158", dkms_builds=True)
K42 = Kernel("6.1.0-42", "6.1.162", dkms_builds=False)
MONTHS = {
    "one": Month("one", (K40,)),
    "two": Month("two", (K40, K41)),
    "three": Month("three", (K40, K41, K42)),
}
