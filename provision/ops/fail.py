"""`fail`: stop the host with a message, in check mode too. Used with `when:` for preflight refusals
(no NVIDIA GPU, Secure Boot with an unsigned module path, ...): the message is what the user reads.
"""

from __future__ import annotations

from typing import Any

from provision.errors import TaskFailed
from provision.ops.base import OpArgs, Operation, Plan, register


class FailArgs(OpArgs):
    msg: str


@register
class FailOperation(Operation):
    name = "fail"
    Args = FailArgs

    def plan(self, args: FailArgs, facts: Any, state: None) -> Plan:
        raise TaskFailed(args.msg)
