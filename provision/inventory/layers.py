"""Host values read from one mapping of host.yaml (the top level, or `vars:`), and a Host built from them.

A `Layer` holds connection settings (under Host field names, whichever spelling the user chose:
`ansible_port` or `port`) and variables, each with the file:line it came from. The settings are
validated where they are written, so an error points at that line. A host is built by merging its
layers (lowest precedence first) and lifting the settings out into `Host` fields; what is left
are its variables. (Ansible inventories are read by `resolve.py`.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.inventory.model import CONNECTION_KEYS, LOGIN_PASSWORD_VARS, Host, Origin
from provision.inventory.settings import check_setting
from provision.inventory.vars import mark_secrets
from provision.yaml_loader import YamlDocument, YamlPath

NO_PASSWORD_LOGIN = "password logins are not supported: use a key (key / ansible_ssh_private_key_file)"


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
        if key in LOGIN_PASSWORD_VARS:
            raise InputError(NO_PASSWORD_LOGIN, source, line, key)
        name = CONNECTION_KEYS.get(key, key)
        if name in layer.origins:
            raise InputError(f"{layer.origins[name].key!r} and {key!r} both set the {name}; keep one",
                             source, line, key)
        origin = Origin(source, line, key)
        if key in CONNECTION_KEYS:
            value = check_setting(name, value, origin, keys_relative_to=source.parent)
        layer.values[name] = value
        layer.origins[name] = origin
    return layer


def build_host(name: str, layers: list[Layer], source: Path) -> tuple[Host, dict[str, Origin], dict[str, Origin]]:
    """The Host made of `layers` merged (later wins), the origins of its variables (by key as
    written) and of its settings (by Host field)."""
    merged = Layer()
    for layer in layers:
        merged.update(layer)
    values = dict(merged.values)
    fields = set(CONNECTION_KEYS.values())
    settings = {field_name: values.pop(field_name) for field_name in fields if field_name in values}
    local = settings.get("connection") == "local" or (name == "localhost" and "address" not in settings)
    address = settings.pop("address", None) or ("localhost" if local else None)
    if address is None:
        raise InputError("missing: say where the host is, e.g. `address: 192.168.1.50`",
                         source, key="address")
    settings["connection"] = "local" if local else settings.get("connection", "ssh")
    host = Host(name=name, address=address, vars=mark_secrets(values), source=source, **settings)
    var_origins = {origin.key: origin for key, origin in merged.origins.items() if key not in fields}
    setting_origins = {key: origin for key, origin in merged.origins.items() if key in fields}
    return host, var_origins, setting_origins
