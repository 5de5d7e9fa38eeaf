"""`vllm_smoke`: wait until the vLLM service is ready, then run the text and vision smoke checks.

Never a change: in a run it always applies (one round trip for readiness, one for the checks) and
fails the host with the reason when the service is not ready (a quoted fatal log line, a timeout)
or a check fails (the wrong answer is quoted). Nothing is rolled back here: this checks what runs;
deploys check (and roll back) themselves in `vllm_release`. Timings are in the summary and the
registered result (`ready_seconds`, `smoke`: per check ok/answer/finish_reason/seconds/tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provision.ops.base import Action, ApplyContext, ApplyResult, Operation, Plan, register
from provision.vllm.ops.vllm_service import VllmServiceArgs, verify_running


@dataclass
class SmokePlan(Plan):
    args: VllmServiceArgs | None = None


@register
class VllmSmokeOperation(Operation):
    name = "vllm_smoke"
    Args = VllmServiceArgs
    reports = True  # its checks go into the results document; `provision smoke` reads them there

    def plan(self, args: VllmServiceArgs, facts: Any, state: None) -> Plan:
        checks = "text and vision" if args.smoke_vision else "text"
        what = f"wait for {args.name} to be ready, then the {checks} smoke checks"
        return SmokePlan(changed=False, args=args, summary=what, steps=[Action(what)])

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        assert isinstance(plan, SmokePlan) and plan.args is not None
        checks = verify_running(ctx, plan.args)
        return ApplyResult(changed=False, summary=checks["summary"], result=checks)
