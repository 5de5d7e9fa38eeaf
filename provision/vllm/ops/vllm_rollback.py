"""`vllm_rollback`: make the host's previous vLLM release current again, checked.

The release record (service/release.py) names the current and the previous release; their files are
kept on the host. Apply installs the previous release's unit and env file, restarts, waits for
readiness and runs the smoke checks; the record then has the two swapped (a second rollback undoes
the first). If the previous release fails its checks, the current one is started again and the host
fails with the reason. No previous release: the task fails, and nothing is touched. Used by
`provision rollback`; the next `provision up` deploys what the inventory says again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provision.errors import TaskFailed
from provision.ops.base import Action, ApplyContext, ApplyResult, Operation, Plan, Probe, only_step, register
from provision.ops.scripting import probe_block
from provision.vllm.checks import host_runner
from provision.vllm.ops.vllm_service import VllmServiceArgs, verify_on
from provision.vllm.release import Deployer, LiveState, Record, describe_entry, parse_live_state, state_probe


@dataclass(frozen=True)
class RollBack(Action):
    """Install the previous release the record names, restart, check; the current one again on failure."""

    args: VllmServiceArgs
    record: Record


@register
class VllmRollbackOperation(Operation):
    name = "vllm_rollback"
    Args = VllmServiceArgs
    interrupts_service = True

    def probe(self, args: VllmServiceArgs) -> Probe[LiveState]:
        return Probe(probe_block(state_probe(args.layout())), parse_live_state)

    def plan(self, args: VllmServiceArgs, facts: Any, live: LiveState) -> Plan:
        record = live.record
        if record.previous is None:
            raise TaskFailed(f"no previous release of {args.service.name} is recorded on this host "
                             f"({args.layout().record_path}): nothing to roll back to")
        current = describe_entry(record.current) if record.current else "no verified release"
        return Plan(changed=True, summary=f"roll back from {current} to {describe_entry(record.previous)}",
                    steps=[RollBack(f"install the previous release of {args.service.name}, restart it, wait for "
                                    "readiness, run the smoke checks; if they fail, start the current one again",
                                    args=args, record=record)])

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        step = only_step(plan, RollBack)
        deployer = Deployer(host_runner(ctx.conn, f"roll back {step.args.service.name}"), step.args.layout(),
                            verify_on(ctx, step.args))
        checks = deployer.rollback(step.record)
        previous = step.record.previous
        assert previous is not None  # plan() plans a RollBack only for a record with a previous release
        return ApplyResult(changed=True, summary=f"{plan.summary}; {checks['summary']}",
                           result={"smoked": True, "release": previous["id"], **checks})
