"""Tasks that start early: a change that needs only what a few tasks give (curl, a mirror's URL) runs
in a unit on the host from the moment those have run, while the tasks between go on; at its own turn
the task waits for that unit, following its output as if it ran there.

A task says so in its role's data (`starts_early: ROLE`, `needs: [TASK, ...]`); nothing here knows
which task or role: the playbook's order decides where a group starts (right after the named role's
tasks on the host; after its play's handlers when the task needs one of them, `after_handlers`), the
task's own plan decides what the unit runs (its one command, exactly what apply would run; check mode
starts nothing, so its plan stays the plan the task shows).

The unit (`provision-early-<hash>.service`, a unit file rather than a transient `systemd-run` unit so
that it is enabled: it outlives the controller and starts again after a reboot; `Restart=on-failure`)
runs the command's script from a root-only file (it may hold a token, as the command would on stdin);
on success the script disables the unit and deletes that file itself, and writes `status` 0. The
wait reads the unit's output (`out.log`, fed to the operation's own progress parser) until the unit
is no longer active, then removes what is left. A rerun after a killed run stops the unit that run
left and starts one from its fresh plan (an interrupted download resumes from its `.part` files).

A unit nobody follows ends by itself once systemd gives up on it: its command exited with
PERMANENT_FAILURE (the hub refused a file), on which it is not restarted, or it failed more often
than its start limit allows. `OnFailure=` then runs `early_give_up.sh`, which disables it and removes
its file and script, leaving a record (`failed`) that the next run's start reports (`earlier_failure`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING, Any

from provision.connection.base import CommandResult, checked, wrap_script
from provision.shell import PERMANENT_FAILURE, Command, parse_records, quote

if TYPE_CHECKING:
    from provision.ops.base import Plan
    from provision.playbook.model import Play, Task
    from provision.runner.results import TaskResult

UNIT_DIR = "/etc/systemd/system"
STATE_DIR = "/var/lib/provision/early"
ENDED = "__provision_early_ended="  # the follow script's last line: when the unit's command ended
# what ends a unit systemd gave up on: a template unit, its instance the early unit's name, and its script
# (outside STATE_DIR and named unlike the early units: a finished run leaves neither a folder nor a unit
# file of its early starts)
GIVE_UP = "provision-give-up"
GIVE_UP_SCRIPT = "/var/lib/provision/early-give-up.sh"
EARLIER = "__provision_early_gave_up"  # the start script's lines about a unit an earlier run left
# starts of one unit within START_LIMIT_S before systemd gives up on it (systemd.unit(5),
# StartLimitIntervalSec= and StartLimitBurst=): a start that fails without a byte (no route, a stalled
# CDN) takes at most ~4 minutes (hf_snapshot's default 3 attempts of 20 s connect or 60 s stall), so an
# unfollowed unit that keeps failing so gives up within ~20 minutes of a boot
START_LIMIT_S = 3600
START_LIMIT_BURST = 5


@dataclass(frozen=True)
class EarlyTask:
    """A task that starts early, with the play it belongs to (whose variables render it)."""

    play: Play
    task: Task


@dataclass
class Started:
    """A unit started early for a task in this run: what it runs and when it began."""

    unit: str
    anchor: str
    args: Any
    plan: Plan
    command: Command
    started: float  # wall clock (time.time)


@dataclass
class EarlyWork:
    """One host's early work in a run: the tasks that ran early (their results, reported again at
    their turn) and the units started."""

    groups: dict[str, list[EarlyTask]]
    play_on_host: Callable[[Play], Any]  # a PlayOnHost for another play of the run, on this host
    done: dict[str, TaskResult] = field(default_factory=dict)
    units: dict[str, Started] = field(default_factory=dict)
    used: list[tuple[str, str]] = field(default_factory=list)  # (task key, the probe snippet it planned from)
    deferred: list[tuple[EarlyTask, str]] = field(default_factory=list)  # (task, its anchor): after the handlers


def early_groups(plays: list[Play]) -> dict[str, list[EarlyTask]]:
    """Role name -> the tasks that start once it has run (roles in the playbook only; the loader
    checked that the role runs before the task)."""
    roles = {role.name for play in plays for role in play.roles}
    groups: dict[str, list[EarlyTask]] = {}
    for play in plays:
        for task in play.tasks:
            if task.starts_early in roles:
                groups.setdefault(task.starts_early, []).append(EarlyTask(play, task))
    return groups


def after_handlers(items: list[EarlyTask], play: Play) -> tuple[list[EarlyTask], list[EarlyTask]]:
    """The group of a role of `play`, split: the tasks that start now, and those that start after the
    play's handlers because they need one (a handler that would cut their work: `restart docker` ends
    the pull in progress, and dockerd fetches its unfinished layers again from their first byte)."""
    names = {handler.name for handler in play.handlers}
    later = [item for item in items if names.intersection(item.task.needs)]
    return [item for item in items if item not in later], later


def triggers(play: Play, selected: list[Task], anchors: set[str]) -> dict[int, list[str]]:
    """Where, in the play's selected tasks, each anchor role of this play ends: index -> roles (the
    group starts before that task; len(selected) is after the last). A role none of whose tasks is
    selected ends where its tasks would have run."""
    points: dict[int, list[str]] = {}
    position = 0
    chosen = {id(task) for task in selected}
    for role in play.roles:
        position += len(role.tasks)
        if role.name in anchors:
            index = sum(1 for task in play.tasks[:position] if id(task) in chosen)
            points.setdefault(index, []).append(role.name)
    return points


def first_script(plan: Plan) -> Command | None:
    """What a unit can start of this plan: the first shell script it runs, as root — a command step,
    or the first script of a typed step (the weights' `Download`, the image's `PullImage`) — when the
    plan changes the host; None otherwise (the task keeps its turn)."""
    if not plan.changed or not plan.steps:
        return None
    first = plan.steps[0]
    scripts = (first,) if isinstance(first, Command) else first.scripts()
    return scripts[0] if scripts and scripts[0].sudo else None


def unit_name(task_key: str) -> str:
    """The host unit of a task (its source and name): the same in every run, so a rerun finds the one a
    killed run left."""
    return "provision-early-" + hashlib.sha256(task_key.encode()).hexdigest()[:12]


def _description(text: str) -> str:
    """A task name as a unit file's Description: one line, no `%` specifiers, no backslashes."""
    return " ".join(text.replace("%", "%%").replace("\\", "/").split())[:200]


