"""Groups and hosts as Ansible's inventory holds them, with where every value was set.

The INI and YAML readers fill one `InventoryGraph`; the rules are Ansible's (ansible-core's
`inventory/data.py`, `group.py`, `host.py`), so a file means here what it means to Ansible:
- `all` and `ungrouped` always exist; a group with no parent becomes a child of `all`; a host in no
  group but `all` is put in `ungrouped`.
- A group's depth is its longest chain of parents up to `all`; the groups of a host are ordered by
  (depth, `ansible_group_priority`, name) to merge their variables, lowest precedence first.
- `ansible_group_priority` set in an inventory file is the group's priority, not a variable.
- The hosts of a group are its own, then those of its children, level by level.
- Unlike Ansible, whose recursive walks end in a RecursionError (or minutes, on a chain of 3000
  INI `[g:children]` sections), a group nested more than `MAX_GROUP_DEPTH` levels under `all` is an
  error naming it: real inventories nest a handful (region, site, role).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.inventory.hostnames import unprintable_in
from provision.inventory.model import Origin

PRIORITY_KEY = "ansible_group_priority"
MAX_GROUP_DEPTH = 50


def refuse_unprintable(host: str, origin: Origin) -> None:
    """InputError at `origin` when the host name `host` holds a character that does not show as itself."""
    character = unprintable_in(host)
    if character:
        raise InputError(f"host name {host!r} holds {character}, a character that does not show as itself"
                         " (a control, bidi or zero-width character): write the name in plain text",
                         origin.file, origin.line)


@dataclass
class Node:
    """A host or a group: its own variables, each with the Origin (file, line, key) it came from."""

    name: str
    origin: Origin
    vars: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, Origin] = field(default_factory=dict)

    def set(self, key: str, value: Any, origin: Origin) -> None:
        self.vars[key] = value
        self.origins[key] = origin


@dataclass
class Group(Node):
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    priority: int = 1


@dataclass
class InventoryGraph:
    """Every group and host read from the inventory sources, in the order they were first seen."""

    groups: dict[str, Group] = field(default_factory=dict)
    hosts: dict[str, Node] = field(default_factory=dict)
    sources: list[Path] = field(default_factory=list)
    depths: dict[str, int] = field(default_factory=dict, repr=False)  # measured by `reconcile`

    def __post_init__(self) -> None:
        for name in ("all", "ungrouped"):
            self.groups.setdefault(name, Group(name, Origin(Path("."), None, name)))
        self.add_child("all", "ungrouped", self.groups["all"].origin)

    def add_group(self, name: str, origin: Origin) -> Group:
        if not name or any(c.isspace() for c in name) or unprintable_in(name):
            raise InputError(f"{name!r} is not a group name (no spaces, control or bidi characters)",
                             origin.file, origin.line, origin.key)
        return self.groups.setdefault(name, Group(name, origin))

    def add_host(self, name: str, group: str | None, origin: Origin, port: int | None = None) -> Node:
        """The host `name` (created on first sight, when `port` is its ansible_port), added to `group`."""
        if name not in self.hosts:
            refuse_unprintable(name, origin)
            self.hosts[name] = Node(name, origin)
            if port is not None:
                self.hosts[name].set("ansible_port", port, origin)
        if group is not None and name not in self.groups[group].hosts:
            self.groups[group].hosts.append(name)
        return self.hosts[name]

    def add_child(self, parent: str, child: str, origin: Origin) -> None:
        if parent == child or parent in self.descendants(child):
            raise InputError(f"adding group '{child}' under '{parent}' makes a cycle of groups",
                             origin.file, origin.line, child)
        if child not in self.groups[parent].children:
            self.groups[parent].children.append(child)
        if parent not in self.groups[child].parents:
            self.groups[child].parents.append(parent)

    def set_group_var(self, group: str, key: str, value: Any, origin: Origin) -> None:
        if key == PRIORITY_KEY:
            try:
                self.groups[group].priority = int(value)
            except (TypeError, ValueError, OverflowError):
                raise InputError(f"expected an integer, got {value!r}", origin.file, origin.line, key) from None
            return
        self.groups[group].set(key, value, origin)

    def reconcile(self) -> None:
        """Ansible's rules after all sources are read: every group under `all`, lone hosts ungrouped."""
        for group in list(self.groups.values()):
            if group.name != "all" and not group.parents:
                self.add_child("all", group.name, group.origin)
        ungrouped = self.groups["ungrouped"]
        for name in self.hosts:
            direct = {g.name for g in self.groups.values() if name in g.hosts}
            if direct - {"all", "ungrouped"}:
                if name in ungrouped.hosts:
                    ungrouped.hosts.remove(name)
            elif name not in ungrouped.hosts:
                ungrouped.hosts.append(name)
        self._measure_depths()

    def _measure_depths(self) -> None:
        """Every group's depth, parents before children (no recursion: the chain may be long); a
        group deeper than MAX_GROUP_DEPTH is an InputError naming where it was declared."""
        waiting = {name: len(group.parents) for name, group in self.groups.items()}
        ready = [name for name, count in waiting.items() if not count]
        while ready:
            group = self.groups[ready.pop()]
            depth = 1 + max((self.depths[parent] for parent in group.parents), default=-1)
            if depth > MAX_GROUP_DEPTH:
                raise InputError(f"group '{group.name}' is nested {depth} levels under all: more than"
                                 f" {MAX_GROUP_DEPTH}, the limit", group.origin.file, group.origin.line, group.name)
            self.depths[group.name] = depth
            for child in group.children:
                waiting[child] -= 1
                if not waiting[child]:
                    ready.append(child)

    def descendants(self, name: str) -> list[str]:
        """`name` and the groups under it, level by level (Ansible's order for a group's hosts)."""
        ordered, seen, level = [name], {name}, [name]
        while level:
            level = list(dict.fromkeys(c for g in level for c in self.groups[g].children if c not in seen))
            seen.update(level)
            ordered.extend(level)
        return ordered

    def group_hosts(self, name: str) -> list[str]:
        """Every host of a group, its own first, then its children's (no duplicates)."""
        found = [host for group in self.descendants(name) for host in self.groups[group].hosts]
        return list(dict.fromkeys(found))

    def groups_of(self, host: str) -> list[str]:
        """Every group `host` is in, directly or through children, `all` included."""
        found: list[str] = []
        pending = [g.name for g in self.groups.values() if host in g.hosts]
        while pending:
            name = pending.pop(0)
            if name not in found:
                found.append(name)
                pending.extend(self.groups[name].parents)
        return found

    def depth(self, name: str) -> int:
        """Longest chain of parents from `name` up to `all` (0 for `all`)."""
        if name not in self.depths:
            self._measure_depths()
        return self.depths[name]

    def precedence_order(self, host: str) -> list[str]:
        """The groups of `host` other than `all`, lowest precedence first: (depth, priority, name)."""
        names = [g for g in self.groups_of(host) if g != "all"]
        return sorted(names, key=lambda g: (self.depth(g), self.groups[g].priority, g))
