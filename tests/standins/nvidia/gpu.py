"""The simulated GPU: what the stand-in `nvidia-smi` reports and the fake PCI tree shows.

A lab host carries one GPU profile as `/etc/nvidia-standin/gpu.json` (written by the lab, see
host_traits.py); without that file the stand-in `nvidia-smi` uses the RTX 5090 Laptop default that
is built into it from `RTX_5090_LAPTOP` below. The file is a flat JSON object of scalars (the shell
script parses it with sed, so values must not contain `"`, `'`, `,`, `{` or `}`).

The H200 preset reproduces the recorded captures in `captures/h200-driver580/` exactly, which is how
the unit tests prove the output formats are the real ones.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace

NVIDIA_VENDOR_ID = 0x10DE


@dataclass(frozen=True)
class GpuProfile:
    """One simulated NVIDIA GPU: identity, memory, and the idle readings nvidia-smi prints."""

    name: str
    pci_device_id: int
    compute_cap: str
    memory_mib: int
    # the kernel module it needs: Blackwell answers "No devices were found" to the proprietary one
    open_kernel_required: bool = True
    brand: str = "GeForce"
    architecture: str = "Blackwell"
    pci_bus_id: str = "00000000:01:00.0"
    pci_class: int = 0x030000  # VGA controller; data-centre cards are 0x030200 (3D controller)
    pci_subsystem_vendor_id: int = 0x1043
    pci_subsystem_device_id: int = 0x3388
    uuid: str = "GPU-5a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"
    serial: str = "N/A"
    vbios_version: str = "98.03.3F.00.4C"
    board_id: str = "0x100"
    virtualization_mode: str = "None"
    pcie_gen_max: int = 5
    pcie_width_max: str = "16x"
    memory_reserved_mib: int = 345
    memory_used_mib: int = 0
    memory_free_mib: int | None = None  # None: total - reserved - used
    bar1_mib: int = 32768
    fan: str = "N/A"  # laptops report N/A; a desktop card would say "30 %"
    temperature_c: int = 46
    temperature_memory_c: str = "N/A"
    pstate: str = "P8"
    power_draw_w: float = 7.42
    power_draw_instant_w: float = 7.58
    power_limit_w: float = 150.00
    power_min_limit_w: float = 5.00
    power_max_limit_w: float = 175.00
    clocks_graphics_mhz: int = 180
    clocks_memory_mhz: int = 405
    clocks_video_mhz: int = 600
    clocks_max_graphics_mhz: int = 3090
    clocks_max_memory_mhz: int = 14001
    clocks_max_video_mhz: int = 3090
    ecc: str = "N/A"  # "Enabled" on data-centre cards
    mig: str = "N/A"  # "Disabled" on MIG-capable cards
    display_attached: str = "No"
    display_active: str = "Disabled"
    # a desktop session on this GPU: "PID:NAME:MIB" entries separated by ";" (graphics processes that
    # `nvidia-smi -q` lists; give memory_used_mib their sum)
    graphics_processes: str = ""

    def to_json(self) -> str:
        """The `/etc/nvidia-standin/gpu.json` text (flat, one key a line) the stand-ins read."""
        fields = {key: value for key, value in asdict(self).items() if value is not None}
        fields["pci_device_id"] = f"0x{self.pci_device_id:04x}"
        fields["pci_class"] = f"0x{self.pci_class:06x}"
        fields["pci_subsystem_vendor_id"] = f"0x{self.pci_subsystem_vendor_id:04x}"
        fields["pci_subsystem_device_id"] = f"0x{self.pci_subsystem_device_id:04x}"
        for key in ("power_draw_w", "power_draw_instant_w", "power_limit_w", "power_min_limit_w",
                    "power_max_limit_w"):
            fields[key] = f"{fields[key]:.2f}"
        text = json.dumps(fields, indent=2)
        unsafe = [key for key, value in fields.items() if any(c in str(value) for c in "\"',{}")]
        if unsafe:
            raise ValueError(f"GPU profile values the stand-in cannot parse: {unsafe}")
        return text + "\n"

    @property
    def slot(self) -> str:
        """The sysfs PCI slot name ("0000:01:00.0") of nvidia-smi's bus id ("00000000:01:00.0")."""
        domain, bus, device_function = self.pci_bus_id.split(":")
        return f"{int(domain, 16):04x}:{bus.lower()}:{device_function.lower()}"


RTX_5090_LAPTOP = GpuProfile(
    name="NVIDIA GeForce RTX 5090 Laptop GPU",
    pci_device_id=0x2C58,
    compute_cap="12.0",
    memory_mib=24463,
)

RTX_4090 = replace(
    RTX_5090_LAPTOP,
    name="NVIDIA GeForce RTX 4090",
    pci_device_id=0x2684,
    compute_cap="8.9",
    memory_mib=24564,
    open_kernel_required=False,
    architecture="Ada Lovelace",
    pci_subsystem_device_id=0x889D,
    uuid="GPU-7c0d2f43-9b1e-4e0a-8f3c-2d5e6f7a8b9c",
    vbios_version="95.02.3C.40.A1",
    pcie_gen_max=4,
    fan="30 %",
    power_limit_w=450.00,
    power_min_limit_w=150.00,
    power_max_limit_w=600.00,
    clocks_max_graphics_mhz=3120,
    clocks_max_memory_mhz=10501,
    clocks_max_video_mhz=2415,
)

H200 = GpuProfile(
    name="NVIDIA H200",
    pci_device_id=0x2335,
    compute_cap="9.0",
    memory_mib=143771,
    open_kernel_required=False,
    brand="NVIDIA",
    architecture="Hopper",
    pci_bus_id="00000000:00:06.0",
    pci_class=0x030200,
    pci_subsystem_vendor_id=0x10DE,
    pci_subsystem_device_id=0x18BF,
    uuid="GPU-00000000-0000-0000-0000-000000000000",
    serial="0000000000000",
    vbios_version="96.00.A5.00.1A",
    board_id="0x6",
    virtualization_mode="Pass-Through",
    memory_reserved_mib=616,
    memory_free_mib=143156,
    bar1_mib=262144,
    temperature_c=37,
    temperature_memory_c="35 C",
    pstate="P0",
    power_draw_w=130.43,
    power_draw_instant_w=130.66,
    power_limit_w=700.00,
    power_min_limit_w=200.00,
    power_max_limit_w=700.00,
    clocks_graphics_mhz=1980,
    clocks_memory_mhz=3201,
    clocks_video_mhz=1545,
    clocks_max_graphics_mhz=1980,
    clocks_max_memory_mhz=3201,
    clocks_max_video_mhz=1545,
    ecc="Enabled",
    mig="Disabled",
    display_attached="Yes",
    display_active="Disabled",
)

PROFILES: dict[str, GpuProfile] = {"rtx5090-laptop": RTX_5090_LAPTOP, "rtx4090": RTX_4090, "h200": H200}
