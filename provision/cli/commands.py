"""The subcommands: each loads and validates its inputs first, then talks to hosts."""

from __future__ import annotations

import argparse
import getpass
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from provision.cli.output import ConsoleReporter, recap_table
from provision.errors import HostUnreachable, InputError, ProvisionError
from provision.facts.gather import gather_facts
from provision.inventory.extra_vars import parse_extra_vars
from provision.inventory.loader import load_inventory
from provision.inventory.model import Host, Inventory
from provision.playbook.loader import load_playbook
from provision.runner.batches import parse_serial
from provision.runner.host_run import RunOptions
from provision.runner.runner import RunConfig, Runner, connect
from provision.secrets import REDACTOR, Secret

EXIT_OK, EXIT_FAILED = 0, 1


def _split(text: str) -> frozenset[str]:
    return frozenset(t.strip() for t in text.split(",") if t.strip())


def inventory_sources(args: argparse.Namespace) -> list[Path]:
    """The positional inventory and every `-i`, in that order; at least one."""
    sources = ([args.inventory] if args.inventory else []) + list(getattr(args, "inventory_sources", []))
    if not sources:
        raise InputError("no inventory: give one (`provision up inventory/host.yaml`) or -i INVENTORY",
                         key="inventory")
    return sources


def read_inventory(args: argparse.Namespace) -> Inventory:
    """The inventory with the group_vars/host_vars next to it and next to the playbook."""
    playbook = getattr(args, "playbook", None) or default_playbook()
    return load_inventory(inventory_sources(args), playbook_dir=Path(playbook).parent)


def load_hosts(args: argparse.Namespace) -> tuple[Inventory, list[Host]]:
    """The inventory and the hosts selected by --limit: all validated before anything connects."""
    inventory = read_inventory(args)
    hosts = inventory.select(args.limit)
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


def default_playbook() -> Path:
    """playbooks/site.yaml of the working directory, else of the checkout this package lives in."""
    here = Path("playbooks/site.yaml")
    if here.exists():
        return here
    return Path(__file__).resolve().parents[2] / "playbooks" / "site.yaml"


def cmd_up(args: argparse.Namespace, console: Console) -> int:
    if args.list_hosts or args.list_tasks:
        return list_plays(args, console)
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


def list_plays(args: argparse.Namespace, console: Console) -> int:
    """`up --list-hosts` / `--list-tasks`, as ansible-playbook prints them; no host is contacted."""
    inventory = read_inventory(args)
    selected = {host.name for host in inventory.select(args.limit)}
    options = RunOptions(tags=_split(args.tags), skip_tags=_split(args.skip_tags))
    for number, play in enumerate(load_playbook(args.playbook or default_playbook()), start=1):
        hosts = [host.name for host in inventory.select(play.hosts) if host.name in selected]
        console.print(f"\n  play #{number} ({play.hosts}): {play.name}", highlight=False)
        if args.list_hosts:
            console.print(f"    pattern: {play.hosts!r}\n    hosts ({len(hosts)}):", highlight=False)
            for name in hosts:
                console.print(f"      {name}", highlight=False)
        if args.list_tasks:
            console.print("    tasks:", highlight=False)
            for task in play.tasks:
                if options.selects(task):
                    tags = ", ".join(sorted(task.tags))
                    console.print(f"      {task.role or play.name} : {task.name}    TAGS: [{tags}]",
                                  highlight=False, markup=False, soft_wrap=True)
    return EXIT_OK


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
