"""Turn the probe's output (provision/facts/probe.sh) into HostFacts.

The output is a series of sections: a header line `@@<kind> <name>` and the raw text under it up
to the next header. The probe writes `@@section NAME`; the runner appends its own `@@task N`
sections to the same script, so `split_sections` keys them "task N" and `parse_probe` ignores
every section it does not know. One pure parser per section: a missing or garbled section gives
that fact's "unknown" value, never an exception, so one odd host cannot hide all the others' facts.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from functools import cache
from importlib import resources

from provision.facts.model import (
    AptSourceLine,
    DiskFree,
    GpuDevice,
    GpuProcess,
    HostFacts,
    InstalledPackage,
    KernelModules,
    LoginSession,
    NvidiaSmiGpu,
    OsInfo,
    SecureBootState,
)
from provision.facts.sections import ALL_SECTIONS, fields_from, sections_for
from provision.shell import parse_fields, quote

SECTION_HEADER = re.compile(r"^@@([A-Za-z0-9][A-Za-z0-9_-]*)[ \t]+(\S.*?)[ \t]*$")
NVIDIA_VENDOR_ID = "10de"
DISPLAY_CLASS_PREFIX = "03"  # PCI base class 0x03: VGA and 3D controllers
KERNEL_META_PREFIXES = ("linux-image-", "linux-generic", "linux-oem")
# the docker engine's packages of either origin (Docker's docker-ce, the distribution's docker.io)
DOCKER_ENGINE_PACKAGES = frozenset({"docker-ce", "docker-ce-cli", "containerd.io", "docker-compose-plugin",
                                    "docker-buildx-plugin", "docker.io"})


@cache
def probe_script() -> str:
    """The probe's shell text (package data, so it works from an installed wheel too)."""
    return resources.files("provision.facts").joinpath("probe.sh").read_text(encoding="utf-8")


def probe_for(fields: Iterable[str] | None) -> str:
    """The facts probe for these fields only (None: every fact)."""
    if fields is None:
        return probe_script()
    sections = " ".join(sections_for(fields)) or "none"
    return f"PROBE_SECTIONS={quote(sections)}\n{probe_script()}"


def split_sections(output: str) -> dict[str, str]:
    """Sections by key: `@@section NAME` -> "NAME", any other `@@KIND NAME` -> "KIND NAME".

    A body is the lines between its header and the next one, joined with "\\n" (no trailing
    newline); text before the first header (a login banner) is dropped; a repeated key keeps the
    last body.
    """
    sections: dict[str, str] = {}
    key: str | None = None
    body: list[str] = []
    for line in output.replace("\r\n", "\n").split("\n"):
        header = SECTION_HEADER.match(line)
        if header:
            if key is not None:
                sections[key] = "\n".join(body).rstrip("\n")
            kind, name = header.groups()
            key = name if kind == "section" else f"{kind} {name}"
            body = []
        elif key is not None:
            body.append(line)
    if key is not None:
        sections[key] = "\n".join(body).rstrip("\n")
    return sections


def parse_probe(output: str) -> HostFacts:
    """HostFacts from the probe's whole output; ValueError when it is not probe output at all."""
    if not output.strip():
        raise ValueError("the facts probe printed nothing")
    sections = split_sections(output)
    if "probe" not in sections and "os-release" not in sections and "kernel" not in sections:
        raise ValueError(f"not facts probe output (no @@section headers): {output.strip()[:200]!r}")

    def get(name: str) -> str:
        return sections.get(name, "")

    kernel, arch = parse_kernel(get("kernel"))
    memory_total, memory_available = parse_meminfo(get("meminfo"))
    systemd, system_state = parse_systemd(get("systemd"))
    docker_client, docker_version = parse_docker(get("docker"))
    smi_rc = parse_nvidia_smi_rc(get("nvidia-smi-rc"))
    gpus, smi_error = parse_nvidia_smi(get("nvidia-smi"), smi_rc)
    module_version = parse_module_version(get("nvidia-module-version"))
    proc_version = get("nvidia-proc-version")
    driver_version = (gpus[0].driver_version if gpus else None) or module_version or \
        parse_proc_driver_version(proc_version)
    memory_used, processes = parse_nvidia_smi_pids(get("nvidia-smi-pids"))
    packages = parse_installed_packages(get("nvidia-packages"))
    return HostFacts(
        os=parse_os_release(get("os-release")),
        kernel=kernel,
        arch=arch,
        boot_id=get("boot-id").strip(),
        reboot_marker_present=parse_yes_no(get("reboot-marker")),
        cpus=parse_cpus(get("cpus")),
        memory_total_bytes=memory_total,
        memory_available_bytes=memory_available,
        disks=parse_df(get("disk-free")),
        systemd=systemd,
        system_state=system_state,
        docker_client=docker_client,
        docker_version=docker_version,
        pci_gpus=parse_pci_gpus(get("pci-nvidia")),
        nvidia_smi_ok=bool(gpus),
        nvidia_smi_error=smi_error,
        nvidia_smi_rc=smi_rc,
        gpus=gpus,
        gpu_memory_used_mib=memory_used,
        gpu_processes=processes,
        nvidia_packages=tuple(p for p in packages if not p.name.startswith(KERNEL_META_PREFIXES)
                              and p.name not in DOCKER_ENGINE_PACKAGES),
        kernel_packages=tuple(p for p in packages if p.name.startswith(KERNEL_META_PREFIXES)),
        docker_packages=tuple(p for p in packages if p.name in DOCKER_ENGINE_PACKAGES),
        nvidia_runfile="runfile-installer yes" in get("nvidia-packages"),
        nvidia_apt_sources=parse_apt_source_lines(get("apt-sources")),
        kernel_modules=parse_kernel_modules(get("kernel-modules")),
        driver_version=driver_version,
        loaded_module_version=module_version,
        open_kernel_module=parse_open_kernel_module(proc_version),
        nouveau_loaded=parse_key_values(get("nouveau")).get("loaded") == "yes",
        secure_boot=parse_secure_boot(get("secure-boot")),
        dkms_key_enrolled=parse_dkms_key_enrolled(get("secure-boot")),
        root_encrypted=parse_root_encrypted(get("root-encryption")),
        sessions=parse_sessions(get("sessions")),
        prime_profile=get("prime-select").strip() or None,
        cloud_init=parse_key_values(get("cloud-init")).get("present") == "yes",
        dpkg_locked=parse_dpkg_lock(get("dpkg-lock")),
        gathered=fields_from(sections.get("probe", ALL_SECTIONS)),
    )




