"""`provision vars INVENTORY [--host NAME]`: every effective variable of a host and where it came from.

Read only: the inventory, `-e` and the roles' defaults, checked like every command does; no host is
contacted. Secrets (tagged `!secret`/`!env`, secret-looking names, or declared `secret: true`) print
as `***`.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from provision import content
from provision.cli.inputs import EXIT_OK, inventory_sources, playbook_of, roles_of, validated_inventory
from provision.errors import InputError
from provision.inventory.extra_vars import parse_extra_vars
from provision.inventory.suggest import did_you_mean
from provision.secrets import MASK, REDACTOR, Secret
from provision.settings import load_specs
from provision.settings.sources import RoleDefaults, Value, effective


def _shown(value: Any, secret: bool) -> Any:
    if isinstance(value, Secret) or (secret and value not in ("", None)):
        return MASK
    if isinstance(value, dict):
        return {key: _shown(item, False) for key, item in value.items()}
    if isinstance(value, list):
        return [_shown(item, False) for item in value]
    return value


def host_rows(variables: dict[str, Value], secret_names: set[str]) -> dict[str, dict[str, Any]]:
    """name -> {value (secrets masked), from (file:line or -e), layer}, sorted by name."""
    return {name: {"value": _shown(item.value, name in secret_names), "from": item.where, "layer": item.layer}
            for name, item in sorted(variables.items())}


def cmd_vars(args: argparse.Namespace, console: Console) -> int:
    extra_vars = parse_extra_vars(args.extra_vars)
    roles_dir = roles_of(args)
    inventory, hosts = validated_inventory(inventory_sources(args), args.limit, extra_vars, roles_dir,
                                           playbook_of(args).parent)
    if args.host:
        names = [host.name for host in inventory.hosts]
        if args.host not in names:
            raise InputError(f"no host {args.host!r} in the inventory{did_you_mean(args.host, names)}",
                             args.inventory, key="--host")
        hosts = [inventory.host(args.host)]
    specs = load_specs([roles_dir])
    secret_names = {name for name, option in specs.options.items() if option.secret}
    defaults = RoleDefaults.read(roles_dir)
    rows = {host.name: host_rows(effective(host, inventory, defaults, extra_vars, specs), secret_names)
            for host in hosts}
    if args.json:
        console.print_json(REDACTOR.json(rows))
        return EXIT_OK
    console.print(content.describe(getattr(args, "roles_path", None), getattr(args, "playbook", None)),
                  highlight=False, markup=False)
    for name, variables in rows.items():
        table = Table(title=name, title_justify="left")
        for column in ("variable", "value", "from"):
            table.add_column(column, overflow="fold")
        for variable, row in variables.items():
            value = row["value"]
            text = json.dumps(value, default=str) if not isinstance(value, str) else value
            table.add_row(variable, REDACTOR(text), row["from"])
        console.print(table)
    return EXIT_OK
