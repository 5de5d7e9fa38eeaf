"""The NVIDIA sections' parsers: one pure function per section's text (provision/gpu/probe.sh).

A missing or garbled section gives that fact's "unknown" value, never an exception.
"""

from __future__ import annotations

import re

from provision.gpu.model import NVIDIA_VENDOR_ID, GpuDevice, GpuProcess, KernelModules, NvidiaSmiGpu

DISPLAY_CLASS_PREFIX = "03"  # PCI base class 0x03: VGA and 3D controllers


def _hex_id(value: str) -> str:
    return value.strip().lower().removeprefix("0x")


def parse_pci_gpus(text: str) -> tuple[GpuDevice, ...]:
    """Lines "address 0xVENDOR 0xDEVICE 0xCLASS": NVIDIA display controllers only."""
    devices = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        address, vendor, device, pci_class = parts[0], _hex_id(parts[1]), _hex_id(parts[2]), _hex_id(parts[3])
        if vendor == NVIDIA_VENDOR_ID and pci_class.startswith(DISPLAY_CLASS_PREFIX) and len(pci_class) == 6:
            devices.append(GpuDevice(pci_address=address, vendor_id=vendor, device_id=device))
    return tuple(devices)


def parse_nvidia_smi_rc(text: str) -> int | None:
    """nvidia-smi's exit code; None when it is not installed ("absent") or the section is missing."""
    value = text.strip()
    return int(value) if value.lstrip("-").isdigit() else None


def parse_nvidia_smi(text: str, rc: int | None) -> tuple[tuple[NvidiaSmiGpu, ...], str]:
    """(GPUs, error) from `--query-gpu=index,name,pci.device_id,driver_version,compute_cap,memory.total`.

    The error is empty when GPUs were read; otherwise nvidia-smi's own words (it prints "NVIDIA-SMI
    has failed because it couldn't communicate with the NVIDIA driver" before the driver is loaded).
    """
    if rc is None:
        return (), "nvidia-smi is not installed"
    gpus = [] if rc != 0 else [gpu for line in text.splitlines() if (gpu := _smi_row(line))]
    if gpus:
        return tuple(gpus), ""
    return (), text.strip() or f"nvidia-smi exited with code {rc} and printed nothing"


def _smi_row(line: str) -> NvidiaSmiGpu | None:
    cells = [cell.strip() for cell in line.split(",")]
    if len(cells) < 6 or not cells[0].isdigit():
        return None
    pci_id, driver, compute_cap, memory = cells[-4:]
    pci_id = _hex_id(pci_id)
    return NvidiaSmiGpu(
        index=int(cells[0]),
        name=", ".join(cells[1:-4]),
        # "0x233510DE": device id in the high 16 bits, vendor in the low 16
        pci_device_id=pci_id[:-4] if len(pci_id) == 8 else pci_id,
        driver_version=driver,
        compute_cap=compute_cap,
        memory_total_mib=int(memory) if memory.isdigit() else 0,
    )


def parse_module_version(text: str) -> str | None:
    return text.strip() or None


def parse_proc_driver_version(text: str) -> str | None:
    """The version in /proc/driver/nvidia/version's "NVRM version: ... Kernel Module  580.159.04 ..."."""
    match = re.search(r"NVRM version:.*?Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    return match.group(1) if match else None


def parse_open_kernel_module(text: str) -> bool | None:
    """True for the open modules (the only ones Blackwell runs on); None when no driver is loaded."""
    if "NVRM version" not in text:
        return None
    return "Open Kernel Module" in text


def parse_nvidia_smi_pids(text: str) -> tuple[tuple[int, ...], tuple[GpuProcess, ...]]:
    """(FB memory used per GPU in MiB, processes) from `nvidia-smi -q -d PIDS,MEMORY`."""
    used: list[int] = []
    processes: list[GpuProcess] = []
    in_fb = False
    process: dict[str, str] = {}

    def flush() -> None:
        if process.get("pid", "").isdigit():
            memory = re.match(r"(\d+)", process.get("memory", ""))
            processes.append(GpuProcess(pid=int(process["pid"]), type=process.get("type", ""),
                                        name=process.get("name", ""), used_mib=int(memory.group(1)) if memory else 0))
        process.clear()

    for line in text.splitlines():
        key, sep, value = (part.strip() for part in line.partition(":"))
        if not sep:
            in_fb = key == "FB Memory Usage" or (in_fb and key == "")
            continue
        if key in ("BAR1 Memory Usage", "Conf Compute Protected Memory Usage"):
            in_fb = False
        if in_fb and key == "Used":
            number = re.match(r"(\d+)", value)
            used.append(int(number.group(1)) if number else 0)
            in_fb = False
        elif key == "Process ID":
            flush()
            process["pid"] = value
        elif key == "Type" and process:
            process["type"] = value
        elif key == "Name" and process:
            process["name"] = value
        elif key == "Used GPU Memory" and process:
            process["memory"] = value
    flush()
    return tuple(used), tuple(processes)


def parse_kernel_modules(text: str) -> tuple[KernelModules, ...]:
    """Lines "KERNEL yes|no": each installed kernel and whether it has an NVIDIA module."""
    return tuple(KernelModules(kernel=parts[0], nvidia=parts[1] == "yes")
                 for parts in map(str.split, text.splitlines()) if len(parts) == 2)
