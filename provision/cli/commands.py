"""The subcommands: each loads and validates its inputs first, then talks to hosts."""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from provision.cli.output import ConsoleReporter, recap_table
from provision.errors import HostUnreachable, ProvisionError
from provision.facts.gather import gather_facts
from provision.inventory.extra_vars import parse_extra_vars
from provision.inventory.loader import load_inventory
from provision.inventory.model import Host, Inventory
from provision.playbook.loader import load_playbook
from provision.runner.batches import parse_serial
from provision.runner.host_run import RunOptions
from provision.runner.runner import RunConfig, Runner, connect
from provision.secrets import REDACTOR

EXIT_OK, EXIT_FAILED = 0, 1


def _split(text: str) -> frozenset[str]:
    return frozenset(t.strip() for t in text.split(",") if t.strip())


def load_hosts(args: argparse.Namespace) -> tuple[Inventory, list[Host]]:
    """The inventory and the hosts selected by --limit: all validated before anything connects."""
    inventory = load_inventory(args.inventory)
    hosts = inventory.select(args.limit)
    inventory.check_key_files(hosts)
    return inventory, hosts


def default_playbook() -> Path:
    """playbooks/site.yaml of the working directory, else of the checkout this package lives in."""
    here = Path("playbooks/site.yaml")
    if here.exists():
        return here
    return Path(__file__).resolve().parents[2] / "playbooks" / "site.yaml"


def cmd_up(args: argparse.Namespace, console: Console) -> int:
    inventory, _ = load_hosts(args)
    extra_vars = parse_extra_vars(args.extra_vars)
    plays = load_playbook(args.playbook or default_playbook())
    config = RunConfig(
        forks=args.forks,
        serial=parse_serial(args.serial) if args.serial else None,
        max_fail_percentage=args.max_fail_percent,
        limit=args.limit,
        extra_vars=extra_vars,
        trust_new_host_keys=args.trust_new_host_keys,
        options=RunOptions(check=args.check, diff=args.diff, tags=_split(args.tags), skip_tags=_split(args.skip_tags)),
    )
    with ConsoleReporter(console, check=args.check, show_diff=args.diff) as reporter:
        result = Runner(inventory, config, reporter).run(plays)
    console.print(recap_table(result))
    if result.aborted:
        console.print(f"[bold red]{REDACTOR(result.aborted)}[/]")
    if args.json_path:
        result.write_json(args.json_path)
    return EXIT_OK if result.ok else EXIT_FAILED


def cmd_facts(args: argparse.Namespace, console: Console) -> int:
    _, hosts = load_hosts(args)

    def gather(host: Host) -> tuple[str, dict | str]:
        try:
            conn = connect(host, args.trust_new_host_keys)
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
