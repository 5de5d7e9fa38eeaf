"""Host facts: one probe script per host -> HostFacts (os, kernel, disks, secure boot, ...), assembled
from the sections each owner registers (sections.py; the NVIDIA ones are provision/gpu/'s)."""

from provision.facts.gather import gather_facts
from provision.facts.model import DiskFree, HostFacts, OsInfo, SecureBootState
from provision.facts.probe import parse_probe, probe_script, split_sections

__all__ = [
    "DiskFree",
    "HostFacts",
    "OsInfo",
    "SecureBootState",
    "gather_facts",
    "parse_probe",
    "probe_script",
    "split_sections",
]
