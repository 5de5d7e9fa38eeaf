"""`debug`: report a message (rendered from facts and variables) as the task's summary; never a change.

For a role to tell the user what it found (preflight's "NVIDIA GPU found: ...") without touching the
host: no probe, no command, the same in check mode and in a run.
"""

from __future__ import annotations

from typing import Any

from provision.ops.base import OpArgs, Operation, Plan, register


class DebugArgs(OpArgs):
    msg: str


@register
class DebugOperation(Operation):
    name = "debug"
    Args = DebugArgs
    reports = True

    def plan(self, args: DebugArgs, facts: Any, state: None) -> Plan:
        return Plan.ok(args.msg.strip())
