"""What every command reads before it talks to a host: the playbook, the roles, the inventory (checked
against the roles' declarations), -e, --serial, the timeouts and the trace, each read once into the one
`Invocation` every command receives; and the one `RunConfig` and `Runner` built from it.

Light on purpose: `up` reads these and starts connecting before the runner and the operations are
imported (runner/connect.py), so nothing here imports them, pydantic or the docker SDK (paramiko it
needs: it connects).
"""

from __future__ import annotations

import argparse
import copy
import getpass
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rich.console import Console  # already imported by cli/main.py, which makes the consoles

from provision import content
from provision.cli.consoles import plain_console
from provision.errors import InputError
from provision.inventory.extra_vars import parse_extra_vars
from provision.inventory.loader import load_inventory
from provision.inventory.model import Host, Inventory
from provision.playbook.loader import load_playbook
from provision.playbook.model import Play
from provision.runner.batches import parse_serial
from provision.runner.connect import Timeouts, Trace
from provision.secrets import Secret
from provision.settings import load_specs, validate_hosts

if TYPE_CHECKING:  # the runner is imported when a command first runs something, not to read its inputs
    from provision.connection.base import Connection
    from provision.runner.results import Reading
    from provision.runner.runner import RunConfig

EXIT_OK, EXIT_FAILED = 0, 1
T = TypeVar("T")


def _split(text: str) -> frozenset[str]:
    return frozenset(t.strip() for t in text.split(",") if t.strip())


def validated_inventory(sources: Path | list[Path], limit: str | None, extra_vars: dict[str, Any],
                        roles_dir: Path, playbook_dir: Path | None = None) -> tuple[Inventory, list[Host]]:
    """The inventory and the hosts selected by --limit, their settings checked against the roles'
    declarations (InvalidSettings, exit 2): all before anything connects."""
    inventory = load_inventory(sources, playbook_dir=playbook_dir)
    hosts = inventory.select(limit)
    validate_hosts(inventory, hosts, roles_dir, load_specs([roles_dir]), extra_vars)
    return inventory, hosts


def ask_become_password(hosts: list[Host]) -> None:
    """`-K`: one prompt (no echo, on the terminal), for every host that becomes root without an
    inventory password (the inventory's own value wins, as in Ansible)."""
    password = Secret(getpass.getpass("BECOME password: "))
    for host in hosts:
        if host.become and host.become_password is None:
            host.become_password = password


class Invocation:
    """One command line, read once: the parsed arguments and the console, and what they name (-e,
    --serial, the trace, the timeouts, the playbook, the roles, the selected hosts), each read the first
    time a command asks and kept; every command receives this one object (`provision/cli/main.py`)."""

    def __init__(self, args: argparse.Namespace, console: Console) -> None:
        self.args = args
        self.console = console
        self._validated: tuple[Inventory, list[Host]] | None = None
        self._hosts: tuple[Inventory, list[Host]] | None = None

    @property
    def json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    @cached_property
    def human(self) -> Console:
        """Where tables and progress go: stderr when stdout carries the --json document."""
        return plain_console(stderr=True) if self.json else self.console

    @cached_property
    def extra_vars(self) -> dict[str, Any]:
        """-e, parsed once (a command that adds a variable copies it)."""
        return parse_extra_vars(getattr(self.args, "extra_vars", []))

    @cached_property
    def serial(self) -> list[int | str] | None:
        text = getattr(self.args, "serial", None)
        return parse_serial(text) if text else None

    @cached_property
    def timeouts(self) -> Timeouts:
        """The connect, per-command and silence timeouts (every command that connects takes them)."""
        args = self.args
        return Timeouts(connect_s=args.connect_timeout, command_s=args.command_timeout, silent_s=args.silent_timeout)

    @cached_property
    def trace(self) -> Trace | None:
        """-v/-vv: remote commands shown where the progress goes (stderr with --json)."""
        verbosity = getattr(self.args, "verbose", 0)
        if not verbosity:
            return None
        out = self.human
        return Trace(verbosity, lambda line: out.print(line, highlight=False, markup=False, soft_wrap=True))

    @cached_property
    def playbook(self) -> Path:
        """The playbook a command runs (`--playbook`, ./playbooks/site.yaml, or the shipped one)."""
        return content.playbook_path(getattr(self.args, "playbook", None))

    @cached_property
    def roles(self) -> Path:
        """The roles folder a command uses (`--roles-path`, ./roles, beside the playbook, or shipped)."""
        return content.roles_path(getattr(self.args, "roles_path", None), self.playbook)

    @cached_property
    def plays(self) -> list[Play]:
        """The playbook, loaded once per command."""
        return load_playbook(self.playbook, self.roles)

    @cached_property
    def sources(self) -> list[Path]:
        """The positional inventory and every `-i`, in that order; at least one."""
        return inventory_sources(self.args)

    @property
    def label(self) -> str:
        return run_label(self.args)

    def read_inventory(self) -> Inventory:
        """The inventory with the group_vars/host_vars next to it and next to the playbook, to list:
        nothing in it is rendered (a lookup is shown as written, as ansible-inventory does)."""
        return load_inventory(self.sources, playbook_dir=self.playbook.parent, render=False)

    def validated(self) -> tuple[Inventory, list[Host]]:
        """The inventory and the --limit hosts, checked against the roles' declarations (not yet
        against connecting: `bundle` and `vars` read hosts they may never reach)."""
        if self._validated is None:
            self._validated = validated_inventory(self.sources, getattr(self.args, "limit", None), self.extra_vars,
                                                  self.roles, self.playbook.parent)
        return self._validated

    def hosts(self) -> tuple[Inventory, list[Host]]:
        """The validated inventory and selected hosts, connectable (key files exist, no unsupported
        login); `-K` asks for the sudo password here, once, before anything connects."""
        if self._hosts is None:
            inventory, hosts = self.validated()
            inventory.check_connectable(hosts)
            if getattr(self.args, "ask_become_pass", False):
                ask_become_password(hosts)
            self._hosts = inventory, hosts
        return self._hosts

    def selecting(self, limit: str) -> Invocation:
        """The same command line with another --limit: what was read stays read (-e, the playbook);
        the hosts are selected and checked again."""
        other = copy.copy(self)
        other.args = argparse.Namespace(**{**vars(self.args), "limit": limit})
        other._validated = other._hosts = None
        return other

    def run_config(self, **settings: Any) -> RunConfig:
        """The one place a run's settings are made from the command line; `settings` are what the
        command itself decides (check mode, tags, the lock, more variables)."""
        from provision.runner.runner import RunConfig

        args = self.args
        config: dict[str, Any] = dict(
            trace=self.trace, forks=args.forks, serial=self.serial,
            max_fail_percentage=getattr(args, "max_fail_percent", None), limit=args.limit,
            extra_vars=self.extra_vars, trust_new_host_keys=args.trust_new_host_keys, timeouts=self.timeouts,
            wait_lock_s=getattr(args, "wait_lock", 0), command=self.label)
        return RunConfig(**{**config, **settings})

    def read_each(self, hosts: list[Host], task: Callable[[Host, Connection], T]) -> dict[str, Reading[T]]:
        """A read-only task on each of `hosts` through the runner (`Runner.read_each`)."""
        from provision.runner.events import SilentReporter
        from provision.runner.runner import Runner

        inventory, _ = self.validated()
        return Runner(inventory, self.run_config(), SilentReporter()).read_each(hosts, task)


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
