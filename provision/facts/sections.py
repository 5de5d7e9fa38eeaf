"""Which sections of the facts probe (provision/facts/probe.sh) each HostFacts field is read from,
so that a run asks the host only for the facts its tasks read.

`parse.probe_for(fields)` is the probe text for those fields (`None`: every fact); the sections asked for
travel in the output (`@@section probe`), and `parse.parse_probe` marks the facts it could read as
gathered: reading any other one fails loudly (`FactNotGathered`), never yields an empty default.
"""

from __future__ import annotations

from collections.abc import Iterable

SMI = ("nvidia-smi",)  # the nvidia-smi section prints nvidia-smi-rc too; -pids needs its exit code

FIELD_SECTIONS: dict[str, tuple[str, ...]] = {
    "os": ("os-release",),
    "kernel": ("kernel",),
    "arch": ("kernel",),
    "boot_id": ("boot-id",),
    "reboot_marker_present": ("reboot-marker",),
    "cpus": ("cpus",),
    "memory_total_bytes": ("meminfo",),
    "memory_available_bytes": ("meminfo",),
    "disks": ("disk-free",),
    "systemd": ("systemd",),
    "system_state": ("systemd",),
    "docker_client": ("docker",),
    "docker_version": ("docker",),
    "pci_gpus": ("pci-nvidia",),
    "nvidia_smi_ok": SMI,
    "nvidia_smi_error": SMI,
    "nvidia_smi_rc": SMI,
    "gpus": SMI,
    "gpu_memory_used_mib": (*SMI, "nvidia-smi-pids"),
    "gpu_processes": (*SMI, "nvidia-smi-pids"),
    "nvidia_packages": ("nvidia-packages",),
    "kernel_packages": ("nvidia-packages",),
    "docker_packages": ("nvidia-packages",),
    "nvidia_runfile": ("nvidia-packages",),
    "nvidia_apt_sources": ("apt-sources",),
    "kernel_modules": ("kernel-modules",),
    "kernels_without_nvidia_module": (*SMI, "kernel-modules"),  # derived from the two above
    "driver_version": (*SMI, "nvidia-module-version", "nvidia-proc-version"),
    "loaded_module_version": ("nvidia-module-version",),
    "open_kernel_module": ("nvidia-proc-version",),
    "nouveau_loaded": ("nouveau",),
    "secure_boot": ("secure-boot",),
    "dkms_key_enrolled": ("secure-boot",),
    "root_encrypted": ("root-encryption",),
    "sessions": ("sessions",),
    "prime_profile": ("prime-select",),
    "cloud_init": ("cloud-init",),
    "dpkg_locked": ("dpkg-lock",),
}
ALL_SECTIONS = "all"


def sections_for(fields: Iterable[str]) -> list[str]:
    """The probe sections that the given HostFacts fields are parsed from (KeyError: not a fact)."""
    return sorted({section for name in fields for section in FIELD_SECTIONS[name]})


def fields_from(asked: str) -> frozenset[str] | None:
    """The fields a probe that was asked for `asked` (its `@@section probe` line) gathered; None: all."""
    sections = set(asked.split())
    if ALL_SECTIONS in sections:
        return None
    return frozenset(name for name, needs in FIELD_SECTIONS.items() if sections.issuperset(needs))

