"""Readiness: wait until the server answers, or stop early and say why it never will.

Ready means, checked on the host (one round trip per poll): `/health` answers 200, then
`/v1/models` (with the API key) lists the served name. vLLM refuses connections until its engine is
up, and answers /health 503 only when the engine died. While waiting, the unit's journal since the
start (the container's output: `docker run` runs in the foreground) is read for vLLM's fatal lines
(fatal.py): one found ends the wait with that line quoted. A service that systemd had to restart,
or that gave up (start-rate limit), fails too. Otherwise the wait is bounded by a timeout
(REFERENCE.md §5: 20 minutes for a first start, which loads weights and compiles).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from provision.errors import TaskFailed
from provision.shell import parse_fields, quote
from provision.vllm.endpoint import Endpoint
from provision.vllm.fatal import FatalLine, clean, find_fatal

LOG_LINES = 500  # a TP start prints a traceback per worker; the cause precedes them
CHECK_TIMEOUT_S = 5
Progress = Callable[[str, float | None, float | None], None]


class ServiceNotReady(TaskFailed):
    """The service did not become ready; the message says why (a quoted fatal line, a timeout)."""

    def __init__(self, reason: str, fatal: FatalLine | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fatal = fatal


@dataclass(frozen=True)
class StartMark:
    """Where the journal of this start begins and systemd's restart count then.

    A cursor (the journal's last entry before the start) or a time (epoch seconds); neither: since
    the unit's current main process started. `restarts` None: do not compare restart counts (a
    service checked long after it started may have been restarted for reasons of its own)."""

    cursor: str = ""
    since: int = 0
    restarts: int | None = None


@dataclass(frozen=True)
class Snapshot:
    """One look at the service: HTTP answers, systemd state, and the log since the start."""

    health: int | None
    models: list[str] | None
    models_error: str
    active_state: str
    sub_state: str
    restarts: int
    log: list[str] = field(default_factory=list)
    load_state: str = "loaded"


@dataclass(frozen=True)
class Verdict:
    """`ready`, `failed` (with the reason) or `waiting` (with what the server is doing)."""

    state: str
    detail: str = ""
    fatal: FatalLine | None = None


def _b64(text: str) -> str:
    try:
        return base64.b64decode(text, validate=True).decode(errors="replace")
    except (binascii.Error, ValueError):
        return ""


def snapshot_script(endpoint: Endpoint, mark: StartMark, when_up: str = "") -> str:
    """Bash printing `key=value` lines for parse_snapshot (never fails: every probe is guarded);
    `when_up`, bash run once /health has answered 200 (after `/v1/models`, with `auth` defined),
    adds its own lines (the smoke probe's checks)."""
    unit = quote(endpoint.unit)
    if mark.cursor:
        where = f"--after-cursor={quote(mark.cursor)}"
    elif mark.since:
        where = f"--since=@{mark.since}"
    else:
        started = f"$(systemctl show -p ExecMainStartTimestamp --value -- {unit})"
        where = f'--since="@$(date -d "{started}" +%s 2>/dev/null || echo 0)"'
    # every probe may fail (the port refuses until ready): no errexit, the output says what was seen
    return f"""set +e +o pipefail
{endpoint.auth_prelude()}
code=$(curl -s -o /dev/null -w '%{{http_code}}' --max-time {CHECK_TIMEOUT_S} \
  {quote(endpoint.url('/health'))} 2>/dev/null)
echo "health=${{code:-000}}"
if [ "$code" = 200 ]; then
  body=$(curl -s --max-time {CHECK_TIMEOUT_S} -w '\\n%{{http_code}}' -K <(auth) \
    {quote(endpoint.url('/v1/models'))} 2>/dev/null)
  echo "models=$(printf '%s' "$body" | base64 -w0)"
{when_up}
fi
systemctl show -p LoadState -p ActiveState -p SubState -p NRestarts -- {unit} 2>/dev/null
echo "log=$(journalctl -u {unit} {where} -o cat --no-pager 2>/dev/null | tail -n {LOG_LINES} | base64 -w0)"
"""


def parse_models(text: str) -> tuple[list[str] | None, str]:
    """(served names, "") from `/v1/models` output (body, newline, status), or (None, what was wrong)."""
    body, _, status = text.rpartition("\n")
    if status.strip() != "200":
        if status.strip() == "401":
            return None, "/v1/models refused the API key in the env file (HTTP 401)"
        return None, f"/v1/models answered HTTP {status.strip() or 'nothing'}"
    try:
        data = json.loads(body)
        return [str(entry["id"]) for entry in data["data"]], ""
    except (ValueError, KeyError, TypeError):
        return None, f"/v1/models answered something that is not a model list: {body[:200]!r}"


def parse_snapshot(output: str) -> Snapshot:
    fields = parse_fields(output)
    health = fields.get("health", "")
    models, models_error = (None, "")
    if "models" in fields:
        models, models_error = parse_models(_b64(fields["models"]))
    restarts = fields.get("NRestarts", "")
    return Snapshot(
        health=int(health) if health.isdigit() and health != "000" else None,
        models=models,
        models_error=models_error,
        active_state=fields.get("ActiveState", "unknown"),
        sub_state=fields.get("SubState", ""),
        restarts=int(restarts) if restarts.isdigit() else 0,
        log=[line for line in _b64(fields.get("log", "")).splitlines() if line.strip()],
        load_state=fields.get("LoadState", "loaded"),
    )


def last_lines(snapshot: Snapshot, count: int = 5) -> str:
    lines = [clean(line) for line in snapshot.log[-count:]]
    return ("; last log lines:\n  " + "\n  ".join(lines)) if lines else "; the log is empty"


def judge(snapshot: Snapshot, endpoint: Endpoint, mark: StartMark) -> Verdict:
    """What one snapshot says (pure): ready, failed with a reason, or still waiting."""
    if snapshot.load_state == "not-found":
        return Verdict("failed", f"{endpoint.unit} is not installed on this host (nothing deployed yet?)")
    fatal = find_fatal(snapshot.log)
    if fatal is not None:
        return Verdict("failed", f"{endpoint.name} failed to start: {fatal.describe()}", fatal)
    if snapshot.health == 200:
        if snapshot.models is None:
            return Verdict("failed", f"{endpoint.name} is up but {snapshot.models_error}")
        if endpoint.served_name in snapshot.models:
            return Verdict("ready", f"serves {endpoint.served_name}")
        return Verdict("failed", f"{endpoint.name} serves {snapshot.models}, not {endpoint.served_name!r}")
    if snapshot.health == 503:
        return Verdict("failed", f"{endpoint.name}'s engine died (/health 503){last_lines(snapshot)}")
    restarted = ((mark.restarts is not None and snapshot.restarts > mark.restarts)
                 or snapshot.sub_state == "auto-restart")
    if restarted or snapshot.active_state in ("failed", "inactive"):
        how = ("exited and systemd restarted it" if restarted
               else f"is {snapshot.active_state} ({snapshot.sub_state})")
        # it died of no known cause (an API server crash before the engine, say): quote its exception
        exited = find_fatal(snapshot.log, exited=True)
        if exited is not None:
            return Verdict("failed", f"{endpoint.name} {how}: {exited.describe()}{last_lines(snapshot)}", exited)
        return Verdict("failed", f"{endpoint.name} {how}{last_lines(snapshot)}")
    phase = clean(snapshot.log[-1])[:80] if snapshot.log else "starting"
    return Verdict("waiting", phase)


@dataclass
class Waiter:
    """Polls a host until its endpoint is ready; clock and sleep are replaceable for tests."""

    run: Callable[[str], str]
    endpoint: Endpoint
    progress: Progress
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    interval: float = 2.0

    def wait(self, mark: StartMark, timeout: float) -> float:
        """Seconds it took to become ready; raises ServiceNotReady with the reason otherwise."""
        started = self.clock()
        script = snapshot_script(self.endpoint, mark)
        second_look = False
        while True:
            snapshot = parse_snapshot(self.run(script))
            verdict = judge(snapshot, self.endpoint, mark)
            elapsed = self.clock() - started
            if verdict.state == "ready":
                return elapsed
            if verdict.state == "failed":
                # vLLM prints "EngineCore failed to start" just before the line naming the cause
                if verdict.fatal is not None and not verdict.fatal.specific and not second_look:
                    second_look = True
                    self.sleep(1.0)
                    continue
                raise ServiceNotReady(verdict.detail, verdict.fatal)
            if elapsed >= timeout:
                raise ServiceNotReady(f"{self.endpoint.name} not ready after {elapsed:.0f}s "
                                      f"(still: {verdict.detail}){last_lines(snapshot)}")
            self.progress(f"waiting for {self.endpoint.name}: {verdict.detail}", elapsed, timeout)
            self.sleep(min(self.interval, max(timeout - elapsed, 0.1)))
