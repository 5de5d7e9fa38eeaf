"""`vllm_smoke`: check that the vLLM service is ready and answers the text and vision smoke checks.

Read-only first: the probe (in the runner's shared probe script, no round trip of its own) takes the
readiness poll's first look (readiness.snapshot_script: unit state, `/health`, `/v1/models`, the
journal since the current start) and, when `/health` answers, sends the smoke checks right there,
their request bodies in the snippet's text (a probe has no stdin payload; the API key is read from
the root-only key file on the host, never in the text or the output). When the poll's own judgement
(readiness.judge) says ready and both checks pass (smoke_judge), the plan has no steps: nothing is
applied, and its summary and result are what a passing apply reports (`ready_seconds` 0, `smoke`),
so a converged rerun pays no round trip here and leaves the probe cache to the tasks after it;
`--check` reports it ok (the checks are requests, they change nothing). The probe rides the play's
first batch, so on a run that deploys its checks went to the release being replaced; the task is
then skipped (`when`: the deploy checked its own release).

Otherwise (not running, still starting, a fatal log line, a wrong answer, a probe cut short) the
plan is one `Action`: apply waits for readiness and runs the checks as before (one round trip per
poll, one for the checks) and fails the host with the reason (a quoted fatal log line, a timeout, the
wrong answer quoted). Never a change, nothing rolled back: this checks what runs; deploys check (and
roll back) themselves in `vllm_release`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provision.ops.base import Action, ApplyContext, ApplyResult, Operation, Plan, Probe, only_step, register
from provision.vllm.checks import checks_report
from provision.vllm.ops.vllm_service import VllmServiceArgs, verify_running
from provision.vllm.readiness import Snapshot, StartMark, judge, parse_snapshot, snapshot_script
from provision.vllm.smoke import embedded_smoke_script, judge_smoke, smoke_requests

# the service as it runs now: its journal since the current start, restarts not compared
RUNNING = StartMark()
# A probe shares its script with every other task's: a server that answers /health but hangs on
# completions must not hold them for the whole smoke_timeout. A check cut short here is left to the
# apply, which waits the full smoke_timeout (a warm server answers these in about a second).
PROBE_CHECK_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class SmokeProbe:
    """The readiness snapshot, and the smoke checks' fields (empty when /health did not answer)."""

    snapshot: Snapshot
    checks: str


def parse_smoke_probe(output: str) -> SmokeProbe:
    """Both parts of the probe's output; every line is `key=value` and the two parts' keys differ."""
    return SmokeProbe(snapshot=parse_snapshot(output), checks=output)


@dataclass(frozen=True)
class WaitAndSmoke(Action):
    """Wait for the service to be ready, then run its smoke checks."""

    args: VllmServiceArgs


@register
class VllmSmokeOperation(Operation):
    name = "vllm_smoke"
    Args = VllmServiceArgs
    reports = True  # its checks go into the results document; `provision smoke` reads them there

    def probe(self, args: VllmServiceArgs) -> Probe[SmokeProbe]:
        endpoint = args.endpoint()
        names, bodies = smoke_requests(endpoint, args.service.smoke_vision)
        checks = embedded_smoke_script(endpoint, names, bodies, min(args.service.smoke_timeout, PROBE_CHECK_TIMEOUT_S))
        return Probe(snapshot_script(endpoint, RUNNING, when_up=checks), parse_smoke_probe)

    def plan(self, args: VllmServiceArgs, facts: Any, state: SmokeProbe) -> Plan:
        if judge(state.snapshot, args.endpoint(), RUNNING).state == "ready":
            report = judge_smoke(state.checks, args.service.smoke_vision)
            if report.ok:
                result = checks_report(0.0, report)
                return Plan(changed=False, summary=result["summary"], result=result)
        checks = "text and vision" if args.service.smoke_vision else "text"
        what = f"wait for {args.service.name} to be ready, then the {checks} smoke checks"
        return Plan(changed=False, summary=what, steps=[WaitAndSmoke(what, args)])

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        checks = verify_running(ctx, only_step(plan, WaitAndSmoke).args)
        return ApplyResult(changed=False, summary=checks["summary"], result=checks)
