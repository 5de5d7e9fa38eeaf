"""The subcommands: each loads and validates its inputs first, then talks to hosts."""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rich.console import Console
from rich.table import Table

from provision import interrupt
from provision.cli.consoles import styled
from provision.cli.endpoints import endpoint_lines, office_lines
from provision.cli.inputs import (
    EXIT_FAILED,
    EXIT_OK,
    _split,
    human_console,
    load_hosts,
    playbook_of,
    plays_of,
    read_inventory,
    run_label,
    timeouts_of,
    trace_of,
)
from provision.cli.output import ConsoleReporter, recap_table
from provision.errors import HostUnreachable, ProvisionError
from provision.facts.gather import gather_facts
from provision.facts.model import SECURE_BOOT_WORDS
from provision.inventory.extra_vars import parse_extra_vars
from provision.inventory.model import Host, Inventory
from provision.playbook.model import Play
from provision.runner import probe_memory
from provision.runner.batches import parse_serial
from provision.runner.connect import EarlyConnections
from provision.runner.host_run import RunOptions
from provision.runner.results import RunResult
from provision.runner.runner import RunConfig, Runner, connect
from provision.secrets import REDACTOR


def write_document(args: argparse.Namespace, console: Console, result: RunResult) -> None:
    """The results document: to stdout with --json, to a file with --json-file."""
    if args.json_path:
        result.write_json(args.json_path)
    if args.json:
        console.print_json(REDACTOR.json(result.document()))


def converge(args: argparse.Namespace, console: Console, inventory: Inventory, hosts: list[Host],
             plays: list[Play], early: EarlyConnections | None = None) -> int:
    """`up` once its inputs are read and checked (cli/up.py): run the plays, print the recap, the
    endpoints and the document; `early` are the connections already under way."""
    extra_vars = parse_extra_vars(args.extra_vars)
    options = RunOptions(check=args.check, diff=args.diff, tags=_split(args.tags), skip_tags=_split(args.skip_tags))
    if args.bundle:
        from provision.bundle.offline import offline_bundle_variable

        extra_vars["offline_bundle"] = offline_bundle_variable(args, inventory, hosts, plays, extra_vars, options,
                                                               timeouts_of(args))
    config = RunConfig(
        trace=trace_of(args, console),
        forks=args.forks,
        serial=parse_serial(args.serial) if args.serial else None,
        max_fail_percentage=args.max_fail_percent,
        limit=args.limit,
        extra_vars=extra_vars,
        trust_new_host_keys=args.trust_new_host_keys,
        timeouts=timeouts_of(args),
        wait_lock_s=args.wait_lock,
        options=options,
        probe_memory=probe_memory.default_folder(),
        command=run_label(args),
    )
    human = human_console(args, console)
    with ConsoleReporter(human, check=args.check, show_diff=args.diff) as reporter, \
            interrupt.gentle_ctrl_c(reporter.message):
        result = Runner(inventory, config, reporter, early).run(plays)
    human.print(recap_table(result))
    if not result.check:  # where the time went: each host's phases, what ran beside and what waited
        from provision.runner.timeline import lines as timeline_lines

        for line in timeline_lines(result):
            human.print(REDACTOR(line), highlight=False, markup=False, soft_wrap=True)
    from provision.cli.status_publish import publish_lines  # after the run: it reads every backend's status

    for line in [*endpoint_lines(plays, playbook_of(args), inventory, result, extra_vars),
                 *office_lines(plays, playbook_of(args), inventory, result, extra_vars),
                 *publish_lines(args, inventory, plays, result, extra_vars)]:
        human.print(REDACTOR(line), highlight=False, markup=False, soft_wrap=True)
    if result.aborted:
        human.print(styled(REDACTOR(result.aborted), "bold red"))
    write_document(args, console, result)
    if interrupt.STOP.is_set():
        return interrupt.EXIT_INTERRUPTED
    return EXIT_OK if result.ok else EXIT_FAILED


def list_plays(args: argparse.Namespace, console: Console) -> int:
    """`up --list-hosts` / `--list-tasks`, as ansible-playbook prints them; no host is contacted."""
    inventory = read_inventory(args)
    selected = {host.name for host in inventory.select(args.limit)}
    options = RunOptions(tags=_split(args.tags), skip_tags=_split(args.skip_tags))
    for number, play in enumerate(plays_of(args), start=1):
        hosts = [host.name for host in inventory.play_hosts(play.hosts) if host.name in selected]
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


# a fact's values that need words to be read right ("bios" is no Secure Boot at all, not an unknown)
FACT_WORDS: dict[str, dict[str, str]] = {"secure_boot": SECURE_BOOT_WORDS}


def fact_rows(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Facts as a person reads them: nested mappings as dotted keys (`gpu.0.name`), one row per
    leaf, yes/no for booleans and "-" for unknown (no Python reprs)."""
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value):
        items = [(str(index), item) for index, item in enumerate(value)]
    else:
        words = FACT_WORDS.get(prefix, {})
        return [(prefix, words.get(value, _fact_text(value)) if isinstance(value, str) else _fact_text(value))]
    if not items:
        return [(prefix, "-")] if prefix else []
    return [row for key, item in items for row in fact_rows(item, f"{prefix}.{key}" if prefix else str(key))]


def _fact_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(_fact_text(item) for item in value) or "-"
    return str(value)


def cmd_facts(args: argparse.Namespace, console: Console) -> int:
    _, hosts = load_hosts(args)

    def gather(host: Host) -> tuple[str, dict | str]:
        try:
            conn = connect(host, args.trust_new_host_keys, trace_of(args, console), timeouts_of(args))
            try:
                return host.name, gather_facts(conn).as_vars()
            finally:
                conn.close()
        except (HostUnreachable, ProvisionError) as error:
            return host.name, REDACTOR(str(error))

    with ThreadPoolExecutor(max_workers=max(1, args.forks)) as pool:
        gathered = dict(pool.map(gather, hosts))
    failed = any(isinstance(v, str) for v in gathered.values())
    if args.json:
        console.print_json(REDACTOR.json(gathered))
        return EXIT_FAILED if failed else EXIT_OK
    for name, facts in gathered.items():
        table = Table(title=name, show_header=False, title_justify="left")
        if isinstance(facts, str):
            table.add_row("error", facts)
        else:
            for key, value in fact_rows(facts):
                table.add_row(key, value)
        console.print(table)
    return EXIT_FAILED if failed else EXIT_OK
