"""`reboot`: reboot the host and wait until it is back from a new boot, proven, not assumed.

"SSH answers again" is never proof of a reboot: the command may not have taken effect yet. Before
rebooting, apply records the boot id and writes a random token into a marker file in /run (a tmpfs
that every boot empties); the host counts as rebooted when a new connection works AND the boot id
differs OR the marker is gone. Both matter: in the lab (containers sharing one kernel) the boot id
never changes, while /run is emptied. The reboot is issued detached, after a short delay, so the
SSH command that asks for it returns cleanly. The plan is always a change; the task's `when:`
decides whether it runs. A host that does not come back within `timeout` is HostUnreachable.
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass
from typing import Any

from pydantic import Field
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential

from provision import interrupt
from provision.errors import HostDidNotComeBack, HostKeyRefused
from provision.ops.base import Action, ApplyContext, ApplyResult, OpArgs, Operation, Plan, register
from provision.ops.fields import AbsolutePath
from provision.shell import Command, parse_fields, quote

BOOT_ID = "/proc/sys/kernel/random/boot_id"
WHAT_TO_DO = ("Look at the machine: it may wait at a boot menu, a disk passphrase or a firmware prompt, "
              "or be off; once it answers SSH again, run `provision up` again (the run goes on after the reboot)")


class RebootArgs(OpArgs):
    reason: str = ""
    timeout: float = Field(default=900, gt=0)
    marker_path: AbsolutePath = "/run/provision/boot-marker"


@dataclass(frozen=True)
class WaitForNewBoot(Action):
    """After the reboot command: reconnect until the host answers from a boot other than the one it
    printed (new boot id, or the marker at `marker_path` gone), `timeout` seconds at most."""

    reason: str
    timeout: float
    marker_path: str


class NotBackYet(Exception):
    """The host is not (yet) reachable from a new boot; the reason is the message."""


def reboot_script(marker_path: str) -> str:
    """Record the boot id, write a fresh token into the marker (atomically), schedule the reboot."""
    marker = quote(marker_path)
    return f"""mkdir -p -- {quote(posixpath.dirname(marker_path))}
token=$(cat /proc/sys/kernel/random/uuid)
printf '%s\\n' "$token" > {marker}.tmp
mv -f -- {marker}.tmp {marker}
echo "boot_id=$(cat {BOOT_ID})"
echo "token=$token"
nohup setsid sh -c 'sleep 2; systemctl reboot' >/dev/null 2>&1 </dev/null &"""


def boot_state_script(marker_path: str) -> str:
    return f'echo "boot_id=$(cat {BOOT_ID})"\necho "marker=$(cat -- {quote(marker_path)} 2>/dev/null)"'


@register
class RebootOperation(Operation):
    name = "reboot"
    Args = RebootArgs
    refreshes_facts = True
    clock = staticmethod(time.monotonic)
    sleep = staticmethod(interrupt.sleep)

    def plan(self, args: RebootArgs, facts: Any, state: None) -> Plan:
        because = f" ({args.reason})" if args.reason else ""
        command = Command(script=reboot_script(args.marker_path), description=f"reboot{because}")
        wait = WaitForNewBoot(f"wait up to {args.timeout:g}s until the host answers from a new boot",
                              reason=args.reason, timeout=args.timeout, marker_path=args.marker_path)
        return Plan(changed=True, steps=[command, wait], summary=f"reboot{because}")

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        reboot, args = plan.steps
        if not (isinstance(reboot, Command) and isinstance(args, WaitForNewBoot)):
            raise TypeError(f"expected the reboot command and a WaitForNewBoot, got {plan.steps!r}")
        before = parse_fields(ctx.conn.run_command(reboot).stdout)
        boot_id, token = before.get("boot_id", ""), before.get("token", "")
        started = self.clock()

        def back_from_new_boot() -> str:
            # the last try may start a back-off past the timeout: the bar stops full, not at 106%
            elapsed = min(self.clock() - started, args.timeout)
            ctx.progress(f"waiting for the reboot{f' ({args.reason})' if args.reason else ''}", elapsed, args.timeout)
            try:
                conn = ctx.reconnect()
                now = parse_fields(conn.run(boot_state_script(args.marker_path), sudo=True).stdout)
            except HostKeyRefused:
                raise
            except Exception as error:  # a rebooting host fails in many ways (refused, reset, timeout)
                raise NotBackYet(f"not reachable: {error}") from error
            if "boot_id" not in now:
                raise NotBackYet("no answer to the boot check")
            if now["boot_id"] != boot_id or now.get("marker") != token:
                return now["boot_id"]
            raise NotBackYet("still the same boot (boot id unchanged, marker present)")

        def out_of_time(state: RetryCallState) -> bool:
            return self.clock() - started >= args.timeout

        retrying = Retrying(stop=out_of_time, wait=wait_exponential(multiplier=1, min=2, max=15),
                            retry=retry_if_exception_type(NotBackYet), sleep=self.sleep, reraise=True)
        try:
            new_boot_id = retrying(back_from_new_boot)
        except NotBackYet as last:
            raise HostDidNotComeBack(
                f"{ctx.host_name} did not come back from a new boot within {self.clock() - started:.0f}s "
                f"after reboot{f' ({args.reason})' if args.reason else ''}: {last}. {WHAT_TO_DO}"
            ) from last
        elapsed = round(self.clock() - started, 1)
        return ApplyResult(changed=True, result={"elapsed": elapsed, "boot_id_before": boot_id,
                                                 "boot_id_after": new_boot_id, "reason": args.reason})
