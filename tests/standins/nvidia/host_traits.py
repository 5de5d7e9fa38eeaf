"""Host traits the lab applies to a lab host: the hardware and firmware state of a real laptop.

The lab (not the tool) places these, so the tool finds them where a real host has them:
- PCI presence: a fake tree bind-mounted read-only over /sys/bus/pci/devices (`docker run -v
  TREE:/sys/bus/pci/devices:ro`), with `vendor`, `device`, `class`, ... per slot. Verified here.
- Secure Boot: a fake /sys/firmware (EFI variable SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c)
  bind-mounted over /sys/firmware (needs the lab's `--security-opt systempaths=unconfined`, else
  docker masks /sys/firmware), and a `mokutil` in /usr/local/bin answering `--sb-state`.
- nouveau loaded: a boot unit that mounts a tmpfs over /sys/module carrying the real entries plus
  /sys/module/nouveau, unless modprobe.d blacklists nouveau (so the tool's blacklist + reboot
  works). A bind mount at /sys/module/nouveau itself is impossible (sysfs has no such directory to
  mount on), and /proc/modules does not exist on this machine's kernel (built without modules), so
  `lsmod` cannot show nouveau in the lab.
- PRIME: a `prime-select` in /usr/local/bin with /etc/prime-discrete (Ubuntu's nvidia-prime files).
- The GPU model: /etc/nvidia-standin/gpu.json, read by the stand-in nvidia-smi and container cli.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

from .gpu import NVIDIA_VENDOR_ID, RTX_5090_LAPTOP, GpuProfile
from .payload import render

SECURE_BOOT_VARIABLE = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
SETUP_MODE_VARIABLE = "SetupMode-8be4df61-93ca-11d2-aa0d-00e098032b8c"
EFI_VARIABLE_ATTRIBUTES = b"\x06\x00\x00\x00"  # BOOTSERVICE_ACCESS | RUNTIME_ACCESS


class HostFile(NamedTuple):
    """A file to write into the host container: absolute path, content, mode."""

    path: str
    content: bytes
    mode: int


class MountSpec(NamedTuple):
    """A bind mount for `docker run -v SOURCE:TARGET[:ro]` when the host container is created."""

    source: Path
    target: str
    read_only: bool = True

    def docker_volume(self) -> str:
        return f"{self.source}:{self.target}{':ro' if self.read_only else ''}"


@dataclass(frozen=True)
class PciDevice:
    """One PCI function as sysfs shows it under /sys/bus/pci/devices/<slot>/."""

    slot: str  # "0000:01:00.0"
    vendor: int
    device: int
    pci_class: int
    subsystem_vendor: int = 0
    subsystem_device: int = 0
    revision: int = 0xA1


INTEL_IGPU = PciDevice("0000:00:02.0", 0x8086, 0xA788, 0x030000, 0x1043, 0x3388, 0x04)
HOST_BRIDGE = PciDevice("0000:00:00.0", 0x8086, 0xA702, 0x060000, 0x1043, 0x3388, 0x01)


def gpu_pci_device(gpu: GpuProfile) -> PciDevice:
    """The NVIDIA GPU's PCI function, consistent with what nvidia-smi reports for it."""
    return PciDevice(gpu.slot, NVIDIA_VENDOR_ID, gpu.pci_device_id, gpu.pci_class,
                     gpu.pci_subsystem_vendor_id, gpu.pci_subsystem_device_id)


@dataclass(frozen=True)
class HostTraits:
    """The simulated hardware and firmware state of one lab host."""

    gpu: GpuProfile | None = RTX_5090_LAPTOP  # None: no NVIDIA GPU on the PCI bus
    intel_igpu: bool = True  # a hybrid laptop's integrated GPU
    nouveau_at_boot: bool = False  # nouveau binds the GPU at every boot until blacklisted
    secure_boot: bool | None = None  # None: no EFI variables and no mokutil (legacy BIOS boot)
    prime_profile: Literal["nvidia", "intel", "on-demand"] | None = None  # None: no prime-select
    extra_pci_devices: tuple[PciDevice, ...] = field(default=())

    def pci_devices(self) -> list[PciDevice]:
        devices = [HOST_BRIDGE]
        if self.intel_igpu:
            devices.append(INTEL_IGPU)
        if self.gpu is not None:
            devices.append(gpu_pci_device(self.gpu))
        return devices + list(self.extra_pci_devices)


