"""`provision plan | bench | status`: what fits, how fast it runs, and what each host serves now.

`plan` runs the plan role's task (roles/plan/tasks.yaml) in check mode through the ordinary runner, so
it sees exactly the settings `provision up` uses. `bench` and `status` take the service from the
release task's arguments as `render` builds them (role defaults + inventory + -e, as `up` sees them), then make
one round trip per host: bench runs the streaming client on the host; status runs the facts probe and
the status script joined into one script.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import Any

from rich.table import Table
from rich.text import Text

from provision.cli.cache_status import cache_hosts, cache_row, cache_table
from provision.cli.inputs import EXIT_FAILED, EXIT_OK, Invocation
from provision.cli.output import ConsoleReporter
from provision.cli.serving import host_services, serving_play, task_file_play
from provision.connection.base import Connection
from provision.errors import InputError, ProvisionError
from provision.facts.probe import parse_probe, probe_script
from provision.gpu.model import nvidia_pci_id
from provision.inventory.model import Host
from provision.runner.host_run import RunOptions
from provision.runner.runner import Runner
from provision.secrets import REDACTOR
from provision.settings.variables import host_variables
from provision.status_page.page import render_page
from provision.vllm.bench import BenchSettings, bench_script, judge, parse_runs
from provision.vllm.ops.vllm_service import ServiceSpec
from provision.vllm.stability import GateThresholds
from provision.vllm.status import (
    describe_failure,
    drift,
    drift_summary,
    memory_found,
    parse_status,
    status_script,
)

PLAN_ROLE = "plan"
BENCH_TIMEOUT_S = 4 * 3600  # a 10-run, 2000-token bench on a slow card takes minutes; never cut it short


# ------------------------------------------------------------------------------------------- plan
def plan_rows(result: Any) -> dict[str, dict[str, Any]]:
    """Host -> the registered memory plan, or {"error": why} for a refused or unreachable host."""
    rows: dict[str, dict[str, Any]] = {}
    for name, host in result.hosts.items():
        # the plan task's own result (a reporting operation's data), not a name registered in YAML
        planned = next((task.data for task in host.tasks if task.role == PLAN_ROLE and task.data), None)
        if host.failed or not planned:
            error = host.error or next((t.error for t in host.tasks if t.error), "") or "not planned"
            rows[name] = {"fits": False, "unreachable": host.unreachable, "error": REDACTOR(error)}
            continue
        keys = ("gpu", "gpu_memory_mib", "max_model_len", "kv_available_gib", "kv_per_sequence_gib",
                "full_sequences", "largest_fitting_context")
        rows[name] = {"fits": True, **{key: planned.get(key) for key in keys}}
    return rows


def plan_table(rows: dict[str, dict[str, Any]]) -> Table:
    table = Table(title="MEMORY PLAN", title_justify="left")
    for column in ("host", "GPU", "max_model_len", "KV available", "KV per full sequence", "full sequences",
                   "largest context that fits", "verdict"):
        table.add_column(column, justify="left" if column in ("host", "GPU", "verdict") else "right")
    for name, row in rows.items():
        if not row["fits"]:
            verdict = "UNREACHABLE" if row["unreachable"] else "REFUSED"
            table.add_row(Text(name, style="red"), *("-",) * 6, Text(f"{verdict}: {row['error']}", style="red"))
            continue
        table.add_row(Text(name, style="green"), row["gpu"], str(row["max_model_len"]),
                      f"{row['kv_available_gib']:.2f} GiB", f"{row['kv_per_sequence_gib']:.2f} GiB",
                      f"{row['full_sequences']:.2f}", str(row["largest_fitting_context"]), Text("fits", style="green"))
    return table


def cmd_plan(inv: Invocation) -> int:
    inventory, _ = inv.hosts()
    play = task_file_play(serving_play(inv.plays, inv.playbook, PLAN_ROLE), PLAN_ROLE, "tasks.yaml")
    config = inv.run_config(options=RunOptions(check=True))
    # with --json the progress lines go to stderr, so stdout is the document alone
    with ConsoleReporter(inv.human) as reporter:
        runner = Runner(inventory, config, reporter)
        result = runner.run([play])
    rows, console = plan_rows(result), inv.console
    if inv.json:
        console.print_json(REDACTOR.json(rows))
    else:
        console.print(plan_table(rows))
    return EXIT_OK if all(row["fits"] for row in rows.values()) else EXIT_FAILED


# ------------------------------------------------------------------------------ endpoint settings
def host_settings(inv: Invocation) -> tuple[list[Host], dict[str, tuple[ServiceSpec, list[str]]]]:
    """The selected hosts and each one's service and `vllm serve` argv, as `render` builds them from
    the release task's arguments (role defaults + inventory + -e, as `provision up` sees them)."""
    _, hosts = inv.hosts()
    play = serving_play(inv.plays, inv.playbook)
    return hosts, host_services(play, inv.playbook, hosts, inv.extra_vars)