def parse_key_values(text: str) -> dict[str, str]:
    """`key=value` lines; a repeated key's values are joined with newlines (mokutil's lines)."""
    return parse_fields(text, join_repeated=True)


def parse_yes_no(text: str) -> bool:
    return text.strip() == "yes"


def parse_os_release(text: str) -> OsInfo:
    """/etc/os-release (shell-quoted KEY=VALUE); codename from VERSION_CODENAME or its fallbacks."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, raw = line.strip().partition("=")
        if not sep or not key.isidentifier():
            continue
        try:
            words = shlex.split(raw)
        except ValueError:
            words = [raw.strip("\"'")]
        values[key] = " ".join(words)
    codename = values.get("VERSION_CODENAME") or values.get("UBUNTU_CODENAME") or ""
    if not codename:
        in_parens = re.search(r"\(([A-Za-z]+)", values.get("VERSION", ""))
        codename = in_parens.group(1).lower() if in_parens else ""
    return OsInfo(
        id=values.get("ID", "").lower(),
        version_id=values.get("VERSION_ID", ""),
        codename=codename,
        pretty=values.get("PRETTY_NAME", ""),
    )


def parse_kernel(text: str) -> tuple[str, str]:
    """(release, machine) from `uname -r` and `uname -m` lines."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else "", lines[1] if len(lines) > 1 else "")


def parse_cpus(text: str) -> int:
    value = text.strip()
    return int(value) if value.isdigit() else 0


def parse_meminfo(text: str) -> tuple[int, int]:
    """(MemTotal, MemAvailable) in bytes; 0 for a line that is missing."""
    found = dict.fromkeys(("MemTotal", "MemAvailable"), 0)
    for line in text.splitlines():
        match = re.match(r"(MemTotal|MemAvailable):\s+(\d+)\s*kB", line)
        if match:
            found[match.group(1)] = int(match.group(2)) * 1024
    return found["MemTotal"], found["MemAvailable"]


_DF_LINE = re.compile(r"^(?P<fs>.+?)\s+(?P<total>\d+)\s+(?P<used>\d+)\s+(?P<free>\d+)\s+\S+\s+(?P<mount>/.*)$")


def parse_df(text: str) -> tuple[DiskFree, ...]:
    """`df -Pk` rows as DiskFree per mount point (a mount that several paths share appears once)."""
    disks: dict[str, DiskFree] = {}
    for line in text.splitlines():
        match = _DF_LINE.match(line.strip())
        if match and match["mount"] not in disks:
            disks[match["mount"]] = DiskFree(
                path=match["mount"], free_bytes=int(match["free"]) * 1024,
                total_bytes=int(match["total"]) * 1024,
            )
    return tuple(disks.values())


def parse_systemd(text: str) -> tuple[bool, str]:
    """(booted with systemd, `systemctl is-system-running` or "unknown")."""
    values = parse_key_values(text)
    return values.get("booted") == "yes", values.get("state", "").strip() or "unknown"


