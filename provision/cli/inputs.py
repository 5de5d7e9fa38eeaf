"""What every command reads before it talks to a host: the playbook, the roles, the inventory (checked
against the roles' declarations), the timeouts and the trace.

Light on purpose: `up` reads these and starts connecting before the runner and the operations are
imported (runner/connect.py), so nothing here imports them, pydantic or the docker SDK (paramiko it
needs: it connects).
"""

from __future__ import annotations

import argparse
import getpass
from pathlib import Path
from typing import Any

from rich.console import Console  # already imported by cli/main.py, which makes the consoles

from provision import content
from provision.cli.consoles import plain_console
from provision.errors import InputError
from provision.inventory.extra_vars import parse_extra_vars
from provision.inventory.loader import load_inventory
from provision.inventory.model import Host, Inventory
from provision.playbook.loader import load_playbook
from provision.playbook.model import Play
from provision.runner.connect import Timeouts, Trace
from provision.secrets import Secret
from provision.settings import load_specs, validate_hosts

EXIT_OK, EXIT_FAILED = 0, 1


def _split(text: str) -> frozenset[str]:
    return frozenset(t.strip() for t in text.split(",") if t.strip())


def playbook_of(args: argparse.Namespace) -> Path:
    """The playbook a command runs (`--playbook`, ./playbooks/site.yaml, or the shipped one)."""
    return content.playbook_path(getattr(args, "playbook", None))


def roles_of(args: argparse.Namespace) -> Path:
    """The roles folder a command uses (`--roles-path`, ./roles, beside the playbook, or shipped)."""
    return content.roles_path(getattr(args, "roles_path", None), playbook_of(args))


def plays_of(args: argparse.Namespace) -> list[Play]:
    return load_playbook(playbook_of(args), roles_of(args))


def inventory_sources(args: argparse.Namespace) -> list[Path]:
    """The positional inventory and every `-i`, in that order; at least one."""
    sources = ([args.inventory] if args.inventory else []) + list(getattr(args, "inventory_sources", []))
    if not sources:
        raise InputError("no inventory: give one (`provision up inventory/host.yaml`) or -i INVENTORY",
                         key="inventory")
    return sources


def run_label(args: argparse.Namespace) -> str:
    """What the run lock's holder record (on each host, for anyone who finds it held) says this run is:
    the sub-command and the inventory, never the other arguments (`-e hf_token=...` is a secret)."""
    return " ".join(["provision", args.command, *map(str, inventory_sources(args))])


def read_inventory(args: argparse.Namespace) -> Inventory:
    """The inventory with the group_vars/host_vars next to it and next to the playbook, to list:
    nothing in it is rendered (a lookup is shown as written, as ansible-inventory does)."""
    return load_inventory(inventory_sources(args), playbook_dir=playbook_of(args).parent, render=False)


def validated_inventory(sources: Path | list[Path], limit: str | None, extra_vars: dict[str, Any],
                        roles_dir: Path, playbook_dir: Path | None = None) -> tuple[Inventory, list[Host]]:
    """The inventory and the hosts selected by --limit, their settings checked against the roles'
    declarations (InvalidSettings, exit 2): all before anything connects."""
    inventory = load_inventory(sources, playbook_dir=playbook_dir)
    hosts = inventory.select(limit)
    validate_hosts(inventory, hosts, roles_dir, load_specs([roles_dir]), extra_vars)
    return inventory, hosts


def load_hosts(args: argparse.Namespace) -> tuple[Inventory, list[Host]]:
    """The validated inventory and selected hosts, connectable (key files exist, no unsupported
    login); `-K` asks for the sudo password here, before anything connects."""
    inventory, hosts = validated_inventory(inventory_sources(args), args.limit, parse_extra_vars(args.extra_vars),
                                           roles_of(args), playbook_of(args).parent)
    inventory.check_connectable(hosts)
    if getattr(args, "ask_become_pass", False):
        ask_become_password(hosts)
    return inventory, hosts


def ask_become_password(hosts: list[Host]) -> None:
    """`-K`: one prompt (no echo, on the terminal), for every host that becomes root without an
    inventory password (the inventory's own value wins, as in Ansible)."""
    password = Secret(getpass.getpass("BECOME password: "))
    for host in hosts:
        if host.become and host.become_password is None:
            host.become_password = password


def timeouts_of(args: argparse.Namespace) -> Timeouts:
    """The connect, per-command and silence timeouts a command was given (every command takes them)."""
    return Timeouts(connect_s=args.connect_timeout, command_s=args.command_timeout, silent_s=args.silent_timeout)


def human_console(args: argparse.Namespace, console: Console) -> Console:
    """Where tables and progress go: stderr when stdout carries the --json document."""
    return plain_console(stderr=True) if getattr(args, "json", False) else console


def trace_of(args: argparse.Namespace, console: Console) -> Trace | None:
    """-v/-vv: remote commands shown where the progress goes (stderr with --json)."""
    verbosity = getattr(args, "verbose", 0)
    if not verbosity:
        return None
    out = human_console(args, console)
    return Trace(verbosity, lambda line: out.print(line, highlight=False, markup=False, soft_wrap=True))