def service_settings(inv: Invocation) -> tuple[list[Host], dict[str, ServiceSpec]]:
    """The selected hosts and each one's service settings (`host_settings` without the argv)."""
    hosts, settings = host_settings(inv)
    return hosts, {name: service for name, (service, _) in settings.items()}


Row = dict[str, Any]


def on_each_host(inv: Invocation, hosts: list[Host], work: Callable[[Host, Connection], Row]) -> dict[str, Row]:
    """`work(host, connection)` on every host, as the runner's read-only tasks (--forks at a time); an
    unreachable host or an error is a row too."""
    return {name: reading.value if reading.value is not None and reading.error is None
            else {"reachable": not reading.unreachable, "error": reading.error}
            for name, reading in inv.read_each(hosts, work).items()}


def run_on(conn: Connection, script: str, timeout: float | None) -> tuple[int, str, str]:
    done = conn.run(script, sudo=True, timeout=timeout)
    return done.rc, done.stdout, done.stderr


# ------------------------------------------------------------------------------------------ bench
def bench_settings(inv: Invocation) -> BenchSettings:
    args = inv.args
    max_tokens = BenchSettings.max_tokens if args.max_tokens is None else args.max_tokens
    if args.runs < 2 or max_tokens < 1 or args.concurrency < 1:
        raise InputError("--runs must be at least 2, --max-tokens and --concurrency at least 1")
    return BenchSettings(runs=args.runs, max_tokens=max_tokens, concurrency=args.concurrency,
                         thresholds=GateThresholds(max_range_percent=args.max_range_percent,
                                                   max_cv_percent=args.max_cv_percent,
                                                   cluster_gap_percent=args.cluster_gap_percent))


def bench_host(host: Host, conn: Connection, service: ServiceSpec, settings: BenchSettings,
               say: Callable[[str], None]) -> dict[str, Any]:
    say(f"{host.name} | bench | {settings.runs} runs of {settings.max_tokens} tokens "
        f"({settings.concurrency} at a time) after a warm-up")
    started = time.monotonic()
    rc, stdout, stderr = run_on(conn, bench_script(service.endpoint(), settings), BENCH_TIMEOUT_S)
    if rc != 0:
        raise ProvisionError(f"the benchmark client failed (exit {rc}): {(stderr or stdout).strip()[-400:]}")
    bench = judge(parse_runs(stdout), settings.thresholds)
    stats = bench.stats
    say(f"{host.name} | bench | done in {time.monotonic() - started:.0f}s")
    return {"reachable": True, "passed": bench.verdict.passed, "reasons": bench.verdict.reasons,
            "runs": [round(run.decode_tokens_per_s, 2) for run in bench.runs],
            "mean": round(stats.mean, 2), "min": round(stats.minimum, 2), "max": round(stats.maximum, 2),
            "range": round(stats.spread, 2), "stdev": round(stats.stdev, 2), "cv_percent": round(stats.cv_percent, 2),
            "mean_ttft_s": round(bench.mean_ttft_s, 3), "clusters": len(stats.clusters),
            "completion_tokens": [run.completion_tokens for run in bench.runs]}


def bench_table(name: str, row: dict[str, Any]) -> Table:
    table = Table(title=f"BENCH {name}", title_justify="left", show_header=False)
    if "error" in row:
        table.add_row("verdict", Text(f"FAILED: {row['error']}", style="red"))
        return table
    table.add_row("runs (tok/s)", ", ".join(f"{value:.1f}" for value in row["runs"]))
    table.add_row("mean / min / max", f"{row['mean']:.2f} / {row['min']:.2f} / {row['max']:.2f} tok/s")
    table.add_row("range / stdev / CV", f"{row['range']:.2f} tok/s / {row['stdev']:.2f} / {row['cv_percent']:.2f}%")
    table.add_row("mean time to first token", f"{row['mean_ttft_s']:.3f} s")
    verdict = Text("passed", style="green") if row["passed"] else Text(
        "FAILED the stability gate: " + "; ".join(row["reasons"]), style="red")
    table.add_row("verdict", verdict)
    return table