def parse_docker(text: str) -> tuple[bool, str | None]:
    """(docker CLI present, server version when the daemon answered)."""
    values = parse_key_values(text)
    server = values.get("server", "").strip()
    answered = values.get("server_rc", "").strip() == "0" and bool(server) and " " not in server
    return values.get("client") == "yes", server if answered else None


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


# mokutil's words for EFI variables without a SecureBoot one (lcp/mokutil src/mokutil.c, since 0.4.0).
# Without EFI variables at all it says "EFI variables are not supported on this system" and exits 1: a
# BIOS boot, but also EFI with its runtime services off (efi=noruntime), so /sys/firmware/efi decides.
MOKUTIL_NO_SECURE_BOOT = "This system doesn't support Secure Boot"


def parse_secure_boot(text: str) -> SecureBootState:
    """mokutil's answer when it gave one; else the EFI variable's last byte; no EFI boot means "bios"
    and EFI without a SecureBoot variable "not_supported" (neither can refuse a module)."""
    values = parse_key_values(text)
    mokutil_lines = values.get("mokutil", "").strip().splitlines()
    mokutil_first = mokutil_lines[:1]
    # shim with validation turned off (`mokutil --disable-validation`) boots any kernel and loads any
    # module: for the driver, that is Secure Boot off
    if "SecureBoot validation is disabled in shim" in mokutil_lines:
        return "disabled"
    if mokutil_first == ["SecureBoot enabled"]:
        return "enabled"
    if mokutil_first == ["SecureBoot disabled"]:
        return "disabled"
    efivar = values.get("efivar", "").split()
    if efivar and efivar[-1].isdigit():
        return "enabled" if efivar[-1] == "1" else "disabled"
    efi = values.get("efi")
    if efi == "no":
        return "bios"  # no /sys/firmware/efi: booted without EFI
    if efi == "yes" and (values.get("efivars") == "yes" or mokutil_first == [MOKUTIL_NO_SECURE_BOOT]):
        return "not_supported"  # EFI variables readable, but no SecureBoot one: the firmware lacks it
    return "unknown"


def parse_dkms_key_enrolled(text: str) -> bool | None:
    """`mokutil --test-key /var/lib/dkms/mok.pub`: "... is already enrolled" / "... is not enrolled".

    None: not asked (no DKMS key yet, or no mokutil).
    """
    answer = parse_key_values(text).get("mok-test-key", "")
    if "is already enrolled" in answer:
        return True
    if "is not enrolled" in answer:
        return False
    return None


def parse_dpkg_lock(text: str) -> bool:
    """True when any process holds a dpkg/apt lock file ("PATH held PID" lines)."""
    return any(len(parts) >= 2 and parts[1] == "held" for parts in map(str.split, text.splitlines()))


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


def parse_installed_packages(text: str) -> tuple[InstalledPackage, ...]:
    """Lines "STATUS PACKAGE VERSION" (dpkg's db:Status-Abbrev, e.g. "ii " or "hi "): installed ones only."""
    packages = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and len(parts[0]) >= 2 and parts[0][1] == "i":
            packages.append(InstalledPackage(name=parts[1], version=parts[2], held=parts[0][0] == "h"))
    return tuple(packages)


def parse_apt_source_lines(text: str) -> tuple[AptSourceLine, ...]:
    """Lines "FILE<TAB>LINE" of apt sources (deb lines, deb822 URIs and Signed-By)."""
    lines = []
    for line in text.splitlines():
        path, sep, content = line.partition("\t")
        if sep and path.startswith("/") and content.strip():
            lines.append(AptSourceLine(path=path, line=content.strip()))
    return tuple(lines)


def parse_kernel_modules(text: str) -> tuple[KernelModules, ...]:
    """Lines "KERNEL yes|no": each installed kernel and whether it has an NVIDIA module."""
    return tuple(KernelModules(kernel=parts[0], nvidia=parts[1] == "yes")
                 for parts in map(str.split, text.splitlines()) if len(parts) == 2)


def parse_root_encrypted(text: str) -> bool:
    """`lsblk -s -r -o TYPE,FSTYPE <root>` lists the root and what it sits on: a "crypt" layer is LUKS."""
    return any(parts[0] == "crypt" or "crypto_LUKS" in parts
               for parts in map(str.split, text.splitlines()) if parts)


def parse_sessions(text: str) -> tuple[LoginSession, ...]:
    """Lines "ID Key=value ..." (loginctl show-session -p Remote -p Class -p Type -p State)."""
    sessions = []
    for line in text.splitlines():
        session_id, _, rest = line.strip().partition(" ")
        if not session_id:
            continue
        values = dict(item.partition("=")[::2] for item in rest.split() if "=" in item)
        sessions.append(LoginSession(id=session_id, remote=values.get("Remote", "no") == "yes",
                                     session_class=values.get("Class", ""), type=values.get("Type", ""),
                                     state=values.get("State", "")))
    return tuple(sessions)
