"""known_hosts files read as OpenSSH reads them, and the one host-key decision every SSH hop makes.

The format is sshd(8), "SSH_KNOWN_HOSTS FILE FORMAT": per line an optional marker (`@cert-authority`
or `@revoked`), comma-separated host name patterns (`*` and `?` wildcards, `!` negates, a
non-standard port as `[host]:port`, or a hashed name `|1|salt|hash`: HMAC-SHA1 of the name keyed by
the salt, as `HashKnownHosts` writes it), the key type, the base64 key and a comment. paramiko's own
reader stops at the first marker line (`InvalidHostKey`) and knows no patterns, so we read the files
ourselves and hand paramiko only the plain keys of the host being reached.

Which files: ssh_config(5)'s `UserKnownHostsFile` (default `~/.ssh/known_hosts ~/.ssh/known_hosts2`;
our host's `known_hosts` setting replaces it) and `GlobalKnownHostsFile` (default
`/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2`); a key learnt on first use goes to the first
user file, as ssh's does.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import paramiko

from provision.errors import HostKeyRefused
from provision.shell import quote

DEFAULT_USER_FILES = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_FILES = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
MARKERS = ("@cert-authority", "@revoked")
SSH_PORT = 22


def host_key_name(host: str, port: int | None) -> str:
    """The name a host's keys are filed under: `host`, or `[host]:port` off port 22 (sshd(8))."""
    return host if port in (None, SSH_PORT) else f"[{host}]:{port}"


@dataclass(frozen=True)
class KnownKey:
    """One line of a known_hosts file."""

    marker: str | None  # "@cert-authority", "@revoked", or None for a host's own key
    patterns: tuple[str, ...]
    key_type: str
    blob: bytes
    where: str  # file:line

    def matches(self, name: str) -> bool:
        """sshd(8): the name matches a pattern of the line and no negated one (`!`)."""
        name = name.lower()
        matched = False
        for pattern in self.patterns:
            if pattern.startswith("|1|"):
                matched = matched or _hashed_matches(pattern, name)
            elif pattern.startswith("!"):
                if _wildcard(pattern[1:]).fullmatch(name):
                    return False
            elif _wildcard(pattern).fullmatch(name):
                matched = True
        return matched

    def is_key(self, key: paramiko.PKey) -> bool:
        return self.blob == key.asbytes()

    @property
    def file(self) -> str:
        return self.where.rsplit(":", 1)[0]


class KnownHosts:
    """Every line of the user's and the system's known_hosts files; the decision on a host's key."""

    _recording = threading.Lock()

    def __init__(self, user_files: list[Path], global_files: list[Path]) -> None:
        self.user_files = user_files
        self.lines = [line for path in [*user_files, *global_files] for line in read_known_hosts(path)]

    def for_name(self, name: str) -> list[KnownKey]:
        return [line for line in self.lines if line.matches(name)]

    def plain_keys(self, name: str) -> list[tuple[str, paramiko.PKey]]:
        """The host's own keys (never a revoked one) as paramiko compares them: (type, key)."""
        lines = self.for_name(name)
        revoked = {line.blob for line in lines if line.marker == "@revoked"}
        keys = []
        for line in lines:
            if line.marker is None and line.blob not in revoked:
                try:
                    keys.append((line.key_type, paramiko.PKey.from_type_string(line.key_type, line.blob)))
                except (paramiko.SSHException, ValueError, TypeError):
                    continue  # a type paramiko cannot use (a security key's): it never offers it either
        return keys

    def refuse_revoked(self, name: str, key: paramiko.PKey) -> None:
        """sshd(8): a key on a `@revoked` line "must not ever be accepted"."""
        for line in self.for_name(name):
            if line.marker == "@revoked" and line.is_key(key):
                raise HostKeyRefused(
                    f"host key of {name} ({key.get_name()} {key.fingerprint}) is REVOKED ({line.where} marks it "
                    "@revoked); it is never accepted. Ask the host's administrator for its new key.")

    def refuse_unknown(self, name: str, key: paramiko.PKey, trust_new: bool) -> None:
        """A key not on file for `name`: recorded if the user opted into trust on first use, else refused
        (never a key under a `@cert-authority` line: host certificates are not checked here)."""
        self.refuse_revoked(name, key)
        authorities = [line for line in self.for_name(name) if line.marker == "@cert-authority"]
        if authorities:
            raise HostKeyRefused(
                f"{authorities[0].where} trusts a certificate authority for {name} (@cert-authority), but "
                f"provision (paramiko) cannot check host certificates, and will not trust the host's plain key "
                f"({key.get_name()} {key.fingerprint}) in its place. Check that fingerprint on the host "
                f"(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub) and add the key for {name} to "
                f"{self.user_files[0]}.")
        if not trust_new:
            raise HostKeyRefused(
                f"host key of {name} is not known ({key.get_name()} {key.fingerprint}). "
                f"Check the fingerprint on the host (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), "
                f"then add it to known_hosts (ssh-keyscan) or rerun with --trust-new-host-keys.")
        with self._recording:
            target = self.user_files[0]
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with target.open("a") as handle:
                handle.write(f"{name} {key.get_name()} {key.get_base64()}\n")

    def changed(self, name: str, key: paramiko.PKey) -> HostKeyRefused:
        """The error for a key that differs from the one on file (a revoked key's own error first)."""
        self.refuse_revoked(name, key)
        on_file = [line for line in self.for_name(name) if line.marker is None]
        same_type = [line for line in on_file if line.key_type == key.get_name()] or on_file
        files = sorted({line.file for line in same_type}) or [str(self.user_files[0])]
        expected = f"{same_type[0].key_type} key at {same_type[0].where}" if same_type else "another key"
        return HostKeyRefused(
            f"host key of {name} has CHANGED (got {key.get_name()} {key.fingerprint}, known_hosts has the "
            f"{expected}). This may be a reinstalled host or an attack; verify it, then remove the old entry with "
            + " and ".join(f"ssh-keygen -R {quote(name)} -f {quote(file)}" for file in files)
            + ". A changed key is never accepted.")


class HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """What paramiko asks when a hop's key is not among the plain keys we gave it."""

    def __init__(self, known: KnownHosts, trust_new: bool) -> None:
        self.known = known
        self.trust_new = trust_new

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        self.known.refuse_unknown(hostname, key, self.trust_new)
        client.get_host_keys().add(hostname, key.get_name(), key)


def read_known_hosts(path: Path) -> list[KnownKey]:
    """The lines of one known_hosts file that name a key (sshd(8) format); a missing or unreadable
    file, and a line ssh would skip too (too few fields, an unknown marker, bad base64), are none."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = fields.pop(0) if fields[0].startswith("@") else None
        if (marker is not None and marker not in MARKERS) or len(fields) < 3:
            continue
        try:
            blob = base64.b64decode(fields[2], validate=True)
        except (binascii.Error, ValueError):
            continue
        lines.append(KnownKey(marker, tuple(fields[0].split(",")), fields[1], blob, f"{path}:{number}"))
    return lines


def _hashed_matches(pattern: str, name: str) -> bool:
    """`|1|base64(salt)|base64(HMAC-SHA1(salt, name))` (OpenSSH hostfile.c, `host_hash`)."""
    try:
        salt, digest = (base64.b64decode(part) for part in pattern[3:].split("|", 1))
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest)


def _wildcard(pattern: str) -> re.Pattern[str]:
    """OpenSSH's `match_pattern`: `*` any run, `?` one character, all else literal (`[`, `]` too)."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern.lower()),
                      re.DOTALL)
