"""`provision status`: one script per host reads the service's state, its release and its metrics.

Drift is taken from what runs, not from the record: the running container's arguments and image
(`docker inspect`) against the inventory's, and the live unit file against the one the release
deployed; each difference is listed (`--max-num-seqs 9 ≠ 3`). The record's last failed upgrade is
shown with its reason.

The script (run with the facts probe, in the same round trip) prints `@@status NAME` sections; the
HTTP calls are made on the host against 127.0.0.1. Metrics are read twice, a second apart, so the
generation rate is a rate. Everything here but the script text is pure parsing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from provision.shell import quote
from provision.vllm.endpoint import Endpoint
from provision.vllm.release import Layout, Record, describe_entry, option_values
from provision.vllm.startup_log import StartupMemory, shortfalls

METRIC = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>[-+0-9.eEnaNif]+)')


def status_script(layout: Layout, endpoint: Endpoint) -> str:
    # vLLM's V1 engine (0.21 included) exports the KV-cache gauge as vllm:kv_cache_usage_perc; the V0
    # name vllm:gpu_cache_usage_perc was deprecated for it and then dropped (vllm/v1/metrics/loggers.py,
    # https://docs.vllm.ai/en/stable/usage/metrics/), so only the V1 name is read.
    metrics = (f"curl -s -m 5 -K <(auth) {quote(endpoint.url('/metrics'))} | "
               "grep -E '^vllm:(generation_tokens_total|kv_cache_usage_perc|num_requests_running|"
               "num_requests_waiting)'")
    return f"""{endpoint.auth_prelude()}
