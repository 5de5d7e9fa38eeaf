"""`command`: run a shell command unless the host shows it has already done its work.

`creates` (skip when that path exists), `removes` (skip when it does not) and `unless` (a shell
condition, skip when it exits 0) are all evaluated in the probe, so a converged host runs nothing.
A relative `creates`/`removes` path is taken relative to `chdir`. The command runs with bash under
`set -euo pipefail` (the first failing line stops it), as root, with `env` exported; running it is a
change. Its stdout, stderr and exit code are what `register` records. A non-zero exit fails the task.
Keep `unless` quick and side-effect free: it runs inside the probe that every task shares.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
from typing import Any

from pydantic import field_validator

from provision.ops.base import OpArgs, Operation, Plan, Probe, register
from provision.ops.scripting import fields_probe
from provision.secrets import REDACTOR, Secret
from provision.shell import Command, quote

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class CommandArgs(OpArgs):
    cmd: str
    creates: str | None = None
    removes: str | None = None
    unless: str | None = None
    chdir: str | None = None
    env: dict[str, str | Secret] = {}
    timeout: float | None = None

    @field_validator("cmd", "unless")
    @classmethod
    def _parses(cls, value: str | None) -> str | None:
        if value is not None:
            check_bash_syntax(value)
        return value

    @field_validator("env")
    @classmethod
    def _names(cls, value: dict[str, str | Secret]) -> dict[str, str | Secret]:
        for key in value:
            if not ENV_NAME.match(key):
                raise ValueError(f"environment variable name {key!r} is not a valid shell name")
        return value

    @field_validator("chdir")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"chdir must be an absolute path, not {value!r}")
        return value

    def on_host(self, path: str) -> str:
        return posixpath.join(self.chdir, path) if self.chdir else path


def check_bash_syntax(text: str) -> None:
    """Refuse text bash cannot parse, before any host is touched (`unless` is spliced into the probe)."""
    done = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ValueError(f"not valid bash: {done.stderr.strip().replace('bash: ', '', 1)}")


def first_line(text: str) -> str:
    lines = text.strip().splitlines() or [""]
    return lines[0] + (" ..." if len(lines) > 1 else "")


@register
class CommandOperation(Operation):
    name = "command"
    Args = CommandArgs

    def probe(self, args: CommandArgs) -> Probe[dict[str, str]] | None:
        body = []
        if args.creates:
            body.append(f"[ -e {quote(args.on_host(args.creates))} ] && echo creates_exists=1")
        if args.removes:
            body.append(f"[ -e {quote(args.on_host(args.removes))} ] || echo removes_missing=1")
        if args.unless:
            cd = f"cd -- {quote(args.chdir)} && " if args.chdir else ""
            body.append(f"( {cd}{{\n{args.unless}\n}} ) >/dev/null 2>&1\necho unless_rc=$?")
        return fields_probe("\n".join(body)) if body else None

    def plan(self, args: CommandArgs, facts: Any, state: dict[str, str] | None) -> Plan:
        fields = state or {}
        if args.creates and fields.get("creates_exists") == "1":
            return Plan.ok(f"skipped: {args.creates} exists", skipped=True)
        if args.removes and fields.get("removes_missing") == "1":
            return Plan.ok(f"skipped: {args.removes} does not exist", skipped=True)
        if args.unless and fields.get("unless_rc") == "0":
            return Plan.ok(f"skipped: `{REDACTOR(first_line(args.unless))}` succeeded", skipped=True)
        script = f"cd -- {quote(args.chdir)}\n{args.cmd}" if args.chdir else args.cmd
        env = {key: value.reveal() if isinstance(value, Secret) else value for key, value in args.env.items()}
        summary = f"run: {REDACTOR(first_line(args.cmd))}"
        return Plan(changed=True, summary=summary,
                    steps=[Command(script=script, description=summary, env=env, timeout=args.timeout)])
