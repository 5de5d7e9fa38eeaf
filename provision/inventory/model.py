"""The validated inventory: `Host` (how to reach a machine and its merged vars) and `Inventory`.

Both are built by `loader.load_inventory`; nothing here reads files. Every value keeps the place
it was set (`Inventory.line_of`), so a later error about a variable can still name file:line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from provision.errors import InputError
from provision.inventory.limit import select_hosts

ConnectionKind = Literal["ssh", "local"]

# Ansible's spellings of the connection settings, and ours; each maps to a Host field.
CONNECTION_KEYS: dict[str, str] = {
    "address": "address", "ansible_host": "address", "ansible_ssh_host": "address",
    "port": "port", "ansible_port": "port", "ansible_ssh_port": "port",
    "user": "user", "ansible_user": "user", "ansible_ssh_user": "user",
    "key": "key", "ansible_ssh_private_key_file": "key", "ansible_private_key_file": "key",
    "become": "become", "ansible_become": "become",
    "connection": "connection", "ansible_connection": "connection",
    "known_hosts": "known_hosts",
}


@dataclass
class Host:
    """One machine: where it is, how to log in, and the variables its tasks see.

    `user` None means "whatever ssh would use" (ssh config, then the current user); `key` None means
    the ssh agent / default keys. `become` runs tasks as root (`sudo -n` when `user` is not root).
    `vars` is group vars merged with host vars (see `vars.py` for the order); connection settings
    are fields, never left in `vars`.
    """

    name: str
    address: str
    port: int = 22
    user: str | None = None
    key: Path | None = None
    become: bool = True
    connection: ConnectionKind = "ssh"
    known_hosts: Path | None = None
    groups: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)
    source: Path = field(default_factory=Path)

    @property
    def is_local(self) -> bool:
        return self.connection == "local"


@dataclass(frozen=True)
class Origin:
    """Where a host's value was set: the file, the line, and the key as the user spelled it."""

    file: Path
    line: int | None
    key: str


@dataclass
class Inventory:
    """All hosts of one inventory file, in file order, with their groups and value origins."""

    hosts: list[Host]
    path: Path
    group_names: list[str] = field(default_factory=list)
    origins: dict[str, dict[str, Origin]] = field(default_factory=dict)

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def select(self, limit: str | None) -> list[Host]:
        """Hosts matching an Ansible-style `--limit` (see `limit.select_hosts`), in inventory order."""
        return select_hosts(self.hosts, self.group_names, limit, self.path)

    def line_of(self, host_name: str, key: str) -> tuple[Path, int | None] | None:
        """(file, line) where `key` (a variable, or a connection setting in either spelling) was
        set for this host; None when it was not set in the inventory."""
        origins = self.origins.get(host_name, {})
        origin = origins.get(key) or origins.get(CONNECTION_KEYS.get(key, key))
        return (origin.file, origin.line) if origin else None

    def check_key_files(self, hosts: list[Host]) -> None:
        """Refuse (InputError at file:line) when a selected host's private key file is missing.

        Called by the CLI after `select` and before connecting, not by the loader: a missing key
        of a host outside `--limit` must not block the others, and commands that never connect
        (listing, memory planning) must work on a machine without the keys.
        """
        for host in hosts:
            if host.key is not None and not host.key.is_file():
                origin = self.origins.get(host.name, {}).get("key")
                raise InputError(
                    f"private key file {host.key} not found (host {host.name})",
                    origin.file if origin else self.path, origin.line if origin else None,
                    origin.key if origin else "key",
                )
