"""YAML inventories (`all:` with `hosts:`, `vars:` and nested `children:`), as Ansible's `yaml` plugin.

Top-level keys are groups (`all` or others, which go under `all`); a group holds `hosts`, `vars`
and `children`, each a mapping (a single string is one name, as Ansible allows); host names may
hold ranges (`web[01:20]`) and a port (`db1:2222`). A host listed under several groups is one
host. Unlike Ansible, which warns and skips them, a misspelt structural key (`chidren:`) or a
value of the wrong shape is an error naming file:line: skipping it would lose hosts silently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.inventory.graph import InventoryGraph
from provision.inventory.hostnames import HostPatternError, expand_hosts, host_and_port
from provision.inventory.model import Origin
from provision.suggest import did_you_mean
from provision.yaml_loader import YamlDocument, YamlPath

GROUP_KEYS = ("hosts", "vars", "children")


class YamlInventoryReader:
    """Walks the group tree of one YAML document, adding what it finds to `graph`."""

    def __init__(self, graph: InventoryGraph, doc: YamlDocument) -> None:
        self.graph = graph
        self.doc = doc
        self.source = Path(doc.source)

    def origin(self, path: YamlPath) -> Origin:
        return Origin(self.source, self.doc.line(path), str(path[-1]) if path else "")

    def read(self) -> None:
        for key, value in self.doc.data.items():
            if key != "all" and not (value is None or isinstance(value, dict)):
                raise InputError(
                    f"unknown top-level key{did_you_mean(str(key), ['all'])}: the top level of a fleet"
                    " inventory holds groups (`all:` with hosts, vars, children)",
                    self.source, self.doc.line((key,)), str(key))
            self._group(key, value, (key,))

    def _group(self, name: Any, value: Any, path: YamlPath) -> str:
        line = self.doc.line(path)
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"a group name must be a string, not {name!r}", self.source, line)
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise InputError(f"expected a group (a mapping with {', '.join(GROUP_KEYS)}), got {value!r}",
                             self.source, line, name)
        self.graph.add_group(name, self.origin(path))
        for key in value:
            if key not in GROUP_KEYS:
                raise InputError(
                    f"unknown key in group '{name}'{did_you_mean(str(key), GROUP_KEYS)}: a group holds"
                    f" only {', '.join(GROUP_KEYS)} (variables go under vars:)",
                    self.source, self.doc.line((*path, key)), str(key))
        for key, section in value.items():
            entries = self._mapping(section, (*path, key), key)
            for entry, entry_value in entries.items():
                entry_path = (*path, key, entry)
                if key == "vars":
                    self.graph.set_group_var(name, self._var_name(entry, entry_path), entry_value,
                                             self.origin(entry_path))
                elif key == "children":
                    if entry == "all":
                        raise InputError("'all' is the root group; it cannot be a child",
                                         self.source, self.doc.line(entry_path), "all")
                    child = self._group(entry, entry_value, entry_path)
                    self.graph.add_child(name, child, self.origin(entry_path))
                else:
                    self._hosts(name, entry, entry_value, entry_path)
        return name

    def _hosts(self, group: str, pattern: Any, value: Any, path: YamlPath) -> None:
        line = self.doc.line(path)
        if not isinstance(pattern, str) or not pattern.strip():
            raise InputError(f"a host name must be a string, not {pattern!r} (quote numbers)", self.source, line)
        variables = self._mapping(value, path, "host variables (or nothing)")
        name_pattern, port = host_and_port(pattern)
        try:
            names = expand_hosts(name_pattern)
        except HostPatternError as error:
            raise InputError(str(error), self.source, line, pattern) from None
        for name in names:
            host = self.graph.add_host(name, group, self.origin(path), port)
            for key, item in variables.items():
                host.set(self._var_name(key, (*path, key)), item, self.origin((*path, key)))

    def _var_name(self, key: Any, path: YamlPath) -> str:
        if not isinstance(key, str):
            raise InputError(f"a variable name must be a string, not {key!r}", self.source,
                             self.doc.line(path), str(key))
        return key

    def _mapping(self, value: Any, path: YamlPath, what: str) -> dict[Any, Any]:
        if value is None:
            return {}
        if isinstance(value, str) and what in GROUP_KEYS:
            return {value: None}  # `hosts: web1` is one host, as in Ansible
        if not isinstance(value, dict):
            expected = {"hosts": "host names (each `name:` or `name: {vars}`)",
                        "vars": "variable names to values",
                        "children": "child group names to groups"}.get(what, what)
            raise InputError(f"expected a mapping of {expected}, got {type(value).__name__}",
                             self.source, self.doc.line(path), str(path[-1]))
        return value


def read_yaml_inventory(graph: InventoryGraph, doc: YamlDocument) -> None:
    """Add the groups, hosts and variables of an Ansible-style YAML inventory document to `graph`."""
    YamlInventoryReader(graph, doc).read()
