"""What `provision inventory` prints: ansible-inventory's `--list`, `--graph` and `--host`, from our model.

The document has ansible-inventory's shape (ansible-core `cli/inventory.py` `json_inventory`): each
group with its own `hosts` (those selected) and `children`, empty groups left out, `all` listing no
hosts, and `_meta.hostvars` holding every variable of every selected host after precedence.
Secrets (`!secret`, `!env`, become passwords, secret-looking names) print as `***`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from provision.inventory.model import Host, Inventory
from provision.secrets import MASK, Secret


def plain(value: Any) -> Any:
    """`value` as JSON can hold it, secrets masked."""
    if isinstance(value, Secret):
        return MASK
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [plain(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def inventory_list(inventory: Inventory, hosts: list[Host]) -> dict[str, Any]:
    """The `--list` document for the selected `hosts`."""
    selected = {host.name for host in hosts}
    document: dict[str, Any] = {}
    seen: set[str] = set()

    def add(name: str) -> None:
        group = inventory.groups[name]
        entry: dict[str, Any] = {}
        if name != "all":
            entry["hosts"] = [host for host in group.hosts if host in selected]
        entry["children"] = list(group.children)
        document[name] = {key: value for key, value in entry.items() if value}
        for child in group.children:
            if child not in seen:
                seen.add(child)
                add(child)
        if not document[name]:
            del document[name]

    add("all")
    hostvars = {host.name: plain(inventory.hostvars.get(host.name, {})) for host in hosts}
    document["_meta"] = {"hostvars": {name: values for name, values in hostvars.items() if values}}
    return document


def inventory_graph(inventory: Inventory, hosts: list[Host], group: str = "all") -> str:
    """The `--graph` tree from `group` down: `@group:` lines, hosts indented under their groups."""
    selected = {host.name for host in hosts}
    lines: list[str] = []

    def walk(name: str, depth: int) -> None:
        lines.append(_graph_name(f"@{name}:", depth))
        for child in inventory.groups[name].children:
            walk(child, depth + 1)
        if name != "all":
            lines.extend(_graph_name(host, depth + 1) for host in inventory.groups[name].hosts if host in selected)

    walk(group, 0)
    return "\n".join(lines)


def _graph_name(name: str, depth: int) -> str:
    return "  |" * depth + "--" + name if depth else name
