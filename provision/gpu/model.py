"""The NVIDIA facts' value types (frozen, as every fact is) and the vendor id they are matched by."""

from __future__ import annotations

from dataclasses import dataclass

#: NVIDIA's PCI vendor id, lower-case hex without "0x" (sysfs writes it "0x10de")
NVIDIA_VENDOR_ID = "10de"


@dataclass(frozen=True)
class GpuDevice:
    """An NVIDIA display controller on the PCI bus (present whether or not a driver is loaded).

    Ids are lower-case hex without "0x": vendor_id "10de", device_id "2c58" (RTX 5090 Laptop).
    """

    pci_address: str
    vendor_id: str
    device_id: str


@dataclass(frozen=True)
class NvidiaSmiGpu:
    """One row of `nvidia-smi --query-gpu`: only present when the driver answers.

    `pci_device_id` is the device part of nvidia-smi's "0x233510DE" in the same form as
    GpuDevice.device_id ("2335"); `compute_cap` stays a string ("12.0") as nvidia-smi prints it.
    """

    index: int
    name: str
    pci_device_id: str
    driver_version: str
    compute_cap: str
    memory_total_mib: int


@dataclass(frozen=True)
class GpuProcess:
    """A process holding GPU memory (`nvidia-smi -q -d PIDS`): type "G" graphics (a desktop), "C" compute."""

    pid: int
    type: str
    name: str
    used_mib: int


@dataclass(frozen=True)
class KernelModules:
    """An installed kernel (/lib/modules/<kernel>) and whether an NVIDIA module is built for it."""

    kernel: str
    nvidia: bool


def nvidia_pci_id(device_id: str) -> str:
    """"10de:2c58": how lspci and the PCI ID tables write an NVIDIA device."""
    return f"{NVIDIA_VENDOR_ID}:{device_id}"
