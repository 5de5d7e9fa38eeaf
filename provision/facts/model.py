"""HostFacts: what one probe found out about a host, as typed, immutable values.

Operations plan from these (a pure function of facts and arguments), preflight refuses on them, and
templates read them through `as_vars()` (`facts.os.codename`, `facts.gpus[0].compute_cap`). Every
field has an "unknown/absent" default, so `HostFacts.empty()` is a valid host that has nothing:
the placeholder for check mode before a probe ran, and the base that unit tests `replace()` from.
Sequences are tuples (lists given to the constructor are turned into tuples) so facts stay frozen.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Literal

from provision.errors import FactNotGathered

# "bios": booted without EFI (legacy BIOS/CSM, or a VM's direct kernel boot); "not_supported": EFI
# firmware without Secure Boot. In both Secure Boot cannot refuse a module, as with "disabled".
SecureBootState = Literal["enabled", "disabled", "bios", "not_supported", "unknown"]
SECURE_BOOT_WORDS: dict[str, str] = {"bios": "not available (BIOS boot)",
                                     "not_supported": "not available (the EFI firmware has none)"}


@dataclass(frozen=True)
class OsInfo:
    """From /etc/os-release: `id` "ubuntu"/"debian", `version_id` "24.04"/"12", `codename` "noble"."""

    id: str = ""
    version_id: str = ""
    codename: str = ""
    pretty: str = ""


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
class DiskFree:
    """One filesystem from `df -Pk`: `path` is its mount point."""

    path: str
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class GpuProcess:
    """A process holding GPU memory (`nvidia-smi -q -d PIDS`): type "G" graphics (a desktop), "C" compute."""

    pid: int
    type: str
    name: str
    used_mib: int


@dataclass(frozen=True)
class InstalledPackage:
    """A package dpkg has installed: the driver's (`nvidia-*`, `libnvidia-*`, ...) or a kernel meta-package."""

    name: str
    version: str
    held: bool = False


@dataclass(frozen=True)
class AptSourceLine:
    """A line of an apt sources file: a deb line, or a deb822 URIs or Signed-By line."""

    path: str
    line: str


@dataclass(frozen=True)
class KernelModules:
    """An installed kernel (/lib/modules/<kernel>) and whether an NVIDIA module is built for it."""

    kernel: str
    nvidia: bool


@dataclass(frozen=True)
class LoginSession:
    """A logind session: `remote` False is someone at the machine (a desktop or a console login)."""

    id: str
    remote: bool
    session_class: str = ""
    type: str = ""
    state: str = ""


