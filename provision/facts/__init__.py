"""Host facts: one probe script per host -> typed HostFacts (os, kernel, gpu, driver, secure boot, ...)."""

from provision.facts.gather import gather_facts
from provision.facts.model import DiskFree, GpuDevice, HostFacts, NvidiaSmiGpu, OsInfo, SecureBootState
from provision.facts.parse import parse_probe, probe_script, split_sections

__all__ = [
    "DiskFree",
    "GpuDevice",
    "HostFacts",
    "NvidiaSmiGpu",
    "OsInfo",
    "SecureBootState",
    "gather_facts",
    "parse_probe",
    "probe_script",
    "split_sections",
]
