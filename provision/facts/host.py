"""The generic sections of the facts probe: the OS, kernel, memory, disks, systemd, docker, Secure
Boot, sessions and the dpkg lock (their shell in probe.sh and fcntl_lock.sh, parsers in parse.py).
The NVIDIA sections are registered by provision/gpu/facts.py."""

from __future__ import annotations

from provision.facts import parse as p
from provision.facts.model import OsInfo
from provision.facts.section import Fact, Raw, Section

PROBE_SHELL = ("probe.sh", "fcntl_lock.sh")


def _kernel(raw: Raw) -> dict[str, object]:
    kernel, arch = p.parse_kernel(raw("kernel"))
    return {"kernel": kernel, "arch": arch}


def _meminfo(raw: Raw) -> dict[str, object]:
    total, available = p.parse_meminfo(raw("meminfo"))
    return {"memory_total_bytes": total, "memory_available_bytes": available}


def _systemd(raw: Raw) -> dict[str, object]:
    booted, state = p.parse_systemd(raw("systemd"))
    return {"systemd": booted, "system_state": state}


def _docker(raw: Raw) -> dict[str, object]:
    client, version = p.parse_docker(raw("docker"))
    return {"docker_client": client, "docker_version": version}


SECTIONS = (
    Section("os-release", "probe_os_release", {"os": Fact(OsInfo())},
            lambda raw: {"os": p.parse_os_release(raw("os-release"))}),
    Section("kernel", "probe_kernel", {"kernel": Fact(""), "arch": Fact("")}, _kernel),
    Section("boot-id", "probe_boot_id", {"boot_id": Fact("")}, lambda raw: {"boot_id": raw("boot-id").strip()}),
    Section("reboot-marker", "probe_reboot_marker", {"reboot_marker_present": Fact(False)},
            lambda raw: {"reboot_marker_present": p.parse_yes_no(raw("reboot-marker"))}),
    Section("cpus", "probe_cpus", {"cpus": Fact(0)}, lambda raw: {"cpus": p.parse_cpus(raw("cpus"))}),
    Section("meminfo", "probe_meminfo", {"memory_total_bytes": Fact(0), "memory_available_bytes": Fact(0)},
            _meminfo),
    # filesystems by mount point: HostFacts.free_bytes(path) reads them
    Section("disk-free", "probe_disk_free", {"disks": Fact(())}, lambda raw: {"disks": p.parse_df(raw("disk-free"))}),
    Section("systemd", "probe_systemd", {"systemd": Fact(False), "system_state": Fact("unknown")}, _systemd),
    Section("docker", "probe_docker", {"docker_client": Fact(False), "docker_version": Fact(None)}, _docker),
    # dkms_key_enrolled: DKMS's signing key (/var/lib/dkms/mok.pub) enrolled as a Machine Owner Key
    # (`mokutil --test-key`); None: no key yet, or no mokutil
    Section("secure-boot", "probe_secure_boot", {"secure_boot": Fact("unknown"), "dkms_key_enrolled": Fact(None)},
            lambda raw: {"secure_boot": p.parse_secure_boot(raw("secure-boot")),
                         "dkms_key_enrolled": p.parse_dkms_key_enrolled(raw("secure-boot"))}),
    # the root filesystem sits on dm-crypt (LUKS): a reboot waits at the passphrase prompt
    Section("root-encryption", "probe_root_encryption", {"root_encrypted": Fact(False)},
            lambda raw: {"root_encrypted": p.parse_root_encrypted(raw("root-encryption"))}),
    Section("sessions", "probe_sessions", {"sessions": Fact(())},
            lambda raw: {"sessions": p.parse_sessions(raw("sessions"))}),
    Section("cloud-init", "probe_cloud_init", {"cloud_init": Fact(False)},
            lambda raw: {"cloud_init": p.parse_key_values(raw("cloud-init")).get("present") == "yes"}),
    Section("dpkg-lock", "probe_dpkg_lock", {"dpkg_locked": Fact(False)},
            lambda raw: {"dpkg_locked": p.parse_dpkg_lock(raw("dpkg-lock"))}),
)
