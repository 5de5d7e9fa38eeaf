"""`systemd`: a unit's enablement, run state and masking, with a daemon-reload when it is due.

All the steps a plan needs run in one script (one round trip), in this order: unmask, daemon-reload,
enable/disable, start/stop/restart/reload, mask. `restarted` and `reloaded` are always a change
(handlers use them). A unit systemd does not know yet (LoadState=not-found) may be installed by an
earlier task of the same run, so enabling or starting it is planned anyway (a daemon-reload first
when `daemon_reload`); at apply time the commands then either work or fail clearly. When start or
restart fails, the unit's status and last journal lines are added to the error output.
"""

from __future__ import annotations

from typing import Any, Literal

from provision.errors import TaskFailed
from provision.ops.base import OpArgs, Operation, Plan, Probe, register
from provision.ops.scripting import quick_block
from provision.shell import Command, parse_fields, quote

PROPERTIES = "LoadState,ActiveState,SubState,UnitFileState,NeedDaemonReload"
ENABLED_STATES = {"enabled", "static", "alias", "generated", "transient"}
DISABLEABLE_STATES = {"enabled", "enabled-runtime", "linked", "linked-runtime"}
RUNNING_STATES = {"active", "reloading"}


class SystemdArgs(OpArgs):
    name: str
    enabled: bool | None = None
    state: Literal["started", "stopped", "restarted", "reloaded"] | None = None
    masked: bool | None = None
    daemon_reload: bool = False


def unit_state(state: str) -> dict[str, str]:
    """The `systemctl show` properties; a unit that printed nothing reads as not-found."""
    fields = parse_fields(state)
    fields.setdefault("LoadState", "not-found")
    return fields


@register
class SystemdOperation(Operation):
    name = "systemd"
    Args = SystemdArgs

    def probe(self, args: SystemdArgs) -> Probe[dict[str, str]]:
        return Probe(quick_block(f"systemctl show -p {PROPERTIES} -- {quote(args.name)}"), unit_state)

    def plan(self, args: SystemdArgs, facts: Any, unit: dict[str, str]) -> Plan:
        steps = self._steps(args, unit)
        if not steps:
            return Plan.ok(f"{args.name} is {unit.get('ActiveState', 'unknown')}, {unit.get('UnitFileState') or 'n/a'}")
        unit_arg = quote(args.name)
        script = "\n".join(self._step_script(step, unit_arg) for step in steps)
        summary = f"{', '.join(steps)} {args.name}"
        return Plan(changed=True, steps=[Command(script=script, description=f"systemctl: {summary}")],
                    summary=summary)

    def _steps(self, args: SystemdArgs, unit: dict[str, str]) -> list[str]:
        """The systemctl verbs the plan needs, in the order they must run."""
        load_state = unit["LoadState"]
        file_state = unit.get("UnitFileState", "")
        active_state = unit.get("ActiveState", "inactive")
        missing = load_state == "not-found"
        masked = load_state == "masked" or file_state == "masked"
        wants_running = args.state in ("started", "restarted", "reloaded")
        if masked and args.masked is not False and (args.enabled or wants_running):
            raise TaskFailed(f"{args.name} is masked; set `masked: false` to unmask it before enabling or starting")
        steps = []
        if args.masked is False and masked:
            steps.append("unmask")
        if args.daemon_reload and (unit.get("NeedDaemonReload") == "yes" or missing or "unmask" in steps):
            steps.append("daemon-reload")
        if args.enabled is True and file_state not in ENABLED_STATES:
            steps.append("enable")
        elif args.enabled is False and file_state in DISABLEABLE_STATES:
            steps.append("disable")
        running = active_state in RUNNING_STATES and not missing
        if args.state == "started" and not running:
            steps.append("start")
        elif args.state == "stopped" and running:
            steps.append("stop")
        elif args.state == "restarted":
            steps.append("restart")
        elif args.state == "reloaded":
            steps.append("reload" if running else "start")
        if args.masked is True and not masked:
            steps.append("mask")
        return steps

    @staticmethod
    def _step_script(step: str, unit_arg: str) -> str:
        if step == "daemon-reload":
            return "systemctl daemon-reload"
        if step in ("start", "restart", "reload"):
            # reruns soon after killed runs restart a unit often: docker.service allows 3 starts in
            # 60 s (moby contrib/init/systemd/docker.service: StartLimitBurst=3, StartLimitInterval=60s),
            # then "start-limit-hit" refuses; reset-failed flushes that counter (systemd.unit(5))
            return (
                f"systemctl reset-failed -- {unit_arg} 2>/dev/null || true\n"
                f"systemctl {step} -- {unit_arg} || {{ rc=$?; "
                f"systemctl status --no-pager --lines=0 -- {unit_arg} >&2 || true; "
                f"journalctl --no-pager -n 20 -u {unit_arg} >&2 || true; exit $rc; }}"
            )
        return f"systemctl {step} -- {unit_arg}"