def cmd_bench(inv: Invocation) -> int:
    args, console = inv.args, inv.console
    if args.workload == "office":
        from provision.cli.office_bench import cmd_office_bench
        return cmd_office_bench(inv)
    settings = bench_settings(inv)
    hosts, services = service_settings(inv)
    human = inv.human
    rows = on_each_host(inv, hosts, lambda host, conn: bench_host(host, conn, services[host.name], settings,
                                                                  lambda line: human.print(line, highlight=False,
                                                                                           markup=False)))
    for name, row in rows.items():
        human.print(bench_table(name, row))
    document = REDACTOR.json({"settings": asdict(settings), "hosts": rows}, indent=2)
    if args.json_path:
        args.json_path.write_text(document + "\n")
    if args.json:
        console.print_json(document)
    return EXIT_OK if all(row.get("passed") for row in rows.values()) else EXIT_FAILED


# ----------------------------------------------------------------------------------------- status
def status_host(conn: Connection, service: ServiceSpec, wanted_argv: list[str], wanted_image: str) -> dict[str, Any]:
    # one round trip: the facts probe, then (in a section the probe's parser ignores) the status script
    script = (f"{probe_script()}\nset +e +o pipefail\nprintf '@@section service-status\\n'\n"
              f"{status_script(service.layout(), service.endpoint())}")
    _, stdout, _ = run_on(conn, script, 60)
    facts = parse_probe(stdout)
    status = parse_status(stdout)
    release = status.release or {}
    differences = drift(status, wanted_argv, wanted_image)
    gpu = facts.gpus[0] if facts.gpus else None
    return {
        "reachable": True,
        "gpu": gpu.name if gpu else
        (f"{nvidia_pci_id(facts.pci_gpus[0].device_id)} (no driver)" if facts.pci_gpus else "none"),
        "driver": facts.driver_version, "state": status.state, "uptime_s": status.uptime_s,
        "image": release.get("pinned_image") or release.get("image"),
        "weights_commit": (release.get("weights") or {}).get("commit"),
        "release": release.get("id"), "flags": drift_summary(differences), "drift": differences,
        "last_failed_upgrade": describe_failure(status.last_failed) or None,
        "health": status.health, "tokens_per_s": status.tokens_per_s, "running": status.running,
        "waiting": status.waiting, "kv_cache_percent": status.kv_cache_percent, "problems": status.problems,
        "kernels_without_nvidia_module": list(facts.kernels_without_nvidia_module),
        "bench_history": status.bench_history,
        **memory_found(status.release),
    }


