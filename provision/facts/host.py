"""The generic sections of the facts probe: the OS, kernel, memory, disks, systemd, docker, Secure
Boot, sessions and the dpkg lock (their shell in probe.sh and fcntl_lock.sh, parsers in parse.py).
The NVIDIA sections are registered by provision/gpu/facts.py."""

from __future__ import annotations

from provision.facts import parse as p
from provision.facts.model import OsInfo
from provision.facts.section import Fact, Section

PROBE_SHELL = ("probe.sh", "fcntl_lock.sh", "dpkg_rows.sh")


def _secure_boot(text: str) -> tuple[object, object]:
    return p.parse_secure_boot(text), p.parse_dkms_key_enrolled(text)


SECTIONS = (
    Section.own("os-release", "probe_os_release", {"os": Fact(OsInfo())}, p.parse_os_release),
    Section.own("kernel", "probe_kernel", {"kernel": Fact(""), "arch": Fact("")}, p.parse_kernel),
    Section.own("boot-id", "probe_boot_id", {"boot_id": Fact("")}, str.strip),
    Section.own("reboot-marker", "probe_reboot_marker", {"reboot_marker_present": Fact(False)}, p.parse_yes_no),
    Section.own("cpus", "probe_cpus", {"cpus": Fact(0)}, p.parse_cpus),
    Section.own("meminfo", "probe_meminfo", {"memory_total_bytes": Fact(0), "memory_available_bytes": Fact(0)},
                p.parse_meminfo),
    # filesystems by mount point: HostFacts.free_bytes(path) reads them
    Section.own("disk-free", "probe_disk_free", {"disks": Fact(())}, p.parse_df),
    Section.own("systemd", "probe_systemd", {"systemd": Fact(False), "system_state": Fact("unknown")},
                p.parse_systemd),
    Section.own("docker", "probe_docker", {"docker_client": Fact(False), "docker_version": Fact(None)},
                p.parse_docker),
    # dkms_key_enrolled: DKMS's signing key (/var/lib/dkms/mok.pub) enrolled as a Machine Owner Key
    # (`mokutil --test-key`); None: no key yet, or no mokutil
    Section.own("secure-boot", "probe_secure_boot", {"secure_boot": Fact("unknown"), "dkms_key_enrolled": Fact(None)},
                _secure_boot),
    # the root filesystem sits on dm-crypt (LUKS): a reboot waits at the passphrase prompt
    Section.own("root-encryption", "probe_root_encryption", {"root_encrypted": Fact(False)}, p.parse_root_encrypted),
    Section.own("sessions", "probe_sessions", {"sessions": Fact(())}, p.parse_sessions),
    Section.own("cloud-init", "probe_cloud_init", {"cloud_init": Fact(False)},
                lambda text: p.parse_key_values(text).get("present") == "yes"),
    Section.own("dpkg-lock", "probe_dpkg_lock", {"dpkg_locked": Fact(False)}, p.parse_dpkg_lock),
)