echo '@@status unit'
systemctl show -p ActiveState -p SubState -p ActiveEnterTimestampMonotonic -p UnitFileState -- {quote(layout.unit)}
echo "NowUptime=$(cut -d' ' -f1 /proc/uptime)"
echo '@@status record'
cat {quote(layout.record_path)} 2>/dev/null
echo '@@status live'
[ -f {quote(layout.unit_path)} ] && echo "unit_sha256=$(sha256sum < {quote(layout.unit_path)} | cut -d' ' -f1)"
echo "container_cmd=$(docker inspect --format '{{{{json .Config.Cmd}}}}' {quote(layout.name)} 2>/dev/null)"
echo "container_image=$(docker inspect --format '{{{{.Config.Image}}}}' {quote(layout.name)} 2>/dev/null)"
echo '@@status health'
curl -s -o /dev/null -m 5 -w '%{{http_code}}' {quote(endpoint.url('/health'))}; echo
echo '@@status metrics-1'
{metrics}
sleep 1
echo '@@status metrics-2'
{metrics}
echo '@@status bench'
for kept in {quote(layout.bench_dir)}/*.json; do [ -f "$kept" ] && {{ tr -d '\n' < "$kept"; echo; }}; done
echo '@@status end'
"""


def sections(output: str) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        if line.startswith("@@status "):
            current = found.setdefault(line.split(" ", 1)[1].strip(), [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in found.items()}


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {metric name: value summed over its label sets}."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = METRIC.match(line.strip())
        if match:
            values[match["name"]] = values.get(match["name"], 0.0) + float(match["value"])
    return values


@dataclass
class ServiceStatus:
    state: str = "unknown"
    uptime_s: float | None = None
    health: str = "down"
    release: dict[str, Any] | None = None
    last_failed: dict[str, Any] | None = None
    live: dict[str, Any] = field(default_factory=dict)
    tokens_per_s: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_cache_percent: float | None = None
    bench_history: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def parse_status(output: str) -> ServiceStatus:
    parts = sections(output)
    status = ServiceStatus()
    unit = dict(line.split("=", 1) for line in parts.get("unit", "").splitlines() if "=" in line)
    status.state = f"{unit.get('ActiveState', 'unknown')} ({unit.get('SubState', '?')})"
    entered, now = unit.get("ActiveEnterTimestampMonotonic", "0"), _seconds(unit.get("NowUptime", ""))
    if unit.get("ActiveState") == "active" and entered.isdigit() and now is not None and int(entered) > 0:
        status.uptime_s = max(0.0, now - int(entered) / 1e6)
    code = parts.get("health", "").strip()
    status.health = "ok" if code == "200" else (f"HTTP {code}" if code and code != "000" else "down")
    live = dict(line.split("=", 1) for line in parts.get("live", "").splitlines() if "=" in line)
    try:
        status.live = {"unit_sha256": live.get("unit_sha256", ""), "image": live.get("container_image", ""),
                       "arguments": json.loads(live["container_cmd"]) if live.get("container_cmd") else None}
    except ValueError:
        status.problems.append(f"docker inspect printed no JSON: {live.get('container_cmd', '')[:100]!r}")
    try:
        record = Record.parse(parts.get("record", ""))
        status.release, status.last_failed = record.current, record.last_failed
    except Exception as error:  # a damaged record is a status to show, not a crash
        status.problems.append(str(error))
    first, second = parse_metrics(parts.get("metrics-1", "")), parse_metrics(parts.get("metrics-2", ""))
    if second:
        generated = "vllm:generation_tokens_total"
        if generated in first and generated in second:
            status.tokens_per_s = max(0.0, second[generated] - first[generated])
        status.running = second.get("vllm:num_requests_running")
        status.waiting = second.get("vllm:num_requests_waiting")
        usage = second.get("vllm:kv_cache_usage_perc")
        status.kv_cache_percent = None if usage is None else 100 * usage
    status.bench_history = kept_results(parts.get("bench", ""))
    if "end" not in parts:
        status.problems.append("the status script did not finish")
    return status


def kept_results(text: str) -> list[dict[str, Any]]:
    """The office bench results kept on the host, one JSON object a line (a damaged one is skipped)."""
    kept = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            kept.append(entry)
    return kept


def _seconds(text: str) -> float | None:
    """/proc/uptime's seconds (`3000.55`), kept a decimal string on the host: mawk, Debian's default
    awk, caps `printf "%d"` at 2^31-1, which as microseconds is 35.8 minutes of uptime."""
    try:
        return float(text)
    except ValueError:
        return None


def resolve_auto(wanted: list[str], deployed: list[str]) -> list[str]:
    """The inventory's argv with each `--flag auto` given the value the deploy resolved it to (the
    memory plan's number for `max_model_len: auto`), so `auto` is not mistaken for drift."""
    resolved = list(wanted)
    for index, word in enumerate(resolved[:-1]):
        if word.startswith("--") and resolved[index + 1] == "auto" and word in deployed:
            position = deployed.index(word)
            if position + 1 < len(deployed):
                resolved[index + 1] = deployed[position + 1]
    return resolved


def serving_arguments(container_cmd: list[str] | None, model: str) -> list[str] | None:
    """The vLLM arguments (model first) in a container's command: after the entrypoint wrapper's words."""
    if not container_cmd:
        return None
    if model in container_cmd:
        return container_cmd[container_cmd.index(model):]
    serve = len(container_cmd) - container_cmd[::-1].index("serve") if "serve" in container_cmd else 0
    return container_cmd[serve:]


def drift(status: ServiceStatus, wanted_argv: list[str], wanted_image: str) -> list[str]:
    """What differs between what runs and what the inventory asks for: the running container's
    arguments and image, and the live unit file against the release that deployed it. Empty: in sync."""
    release = status.release
    if not release:
        return ["not deployed"]
    found: list[str] = []
    running = serving_arguments(status.live.get("arguments"), wanted_argv[0] if wanted_argv else "")
    if running is None:
        found.append("no container running")
    else:
        wanted, actual = option_values(resolve_auto(wanted_argv, running)), option_values(running)
        for key in sorted(set(wanted) | set(actual)):
            name = key or "model"
            if key not in actual:
                found.append(f"{name} {wanted[key]} missing".replace("  ", " "))
            elif key not in wanted:
                found.append(f"{name} {actual[key]} not in the inventory".replace("  ", " "))
            elif wanted[key] != actual[key]:
                found.append(f"{name} {actual[key]} ≠ {wanted[key]}")
        image = status.live.get("image") or ""
        if image and image != release.get("pinned_image") and image != release.get("image"):
            found.append(f"image {image} ≠ recorded {release.get('pinned_image')}")
    if wanted_image and release.get("image") != wanted_image:
        found.append(f"image {_short(str(release.get('pinned_image') or release.get('image')))} ≠ "
                     f"inventory's {wanted_image}")
    live_unit = status.live.get("unit_sha256")
    if live_unit and release.get("unit_sha256") and live_unit != release["unit_sha256"]:
        found.append(f"unit file edited on the host (not what release {release.get('id')} deployed)")
    return found


def _short(image: str) -> str:
    """`repo@sha256:abcdef012345…` (a digest cut to 12 hex digits)."""
    name, sep, digest = image.partition("@sha256:")
    return f"{name}@sha256:{digest[:12]}…" if sep else image


def drift_summary(found: list[str]) -> str:
    if found == ["not deployed"]:
        return "not deployed"
    return "in sync" if not found else "DRIFT: " + "; ".join(found)


def memory_found(release: dict[str, Any] | None) -> dict[str, Any]:
    """Planned vs found KV memory and full-length concurrency from the release record (vllm_memory
    writes both after a start), with a warning where vLLM found more than 15% less than planned."""
    planned = (release or {}).get("planned_memory") or {}
    found = StartupMemory(**{key: value for key, value in ((release or {}).get("startup_memory") or {}).items()
                             if key in StartupMemory.__dataclass_fields__})
    return {"kv_planned_gib": planned.get("kv_available_gib"), "kv_found_gib": found.kv_gib,
            "sequences_planned": planned.get("full_sequences"), "sequences_found": found.max_concurrency,
            "memory_warnings": shortfalls(planned, found)}


def describe_failure(last_failed: dict[str, Any] | None) -> str:
    """`release X (image, weights) failed: reason` for the record's last failed upgrade, or ''."""
    if not last_failed:
        return ""
    reason = str(last_failed.get("reason", "")).strip().splitlines()
    return f"{describe_entry(last_failed)} failed: {reason[0] if reason else 'no reason recorded'}"
