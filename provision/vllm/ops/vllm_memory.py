"""`vllm_memory`: what vLLM found at start-up against what the planner expected; kept in the record.

The probe reads the running service's own journal lines (its current invocation only) for vLLM's
memory figures, and the release record. The summary says planned vs actual. Writing the figures
into the record's current release is bookkeeping, not a change of the host's configuration: it is
applied (not in check mode) without counting as "changed", so a converged rerun stays at 0.
"""

from __future__ import annotations

import base64
from typing import Any

from provision.ops.base import OpArgs, Operation, Plan, Probe, register
from provision.shell import Command, parse_fields, quote
from provision.vllm.ops.vllm_service import ServiceSpec
from provision.vllm.release import Record
from provision.vllm.startup_log import (
    JOURNAL_FILTER,
    StartupMemory,
    parse_startup_memory,
    planned_vs_actual,
    shortfalls,
)

# every memory line of one start (TP ranks repeat some; v0.21 prints concurrency on its own line)
MEMORY_LINES_KEPT = 40


class VllmMemoryArgs(OpArgs):
    service: ServiceSpec
    planned: dict[str, Any]


def parse_memory_probe(output: str) -> tuple[StartupMemory, Record]:
    """vLLM's memory figures from the journal lines, and the release record."""
    fields = parse_fields(output)
    log = base64.b64decode(fields.get("log") or b"").decode(errors="replace")
    record_text = base64.b64decode(fields.get("record") or b"").decode(errors="replace")
    return parse_startup_memory(log), Record.parse(record_text)


@register
class VllmMemoryOperation(Operation):
    name = "vllm_memory"
    Args = VllmMemoryArgs
    reports = True

    def probe(self, args: VllmMemoryArgs) -> Probe[tuple[StartupMemory, Record]]:
        unit = quote(args.service.layout().unit)
        record = quote(args.service.layout().record_path)
        return Probe(f"id=$(systemctl show -p InvocationID --value -- {unit} 2>/dev/null)\n"
                f'[ -n "$id" ] && echo "log=$(journalctl _SYSTEMD_INVOCATION_ID="$id" -o cat --no-pager 2>/dev/null'
                f" | grep -E {quote(JOURNAL_FILTER)} | tail -n {MEMORY_LINES_KEPT} | base64 -w0)\"\n"
                     f'[ -f {record} ] && echo "record=$(base64 -w0 < {record})"\n'
                     "true", parse_memory_probe)

    def plan(self, args: VllmMemoryArgs, facts: Any, state: tuple[StartupMemory, Record]) -> Plan:
        actual, record = state
        warnings = shortfalls(args.planned, actual)
        summary = "; ".join([planned_vs_actual(args.planned, actual), *(f"WARNING: {w}" for w in warnings)])
        figures = actual.as_dict()
        planned = {key: args.planned.get(key) for key in ("kv_available_gib", "full_sequences")}
        result = {**{f"found_{key}": value for key, value in figures.items()},
                  **{f"planned_{key}": value for key, value in planned.items()}}
        if warnings:
            result["warnings"] = warnings
        if not figures or record.current is None or record.current.get("startup_memory") == figures:
            return Plan(changed=False, summary=summary, result=result)
        current = {**record.current, "startup_memory": figures, "planned_memory": planned}
        text = Record(current=current, previous=record.previous, last_failed=record.last_failed).text()
        path = quote(args.service.layout().record_path)
        script = (f"tmp=$(mktemp {path}.XXXXXX)\ncat <&3 > \"$tmp\"\nchmod 0644 \"$tmp\"\nmv -f \"$tmp\" {path}")
        return Plan(changed=False, summary=summary, result=result,
                    steps=[Command(script=script, data=text.encode(), description="record vLLM's memory figures")])
