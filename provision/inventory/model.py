"""The validated inventory: `Host` (how to reach a machine and its merged vars) and `Inventory`.

Both are built by `loader.load_inventory`; nothing here reads files. Every value keeps the place
it was set: `Inventory.origins[host][key]` is the `Origin` (file, line, key as written) of each of
the host's variables after precedence, whether it came from a YAML or INI inventory line or from a
group_vars/host_vars file, so a later error about a variable can still name file:line:key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from provision.errors import InputError
from provision.inventory.limit import NoHostsMatched, select_hosts
from provision.secrets import Secret

ConnectionKind = Literal["ssh", "local"]

# The single-host file's settings (host.yaml), in Ansible's spelling or ours; each maps to a Host field.
CONNECTION_KEYS: dict[str, str] = {
    "address": "address", "ansible_host": "address", "ansible_ssh_host": "address",
    "port": "port", "ansible_port": "port", "ansible_ssh_port": "port",
    "user": "user", "ansible_user": "user", "ansible_ssh_user": "user",
    "key": "key", "ansible_ssh_private_key_file": "key", "ansible_private_key_file": "key",
    "become": "become", "ansible_become": "become",
    "connection": "connection", "ansible_connection": "connection",
    "known_hosts": "known_hosts",
    "become_password": "become_password", "ansible_become_password": "become_password",
    "ansible_become_pass": "become_password",
    "become_user": "become_user", "ansible_become_user": "become_user",
}
# The connection variables of an Ansible inventory, for each Host field, in the order Ansible reads
# them: when several are set, the last one wins (ansible-core plugins/connection/ssh.py, become/sudo.py).
# `port`, `user`, `become` ... are ordinary variables there, as in Ansible; `known_hosts` is ours.
ANSIBLE_CONNECTION_VARS: dict[str, tuple[str, ...]] = {
    "address": ("ansible_host", "ansible_ssh_host"),
    "port": ("ansible_port", "ansible_ssh_port"),
    "user": ("ansible_user", "ansible_ssh_user"),
    "key": ("ansible_private_key_file", "ansible_ssh_private_key_file"),
    "become": ("ansible_become",),
    "become_user": ("ansible_become_user", "ansible_sudo_user"),
    "become_method": ("ansible_become_method",),
    "become_password": ("ansible_become_password", "ansible_become_pass", "ansible_sudo_pass"),
    "connection": ("ansible_connection",),
    "known_hosts": ("known_hosts",),
}
LOGIN_PASSWORD_VARS = ("ansible_password", "ansible_ssh_pass", "ansible_ssh_password")


@dataclass
class Host:
    """One machine: where it is, how to log in, and the variables its tasks see.

    `user` None means "whatever ssh would use" (ssh config, then the current user); `key` None means
    the ssh agent / default keys. `become` runs tasks as `become_user` (root) through sudo: `sudo -n`,
    or, with a `become_password`, `sudo -S` fed the password on stdin.
    `vars` is group vars merged with host vars (see `vars.py` for the order); connection settings
    are fields, never left in `vars`.
    """

    name: str
    address: str
    port: int = 22
    user: str | None = None
    key: Path | None = None
    become: bool = True
    become_user: str = "root"
    become_password: Secret | None = None
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


@dataclass(frozen=True)
class GroupInfo:
    """A group as `ansible-inventory --list` shows it: its own hosts, its children, and every host
    in it through its children too (in Ansible's order, which `web[0:2]` subscripts count in)."""

    name: str
    hosts: list[str]
    children: list[str]
    all_hosts: list[str]


@dataclass
class Inventory:
    """All hosts of an inventory, in Ansible's order, with their groups and value origins.

    `hostvars[host]` is every variable of the host after precedence, keys as written (connection
    variables included, as `ansible-inventory --host` shows them); `Host.vars` is the same without
    the connection variables, which are `Host` fields. `problems[host]` are input errors that only
    matter if the host is contacted (a winrm connection, a login password): `check_connectable`
    raises them for the selected hosts, so listing an inventory never needs them solved.
    """

    hosts: list[Host]
    path: Path
    group_names: list[str] = field(default_factory=list)
    origins: dict[str, dict[str, Origin]] = field(default_factory=dict)
    hostvars: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, GroupInfo] = field(default_factory=dict)
    setting_origins: dict[str, dict[str, Origin]] = field(default_factory=dict)
    problems: dict[str, list[InputError]] = field(default_factory=dict)

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def select(self, limit: str | None) -> list[Host]:
        """Hosts matching an Ansible-style `--limit` (see `limit.select_hosts`), in inventory order."""
        return select_hosts(self, limit)

    def play_hosts(self, pattern: str) -> list[Host]:
        """Hosts a play's `hosts:` pattern matches. A pattern that matches nothing (the site's
        `office_cache` play on a fleet without such a group) gives no host, as Ansible skips the play
        ("Could not match supplied host pattern, ignoring"); only `--limit` is refused for that."""
        try:
            return self.select(pattern)
        except NoHostsMatched:
            return []

    def line_of(self, host_name: str, key: str) -> tuple[Path, int | None] | None:
        """(file, line) where `key` (a variable, or a connection setting by any of its names) was
        set for this host; None when it was not set in the inventory."""
        origin = self.origins.get(host_name, {}).get(key)
        if origin is None:
            origin = self.setting_origins.get(host_name, {}).get(CONNECTION_KEYS.get(key, key))
        return (origin.file, origin.line) if origin else None

    def check_connectable(self, hosts: list[Host]) -> None:
        """Refuse, before any host is contacted, what the selected hosts' settings cannot do."""
        self.check_problems(hosts)
        self.check_lookups(hosts)
        self.check_key_files(hosts)

    def check_problems(self, hosts: list[Host]) -> None:
        """Refuse a selected host whose settings could not be read (a winrm connection, a login
        password, a connection variable that does not render)."""
        for host in hosts:
            for problem in self.problems.get(host.name, []):
                raise problem

    def check_lookups(self, hosts: list[Host]) -> None:
        """Refuse (InputError at file:line) a selected host with a variable that needs a lookup
        provision does not run (a vault, `pipe`), found without rendering anything."""
        from provision.lookups import refused_lookup  # here: reading an inventory parses no template

        for host in hosts:
            for key, value in self.hostvars.get(host.name, {}).items():
                for text in _strings(value):
                    refused = refused_lookup(text)
                    if refused:
                        origin = self.origins.get(host.name, {}).get(key)
                        raise InputError(f"host {host.name}: {refused}", origin.file if origin else self.path,
                                         origin.line if origin else None, key)

    def check_key_files(self, hosts: list[Host]) -> None:
        """Refuse (InputError at file:line) when a selected host's private key file is missing.

        Called by the CLI after `select` and before connecting, not by the loader: a missing key
        of a host outside `--limit` must not block the others, and commands that never connect
        (listing, memory planning) must work on a machine without the keys.
        """
        for host in hosts:
            if host.key is not None and not host.key.is_file():
                origin = self.setting_origins.get(host.name, {}).get("key")
                raise InputError(
                    f"private key file {host.key} not found (host {host.name})",
                    origin.file if origin else self.path, origin.line if origin else None,
                    origin.key if origin else "key",
                )


def _strings(value: Any) -> list[str]:
    """Every string in a variable's value (through dicts and lists; a secret's text too)."""
    if isinstance(value, Secret):
        return [value.reveal()]
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    return []