def make_fake_pci_tree(directory: Path | str, devices: Iterable[PciDevice]) -> Path:
    """Write DIRECTORY/<slot>/{vendor,device,class,...} as sysfs has them; returns DIRECTORY.

    Besides the text attributes, each slot gets a 64-byte `config` header so `lspci` works too.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for device in devices:
        slot = directory / device.slot
        slot.mkdir(exist_ok=True)
        attributes = {
            "vendor": f"0x{device.vendor:04x}",
            "device": f"0x{device.device:04x}",
            "class": f"0x{device.pci_class:06x}",
            "subsystem_vendor": f"0x{device.subsystem_vendor:04x}",
            "subsystem_device": f"0x{device.subsystem_device:04x}",
            "revision": f"0x{device.revision:02x}",
            "enable": "1",
            "irq": "0",
            "numa_node": "-1",
            "uevent": (f"PCI_CLASS={device.pci_class:X}\nPCI_ID={device.vendor:04X}:{device.device:04X}\n"
                       f"PCI_SUBSYS_ID={device.subsystem_vendor:04X}:{device.subsystem_device:04X}\n"
                       f"PCI_SLOT_NAME={device.slot}\nMODALIAS=pci:v{device.vendor:08X}d{device.device:08X}"
                       f"sv{device.subsystem_vendor:08X}sd{device.subsystem_device:08X}"
                       f"bc{device.pci_class >> 16:02X}sc{(device.pci_class >> 8) & 0xFF:02X}"
                       f"i{device.pci_class & 0xFF:02X}"),
        }
        for name, value in attributes.items():
            (slot / name).write_text(value + "\n", encoding="ascii")
        (slot / "config").write_bytes(_config_header(device))
    return directory


def _config_header(device: PciDevice) -> bytes:
    header = bytearray(64)
    header[0:2] = device.vendor.to_bytes(2, "little")
    header[2:4] = device.device.to_bytes(2, "little")
    header[8] = device.revision
    header[9:12] = device.pci_class.to_bytes(3, "little")
    header[0x2C:0x2E] = device.subsystem_vendor.to_bytes(2, "little")
    header[0x2E:0x30] = device.subsystem_device.to_bytes(2, "little")
    return bytes(header)


def make_fake_firmware_tree(directory: Path | str, secure_boot: bool) -> Path:
    """A /sys/firmware with efi/efivars/SecureBoot-<guid> (last byte 1 = enabled); returns DIRECTORY."""
    efivars = Path(directory) / "efi" / "efivars"
    efivars.mkdir(parents=True, exist_ok=True)
    (efivars / SECURE_BOOT_VARIABLE).write_bytes(EFI_VARIABLE_ATTRIBUTES + (b"\x01" if secure_boot else b"\x00"))
    (efivars / SETUP_MODE_VARIABLE).write_bytes(EFI_VARIABLE_ATTRIBUTES + b"\x00")
    return Path(directory)


def host_traits_files(traits: HostTraits) -> list[HostFile]:
    """The files to write into the host (before its first boot, or before the reboot that applies them)."""
    files = [HostFile("/etc/systemd/system-generators/nvidia-standin-daemon-reload",
                      render("daemon-reload-generator"), 0o755)]
    if traits.gpu is not None:
        files.append(HostFile("/etc/nvidia-standin/gpu.json", traits.gpu.to_json().encode(), 0o644))
    if traits.secure_boot is not None:
        state = "enabled" if traits.secure_boot else "disabled"
        files.append(HostFile("/usr/local/bin/mokutil", render("mokutil", STATE=state), 0o755))
    if traits.prime_profile is not None:
        files.append(HostFile("/usr/local/bin/prime-select", render("prime-select"), 0o755))
        discrete = {"nvidia": "on", "intel": "off", "on-demand": "on-demand"}[traits.prime_profile]
        files.append(HostFile("/etc/prime-discrete", f"{discrete}\n".encode(), 0o644))
        if traits.prime_profile == "intel":
            blacklist = ("# Do not modify\n# This file was generated by nvidia-prime\nblacklist nvidia\n"
                         "blacklist nvidia-drm\nblacklist nvidia-modeset\nalias nvidia off\n"
                         "alias nvidia-drm off\nalias nvidia-modeset off\n")
            files.append(HostFile("/lib/modprobe.d/blacklist-nvidia.conf", blacklist.encode(), 0o644))
    if traits.nouveau_at_boot:
        files += [
            HostFile("/usr/local/lib/nvidia-standin/nouveau-at-boot", render("nouveau-at-boot"), 0o755),
            HostFile("/etc/systemd/system/standin-nouveau.service", render("standin-nouveau.service"), 0o644),
            HostFile("/etc/systemd/system/sysinit.target.d/standin-nouveau.conf",
                     b"[Unit]\nWants=standin-nouveau.service\n", 0o644),
        ]
    return files


def host_traits_mounts(traits: HostTraits, workdir: Path | str) -> list[MountSpec]:
    """Create the fake sysfs trees under WORKDIR and return the bind mounts that put them in place."""
    workdir = Path(workdir)
    mounts = [MountSpec(make_fake_pci_tree(workdir / "pci-devices", traits.pci_devices()), "/sys/bus/pci/devices")]
    if traits.secure_boot is not None:
        mounts.append(MountSpec(make_fake_firmware_tree(workdir / "firmware", traits.secure_boot), "/sys/firmware"))
    return mounts
