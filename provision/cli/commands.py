"""The subcommands: each loads and validates its inputs first, then talks to hosts."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from provision import interrupt
from provision.cli.consoles import styled
from provision.cli.endpoints import endpoint_lines, office_lines
from provision.cli.inputs import EXIT_FAILED, EXIT_OK, Invocation, _split
from provision.cli.output import ConsoleReporter, recap_table
from provision.connection.base import Connection
from provision.facts.gather import gather_facts
from provision.facts.model import SECURE_BOOT_WORDS
from provision.inventory.model import Host
from provision.runner import probe_memory
from provision.runner.connect import EarlyConnections
from provision.runner.host_run import RunOptions
from provision.runner.results import RunResult
from provision.runner.runner import Runner
from provision.secrets import REDACTOR


def write_document(inv: Invocation, console: Console, result: RunResult) -> None:
    """The results document: to stdout with --json, to a file with --json-file."""
    if inv.args.json_path:
        result.write_json(inv.args.json_path)
    if inv.args.json:
        console.print_json(REDACTOR.json(result.document()))


def converge(inv: Invocation, early: EarlyConnections | None = None) -> int:
    """`up` once its inputs are read and checked (cli/up.py): run the plays, print the recap, the
    endpoints and the document; `early` are the connections already under way."""
    args, console = inv.args, inv.console
    inventory, hosts = inv.hosts()
    plays = inv.plays
    extra_vars = dict(inv.extra_vars)
    options = RunOptions(check=args.check, diff=args.diff, tags=_split(args.tags), skip_tags=_split(args.skip_tags))
    if args.bundle:
        from provision.bundle.offline import offline_bundle_variable

        extra_vars["offline_bundle"] = offline_bundle_variable(args.bundle, inv.read_each, inventory, hosts, plays,
                                                               extra_vars, options)
    config = inv.run_config(extra_vars=extra_vars, options=options, probe_memory=probe_memory.default_folder())
    human = inv.human
    with ConsoleReporter(human, check=args.check, show_diff=args.diff) as reporter, \
            interrupt.gentle_ctrl_c(reporter.message):
        result = Runner(inventory, config, reporter, early).run(plays)
    human.print(recap_table(result))
    if not result.check:  # where the time went: each host's phases, what ran beside and what waited
        from provision.runner.timeline import lines as timeline_lines

        for line in timeline_lines(result):
            human.print(REDACTOR(line), highlight=False, markup=False, soft_wrap=True)
    from provision.cli.status_publish import publish_lines  # after the run: it reads every backend's status

    for line in [*endpoint_lines(plays, inv.playbook, inventory, result, extra_vars),
                 *office_lines(plays, inv.playbook, inventory, result, extra_vars),
                 *publish_lines(inv, inventory, plays, result, extra_vars)]:
        human.print(REDACTOR(line), highlight=False, markup=False, soft_wrap=True)
    if result.aborted:
        human.print(styled(REDACTOR(result.aborted), "bold red"))
    write_document(inv, console, result)
    if interrupt.STOP.is_set():
        return interrupt.EXIT_INTERRUPTED
    return EXIT_OK if result.ok else EXIT_FAILED


def list_plays(inv: Invocation) -> int:
    """`up --list-hosts` / `--list-tasks`, as ansible-playbook prints them; no host is contacted."""
    args, console = inv.args, inv.console
    inventory = inv.read_inventory()
    selected = {host.name for host in inventory.select(args.limit)}
    options = RunOptions(tags=_split(args.tags), skip_tags=_split(args.skip_tags))
    for number, play in enumerate(inv.plays, start=1):
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


def cmd_facts(inv: Invocation) -> int:
    _, hosts = inv.hosts()

    def gather(_: Host, conn: Connection) -> dict[str, Any]:
        return gather_facts(conn).as_vars()

    readings = inv.read_each(hosts, gather)
    gathered: dict[str, dict | str | None] = {name: reading.error if reading.error is not None else reading.value
                                              for name, reading in readings.items()}
    failed = any(isinstance(v, str) for v in gathered.values())
    console = inv.console
    if inv.json:
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