@dataclass(frozen=True)
class HostFacts:
    """Everything the probe learns about a host; see provision/facts/probe.sh for the sources."""

    os: OsInfo = OsInfo()
    kernel: str = ""
    arch: str = ""
    boot_id: str = ""
    reboot_marker_present: bool = False
    cpus: int = 0
    memory_total_bytes: int = 0
    memory_available_bytes: int = 0
    disks: tuple[DiskFree, ...] = ()
    systemd: bool = False
    system_state: str = "unknown"
    docker_client: bool = False
    docker_version: str | None = None
    pci_gpus: tuple[GpuDevice, ...] = ()
    nvidia_smi_ok: bool = False
    # why nvidia-smi gave no GPUs: its own words ("... couldn't communicate with the NVIDIA driver ...")
    nvidia_smi_error: str = ""
    # its exit code; None when nvidia-smi is not installed (9: driver not loaded, 18: version mismatch)
    nvidia_smi_rc: int | None = None
    gpus: tuple[NvidiaSmiGpu, ...] = ()
    # `nvidia-smi -q`: FB memory in use per GPU (MiB, in nvidia-smi's order) and the processes holding it
    gpu_memory_used_mib: tuple[int, ...] = ()
    gpu_processes: tuple[GpuProcess, ...] = ()
    # the driver's installed packages (empty with a driver installed outside apt: .run file, vendor image)
    nvidia_packages: tuple[InstalledPackage, ...] = ()
    # kernel meta-packages (linux-image-generic-hwe-24.04, linux-oem-24.04, ...): the flavour that upgrades
    kernel_packages: tuple[InstalledPackage, ...] = ()
    # the docker engine's installed packages (docker-ce, containerd.io, ... or docker.io): which one to keep
    docker_packages: tuple[InstalledPackage, ...] = ()
    nvidia_runfile: bool = False
    # every apt source line (deb lines, deb822 URIs/Signed-By): stray NVIDIA entries are found in these
    nvidia_apt_sources: tuple[AptSourceLine, ...] = ()
    kernel_modules: tuple[KernelModules, ...] = ()
    # the running driver: nvidia-smi's, else the loaded module's, else /proc/driver/nvidia/version's
    driver_version: str | None = None
    # /sys/module/nvidia/version: the module in the kernel now (compare with the installed one)
    loaded_module_version: str | None = None
    open_kernel_module: bool | None = None
    nouveau_loaded: bool = False
    secure_boot: SecureBootState = "unknown"
    # DKMS's signing key (/var/lib/dkms/mok.pub) enrolled as a Machine Owner Key (`mokutil --test-key`);
    # None: no key yet, or no mokutil
    dkms_key_enrolled: bool | None = None
    # the root filesystem sits on dm-crypt (LUKS): a reboot waits at the passphrase prompt
    root_encrypted: bool = False
    sessions: tuple[LoginSession, ...] = ()
    prime_profile: str | None = None
    cloud_init: bool = False
    dpkg_locked: bool = False
    # derived, not probed: installed kernels that would boot without the driver in use (no NVIDIA
    # module built or packaged for them); empty when no driver answers. Preflight and `provision
    # status` both report these.
    kernels_without_nvidia_module: tuple[str, ...] = field(init=False, default=())
    # the fields this probe read (None: all of them); reading another one raises FactNotGathered
    gathered: frozenset[str] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("disks", "pci_gpus", "gpus", "gpu_memory_used_mib", "gpu_processes", "nvidia_packages",
                     "kernel_packages", "docker_packages", "nvidia_apt_sources", "kernel_modules", "sessions"):
            object.__setattr__(self, name, tuple(object.__getattribute__(self, name)))
        gathered = object.__getattribute__(self, "gathered")
        if gathered is None or {"kernel_modules", "nvidia_smi_ok"} <= gathered:
            missing = tuple(k.kernel for k in self.kernel_modules if not k.nvidia) if self.nvidia_smi_ok else ()
            object.__setattr__(self, "kernels_without_nvidia_module", missing)

    def __getattribute__(self, name: str) -> Any:
        gathered = object.__getattribute__(self, "gathered")
        if gathered is not None and name in FACT_FIELDS and name not in gathered:
            raise FactNotGathered(name)
        return object.__getattribute__(self, name)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={object.__getattribute__(self, name)!r}" for name in self.known_fields())
        return f"HostFacts({shown})"

    def known_fields(self) -> list[str]:
        """The fields that were gathered, in declaration order."""
        gathered = object.__getattribute__(self, "gathered")
        return [name for name in FACT_FIELDS if gathered is None or name in gathered]

    def merged(self, more: HostFacts) -> HostFacts:
        """These facts with those `more` gathered in addition (a later play that reads more)."""
        mine, theirs = object.__getattribute__(self, "gathered"), object.__getattribute__(more, "gathered")
        if mine is None:
            return self
        values = {name: object.__getattribute__(self, name) for name in self.known_fields() if name in INIT_FIELDS}
        values.update({name: object.__getattribute__(more, name) for name in more.known_fields()
                       if name in INIT_FIELDS})
        return HostFacts(**values, gathered=None if theirs is None else mine | theirs)

    @classmethod
    def empty(cls) -> HostFacts:
        """A host about which nothing is known (check-mode placeholder, unit-test base)."""
        return cls()

    def free_bytes(self, path: str) -> int | None:
        """Free bytes on the filesystem holding `path` (longest mount-point prefix); None if unknown."""
        best: DiskFree | None = None
        for disk in self.disks:
            mount = disk.path.rstrip("/") or "/"
            inside = mount == "/" or path == mount or path.startswith(mount + "/")
            if inside and (best is None or len(mount) > len(best.path.rstrip("/") or "/")):
                best = disk
        return None if best is None else best.free_bytes

    def as_vars(self) -> dict[str, Any]:
        """Plain nested dicts and lists of every gathered field, for Jinja templates and `--facts` output."""
        return {name: _plain(object.__getattribute__(self, name)) for name in self.known_fields()}


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


#: the fact fields of HostFacts (everything but the bookkeeping of which were gathered)
FACT_FIELDS = frozenset(f.name for f in fields(HostFacts) if f.name != "gathered")
#: the fields a probe sets (the others are derived from them in __post_init__)
INIT_FIELDS = frozenset(f.name for f in fields(HostFacts) if f.init and f.name != "gathered")
