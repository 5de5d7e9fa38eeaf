"""The subcommands: each loads and validates its inputs first, then talks to hosts."""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from provision import content, interrupt
from provision.cli.endpoints import endpoint_lines
from provision.cli.output import ConsoleReporter, recap_table
from provision.errors import HostUnreachable, ProvisionError
from provision.facts.gather import gather_facts
from provision.inventory.extra_vars import parse_extra_vars
from provision.inventory.loader import load_inventory
from provision.inventory.model import Host, Inventory
from provision.playbook.loader import load_playbook
from provision.playbook.model import Play
from provision.runner.batches import parse_serial
from provision.runner.host_run import RunOptions
from provision.runner.results import RunResult
from provision.runner.runner import RunConfig, Runner, Timeouts, connect
from provision.secrets import REDACTOR
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


def validated_inventory(path: Path, limit: str | None, extra_vars: dict[str, Any],
                        roles_dir: Path) -> tuple[Inventory, list[Host]]:
    """The inventory and the hosts selected by --limit, their settings checked against the roles'
    declarations (InvalidSettings, exit 2): all before anything connects."""
    inventory = load_inventory(path)
    hosts = inventory.select(limit)
    validate_hosts(inventory, hosts, roles_dir, load_specs([roles_dir]), extra_vars)
    return inventory, hosts


def load_hosts(args: argparse.Namespace) -> tuple[Inventory, list[Host]]:
    """The validated inventory and selected hosts; their key files exist."""
    inventory, hosts = validated_inventory(args.inventory, args.limit, parse_extra_vars(args.extra_vars),
                                           roles_of(args))
    inventory.check_key_files(hosts)
    return inventory, hosts


def add_json_arguments(parser: argparse.ArgumentParser, document: bool = False) -> None:
    """`--json` means one thing in every command: the command's result as JSON on stdout (progress on
    stderr). Commands that produce a results document also take `--json-file PATH`."""
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout (progress on stderr)")
    if document:
        parser.add_argument("--json-file", type=Path, dest="json_path", metavar="PATH",
                            help="also write the results document (per host and task) to PATH")


def add_wait_lock_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--wait-lock", type=float, default=0, metavar="SECONDS", dest="wait_lock",
                        help="when another run holds a host, wait up to this long for it (default: refuse at once)")


def timeouts_of(args: argparse.Namespace) -> Timeouts:
    """The connect, per-command and silence timeouts a command was given (every command takes them)."""
    return Timeouts(connect_s=args.connect_timeout, command_s=args.command_timeout, silent_s=args.silent_timeout)


def human_console(args: argparse.Namespace, console: Console) -> Console:
    """Where tables and progress go: stderr when stdout carries the --json document."""
    return Console(stderr=True) if getattr(args, "json", False) else console


def write_document(args: argparse.Namespace, console: Console, result: RunResult) -> None:
    """The results document: to stdout with --json, to a file with --json-file."""
    if args.json_path:
        result.write_json(args.json_path)
    if args.json:
        console.print_json(REDACTOR(json.dumps(result.document())))


def cmd_up(args: argparse.Namespace, console: Console) -> int:
    inventory, _ = load_hosts(args)
    extra_vars = parse_extra_vars(args.extra_vars)
    plays = plays_of(args)
    config = RunConfig(
        forks=args.forks,
        serial=parse_serial(args.serial) if args.serial else None,
        max_fail_percentage=args.max_fail_percent,
        limit=args.limit,
        extra_vars=extra_vars,
        trust_new_host_keys=args.trust_new_host_keys,
        timeouts=timeouts_of(args),
        wait_lock_s=args.wait_lock,
        options=RunOptions(check=args.check, diff=args.diff, tags=_split(args.tags), skip_tags=_split(args.skip_tags)),
    )
    human = human_console(args, console)
    with ConsoleReporter(human, check=args.check, show_diff=args.diff) as reporter, \
            interrupt.gentle_ctrl_c(reporter.message):
        result = Runner(inventory, config, reporter).run(plays)
    human.print(recap_table(result))
    for line in endpoint_lines(plays, playbook_of(args), inventory, result, extra_vars):
        human.print(REDACTOR(line), highlight=False, markup=False, soft_wrap=True)
    if result.aborted:
        human.print(f"[bold red]{REDACTOR(result.aborted)}[/]")
    write_document(args, console, result)
    if interrupt.STOP.is_set():
        return interrupt.EXIT_INTERRUPTED
    return EXIT_OK if result.ok else EXIT_FAILED


def cmd_facts(args: argparse.Namespace, console: Console) -> int:
    _, hosts = load_hosts(args)

    def gather(host: Host) -> tuple[str, dict | str]:
        try:
            conn = connect(host, args.trust_new_host_keys, timeouts_of(args))
            try:
                return host.name, asdict(gather_facts(conn))
            finally:
                conn.close()
        except (HostUnreachable, ProvisionError) as error:
            return host.name, REDACTOR(str(error))

    with ThreadPoolExecutor(max_workers=max(1, args.forks)) as pool:
        gathered = dict(pool.map(gather, hosts))
    failed = any(isinstance(v, str) for v in gathered.values())
    if args.json:
        console.print_json(json.dumps(gathered, default=str))
        return EXIT_FAILED if failed else EXIT_OK
    for name, facts in gathered.items():
        table = Table(title=name, show_header=False, title_justify="left")
        if isinstance(facts, str):
            table.add_row("error", facts)
        else:
            for key, value in facts.items():
                table.add_row(key, json.dumps(value, default=str) if isinstance(value, (list, dict)) else str(value))
        console.print(table)
    return EXIT_FAILED if failed else EXIT_OK
