"""`generated_secret`: a random secret made once per host, kept in a root-only file, reused after.

The first run generates it (in the tool, from `secrets.token_urlsafe`), writes it atomically with
mode 0600, and shows it ONCE to a person at a terminal (`ApplyResult.reveal`; the summary, the logs
and the JSON document only say where to read it, so a CI log never holds it); every later
appearance is `***`. Later runs read it back in the probe and
register it with the redactor before anything could print it. The registered result's `value` is
the secret (a Secret when read; plain only in the run that generated it, which is also the run that
shows it), for templates such as an env file. In check mode a new secret is a placeholder.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from dataclasses import dataclass
from functools import partial
from typing import Any

from pydantic import Field

from provision.errors import TaskFailed
from provision.ops.base import Action, ApplyContext, ApplyResult, OpArgs, Operation, Plan, Probe, only_step, register
from provision.ops.fields import AbsolutePath, FileMode
from provision.ops.scripting import atomic_write_script, probe_block
from provision.secrets import SECRET_PROBE, Secret
from provision.shell import Command, parse_fields, quote

PLACEHOLDER = "(generated when applied)"


class GeneratedSecretArgs(OpArgs):
    path: AbsolutePath
    length: int = Field(default=32, ge=16, le=256)  # bytes of randomness
    prefix: str = ""
    mode: FileMode = "0600"


@dataclass(frozen=True)
class GenerateSecret(Action):
    """Make `prefix` + `length` random bytes (URL-safe) in this process and write them to `path`."""

    path: str
    length: int
    prefix: str
    mode: str | None


def parse_secret(path: str, output: str) -> Secret | None:
    """The secret the file holds (a Secret: masked from here on), None when it is absent or empty."""
    fields = parse_fields(output)
    if "value" not in fields:
        raise TaskFailed(f"the probe of {path} printed nothing usable")
    try:
        value = base64.b64decode(fields["value"], validate=True).decode().strip()
    except (binascii.Error, ValueError, UnicodeDecodeError) as error:
        raise TaskFailed(f"{path} does not hold a readable secret ({error})") from error
    return Secret(value) if value else None


@register
class GeneratedSecretOperation(Operation):
    name = "generated_secret"
    Args = GeneratedSecretArgs

    def probe(self, args: GeneratedSecretArgs) -> Probe[Secret | None]:
        path = quote(args.path)
        body = f'if [ -s {path} ]; then echo "value=$(base64 -w0 < {path})"; else echo value=; fi'
        return Probe(SECRET_PROBE + probe_block(body), partial(parse_secret, args.path))

    def plan(self, args: GeneratedSecretArgs, facts: Any, kept: Secret | None) -> Plan:
        if kept is not None:
            return Plan.ok(f"{args.path} kept", value=kept, generated=False)
        return Plan(changed=True, summary=f"generate a new secret into {args.path}",
                    steps=[GenerateSecret(f"generate a random secret (in this process) and write it to {args.path}, "
                                          f"mode {args.mode}", path=args.path, length=args.length,
                                          prefix=args.prefix, mode=args.mode)],
                    result={"value": PLACEHOLDER, "generated": True})

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        args = only_step(plan, GenerateSecret)
        value = args.prefix + secrets.token_urlsafe(args.length)
        script = atomic_write_script(args.path, mode=args.mode or "0600", owner_group="root:root", create_parent=True)
        ctx.conn.run_command(Command(script=script, data=(value + "\n").encode(), description=f"write {args.path}"))
        return ApplyResult(changed=True, summary=f"generated a new secret into {args.path} (root, mode {args.mode}); "
                                                 f"read it there: sudo cat {args.path}",
                           result={"value": value, "generated": True}, reveal=value)
