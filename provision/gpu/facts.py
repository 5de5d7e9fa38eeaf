"""The NVIDIA sections of the facts probe (shell in probe.sh, parsers in parse.py): the GPUs on the PCI
bus and as nvidia-smi sees them, the driver's packages, apt sources, modules and versions, nouveau
and PRIME. Registered through provision/facts/sections.py `SECTION_MODULES`."""

from __future__ import annotations

from provision.facts.parse import parse_apt_source_lines, parse_installed_packages, parse_key_values
from provision.facts.section import Derived, Fact, Raw, Section
from provision.gpu import parse as p
from provision.gpu.model import NVIDIA_VENDOR_ID, KernelModules, NvidiaSmiGpu
from provision.shell import quote

PROBE_SHELL = ("probe.sh",)
SMI = ("nvidia-smi",)  # the nvidia-smi section prints nvidia-smi-rc too; -pids needs its exit code
KERNEL_META_PREFIXES = ("linux-image-", "linux-generic", "linux-oem")
# the docker engine's packages of either origin (Docker's docker-ce, the distribution's docker.io)
DOCKER_ENGINE_PACKAGES = frozenset({"docker-ce", "docker-ce-cli", "containerd.io", "docker-compose-plugin",
                                    "docker-buildx-plugin", "docker.io"})


def _smi(raw: Raw) -> tuple[tuple[NvidiaSmiGpu, ...], str, int | None]:
    rc = p.parse_nvidia_smi_rc(raw("nvidia-smi-rc"))
    return (*p.parse_nvidia_smi(raw("nvidia-smi"), rc), rc)


def _nvidia_smi(raw: Raw) -> dict[str, object]:
    gpus, error, rc = _smi(raw)
    # nvidia_smi_error: why it gave no GPUs, in its own words ("... couldn't communicate with the
    # NVIDIA driver ..."); nvidia_smi_rc: None when it is not installed (9: driver not loaded, 18: mismatch)
    return {"nvidia_smi_ok": bool(gpus), "nvidia_smi_error": error, "nvidia_smi_rc": rc, "gpus": gpus}


def _packages(raw: Raw) -> dict[str, object]:
    """The driver's packages (none with a driver installed outside apt: .run file, vendor image), the
    kernel meta-packages (the flavour that upgrades) and the docker engine's (which one to keep)."""
    packages = parse_installed_packages(raw("nvidia-packages"))
    return {
        "nvidia_packages": tuple(pkg for pkg in packages if not pkg.name.startswith(KERNEL_META_PREFIXES)
                                 and pkg.name not in DOCKER_ENGINE_PACKAGES),
        "kernel_packages": tuple(pkg for pkg in packages if pkg.name.startswith(KERNEL_META_PREFIXES)),
        "docker_packages": tuple(pkg for pkg in packages if pkg.name in DOCKER_ENGINE_PACKAGES),
        "nvidia_runfile": "runfile-installer yes" in raw("nvidia-packages"),
    }


def _proc_version(raw: Raw) -> dict[str, object]:
    """The running driver: nvidia-smi's, else the loaded module's, else /proc/driver/nvidia/version's."""
    gpus = _smi(raw)[0]
    proc = raw("nvidia-proc-version")
    driver = (gpus[0].driver_version if gpus else None) or p.parse_module_version(raw("nvidia-module-version")) \
        or p.parse_proc_driver_version(proc)
    return {"open_kernel_module": p.parse_open_kernel_module(proc), "driver_version": driver}


def _without_module(kernel_modules: tuple[KernelModules, ...], nvidia_smi_ok: bool) -> tuple[str, ...]:
    return tuple(k.kernel for k in kernel_modules if not k.nvidia) if nvidia_smi_ok else ()


SECTIONS = (
    Section.own("pci-nvidia", f"probe_pci_nvidia {quote('0x' + NVIDIA_VENDOR_ID)}", {"pci_gpus": Fact(())},
                p.parse_pci_gpus),
    Section("nvidia-smi", "probe_nvidia_smi", {"nvidia_smi_ok": Fact(False), "nvidia_smi_error": Fact(""),
                                               "nvidia_smi_rc": Fact(None), "gpus": Fact(())}, _nvidia_smi),
    # `nvidia-smi -q`: FB memory in use per GPU (MiB, in nvidia-smi's order) and the processes holding it
    Section.own("nvidia-smi-pids", "probe_nvidia_smi_pids",
                {"gpu_memory_used_mib": Fact((), SMI), "gpu_processes": Fact((), SMI)}, p.parse_nvidia_smi_pids),
    Section("nvidia-packages", "probe_nvidia_packages",
            {"nvidia_packages": Fact(()), "kernel_packages": Fact(()), "docker_packages": Fact(()),
             "nvidia_runfile": Fact(False)}, _packages),
    # every apt source line naming nvidia or cuda: stray NVIDIA entries are found in these
    Section.own("apt-sources", "probe_apt_sources", {"nvidia_apt_sources": Fact(())}, parse_apt_source_lines),
    Section.own("kernel-modules", "probe_kernel_modules", {"kernel_modules": Fact(())}, p.parse_kernel_modules),
    Section("nvidia-proc-version", "probe_nvidia_proc_version",
            {"driver_version": Fact(None, (*SMI, "nvidia-module-version")), "open_kernel_module": Fact(None)},
            _proc_version),
    # /sys/module/nvidia/version: the module in the kernel now (compare with the installed one)
    Section.own("nvidia-module-version", "probe_nvidia_module_version", {"loaded_module_version": Fact(None)},
                p.parse_module_version),
    Section.own("nouveau", "probe_nouveau", {"nouveau_loaded": Fact(False)},
                lambda text: parse_key_values(text).get("loaded") == "yes"),
    Section.own("prime-select", "probe_prime_select", {"prime_profile": Fact(None)}, lambda text: text.strip() or None),
)
# installed kernels that would boot without the driver in use (no NVIDIA module built or packaged for
# them); empty when no driver answers. Preflight and `provision status` both report these.
DERIVED = (Derived("kernels_without_nvidia_module", ("kernel_modules", "nvidia_smi_ok"), _without_module),)
