"""`dpkg_lock_wait`: wait (bounded) until no process holds the dpkg/apt locks, showing the holder.

A fresh Ubuntu host runs unattended-upgrades and cloud-init for minutes after its first boot; the
preflight role waits for them here, before any apt work. Waiting is never a change. The wait is
dpkg_lock.sh's (the apt operation's own rule), and its lines show as progress: the process that
holds the lock, its command line and the seconds waited, every 5 s (before, the wait showed nothing).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from provision.ops.base import ApplyContext, ApplyResult, OpArgs, Operation, Plan, register
from provision.ops.dpkg_lock import dpkg_lock_script, lock_wait_progress
from provision.ops.streaming import run_streaming
from provision.shell import Command


class DpkgLockWaitArgs(OpArgs):
    timeout: int = Field(default=600, gt=0)


@register
class DpkgLockWaitOperation(Operation):
    name = "dpkg_lock_wait"
    Args = DpkgLockWaitArgs

    def probe(self, args: DpkgLockWaitArgs) -> None:
        return None

    def plan(self, args: DpkgLockWaitArgs, facts: Any, state: None) -> Plan:
        script = f"{dpkg_lock_script()}\nwait_dpkg_lock {args.timeout}\necho 'the dpkg lock is free'"
        summary = f"wait up to {args.timeout}s for the dpkg lock"
        return Plan(changed=False, summary=summary,
                    steps=[Command(script=script, description=summary, timeout=args.timeout + 60)])

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        def on_line(line: str) -> None:
            if (waiting := lock_wait_progress(line)) is not None:
                ctx.progress(waiting)

        done = run_streaming(ctx.conn, plan.commands[0], on_line)
        return ApplyResult(changed=False, stdout=done.stdout, stderr=done.stderr, rc=done.rc)
