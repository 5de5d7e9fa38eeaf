"""Which GPU a host has, matched against the GPU profiles (data in roles/plan/defaults.yaml).

Matched by PCI device id (known before any driver is installed) or by nvidia-smi's name; the
memory used for planning is what nvidia-smi reports when the driver answers, else the profile's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provision.facts.model import HostFacts
from provision.gpu.model import NVIDIA_VENDOR_ID, nvidia_pci_id


@dataclass(frozen=True)
class GpuProfile:
    name: str
    pci_ids: tuple[str, ...]
    memory_mib: int
    compute_cap: str

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> GpuProfile:
        return cls(name=str(data["name"]), pci_ids=tuple(str(i).lower().removeprefix("0x") for i in data["pci_ids"]),
                   memory_mib=int(data["memory_mib"]), compute_cap=str(data["compute_cap"]))


@dataclass(frozen=True)
class IdentifiedGpu:
    name: str
    pci_id: str | None
    memory_mib: int
    compute_cap: str | None
    profile: GpuProfile | None
    memory_source: str  # "nvidia-smi" or "profile"

    @property
    def description(self) -> str:
        known = self.profile.name if self.profile else f"unknown GPU ({self.name})"
        pci = f" [{nvidia_pci_id(self.pci_id)}]" if self.pci_id else ""
        cap = f", compute capability {self.compute_cap}" if self.compute_cap else ""
        return f"{known}{pci}, {self.memory_mib} MiB ({self.memory_source}){cap}"


class UnknownGpu(Exception):
    """No profile matches and the driver cannot say how much memory the GPU has."""


def identify_gpu(facts: HostFacts, profiles: list[GpuProfile]) -> IdentifiedGpu | None:
    """The host's first NVIDIA GPU, or None when there is none."""
    smi = facts.gpus[0] if facts.gpus else None
    pci = next((d for d in facts.pci_gpus if d.vendor_id == NVIDIA_VENDOR_ID), None)
    pci_id = (pci.device_id if pci else None) or (smi.pci_device_id[:4] if smi and smi.pci_device_id else None)
    if smi is None and pci is None:
        return None
    profile = next((p for p in profiles if pci_id and pci_id in p.pci_ids), None)
    if profile is None and smi is not None:
        profile = next((p for p in profiles if p.name.lower() == smi.name.lower()), None)
    if smi is not None and smi.memory_total_mib:
        return IdentifiedGpu(smi.name, pci_id, smi.memory_total_mib, smi.compute_cap or None, profile, "nvidia-smi")
    if profile is not None:
        return IdentifiedGpu(profile.name, pci_id, profile.memory_mib, profile.compute_cap, profile, "profile")
    raise UnknownGpu(f"NVIDIA GPU {nvidia_pci_id(str(pci_id))} matches no GPU profile and has no driver yet to "
                     "report its memory; add it to gpu_profiles (name, pci_ids, memory_mib, compute_cap) or install "
                     "the driver first")
