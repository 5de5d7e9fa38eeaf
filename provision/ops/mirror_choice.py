"""`mirror_choice`: use a mirror (the office cache) when the host reaches it, else the upstream; say which.

One component of a cache (the Hugging Face mirror, the registry, the apt proxy) can be down while the
others serve; each task of this kind checks one, from the host itself (a TCP connect to the mirror's
host and port with bash's /dev/tcp, so it needs nothing installed), and registers `url`: the mirror
when it answers, else the upstream. Never a change: the summary says what was chosen, and a mirror
that is down says so ("DOWN, falling back to ..."), so a rollout that goes to the internet instead
of the LAN is visible in the run's output. An empty `mirror` (no office cache in the inventory)
chooses the upstream without any check.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pydantic import field_validator

from provision.ops.base import OpArgs, Operation, Plan, Probe, register
from provision.ops.scripting import fields_probe, port_open_script

CHECK_TIMEOUT_S = 3
DEFAULT_PORTS = {"http": 80, "https": 443}


def _url(value: str, key: str) -> str:
    if value and not value.startswith(("http://", "https://")):
        raise ValueError(f"{key} must start with http:// or https://, not {value!r}")
    return value.rstrip("/")


class MirrorChoiceArgs(OpArgs):
    component: str
    mirror: str = ""
    upstream: str

    @field_validator("mirror")
    @classmethod
    def _mirror(cls, value: str) -> str:
        return _url(value, "mirror")

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, value: str) -> str:
        return _url(value, "upstream")

    def mirror_address(self) -> tuple[str, int]:
        """(host, port) of the mirror URL, the scheme's port when it names none."""
        parts = urlsplit(self.mirror)
        return parts.hostname or "", parts.port or DEFAULT_PORTS[parts.scheme]


def mirror_up_script(args: MirrorChoiceArgs) -> str:
    host, port = args.mirror_address()
    return port_open_script(host, port, CHECK_TIMEOUT_S)


@register
class MirrorChoiceOperation(Operation):
    name = "mirror_choice"
    Args = MirrorChoiceArgs
    reports = True

    def probe(self, args: MirrorChoiceArgs) -> Probe[dict[str, str]] | None:
        return fields_probe(mirror_up_script(args)) if args.mirror else None

    def plan(self, args: MirrorChoiceArgs, facts: Any, state: dict[str, str] | None) -> Plan:
        if not args.mirror or state is None:
            return Plan.ok(f"{args.component}: {args.upstream} (no office cache)", url=args.upstream,
                           mirror_up=False, via="upstream")
        if state.get("up") == "1":
            return Plan.ok(f"{args.component}: office cache {args.mirror}", url=args.mirror, mirror_up=True,
                           via="office cache")
        return Plan.ok(f"{args.component}: office cache {args.mirror} is DOWN, falling back to {args.upstream}",
                       url=args.upstream, mirror_up=False, via="upstream")
