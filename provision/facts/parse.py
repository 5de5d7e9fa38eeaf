"""The generic sections' parsers: one pure function per section's text (provision/facts/probe.sh).

A missing or garbled section gives that fact's "unknown" value, never an exception, so one odd host
cannot hide all the others' facts. `host.py` registers them; the NVIDIA ones are in provision/gpu/.
"""

from __future__ import annotations

import re
import shlex

from provision.facts.model import (
    AptSourceLine,
    DiskFree,
    InstalledPackage,
    LoginSession,
    OsInfo,
    SecureBootState,
)
from provision.facts.section import key_values


def parse_key_values(text: str) -> dict[str, str]:
    """`key=value` lines; a repeated key's values are joined with newlines (mokutil's lines)."""
    return key_values(text)


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