def unit_file(unit: str, task_name: str) -> str:
    """The early unit: restarted on a failure (a dropped connection resumes) but not on one that no
    retry mends (`RestartPreventExitStatus=`, systemd.service(5)); once systemd gives up on it (that
    status, or its start limit hit: "a service unit using Restart= enters the failed state only after
    the start limits are reached", systemd.unit(5) on OnFailure=), `OnFailure=` ends it for good."""
    folder = f"{STATE_DIR}/{unit}"
    return f"""[Unit]
Description=provision (started early): {_description(task_name)}
Wants=network-online.target
After=network-online.target
StartLimitIntervalSec={START_LIMIT_S}
StartLimitBurst={START_LIMIT_BURST}
OnFailure={GIVE_UP}@{unit}.service

[Service]
Type=exec
Environment=HOME=/root
ExecStart=/bin/bash {folder}/run.sh
StandardOutput=append:{folder}/out.log
StandardError=append:{folder}/err.log
Restart=on-failure
RestartSec=5
RestartPreventExitStatus={PERMANENT_FAILURE}

[Install]
WantedBy=multi-user.target
"""


def give_up_unit() -> str:
    """The template unit `OnFailure=` starts: `early_give_up.sh` for the failed unit (its instance)."""
    return f"""[Unit]
Description=provision: end the host unit %i started early, which systemd gave up on

[Service]
Type=oneshot
ExecStart=/bin/bash {GIVE_UP_SCRIPT} %i {PERMANENT_FAILURE}
"""


def give_up_script() -> str:
    return resources.files("provision.runner").joinpath("early_give_up.sh").read_text(encoding="utf-8")


def unit_script(unit: str, command: Command) -> str:
    """What the unit runs: the command exactly as a connection would run it (its payload on fd 3 and
    its env), then, on success: `status` 0, the unit disabled and its file and this script removed
    (a token it holds is on disk only while the work is unfinished)."""
    folder = quote(f"{STATE_DIR}/{unit}")
    return wrap_script(command.script, command.data, command.env) + f"""
date +%s.%N > {folder}/ended
echo 0 > {folder}/status
systemctl disable --quiet -- {quote(unit + '.service')} 2>/dev/null || true
rm -f -- {quote(f'{UNIT_DIR}/{unit}.service')} {folder}/run.sh
"""


def start_script(unit: str, task_name: str) -> str:
    """Stop a unit a killed run left (printing the record of one systemd gave up on, and its error
    output's end), write the unit's script (payload on fd 3, root-only) and file, and what ends it
    (`give_up_unit`), enable and start it. Each file is written to a temporary name and renamed: none
    is half-written."""
    folder = quote(f"{STATE_DIR}/{unit}")
    service = quote(unit + ".service")
    unit_path = quote(f"{UNIT_DIR}/{unit}.service")
    give_up_path = quote(f"{UNIT_DIR}/{GIVE_UP}@.service")
    return f"""systemctl stop -- {service} 2>/dev/null || true
systemctl reset-failed -- {service} 2>/dev/null || true
if [ -f {folder}/failed ]; then
  echo "{EARLIER}=$(head -c 200 -- {folder}/failed)"
  tail -n 5 -- {folder}/err.log 2>/dev/null | cut -c 1-1000 | sed 's/^/{EARLIER}_log=/'
fi
umask 077
printf '%s' {quote(give_up_script())} > {quote(GIVE_UP_SCRIPT)}.tmp
mv -f -- {quote(GIVE_UP_SCRIPT)}.tmp {quote(GIVE_UP_SCRIPT)}
printf '%s' {quote(give_up_unit())} > {give_up_path}.tmp
chmod 644 -- {give_up_path}.tmp
mv -f -- {give_up_path}.tmp {give_up_path}
mkdir -p -- {folder}
chmod 700 -- {folder}
rm -f -- {folder}/status {folder}/ended {folder}/failed
cat <&3 > {folder}/.run.sh.tmp
mv -f -- {folder}/.run.sh.tmp {folder}/run.sh
: > {folder}/out.log
: > {folder}/err.log
printf '%s' {quote(unit_file(unit, task_name))} > {unit_path}.tmp
chmod 644 -- {unit_path}.tmp
mv -f -- {unit_path}.tmp {unit_path}
systemctl daemon-reload
systemctl enable --now --quiet -- {service}
"""


