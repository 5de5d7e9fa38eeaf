"""The Ansible-style fleet inventory (`all:` with `hosts:`, `vars:` and nested `children:`).

Semantics follow Ansible's YAML inventory so existing files work: a host listed under several
groups is one host; top-level keys other than `all` are groups under `all`; a host's variables are
merged from `all` (lowest), then its groups ordered by depth (parents before children, ties by
name), then its own entries (highest). Connection settings (`ansible_host`, `ansible_port`, ...,
or ours: `address`, `port`, ...) may be set in group `vars` and are inherited like any variable.
A host with no address is reached by its name, as in Ansible.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.inventory.layers import Layer, build_host, read_layer
from provision.inventory.model import Inventory
from provision.inventory.suggest import did_you_mean
from provision.inventory.yaml_loader import YamlDocument, YamlPath

GROUP_KEYS = ("hosts", "vars", "children")
HOST_RANGE = re.compile(r"\[[^\]]*:[^\]]*\]")


@dataclass
class _Group:
    name: str
    line: int | None
    parents: set[str] = field(default_factory=set)
    layer: Layer = field(default_factory=Layer)
    hosts: list[str] = field(default_factory=list)


class _FleetReader:
    """Walks the group tree once, collecting groups, host entries and their value layers."""

    def __init__(self, doc: YamlDocument) -> None:
        self.doc = doc
        self.source = Path(doc.source)
        self.groups: dict[str, _Group] = {"all": _Group("all", doc.line(("all",)))}
        self.host_layers: dict[str, Layer] = {}  # insertion order: first appearance in the file

    def read(self) -> Inventory:
        for key, value in self.doc.data.items():
            if key != "all" and not (value is None or isinstance(value, dict)):
                raise InputError(
                    f"unknown top-level key{did_you_mean(str(key), ['all'])}: the top level of a fleet"
                    " inventory holds groups (`all:` with hosts, vars, children)",
                    self.source, self.doc.line((key,)), str(key))
            self._read_group(key, value, (key,), parent=None if key == "all" else "all")
        if not self.host_layers:
            raise InputError("the inventory lists no hosts (add them under all: hosts:)", self.source,
                             self.doc.line(("all",)), "all")
        depths = {name: self._depth(name, ()) for name in self.groups}
        hosts, origins = [], {}
        for host_name, own_layer in self.host_layers.items():
            member_of = self._groups_of(host_name)
            ordered = sorted(member_of, key=lambda name: (depths[name], name))
            layers = [self.groups[name].layer for name in ordered] + [own_layer]
            groups = [name for name in ordered if name != "all"]
            host, origins[host_name] = build_host(host_name, layers, groups, self.source, host_name)
            hosts.append(host)
        group_names = [name for name in self.groups if name != "all"]
        return Inventory(hosts=hosts, path=self.source, group_names=group_names, origins=origins)

    def _read_group(self, name: Any, value: Any, path: YamlPath, parent: str | None) -> None:
        line = self.doc.line(path)
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"a group name must be a string, not {name!r}", self.source, line)
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise InputError(f"expected a group (a mapping with {', '.join(GROUP_KEYS)}), got {value!r}",
                             self.source, line, name)
        group = self.groups.setdefault(name, _Group(name, line))
        if parent is not None:
            group.parents.add(parent)
        for key in value:
            if key not in GROUP_KEYS:
                raise InputError(
                    f"unknown key in group '{name}'{did_you_mean(str(key), GROUP_KEYS)}: a group holds"
                    f" only {', '.join(GROUP_KEYS)} (variables go under vars:)",
                    self.source, self.doc.line((*path, key)), str(key))
        group.layer.update(self._layer(value.get("vars"), (*path, "vars"), "variable names to values"))
        for host_name, host_value in self._mapping(value.get("hosts"), (*path, "hosts"),
                                                   "host names (each `name:` or `name: {vars}`)").items():
            self._read_host(group, host_name, host_value, (*path, "hosts", host_name))
        children = self._mapping(value.get("children"), (*path, "children"), "child group names to groups")
        for child_name, child_value in children.items():
            if child_name == "all":
                raise InputError("'all' is the root group; it cannot be a child",
                                 self.source, self.doc.line((*path, "children", "all")), "all")
            self._read_group(child_name, child_value, (*path, "children", child_name), parent=name)

    def _read_host(self, group: _Group, name: Any, value: Any, path: YamlPath) -> None:
        line = self.doc.line(path)
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"a host name must be a string, not {name!r}", self.source, line)
        if HOST_RANGE.search(name):
            raise InputError("host ranges such as [01:10] are not supported; list each host", self.source,
                             line, name)
        layer = self._layer(value, path, "host variables (or nothing)")
        self.host_layers.setdefault(name, Layer()).update(layer)
        if name not in group.hosts:
            group.hosts.append(name)

    def _mapping(self, value: Any, path: YamlPath, expected: str) -> dict[Any, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise InputError(f"expected a mapping of {expected}, got {type(value).__name__}",
                             self.source, self.doc.line(path), str(path[-1]))
        return value

    def _layer(self, value: Any, path: YamlPath, expected: str) -> Layer:
        return read_layer(self.doc, self._mapping(value, path, expected), path)

    def _depth(self, name: str, seen: tuple[str, ...]) -> int:
        """Longest chain of parents up to `all` (Ansible's group depth); a cycle is an error."""
        if name in seen:
            chain = " -> ".join((*seen[seen.index(name):], name))
            raise InputError(f"groups form a cycle: {chain}", self.source, self.groups[name].line, name)
        if name == "all":
            return 0
        return 1 + max(self._depth(parent, (*seen, name)) for parent in self.groups[name].parents)

    def _groups_of(self, host_name: str) -> set[str]:
        """Every group the host is in, directly or through children, `all` included."""
        found: set[str] = {"all"}
        pending = [name for name, group in self.groups.items() if host_name in group.hosts]
        while pending:
            name = pending.pop()
            if name not in found:
                found.add(name)
                pending.extend(self.groups[name].parents)
        return found


def read_fleet(doc: YamlDocument) -> Inventory:
    """The Inventory described by an Ansible-style YAML inventory document."""
    return _FleetReader(doc).read()

