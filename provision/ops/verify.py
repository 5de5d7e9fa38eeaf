"""`verify`: check something on the host with a read-only command; never a change.

`cmd` runs in the probe (so a converged host pays no extra round trip), with bash and `pipefail`,
bounded by `timeout` seconds. Exit 0 means verified: the task is ok and its summary is what the
command printed (so it doubles as a report: "NVIDIA GeForce RTX 5090 Laptop GPU, 580.95.05").
A failing check fails the host with `msg` followed by the command's output, except that with
`defer: true` (the default) the verdict waits for the run: earlier tasks of the same run may create
what is checked (a driver, a restarted daemon), so in check mode a failing check is reported as
"not checked" (not run: the runner's rule for any plan whose steps are a check) and in a run it
is checked again, then passes or fails. `defer: false` fails at once, in check mode too: for
preflight checks of what no task changes (free disk).
Keep `cmd` quick and free of side effects: it runs inside the probe that every task shares.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from pydantic import Field, field_validator

from provision.errors import TaskFailed
from provision.ops.base import Action, ApplyContext, ApplyResult, OpArgs, Operation, Plan, Probe, only_step, register
from provision.ops.command import check_bash_syntax, first_line
from provision.ops.scripting import probe_block
from provision.secrets import REDACTOR
from provision.shell import Command, parse_fields, quote

SUMMARY_LINES = 3
MESSAGE_TAIL_LINES = 20


class VerifyArgs(OpArgs):
    cmd: str
    msg: str = ""
    defer: bool = True
    timeout: float = Field(default=120, gt=0)

    @field_validator("cmd")
    @classmethod
    def _parses(cls, value: str) -> str:
        check_bash_syntax(value)
        return value


def verify_script(args: VerifyArgs) -> str:
    """Bash that runs the check and prints `rc=` and `out=` (its stdout and stderr, base64)."""
    return (f"rc=0; out=$(timeout {args.timeout:g} bash -o pipefail -c {quote(args.cmd)} 2>&1) || rc=$?\n"
            'echo "rc=$rc"\n'
            """echo "out=$(printf '%s' "$out" | base64 -w0)\"""")


def parse_check(state: str) -> tuple[int | None, str]:
    """(exit code or None when the check printed nothing usable, its output)."""
    fields = parse_fields(state)
    rc = fields.get("rc", "")
    try:
        output = base64.b64decode(fields.get("out", "")).decode(errors="replace")
    except binascii.Error:
        output = ""
    return (int(rc) if rc.lstrip("-").isdigit() else None), output.strip()


def describe_failure(args: VerifyArgs, rc: int | None, output: str) -> str:
    what = args.msg.strip() or f"check failed: {first_line(args.cmd)}"
    if rc == 124:
        what += f" (the check timed out after {args.timeout:g}s)"
    lines = output.splitlines()[-MESSAGE_TAIL_LINES:]
    return REDACTOR(what + ("\n" + "\n".join(lines) if lines else ""))


def success_summary(args: VerifyArgs, output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()][:SUMMARY_LINES]
    return "; ".join(lines) if lines else f"verified: {first_line(args.cmd)}"


@dataclass(frozen=True)
class CheckAgain(Action):
    """A deferred check: apply runs `check` again and decides by the arguments it was given."""

    check: Command
    args: VerifyArgs


@register
class VerifyOperation(Operation):
    name = "verify"
    Args = VerifyArgs

    def probe(self, args: VerifyArgs) -> Probe[tuple[int | None, str]]:
        return Probe(probe_block(verify_script(args)), parse_check)

    def plan(self, args: VerifyArgs, facts: Any, state: tuple[int | None, str]) -> Plan:
        rc, output = state
        if rc == 0:
            return Plan.ok(success_summary(args, output), output=output)
        if not args.defer:
            raise TaskFailed(describe_failure(args, rc, output))
        what = args.msg.strip().splitlines()[0] if args.msg.strip() else first_line(args.cmd)
        command = Command(script=verify_script(args), description=f"verify: {first_line(args.cmd)}",
                          timeout=args.timeout + 30)
        return Plan(changed=False, steps=[CheckAgain(command.description, check=command, args=args)],
                    summary=f"checked again in the run; not true yet: {what}")

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        step = only_step(plan, CheckAgain)
        result = ctx.conn.run_command(step.check, check=False)
        rc, output = parse_check(result.stdout)
        if rc != 0:
            raise TaskFailed(describe_failure(step.args, rc, output or result.stderr.strip()))
        # the report, as for a check that passed at once
        return ApplyResult(changed=False, summary=success_summary(step.args, output), stdout=output,
                           result={"output": output})