def earlier_failure(unit: str, output: str) -> str | None:
    """What the start script read of a unit an earlier run left and systemd gave up on (its record:
    when, the result, the exit status; and its error output's last lines), as one sentence; None when
    there was none."""
    records = parse_records(output, EARLIER)
    if not records:
        return None
    when, result, status = [*records[-1].split(), "", "", ""][:3]
    try:
        at = datetime.fromtimestamp(int(when), UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        at = "an unknown time"
    why = f"it failed {START_LIMIT_BURST} times within {START_LIMIT_S // 60} minutes" \
        if result == "start-limit-hit" else "its command failed for good"
    errors = parse_records(output, EARLIER + "_log")
    return (f"the host unit {unit} an earlier run left ended by itself at {at}: {why} ({result or '?'}, exit "
            f"status {status or '?'})" + (": " + " / ".join(errors) if errors else ""))


def follow_script(unit: str) -> str:
    """Print the unit's output from its start until it is no longer active (restarts included), and
    when its command ended; then exit 0 when it finished (`status` 0), else with its exit status and
    its stderr's end. What it left on the host is removed either way (a rerun starts afresh)."""
    folder = quote(f"{STATE_DIR}/{unit}")
    service = quote(unit + ".service")
    return f"""(
  while :; do
    case "$(systemctl show -p ActiveState --value -- {service})" in
      active|activating|deactivating|reloading) sleep 0.5 ;;
      *) break ;;
    esac
  done
) &
waiter=$!
# tail ends once the waiter has, after reading the file a last time (GNU tail --pid)
tail -n +1 -F -s 0.2 --pid="$waiter" -- {folder}/out.log 2>/dev/null || true
wait "$waiter" || true
ended=$(cat -- {folder}/ended 2>/dev/null || date +%s.%N)
echo "{ENDED}$ended"
rc=1
if [ "$(cat -- {folder}/status 2>/dev/null)" = 0 ]; then
  rc=0
else
  status=$(systemctl show -p ExecMainStatus --value -- {service} 2>/dev/null || true)
  result=$(systemctl show -p Result --value -- {service} 2>/dev/null || true)
  echo "the host unit {unit} ended: ${{result:-gone}} (exit status ${{status:-?}})" >&2
  tail -c 2000 -- {folder}/err.log >&2 2>/dev/null || true
  case "$status" in ''|0) ;; *) rc=$status ;; esac
fi
systemctl stop -- {service} 2>/dev/null || true
systemctl disable --quiet -- {service} 2>/dev/null || true
rm -f -- {quote(f'{UNIT_DIR}/{unit}.service')}
systemctl daemon-reload
systemctl reset-failed -- {service} 2>/dev/null || true
rm -rf -- {folder}
exit "$rc"
"""


class FollowConnection:
    """The connection an early task's apply runs through at its turn: the command the unit runs is
    answered by following the unit (its output lines, its exit status); anything else the apply runs
    goes to the host as usual. `ended` is when the unit's command ended (wall clock), once known."""

    def __init__(self, conn: Any, command: Command, unit: str) -> None:
        self._conn = conn
        self._command = command
        self._unit = unit
        self.ended: float | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def run_command(self, command: Command, check: bool = True) -> CommandResult:
        return checked(self, command, check)  # type: ignore[arg-type]  # a Connection in all it is asked

    def run(self, script: str, *, sudo: bool = True, data: bytes | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None, on_output: Callable[[str], None] | None = None) -> CommandResult:
        if script != self._command.script:
            return self._conn.run(script, sudo=sudo, data=data, env=env, timeout=timeout, on_output=on_output)
        lines: list[str] = []

        def line(text: str) -> None:
            if text.startswith(ENDED):
                try:
                    self.ended = float(text[len(ENDED):])
                except ValueError:
                    self.ended = time.time()
                return
            lines.append(text)
            if on_output is not None:
                on_output(text)

        result = self._conn.run(follow_script(self._unit), sudo=True, on_output=line)
        if self.ended is None:  # a connection that gives the output at the end (the local one)
            for text in result.stdout.splitlines():
                if text.startswith(ENDED):
                    line(text)
        stdout = "\n".join(text for text in result.stdout.splitlines() if not text.startswith(ENDED))
        return CommandResult(stdout=stdout, stderr=result.stderr, rc=result.rc)
