"""The lab's simulated NVIDIA stack: stand-in apt repositories with the real package names.

A test fixture, never installed on a real machine. A lab host installs these packages through the
same settings a user has for an offline mirror of NVIDIA's repositories (only the base URL
differs), so the provisioning tool never knows it is talking to a stand-in.

- repo.py         build_repo(out_dir, base_url) -> RepoInfo; serve(out_dir, port) -> RepoServer
- host_traits.py  GPU on the PCI bus, Secure Boot, nouveau, PRIME: files and mounts for a lab host
- gpu.py          the simulated GPU profiles (RTX 5090 Laptop default, RTX 4090, H200)
- payload/        the stand-in programs themselves (nvidia-smi, nvidia-ctk, ...)
"""

from .gpu import H200, PROFILES, RTX_4090, RTX_5090_LAPTOP, GpuProfile
from .host_traits import (
    HostFile,
    HostTraits,
    MountSpec,
    PciDevice,
    host_traits_files,
    host_traits_mounts,
    make_fake_firmware_tree,
    make_fake_pci_tree,
)
from .repo import KeyInfo, RepoInfo, RepoServer, build_repo, serve

__all__ = [
    "H200",
    "PROFILES",
    "RTX_4090",
    "RTX_5090_LAPTOP",
    "GpuProfile",
    "HostFile",
    "HostTraits",
    "KeyInfo",
    "MountSpec",
    "PciDevice",
    "RepoInfo",
    "RepoServer",
    "build_repo",
    "host_traits_files",
    "host_traits_mounts",
    "make_fake_firmware_tree",
    "make_fake_pci_tree",
    "serve",
]
