"""One run per host: a lock on the host, held by a session of the run, with a heartbeat.

The lock script (run_lock.sh) is started with the host's first probe batch, on one channel: it takes
flock(2) on /var/lib/provision/run.lock, records who holds it in run.holder.json (root's, 0600: the
controller's id and host, pid, the pid's start time, and the sub-command and inventory only, never
`-e` values or other arguments, which may be secrets), runs the batch (`HostState.fill`; where the
lock is held it runs on its own) and writes a beat every second for as long as the run's controller
keeps the channel open. A controller that closes the channel (a run that ends) releases the lock at
once (the holder reads end of file on its stdin: a rerun right after finds it free); one that dies
or loses the network releases it by itself (the holder's next write fails). A second run is refused
at once naming the holder, or waits (`--wait-lock SECONDS`). A holder whose controller is provably
gone — the same controller (its id: a random id kept in the user's controller cache, so two
containers or machines with one hostname are told apart), and that pid no longer runs with that
start time — is ended and the lock taken.

The beat is also the run's liveness signal: when no beat arrives for `silent_after_s`, the host is
silent (packets dropped, host hung) and the watchdog closes the connection, so the command in flight
fails at once as unreachable instead of hanging on TCP's retransmissions.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from provision import controller_cache, interrupt
from provision.connection.base import Connection, LineStream
from provision.errors import ProvisionError
from provision.shell import parse_fields

LOCK_DIR = "/var/lib/provision"
# a guard unit that holds the lock for a cut-off run (an upgrade guard), as its holder record names it
GUARD_UNIT = re.compile(r"^provision-guard-[A-Za-z0-9_.@-]+$")
CONTROLLER_ID = re.compile(r"^[0-9a-f]{32}$")
ANSWER_TIMEOUT_S = 30.0
TAKEN = 'echo "lock=taken"\n'  # run_lock.sh's line after which the lock is held
POLL_S = 2.0


class RunLockHeld(ProvisionError):
    """Another run holds this host."""


@cache
def lock_script() -> str:
    """run_lock.sh without its comment lines (the host's bash reads a script byte by byte)."""
    text = resources.files("provision.runner").joinpath("run_lock.sh").read_text(encoding="utf-8")
    return "".join(line for line in text.splitlines(keepends=True) if not line.lstrip().startswith("#"))


def process_start(pid: int) -> str:
    """The start time of `pid` in clock ticks since boot (field 22 of /proc/PID/stat): with the pid, it
    names one process even after the pid is reused. Empty where /proc is not there (macOS)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def controller_id(path: Path | None = None) -> str:
    """This controller's id: random, made once and kept in the user's controller cache (0600). A
    controller that cannot keep it gets a new one per run: its orphaned holders are then never
    provably gone (they still end by themselves, at their next beat's failed write)."""
    path = path or controller_cache.folder("identity") / "controller-id"
    kept = (controller_cache.read(path) or b"").decode(errors="replace").strip()
    if CONTROLLER_ID.match(kept):
        return kept
    made = secrets.token_hex(16)
    controller_cache.write(path, made.encode())
    return made


def this_controller(command: str) -> dict[str, Any]:
    """Who we are, as the holder record names it."""
    pid = os.getpid()
    return {"controller_id": controller_id(), "controller_host": socket.gethostname(), "controller_pid": pid,
            "controller_pid_start": process_start(pid),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": command}


def describe_holder(holder: dict[str, Any]) -> str:
    """`controller laptop-7 pid 4242 (since 2026-12-01T09:12:03Z, `provision up office.yaml`)`."""
    if not holder:
        return "a run whose holder record is unreadable"
    return (f"controller {holder.get('controller_host', '?')} pid {holder.get('controller_pid', '?')} "
            f"(since {holder.get('started', '?')}, `{holder.get('command', '?')}`)")


def provably_gone(holder: dict[str, Any], local_id: str, alive: Callable[[int, str], bool]) -> bool:
    """True only when the holder's controller is this one (its id, not its hostname: two containers
    may share one) and its process is gone (pid not running, or running with another start time:
    reused). A holder from another controller, or one without an id, is never provably gone from here."""
    pid = holder.get("controller_pid")
    if holder.get("controller_id") != local_id or not local_id or not isinstance(pid, int):
        return False
    return not alive(pid, str(holder.get("controller_pid_start", "")))


def local_process_alive(pid: int, start: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return not start or process_start(pid) in ("", start)


@dataclass
class Answer:
    taken: bool
    holder: dict[str, Any]


def parse_answer(lines: list[str]) -> Answer:
    """`lock=taken` or `lock=held` + `holder=BASE64(JSON)`."""
    fields = parse_fields("\n".join(lines))
    if fields.get("lock") == "taken":
        return Answer(True, {})
    if fields.get("lock") != "held":
        raise ProvisionError(f"the run lock script printed nothing usable: {' | '.join(lines)[:200]!r}")
    try:
        holder = json.loads(base64.b64decode(fields.get("holder", ""), validate=True) or b"{}")
    except (binascii.Error, ValueError):
        holder = {}
    return Answer(False, holder if isinstance(holder, dict) else {})


class RunLock:
    """The run lock of one host, and the watchdog of its beat."""

    def __init__(self, host_name: str, command: str = "provision",
                 wait_s: float = 0, silent_after_s: float = 20,
                 progress: Callable[[str], None] | None = None, lock_dir: str = LOCK_DIR) -> None:
        self.host_name = host_name
        self.lock_dir = lock_dir
        self.me = this_controller(command)
        self.wait_s = wait_s
        self.silent_after_s = silent_after_s
        self.progress = progress or (lambda text: None)
        self.stream: LineStream | None = None
        self.last_beat = time.monotonic()
        self.silent_for: float | None = None
        self._answer: list[str] = []
        self._answered = threading.Event()
        self._failure: Exception | None = None
        self._closed = False
        self._stopped_guard = False
        self.started = False
        self._batch_end = ""
        self._batch_lines: list[str] = []
        self._batch_done = threading.Event()

    def start(self, conn: Connection, break_pid: int | None = None, stop_guard: str = "",
              batch: tuple[str, str] | None = None) -> None:
        """Ask for the lock on `conn` without waiting, not even for its channel to open; read the answer
        with `confirm`. `batch` (a probe batch's script and its token): run once the lock is taken, on
        the lock's own channel (one channel, one shell less on the host: ~5 ms of its CPU); its output
        is read with `batch_output`."""
        holder = json.dumps(self.me)[:-1]
        env = {"LOCK_DIR": self.lock_dir, "HOLDER": holder, "GRACE_S": "2", "BREAK_PID": str(break_pid or ""),
               "STOP_GUARD": stop_guard}
        self._answer, self._answered, self._failure = [], threading.Event(), None
        self._batch_end = f"@@{batch[1]} end" if batch else ""
        self._batch_lines, self._batch_done = [], threading.Event()
        self.started = True
        self.silent_for = None
        self.last_beat = time.monotonic()
        script = lock_script()
        if batch:  # without the lock's descriptor: no probe process can keep the lock after this shell
            script = script.replace(TAKEN, f"{TAKEN}{{\n{batch[0]}}} 9>&-\nset -euo pipefail\n", 1)
        threading.Thread(target=self._run, args=(conn, env, self._answer, self._answered, script), daemon=True,
                         name=f"run-lock {self.host_name}").start()

    def batch_output(self) -> str | None:
        """The output of the batch `start` was given, once the lock was taken and the batch ran; None
        when it did not run whole there (the lock was held, the channel failed): run it on its own."""
        if not self._batch_end or not self.confirm_taken():
            return None
        self._batch_done.wait(ANSWER_TIMEOUT_S)
        lines = list(self._batch_lines)
        if not lines or lines[-1] != self._batch_end:
            return None
        return "".join(line + "\n" for line in lines)

    def confirm_taken(self) -> bool:
        """Whether the answer (waited for) is `lock=taken`."""
        self._answered.wait(ANSWER_TIMEOUT_S)
        return self._failure is None and any(line.startswith("lock=taken") for line in self._answer)

    def _run(self, conn: Connection, env: dict[str, str], answer: list[str], answered: threading.Event,
             script: str) -> None:
        try:
            stream = conn.start(script, sudo=True, env=env)
        except Exception as error:  # the channel did not open: confirm reports it
            self._failure = error
            answered.set()
            return
        if self._closed:  # released while the channel was opening
            stream.close()
            answered.set()
            return
        self.stream = stream
        self.last_beat = time.monotonic()
        self._read(stream, answer, answered, conn)

    def _read(self, stream: LineStream, answer: list[str], answered: threading.Event, conn: Connection) -> None:
        watchdog_started = False
        batch_lines, batch_done, batch_end = self._batch_lines, self._batch_done, self._batch_end
        try:
            for line in stream:
                self.last_beat = time.monotonic()
                if answered.is_set() and batch_end and not batch_done.is_set():
                    batch_lines.append(line)
                    if line == batch_end:
                        batch_done.set()
                    continue
                if not answered.is_set():
                    answer.append(line)
                    if line.startswith("lock=taken") or line.startswith("holder="):
                        answered.set()
                        if line.startswith("lock=taken") and not watchdog_started:
                            watchdog_started = True
                            threading.Thread(target=self._watch, args=(stream, conn), daemon=True).start()
        except Exception:  # the channel died: the watchdog or the command in flight reports it
            pass
        answered.set()
        batch_done.set()

    def _watch(self, stream: LineStream, conn: Connection) -> None:
        while not self._closed and self.stream is stream:
            quiet = time.monotonic() - self.last_beat
            if quiet > self.silent_after_s:
                self.silent_for = quiet
                conn.close()  # the command in flight fails at once: HostUnreachable
                return
            time.sleep(0.5)

    def confirm(self, conn: Connection) -> bool:
        """Wait for the lock's answer; on `held`, end a provably orphaned holder, wait (--wait-lock),
        or refuse naming the holder. True when the lock was taken only after another run let go (so
        whatever was read from the host before is stale)."""
        deadline = time.monotonic() + self.wait_s
        waited = False
        while True:
            if not self._answered.wait(ANSWER_TIMEOUT_S):
                raise ProvisionError(f"the run lock on {self.host_name} did not answer in {ANSWER_TIMEOUT_S:.0f} s")
            if self._failure is not None:
                raise self._failure
            answer = parse_answer(self._answer)
            if answer.taken:
                return waited
            waited = True
            holder = answer.holder
            if provably_gone(holder, self.me["controller_id"], local_process_alive) and holder.get("lock_pid"):
                self.progress(f"the run lock was held by {describe_holder(holder)}, which is gone: taking it over")
                self.start(conn, break_pid=int(holder["lock_pid"]))
                continue
            guard = str(holder.get("guard_unit") or "")
            if GUARD_UNIT.match(guard) and not self._stopped_guard:
                # the upgrade guard of a run that was cut off: this run redoes (or undoes) the upgrade
                # itself, at once, instead of being refused while the guard waits for the release
                self._stopped_guard = True
                self.progress(f"the run lock was held by {describe_holder(holder)}: taking over from it "
                              "(this run checks the release and finishes or undoes the upgrade)")
                self.start(conn, stop_guard=guard)
                continue
            seconds = self.wait_s - (deadline - time.monotonic())
            if time.monotonic() >= deadline:
                hint = "" if self.wait_s else "; wait for it with --wait-lock SECONDS"
                raise RunLockHeld(f"{self.host_name}: another provision run holds this host: "
                                  f"{describe_holder(holder)}{hint}"
                                  + (f" (waited {seconds:.0f} s)" if self.wait_s else ""))
            self.progress(f"waiting for the run lock held by {describe_holder(holder)} ({seconds:.0f} s)")
            interrupt.sleep(min(POLL_S, max(0.0, deadline - time.monotonic())))
            self.start(conn)

    def release(self) -> None:
        self._closed = True
        if self.stream is not None:
            self.stream.close()
            self.stream = None
