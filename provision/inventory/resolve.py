"""An Ansible inventory (files, folders, group_vars/host_vars) -> `Inventory`, as Ansible resolves it.

A host's variables, lowest precedence first (ansible-core `VariableManager.get_vars`, default
`VARIABLE_PRECEDENCE`):
    `all` in the inventory files < its other groups in the inventory files
    < group_vars/all next to each inventory source < group_vars/all next to the playbook
    < group_vars/<group> next to each source < group_vars/<group> next to the playbook
    < the host's own inventory entries < host_vars/<host> next to each source < ... next to the playbook
where a host's groups are ordered by (depth, ansible_group_priority, name). Values replace whole
(no deep merge). Connection variables (`ansible_host`, `ansible_port`, ... see
`model.ANSIBLE_CONNECTION_VARS`) become Host fields, rendered with Jinja first when they hold
`{{ }}` (`ansible_host: "{{ inventory_hostname }}.lan"`), and checked where they were written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2

from provision.errors import InputError
from provision.inventory.graph import InventoryGraph
from provision.inventory.model import (
    ANSIBLE_CONNECTION_VARS,
    LOGIN_PASSWORD_VARS,
    GroupInfo,
    Host,
    Inventory,
    Origin,
)
from provision.inventory.settings import check_setting
from provision.inventory.sources import read_sources
from provision.inventory.vars import mark_secrets
from provision.inventory.vars_files import VarsLayer, read_vars_files
from provision.lookups import refused_lookup
from provision.sandbox import BoundedSandbox
from provision.secrets import Secret

LOGIN_PASSWORD = "password logins are not supported: use a key (ansible_ssh_private_key_file) or the ssh agent"
RENDER_PASSES = 10
CONNECTION_VAR_NAMES = frozenset(name for names in ANSIBLE_CONNECTION_VARS.values() for name in names)
_ENV = BoundedSandbox(undefined=jinja2.StrictUndefined)  # the sandbox every template renders in


def load_ansible_inventory(sources: list[Path], playbook_dir: Path | None = None, render: bool = True) -> Inventory:
    """Read `sources` (files, folders, `h1,h2,`) with their group_vars/host_vars, resolved per host."""
    graph = InventoryGraph()
    read_sources(graph, sources)
    graph.reconcile()
    if not graph.hosts:
        raise InputError("the inventory lists no hosts", sources[0] if sources else None)
    bases = [source if source.is_dir() else source.parent for source in graph.sources]
    bases = list(dict.fromkeys(path.absolute() for path in bases))
    play_bases = [playbook_dir.absolute()] if playbook_dir is not None else []
    return _Resolver(graph, bases, play_bases, sources[0], render).inventory()


class _Resolver:
    def __init__(self, graph: InventoryGraph, bases: list[Path], play_bases: list[Path], path: Path,
                 render: bool = True) -> None:
        self.graph = graph
        self.render_templates = render
        self.bases = bases
        self.play_bases = [base for base in play_bases if base not in bases]
        self.path = path
        self._files: dict[tuple[Path, str, str], VarsLayer] = {}
        self.members = {name: graph.group_hosts(name) for name in graph.groups}

    def files(self, bases: list[Path], kind: str, names: list[str]) -> list[VarsLayer]:
        found = []
        for base in bases:
            for name in names:
                if (base, kind, name) not in self._files:
                    self._files[(base, kind, name)] = read_vars_files(base, kind, name)
                found.append(self._files[(base, kind, name)])
        return found

    def layers(self, host: str) -> list[VarsLayer]:
        groups = self.graph.precedence_order(host)
        node = self.graph.hosts[host]
        return [
            VarsLayer(self.graph.groups["all"].vars, self.graph.groups["all"].origins),
            *(VarsLayer(self.graph.groups[g].vars, self.graph.groups[g].origins) for g in groups),
            *self.files(self.bases, "group_vars", ["all"]),
            *self.files(self.play_bases, "group_vars", ["all"]),
            *self.files(self.bases, "group_vars", groups),
            *self.files(self.play_bases, "group_vars", groups),
            VarsLayer(node.vars, node.origins),
            *self.files(self.bases, "host_vars", [host]),
            *self.files(self.play_bases, "host_vars", [host]),
        ]

    def inventory(self) -> Inventory:
        hosts, hostvars, origins, setting_origins, problems = [], {}, {}, {}, {}
        order = list(self.members["all"])
        order += [name for name in self.graph.hosts if name not in order]
        for name in order:
            merged, merged_origins = {}, {}
            for layer in self.layers(name):
                merged.update(layer.vars)
                merged_origins.update(layer.origins)
            hostvars[name] = mark_secrets(_secret_passwords(merged))
            origins[name] = merged_origins
            host, setting_origins[name], problems[name] = self.host(name, hostvars[name], merged_origins)
            hosts.append(host)
        groups = {name: GroupInfo(name, list(group.hosts), list(group.children), self.members[name])
                  for name, group in self.graph.groups.items()}
        group_names = [name for name in self.graph.groups if name not in ("all", "ungrouped")]
        return Inventory(hosts=hosts, path=self.path, group_names=group_names, origins=origins,
                         hostvars=hostvars, groups=groups, setting_origins=setting_origins,
                         problems={name: found for name, found in problems.items() if found})

    def host(self, name: str, variables: dict[str, Any], origins: dict[str, Origin]
             ) -> tuple[Host, dict[str, Origin], list[InputError]]:
        """The Host of `name`, where each of its settings was set, and what would stop contacting it."""
        settings: dict[str, Any] = {}
        where: dict[str, Origin] = {}
        problems: list[InputError] = []
        for field_name, keys in ANSIBLE_CONNECTION_VARS.items():
            key = next((k for k in reversed(keys) if k in variables), None)
            if key is None:
                continue
            origin = origins.get(key, Origin(self.path, None, key))
            # a value as written is checked now; a rendered one (a lookup it needs, a variable it lacks)
            # only matters if the host is contacted, as `ansible-inventory --list` lists it as written
            deferred = field_name in ("connection", "become_method") or _has_template(variables[key])
            if _has_template(variables[key]) and not self.render_templates:
                continue
            try:
                value = render(variables[key], lambda: self.context(name, variables), origin)
                settings[field_name] = check_setting(field_name, value, origin, keys_relative_to=None)
                where[field_name] = origin
            except InputError as error:
                if deferred:
                    problems.append(InputError(f"host {name}: {error.message}", error.file, error.line, error.key))
                    continue
                raise
        for key in LOGIN_PASSWORD_VARS:
            if key in variables:
                origin = origins.get(key, Origin(self.path, None, key))
                problems.append(InputError(f"host {name}: {LOGIN_PASSWORD}", origin.file, origin.line, key))
        local = settings.get("connection") == "local" or (name == "localhost" and "address" not in settings)
        settings["connection"] = "local" if local else settings.get("connection", "ssh")
        settings.setdefault("address", "localhost" if local else name)
        settings.pop("become_method", None)
        plain = {key: value for key, value in variables.items()
                 if key not in CONNECTION_VAR_NAMES and key not in LOGIN_PASSWORD_VARS}
        host = Host(name=name, vars=plain, source=self.path, groups=self.graph.precedence_order(name), **settings)
        return host, where, problems

    def context(self, name: str, variables: dict[str, Any]) -> dict[str, Any]:
        """What a template in a connection variable sees: the host's variables and Ansible's
        inventory magic variables."""
        group_names = sorted(g for g in self.graph.groups_of(name) if g not in ("all", "ungrouped"))
        return {**variables, "inventory_hostname": name, "inventory_hostname_short": name.split(".")[0],
                "group_names": group_names,
                "groups": self.members}


def render(value: Any, context: Callable[[], dict[str, Any]], origin: Origin) -> Any:
    """`value` with its Jinja expressions rendered (again while the result still holds some);
    `context` is called only when there is something to render. A template holding a lookup other
    than env/file is refused before it is rendered (lookups.py)."""
    if isinstance(value, Secret):  # `ansible_become_password: "{{ lookup('env', 'SUDO_PASS') }}"`
        text = value.reveal()
        rendered = render(text, context, origin)
        return value if rendered == text else Secret(str(rendered))
    for _ in range(RENDER_PASSES):
        if not isinstance(value, str) or ("{{" not in value and "{%" not in value):
            return value
        refused = refused_lookup(value)
        if refused:
            raise InputError(f"cannot render {origin.key}: {refused}", origin.file, origin.line, origin.key)
        try:
            value = _ENV.from_string(value).render(context())
        except jinja2.TemplateError as error:
            raise InputError(f"cannot render {origin.key}: {error}", origin.file, origin.line, origin.key) from None
    raise InputError(f"cannot render {origin.key}: it still holds a template after {RENDER_PASSES} passes",
                     origin.file, origin.line, origin.key)


def _has_template(value: Any) -> bool:
    text = value.reveal() if isinstance(value, Secret) else value
    return isinstance(text, str) and ("{{" in text or "{%" in text)


def _secret_passwords(variables: dict[str, Any]) -> dict[str, Any]:
    """Become and login passwords as Secrets, whatever their names look like (ansible_become_pass)."""
    names = ANSIBLE_CONNECTION_VARS["become_password"] + LOGIN_PASSWORD_VARS
    return {key: Secret(str(value)) if key in names and value is not None and not isinstance(value, Secret)
            else value for key, value in variables.items()}
