"""Which versions the stand-in repositories carry: two of each so upgrades can be tested.

The versions are real NVIDIA releases, so a test that pins one reads like it would on a real host.
"""

from __future__ import annotations

from dataclasses import dataclass

# The driver branch 580 releases, oldest first; the package version adds "-1" as NVIDIA's repo does.
DRIVER_VERSIONS: tuple[str, ...] = ("580.95.05", "580.105.08")
DRIVER_PACKAGE_REVISION = "1"
# The CUDA version a driver of the branch reports ("CUDA Version: 13.0" in nvidia-smi's header).
CUDA_VERSION_OF_BRANCH = {"580": "13.0"}

# Distributions the CUDA repository is laid out for: BASE/cuda/repos/<distro>/x86_64/
CUDA_DISTROS: tuple[str, ...] = ("debian12", "debian13", "ubuntu2404")

# The NVIDIA Container Toolkit releases (all four packages share the version).
CONTAINER_TOOLKIT_VERSIONS: tuple[str, ...] = ("1.17.8-1", "1.18.0-1", "1.18.2-1")
# what `nvidia-ctk --version` prints as "commit:" (placeholders, not NVIDIA's hashes)
CONTAINER_TOOLKIT_COMMITS = {
    "1.17.8-1": "0e6ad0f7c1b2a3d4e5f60718293a4b5c6d7e8f90",
    "1.18.0-1": "5a9cd1a0b7c6e1f8a3d2e4b5c6a7f8e9d0c1b2a3",
    "1.18.2-1": "9c3e7b2d4f6a8c0e1b3d5f7a9c2e4b6d8f0a1c3e",
}


@dataclass(frozen=True)
class CudaToolkitRelease:
    """One CUDA toolkit: the package names carry major-minor, nvcc prints its own build string."""

    major: int
    minor: int
    package_version: str
    nvcc_version_text: str

    @property
    def dashed(self) -> str:
        return f"{self.major}-{self.minor}"

    @property
    def dotted(self) -> str:
        return f"{self.major}.{self.minor}"


CUDA_TOOLKIT = CudaToolkitRelease(
    major=12,
    minor=9,
    package_version="12.9.1-1",
    nvcc_version_text=(
        "nvcc: NVIDIA (R) Cuda compiler driver\n"
        "Copyright (c) 2005-2025 NVIDIA Corporation\n"
        "Built on Tue_May_27_02:21:03_PDT_2025\n"
        "Cuda compilation tools, release 12.9, V12.9.86\n"
        "Build cuda_12.9.r12.9/compiler.36037853_0"
    ),
)


def driver_package_version(driver_version: str) -> str:
    """The Debian version of the driver packages: "580.95.05" -> "580.95.05-1"."""
    return f"{driver_version}-{DRIVER_PACKAGE_REVISION}"


def cuda_version_of(driver_version: str) -> str:
    """The CUDA version a driver reports, from its branch."""
    return CUDA_VERSION_OF_BRANCH[driver_version.split(".", 1)[0]]