def _uptime(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, _ = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h {minutes}m"
    return f"{hours}h {minutes}m" if hours else f"{minutes}m {int(seconds) % 60}s"


def _digest(image: str | None) -> str:
    """`sha256:abcdef012345` of a pinned image, else the image as named."""
    image = image or "-"
    return image.split("@", 1)[1][:19] if "@" in image else image


def _number(value: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def status_table(rows: dict[str, dict[str, Any]]) -> Table:
    table = Table(title="STATUS", title_justify="left")
    for column in ("host", "reachable", "GPU / driver", "service", "uptime", "image", "weights", "flags", "health",
                   "tok/s", "running / waiting", "KV cache"):
        table.add_column(column)
    for name, row in rows.items():
        if "error" in row:
            table.add_row(Text(name, style="red"), "yes" if row["reachable"] else Text("no", style="red"),
                          Text(row["error"][:160], style="red"), *("-",) * 9)
            continue
        digest = _digest(row["image"])
        active = row["state"].startswith("active")
        flags_style = "green" if row["flags"] == "in sync" else "bold red"
        table.add_row(
            Text(name, style="green" if active and row["health"] == "ok" else "red"), "yes",
            f"{row['gpu']} / {row['driver'] or '-'}", Text(row["state"], style="green" if active else "red"),
            _uptime(row["uptime_s"]), digest, (row["weights_commit"] or "-")[:12],
            Text(row["flags"] + (f"\nlast failed upgrade: {row['last_failed_upgrade']}"
                                 if row["last_failed_upgrade"] else ""), style=flags_style),
            Text(row["health"], style="green" if row["health"] == "ok" else "red"), _number(row["tokens_per_s"]),
            f"{_number(row['running'])} / {_number(row['waiting'])}", _number(row["kv_cache_percent"], "{:.1f}%"))
    return table


def serves(row: dict[str, Any]) -> bool:
    """A host serves when its endpoint answers /health with 200 (status's exit code, as `systemctl
    is-active`'s: 0 only when every host does)."""
    return bool(row.get("reachable")) and "error" not in row and row.get("health") == "ok"


def status_lines(rows: dict[str, dict[str, Any]]) -> list[str]:
    """One plain line per host for a pipe, a log or CI (the table is for a terminal: at 80 columns
    it wraps every cell)."""
    lines = []
    for name, row in rows.items():
        if "error" in row:
            lines.append(f"{name}: {'error' if row['reachable'] else 'unreachable'}: {row['error']}")
            continue
        failed = f" (last failed upgrade: {row['last_failed_upgrade']})" if row["last_failed_upgrade"] else ""
        lines.append(
            f"{name}: {'serving' if serves(row) else 'NOT SERVING'} | service {row['state']}, up "
            f"{_uptime(row['uptime_s'])} | health {row['health']} | GPU {row['gpu']} / driver {row['driver'] or '-'}"
            f" | image {_digest(row['image'])} | weights "
            f"{(row['weights_commit'] or '-')[:12]} | flags {row['flags']}{failed} | {_number(row['tokens_per_s'])}"
            f" tok/s | running {_number(row['running'])} / waiting {_number(row['waiting'])} | KV cache "
            f"{_number(row['kv_cache_percent'], '{:.1f}%')}")
    return lines


def memory_lines(rows: dict[str, dict[str, Any]]) -> list[Text]:
    """Per host, planned vs found KV memory and full-length sequences (one line each: the table is
    wide already), then a warning where vLLM found much less than planned."""
    lines = []
    for name, row in rows.items():
        if row.get("kv_found_gib") is None and row.get("sequences_found") is None:
            continue
        lines.append(Text(f"{name}: KV cache planned {_number(row.get('kv_planned_gib'), '{:.2f}')} GiB, found "
                          f"{_number(row.get('kv_found_gib'), '{:.2f}')} GiB; full-length sequences planned "
                          f"{_number(row.get('sequences_planned'), '{:.2f}')}, found "
                          f"{_number(row.get('sequences_found'), '{:.2f}')}"))
        lines += [Text(f"WARNING {name}: {warning}", style="yellow") for warning in row.get("memory_warnings") or []]
    return lines


def kernel_lines(rows: dict[str, dict[str, Any]]) -> list[Text]:
    """A warning per host with an installed kernel that would boot without the GPU driver (the same
    fact preflight reports: HostFacts.kernels_without_nvidia_module)."""
    return [Text(f"WARNING {name}: no NVIDIA module for kernel(s) {', '.join(kernels)}: booting "
                 f"{'it' if len(kernels) == 1 else 'one of them'} leaves the host without a GPU driver",
                 style="yellow")
            for name, row in rows.items() if (kernels := row.get("kernels_without_nvidia_module"))]


def inventory_values(inv: Invocation, hosts: list[Host], name: str) -> dict[str, str]:
    """Each host's variable `name` as the inventory (and -e) set it (`vllm_image`, `model`: the profile)."""
    play = serving_play(inv.plays, inv.playbook)
    return {host.name: str(host_variables(play, host, inv.extra_vars).get(name) or "") for host in hosts}


def status_rows(inv: Invocation) -> tuple[list[Host], dict[str, dict[str, Any]]]:
    """The selected hosts and each one's status row (also what `up` publishes on the office gateway)."""
    hosts, settings = host_settings(inv)
    services = {name: service for name, (service, _) in settings.items()}
    wanted = {name: argv[2:] for name, (_, argv) in settings.items()}
    images, profiles = inventory_values(inv, hosts, "vllm_image"), inventory_values(inv, hosts, "model")
    rows = on_each_host(inv, hosts, lambda host, conn: status_host(conn, services[host.name], wanted[host.name],
                                                                   images[host.name]))
    for name, row in rows.items():
        row["serving"] = serves(row)
        row["model_profile"] = profiles[name] or None
    return hosts, rows


def cmd_status(inv: Invocation) -> int:
    args, console = inv.args, inv.console
    hosts, rows = status_rows(inv)
    caches = on_each_host(inv, cache_hosts(hosts), lambda host, conn: cache_row(
        host, partial(run_on, conn)))
    from provision.cli.gateway import gateway_rows, users_table, view_table  # it runs its script with run_on

    gateways = gateway_rows(inv, hosts)
    if args.html:
        try:  # the page shows what hosts sent, masked as every output is
            args.html.write_text(render_page(REDACTOR.document(rows)))
        except OSError as error:
            raise InputError(f"--html {args.html}: cannot write the page: {error.strerror}") from error
    if inv.json:
        for name, cache in caches.items():
            rows[name]["office_cache"] = cache
        for name, gateway in gateways.items():
            rows[name]["office_gateway"] = gateway
        console.print_json(REDACTOR.json(rows))
    else:
        if console.is_terminal:
            console.print(status_table(rows))
        else:
            for text in status_lines(rows):
                console.print(text, markup=False, highlight=False, soft_wrap=True)
        for line in [*memory_lines(rows), *kernel_lines(rows)]:
            console.print(line)
        if caches:
            console.print(cache_table(caches))
        for name, gateway in gateways.items():
            console.print(view_table(name, gateway))
            if users := users_table(name, gateway):
                console.print(users)
    return EXIT_OK if all(row["serving"] for row in rows.values()) else EXIT_FAILED
