"""INI inventories, read as ansible-core's `ini` inventory plugin reads them.

    # comments start with # or ;
    web[01:03].example.com ansible_user=deploy     <- before any section: group `ungrouped`
    [db]
    db1 ansible_host=10.0.0.5 opts='{"a": [1, 2]}'  <- host line: shlex words, key=value each
    db2:2222                                        <- host:port sets ansible_port
    [db:vars]
    backup = nightly                                <- split at the first `=`, no shlex
    [prod:children]
    db

Values go through Python's `ast.literal_eval` as Ansible's do (`2222` is an int, `True` a bool,
`'[1, 2]'` a list, `yes` stays the string 'yes'); tuples and sets become lists. `[g:vars]` for a
group never declared, or `[g:children]` naming one, is an error at the line that named it.
Every value keeps its file and line (`Origin`), every error names them.
"""

from __future__ import annotations

import ast
import re
import shlex
import warnings
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.inventory.graph import InventoryGraph
from provision.inventory.hostnames import HostPatternError, expand_hosts, host_and_port
from provision.inventory.model import Origin

SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
GROUP_NAME = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")
COMMENT_MARKERS = ("#", ";")
SECTION_KINDS = ("hosts", "children", "vars")


def parse_value(text: str) -> Any:
    """An INI value as Ansible reads it: a Python literal when it is one, else the text."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple, set)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if value is ...:
        return "..."
    if isinstance(value, complex):
        return str(value)
    if isinstance(value, bytes):
        return value.decode(errors="surrogateescape")
    return value


class IniReader:
    """One pass over the lines of one INI file, filling `graph` (Ansible's state machine)."""

    def __init__(self, graph: InventoryGraph, path: Path) -> None:
        self.graph = graph
        self.path = path
        self.line = 0
        self.pending: dict[str, dict[str, Any]] = {}  # groups named before they were declared

    def origin(self, key: str) -> Origin:
        return Origin(self.path, self.line, key)

    def error(self, message: str, key: str | None = None) -> InputError:
        return InputError(message, self.path, self.line, key)

    def read(self, text: str) -> None:
        group, kind = "ungrouped", "hosts"
        for self.line, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line[0] in COMMENT_MARKERS:
                continue
            section = SECTION.match(line)
            if section:
                group, kind = section.group(1), section.group(2) or "hosts"
                self._section(group, kind)
            elif line.startswith("[") and line.endswith("]"):
                raise self.error(f"invalid section {line!r}: a section is [name], [name:vars] or"
                                 " [name:children], with no spaces")
            elif kind == "hosts":
                self._host_line(line, group)
            elif kind == "vars":
                self._var_line(line, group)
            else:
                self._child_line(line, group)
        for name, declared in self.pending.items():
            self.line = declared["line"]
            if declared["kind"] == "vars":
                raise self.error(f"section [{name}:vars] is for a group that is never declared"
                                 f" (add a [{name}] or [{name}:children] section)", name)
            raise self.error(f"section [{declared['parents'][-1]}:children] names the group {name!r},"
                             " which is never declared", name)

    def _section(self, group: str, kind: str) -> None:
        if kind not in SECTION_KINDS:
            raise self.error(f"section [{group}:{kind}] has an unknown type {kind!r}"
                             " (hosts, vars or children)", group)
        if group not in self.graph.groups:
            if kind == "vars" and group not in self.pending:
                self.pending[group] = {"line": self.line, "kind": kind}
            self.graph.add_group(group, self.origin(group))
        if group in self.pending and kind != "vars":
            if self.pending[group]["kind"] == "children":
                self._declare_pending_child(group)
            else:
                del self.pending[group]

    def _declare_pending_child(self, group: str) -> None:
        for parent in self.pending[group]["parents"]:
            self.graph.add_child(parent, group, self.origin(group))
            if parent in self.pending and self.pending[parent]["kind"] == "children":
                self._declare_pending_child(parent)
        del self.pending[group]

    def _host_line(self, line: str, group: str) -> None:
        try:
            words = shlex.split(line, comments=True)
        except ValueError as error:
            raise self.error(f"cannot read the host line: {error} (check the quotes)") from None
        if not words:
            return
        pattern, port = host_and_port(words[0])
        if words[0].endswith(":") and port is None:
            raise self.error(f"invalid host {words[0]!r}: a trailing ':' must be followed by a port", words[0])
        if pattern.strip() == "---":
            raise self.error("'---' is not a host: is this a YAML file? (a YAML inventory starts with `all:`)")
        try:
            names = expand_hosts(pattern)
        except HostPatternError as error:
            raise self.error(str(error), words[0]) from None
        variables: list[tuple[str, Any]] = []
        for word in words[1:]:
            key, equals, value = word.partition("=")
            if not equals:
                raise self.error(f"expected key=value after the host name, got {word!r}", word)
            variables.append((key, parse_value(value)))
        for name in names:
            host = self.graph.add_host(name, group, self.origin(name), port)
            for key, value in variables:
                host.set(key, value, self.origin(key))

    def _var_line(self, line: str, group: str) -> None:
        key, equals, value = (part.strip() for part in line.partition("="))
        if not equals:
            raise self.error(f"expected key=value in [{group}:vars], got {line!r}")
        self.graph.set_group_var(group, key, parse_value(value), self.origin(key))

    def _child_line(self, line: str, group: str) -> None:
        match = GROUP_NAME.match(line)
        if not match:
            raise self.error(f"expected a group name in [{group}:children], got {line!r}")
        child = match.group(1)
        if child in self.graph.groups:
            self.graph.add_child(group, child, self.origin(child))
        elif child in self.pending:
            self.pending[child].setdefault("parents", []).append(group)
        else:
            self.pending[child] = {"line": self.line, "kind": "children", "parents": [group]}


def read_ini(graph: InventoryGraph, path: Path, text: str) -> None:
    """Add the groups, hosts and variables of the INI inventory `text` (read from `path`) to `graph`."""
    IniReader(graph, path).read(text)
