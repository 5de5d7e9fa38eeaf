"""Host values read from one mapping (a group's `vars`, a host entry), and a Host built from them.

A `Layer` holds connection settings (under our field names, whichever spelling the user chose:
`ansible_port` or `port`) and variables, each with the file:line it came from. The settings are
validated where they are written, so an error points at that line even when the value is
inherited by many hosts. A host is built by merging its layers (lowest precedence first) and
lifting the settings out into `Host` fields; what is left are its variables.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.inventory.model import CONNECTION_KEYS, Host, Origin
from provision.inventory.vars import mark_secrets
from provision.inventory.yaml_loader import YamlDocument, YamlPath
from provision.secrets import Secret

NO_PASSWORD_LOGIN = "password logins are not supported: use a key (key / ansible_ssh_private_key_file)"
NO_SUDO_PASSWORD = "sudo passwords are not supported: give the user passwordless sudo, or log in as root"
UNSUPPORTED_KEYS: dict[str, str] = {
    "ansible_password": NO_PASSWORD_LOGIN,
    "ansible_ssh_pass": NO_PASSWORD_LOGIN,
    "ansible_ssh_password": NO_PASSWORD_LOGIN,
    "ansible_become_password": NO_SUDO_PASSWORD,
    "ansible_become_pass": NO_SUDO_PASSWORD,
    "ansible_sudo_pass": NO_SUDO_PASSWORD,
}
SSH_CONNECTIONS = ("ssh", "smart", "paramiko")  # Ansible's names for "over SSH"


@dataclass
class Layer:
    """Values set in one place, keyed by variable or Host field name, with where each was set."""

    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, Origin] = field(default_factory=dict)

    def update(self, other: Layer) -> None:
        self.values.update(other.values)
        self.origins.update(other.origins)


def read_layer(doc: YamlDocument, mapping: dict[Any, Any], path: YamlPath) -> Layer:
    """The settings and variables of `mapping` (found at `path` in `doc`), validated."""
    source = Path(doc.source)
    layer = Layer()
    for key, value in mapping.items():
        line = doc.line((*path, key))
        if not isinstance(key, str):
            raise InputError(f"a variable name must be a string, not {key!r}", source, line, str(key))
        if key in UNSUPPORTED_KEYS:
            raise InputError(UNSUPPORTED_KEYS[key], source, line, key)
        name = CONNECTION_KEYS.get(key, key)
        if name in layer.origins:
            raise InputError(f"{layer.origins[name].key!r} and {key!r} both set the {name}; keep one",
                             source, line, key)
        if key in CONNECTION_KEYS:
            value = _setting(name, value, source, line, key)
        layer.values[name] = value
        layer.origins[name] = Origin(source, line, key)
    return layer


def _setting(name: str, value: Any, source: Path, line: int | None, key: str) -> Any:
    """A connection setting's value, checked and normalised (paths resolved against `source`)."""
    def refuse(expected: str) -> InputError:
        shown = "a !secret/!env value" if isinstance(value, Secret) else f"{value!r}"
        return InputError(f"expected {expected}, got {shown}", source, line, key)

    if name == "port":
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
            raise refuse("an integer from 1 to 65535")
        return value
    if name == "become":
        if not isinstance(value, bool):
            raise refuse("true or false")
        return value
    if name == "connection":
        if value not in (*SSH_CONNECTIONS, "local"):
            raise refuse("'ssh' or 'local'")
        return "local" if value == "local" else "ssh"
    what = {"address": "a host name or IP address", "user": "a user name",
            "key": "the path of a private key file", "known_hosts": "the path of a known_hosts file"}[name]
    if not isinstance(value, str) or not value.strip() or (name != "key" and any(c.isspace() for c in value)):
        raise refuse(f"{what} (a string)")
    if name == "address" and "@" in value:
        raise InputError(f"expected a host name or IP address, got {value!r}; put the user in user:",
                         source, line, key)
    if name in ("key", "known_hosts"):
        return resolve_path(value, source)
    return value


def resolve_path(value: str, source: Path) -> Path:
    """`value` with `~` expanded, relative to the folder of the file it was written in."""
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        path = source.parent.absolute() / path
    return Path(os.path.normpath(path))


def build_host(name: str, layers: list[Layer], groups: list[str], source: Path,
               default_address: str | None) -> tuple[Host, dict[str, Origin]]:
    """The Host made of `layers` merged (later wins), and where each of its values was set."""
    merged = Layer()
    for layer in layers:
        merged.update(layer)
    values = dict(merged.values)
    settings = {field_name: values.pop(field_name) for field_name in set(CONNECTION_KEYS.values())
                if field_name in values}
    local = settings.get("connection") == "local" or (name == "localhost" and "address" not in settings)
    address = settings.pop("address", None) or ("localhost" if local else default_address)
    if address is None:
        raise InputError("missing: say where the host is, e.g. `address: 192.168.1.50`",
                         source, key="address")
    settings["connection"] = "local" if local else settings.get("connection", "ssh")
    host = Host(name=name, address=address, groups=groups, vars=mark_secrets(values), source=source,
                **settings)
    return host, merged.origins
