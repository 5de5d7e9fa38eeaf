"""`provision vars INVENTORY [--host NAME]`: every effective variable of a host and where it came from.

Read only: the inventory, `-e`, the play `vars:` of the plays the host is in and the roles' defaults,
checked like every command does and layered as `up` layers them (settings/variables.py); no host is
contacted. Secrets (tagged `!secret`/`!env`, secret-looking names, or declared `secret: true`) print
as `***`. A value that is a template shows what it evaluates to for that host, rendered as `up`
renders it (the template is kept beside it); one that reads the host's facts, itself or through
another variable, cannot be known without the host and says so, naming the facts. Where two plays
of the host set the same variable, the later play's value is shown.
"""

from __future__ import annotations

import json
from typing import Any

import jinja2
from rich.table import Table

from provision import content
from provision.cli.inputs import EXIT_OK, Invocation
from provision.errors import InputError
from provision.inventory.model import Host, Inventory
from provision.playbook.templating import Renderer, TemplateError, facts_read, make_environment
from provision.secrets import MASK, REDACTOR, Secret
from provision.settings import load_specs
from provision.settings.variables import RoleDefaults, Value, effective, inventory_variables
from provision.suggest import did_you_mean


def _shown(value: Any, secret: bool) -> Any:
    if isinstance(value, Secret) or (secret and value not in ("", None)):
        return MASK
    if isinstance(value, dict):
        return {key: _shown(item, False) for key, item in value.items()}
    if isinstance(value, list):
        return [_shown(item, False) for item in value]
    return value


def evaluated(host: Host, inventory: Inventory, variables: dict[str, Value],
              secret_names: set[str]) -> dict[str, dict[str, Any]]:
    """Each template-valued variable -> {"value": what it renders to} (as `up` renders it, without
    facts), or {"needs_facts": [fields]} when it reads the host's facts (None: facts it does not name),
    or {"error": why} when it cannot be rendered."""
    env = make_environment([])
    plain = {name: item.value for name, item in variables.items()}
    renderer = Renderer(env, {**inventory_variables(inventory), **plain, "inventory_hostname": host.name})
    secrets = [str(value) for name, value in plain.items() if name in secret_names and value not in ("", None)]
    found: dict[str, dict[str, Any]] = {}
    for name, value in plain.items():
        text = json.dumps(_shown(value, False), default=str)
        if "{{" not in text and "{%" not in text:
            continue
        fields = facts_read(env, [value], plain)
        if fields is None or fields:
            found[name] = {"needs_facts": None if fields is None else sorted(fields)}
            continue
        try:
            rendered = renderer.render(value)
        except (TemplateError, jinja2.TemplateError, TypeError, ValueError) as error:
            found[name] = {"error": str(error)}
            continue
        hides_secret = any(secret in json.dumps(rendered, default=str) for secret in secrets)
        found[name] = {"value": _shown(rendered, name in secret_names or hides_secret)}
    return found


def host_rows(variables: dict[str, Value], secret_names: set[str],
              rendered: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """name -> {value (secrets masked; a template's value rendered), from (file:line or -e), layer,
    and for a template: template (its text), needs_facts or error}, sorted by name."""
    rows = {}
    for name, item in sorted(variables.items()):
        row = {"value": _shown(item.value, name in secret_names), "from": item.where, "layer": item.layer}
        if name in (rendered or {}):
            row = {**row, "value": None, **rendered[name], "template": row["value"]}  # type: ignore[index]
        rows[name] = row
    return rows


def shown_value(row: dict[str, Any]) -> str:
    """The value column: the value, or why a template's value is not known before a run."""
    if "needs_facts" in row:
        facts = ", ".join(f"facts.{field}" for field in row["needs_facts"] or []) or "the host's facts"
        return f"(set from {facts} when a run reads the host)"
    if "error" in row:
        return f"(cannot be rendered: {row['error']})"
    value = row["value"]
    return json.dumps(value, default=str) if not isinstance(value, str) else value


def cmd_vars(inv: Invocation) -> int:
    args, console, extra_vars, roles_dir = inv.args, inv.console, inv.extra_vars, inv.roles
    inventory, hosts = inv.validated()
    if args.host:
        names = [host.name for host in inventory.hosts]
        if args.host not in names:
            raise InputError(f"no host {args.host!r} in the inventory{did_you_mean(args.host, names)}",
                             args.inventory, key="--host")
        hosts = [inventory.host(args.host)]
    specs = load_specs([roles_dir])
    secret_names = {name for name, option in specs.options.items() if option.secret}
    defaults = RoleDefaults.read(roles_dir)
    plays = inv.plays
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for host in hosts:
        in_plays = [play for play in plays if host in inventory.play_hosts(play.hosts)]
        variables = effective(host, inventory, defaults, extra_vars, specs, in_plays)
        rows[host.name] = host_rows(variables, secret_names, evaluated(host, inventory, variables, secret_names))
    if args.json:
        console.print_json(REDACTOR.json(rows))
        return EXIT_OK
    console.print(content.describe(getattr(args, "roles_path", None), getattr(args, "playbook", None)),
                  highlight=False, markup=False)
    for name, host_table in rows.items():
        table = Table(title=name, title_justify="left")
        for column in ("variable", "value", "from"):
            table.add_column(column, overflow="fold")
        for variable, row in host_table.items():
            table.add_row(variable, REDACTOR(shown_value(row)), row["from"])
        console.print(table)
    return EXIT_OK
