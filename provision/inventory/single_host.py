"""The one-machine inventory form, `inventory/host.yaml`:

    name: laptop            # optional; defaults to the address
    address: 192.168.1.50
    user: ubuntu
    key: ~/.ssh/id_ed25519
    become_password: !env SUDO_PASSWORD   # only when sudo asks for one; fed to sudo on stdin
    vars:
      max_model_len: 65536

Only the keys below are allowed at the top, so a misspelt `adress:` is an error with a hint rather
than a silently ignored line.
"""

from __future__ import annotations

from pathlib import Path

from provision.errors import InputError
from provision.inventory.graph import refuse_unprintable
from provision.inventory.layers import build_host, read_layer
from provision.inventory.model import CONNECTION_KEYS, GroupInfo, Inventory, Origin
from provision.suggest import did_you_mean
from provision.yaml_loader import YamlDocument

SINGLE_HOST_KEYS = ("name", "address", "port", "user", "key", "become", "become_user", "become_password",
                    "connection", "known_hosts", "vars")


def read_single_host(doc: YamlDocument) -> Inventory:
    """The Inventory of one host described by the top-level mapping of `doc`."""
    source = Path(doc.source)
    data: dict[object, object] = doc.data
    for key in data:
        if key not in SINGLE_HOST_KEYS:
            raise InputError(_unknown_key_message(key), source, doc.line((key,)), str(key))
    name = data.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise InputError(f"expected a host name (a string), got {name!r}", source, doc.line(("name",)), "name")
    variables = data.get("vars")
    if variables is None:
        variables = {}
    elif not isinstance(variables, dict):
        raise InputError(f"expected a mapping of variable names to values, got {type(variables).__name__}",
                         source, doc.line(("vars",)), "vars")
    settings = read_layer(doc, {key: value for key, value in data.items() if key in CONNECTION_KEYS}, ())
    var_layer = read_layer(doc, variables, ("vars",))
    address = settings.values.get("address")
    host_name = name or address or ("localhost" if settings.values.get("connection") == "local" else None)
    if host_name is None:
        raise InputError("missing: say where the host is, e.g. `address: 192.168.1.50`", source, key="address")
    key = "name" if name else "address"
    refuse_unprintable(host_name, Origin(source, doc.line((key,)), key))
    host, origins, setting_origins = build_host(host_name, [settings, var_layer], source)
    hostvars = {**{key: value for key, value in data.items() if key not in ("name", "vars")}, **variables}
    groups = {"all": GroupInfo("all", [], ["ungrouped"], [host.name]),
              "ungrouped": GroupInfo("ungrouped", [host.name], [], [host.name])}
    return Inventory(hosts=[host], path=source, group_names=[], origins={host.name: origins},
                     hostvars={host.name: hostvars}, groups=groups,
                     setting_origins={host.name: setting_origins})


def _unknown_key_message(key: object) -> str:
    if isinstance(key, str) and key in CONNECTION_KEYS:
        hint = f" (did you mean '{CONNECTION_KEYS[key]}'?)"
    else:
        hint = did_you_mean(str(key), SINGLE_HOST_KEYS)
    return (f"unknown key{hint}; a host file has {', '.join(SINGLE_HOST_KEYS)}"
            " (other settings go under vars:)")
