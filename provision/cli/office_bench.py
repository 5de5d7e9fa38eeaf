"""`provision bench --workload office`: run the office workload on each host, judge it by the promise,
keep it on the host with the release it measured, and flag a regression against the previous release.

One round trip runs the client (provision/vllm/office_bench.py) and reads the release record and the
kept results; a second writes this result (atomically) beside them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from rich.table import Table
from rich.text import Text

from provision.cli.fleet import BENCH_TIMEOUT_S, on_each_host, run_on, service_settings
from provision.cli.inputs import EXIT_FAILED, EXIT_OK, Invocation
from provision.connection.base import Connection
from provision.errors import InputError, ProvisionError
from provision.inventory.model import Host
from provision.secrets import REDACTOR
from provision.vllm.office_bench import (
    OfficeWorkload,
    keep_script,
    office_script,
    parse_output,
    previous_result,
    regression,
    summarize,
)
from provision.vllm.ops.vllm_service import ServiceSpec


def office_workload(inv: Invocation) -> OfficeWorkload:
    args = inv.args
    defaults = OfficeWorkload()
    max_tokens = defaults.max_tokens if args.max_tokens is None else args.max_tokens
    if args.users < 1 or max_tokens < 1 or args.gate_tokens_per_s < 0 or args.noise_band_percent < 0:
        raise InputError("--users and --max-tokens must be at least 1, --gate and --noise-band-percent not negative")
    return OfficeWorkload(users=args.users, max_tokens=max_tokens, gate_tokens_per_s=args.gate_tokens_per_s,
                          noise_band_percent=args.noise_band_percent)


def office_host(host: Host, conn: Connection, service: ServiceSpec, workload: OfficeWorkload,
                say: Callable[[str], None]) -> dict[str, Any]:
    say(f"{host.name} | bench office | {workload.users} users, documents up to the context with an image each")
    layout = service.layout()
    rc, stdout, stderr = run_on(conn, office_script(service.endpoint(), layout, workload), BENCH_TIMEOUT_S)
    if rc != 0:
        raise ProvisionError(f"the office bench client failed (exit {rc}): {(stderr or stdout).strip()[-400:]}")
    release, context, kept, requests = parse_output(stdout)
    result = {"release": release or None, "measured_at": time.time(), **summarize(requests, workload, context)}
    previous = previous_result(kept, release)
    result["compared_with"] = previous.get("release") if previous else None
    result["regression"] = regression(result, previous, workload.noise_band_percent)
    result["warnings"] = []  # not the promise's failures: what kept the result from becoming history
    if release:
        rc, _, stderr = run_on(conn, keep_script(layout, release, result), 60)
        if rc != 0:
            result["warnings"].append(f"could not keep the result on the host: {stderr.strip()[-200:]}")
    else:
        result["warnings"].append("no deployed release recorded on the host: the result is not kept")
    return {"reachable": True, **result}


def office_table(name: str, row: dict[str, Any]) -> Table:
    table = Table(title=f"OFFICE BENCH {name}", title_justify="left", show_header=False)
    if "error" in row:
        table.add_row("verdict", Text(f"FAILED: {row['error']}", style="red"))
        return table
    table.add_row("release", f"{row['release'] or '-'} (context {row['context']} tokens)")
    for user, figures in row["per_user"].items():
        table.add_row(f"user {user}", f"{figures['mean_tokens_per_s']} tok/s mean, {figures['min_tokens_per_s']} "
                                      f"slowest, {figures['requests']} requests, {figures['errors']} errors")
    table.add_row("time to first token", f"p50 {row['ttft_p50_s']} s, p95 {row['ttft_p95_s']} s")
    table.add_row("largest prompt served", f"{row['largest_prompt_tokens']} tokens")
    verdict = Text("passed the promise", style="green") if row["passed"] else Text(
        "FAILED: " + "; ".join(row["reasons"]), style="red")
    table.add_row("verdict", verdict)
    for warning in row["warnings"]:
        table.add_row("WARNING", Text(warning, style="yellow"))
    if row["regression"]:
        table.add_row("REGRESSION", Text(row["regression"], style="bold red"))
    elif row["compared_with"]:
        table.add_row("against", f"release {row['compared_with']}: within the noise band")
    return table


def cmd_office_bench(inv: Invocation) -> int:
    args, console = inv.args, inv.console
    workload = office_workload(inv)
    hosts, services = service_settings(inv)
    human = inv.human
    rows = on_each_host(inv, hosts, lambda host, conn: office_host(
        host, conn, services[host.name], workload, lambda line: human.print(line, highlight=False, markup=False)))
    for name, row in rows.items():
        human.print(office_table(name, row))
    document = REDACTOR(json.dumps({"workload": asdict(workload), "hosts": rows}, indent=2))
    if args.json_path:
        args.json_path.write_text(document + "\n")
    if args.json:
        console.print_json(document)
    good = all(row.get("passed") and not row.get("regression") for row in rows.values())
    return EXIT_OK if good else EXIT_FAILED
