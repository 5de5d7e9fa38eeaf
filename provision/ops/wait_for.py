"""`wait_for`: wait until a TCP port accepts connections or a URL answers, checked from the host itself.

Waiting is never a change: when the probe already sees the port/URL up the plan has nothing to do;
otherwise it is `changed=False` with the check as its step, and apply polls with it (one round trip per check,
every `interval` seconds) reporting elapsed/total progress, failing after `timeout` seconds with
the last thing it saw. The port check uses bash's /dev/tcp; the URL check uses curl on the host.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pydantic import Field, model_validator

from provision import interrupt
from provision.errors import TaskFailed
from provision.ops.base import Action, ApplyContext, ApplyResult, OpArgs, Operation, Plan, Probe, only_step, register
from provision.ops.scripting import fields_probe, port_open_script
from provision.shell import Command, parse_fields, quote

CHECK_TIMEOUT_S = 5


class WaitForArgs(OpArgs):
    port: int | None = Field(default=None, ge=1, le=65535)
    host: str = "127.0.0.1"
    url: str | None = None
    status: int = 200
    contains: str | None = None
    timeout: float = Field(default=300, gt=0)
    interval: float = Field(default=2, gt=0)

    @model_validator(mode="after")
    def _one_target(self) -> WaitForArgs:
        if (self.port is None) == (self.url is None):
            raise ValueError("give exactly one of `port` or `url`")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, not {self.url!r}")
        if self.contains is not None and self.url is None:
            raise ValueError("`contains` needs `url`")
        return self

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}" if self.port is not None else str(self.url)


def target_up_script(args: WaitForArgs) -> str:
    """Bash that prints `up=1` or `up=0` (and, for a URL, `status=`) after one quick check."""
    if args.port is not None:
        return port_open_script(args.host, args.port, CHECK_TIMEOUT_S)
    contains = (f' && {{ grep -qF -- {quote(args.contains)} "$body" || up=0; }}'
                if args.contains is not None else "")
    return f"""if ! command -v curl >/dev/null 2>&1; then echo curl=missing; echo up=0; else
body=$(mktemp)
code=$(curl -sS -o "$body" -w '%{{http_code}}' --max-time {CHECK_TIMEOUT_S} -- {quote(str(args.url))} 2>/dev/null)
echo "status=$code"
up=0; if [ "$code" = {args.status} ]; then up=1{contains}; fi
echo "up=$up"; rm -f -- "$body"
fi"""


def describe_miss(args: WaitForArgs, fields: dict[str, str]) -> str:
    if args.port is not None:
        return "the port refused or timed out"
    status = fields.get("status", "")
    if status in ("", "000"):
        return "no HTTP answer"
    if status == str(args.status) and args.contains is not None:
        return f"HTTP {status} without {args.contains!r} in the body"
    return f"HTTP {status}"


@dataclass(frozen=True)
class PollUntilUp(Action):
    """Run `check` every `args.interval` seconds until it prints `up=1`, `args.timeout` seconds at most."""

    check: Command
    args: WaitForArgs


@register
class WaitForOperation(Operation):
    name = "wait_for"
    Args = WaitForArgs
    clock = staticmethod(time.monotonic)
    sleep = staticmethod(interrupt.sleep)

    def probe(self, args: WaitForArgs) -> Probe[dict[str, str]]:
        return fields_probe(target_up_script(args))

    def plan(self, args: WaitForArgs, facts: Any, state: dict[str, str]) -> Plan:
        if state.get("up") == "1":
            return Plan.ok(f"{args.target} is up")
        what = f"check {args.target} every {args.interval:g}s until it is up, {args.timeout:g}s at most"
        poll = PollUntilUp(what, check=Command(script=target_up_script(args), description=what), args=args)
        return Plan(changed=False, steps=[poll], summary=f"wait up to {args.timeout:g}s for {args.target}")

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        poll = only_step(plan, PollUntilUp)
        args = poll.args
        started = self.clock()
        while True:
            result = ctx.conn.run_command(poll.check, check=False)
            fields = parse_fields(result.stdout)
            elapsed = self.clock() - started
            if fields.get("up") == "1":
                return ApplyResult(changed=False, stdout=result.stdout, result={"elapsed": round(elapsed, 1)})
            if fields.get("curl") == "missing":
                raise TaskFailed(f"cannot check {args.target}: curl is not installed on the host")
            if elapsed >= args.timeout:
                raise TaskFailed(f"{args.target} not up after {elapsed:.0f}s: {describe_miss(args, fields)}")
            ctx.progress(f"waiting for {args.target}", elapsed, args.timeout)
            self.sleep(min(args.interval, args.timeout - elapsed))
