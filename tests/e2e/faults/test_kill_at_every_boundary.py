"""`provision up --tags docker` on a fresh host, SIGKILLed at every task boundary in turn (after the
first task, then after the second, ...), each kill followed by the next run; the last run converges
and a rerun changes nothing. The whole GPU site on a laptop, the same way and inside its long tasks:
test_kill_the_whole_site.py (it uses the helpers here)."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.e2e.helpers import REPO, provision

MAX_BOUNDARIES = 12
# a task's line: "HOST | STATUS | ROLE: TASK" (printed when it finished; skipped ones too without a terminal)
TASK_LINE = r"^{host} \| (ok|changed|skipped|failed) \| (.*?)(  \(.*)?$"


@dataclass
class KilledRun:
    """One run and where it was killed: `finished` are the tasks it finished ("role: task"), in order."""

    killed: bool
    output: str
    finished: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    injected: bool = False  # `instead` was called
    returncode: int | None = None  # None: killed


def run_and_kill(inventory: Path, host: str, *args: str, after_tasks: int | None = None,
                 when: Callable[[list[str]], bool] | None = None, instead: Callable[[], None] | None = None,
                 timeout: float = 600) -> KilledRun:
    """Start `up INVENTORY ARGS`; SIGKILL it (its whole process group, like a power cut of the
    controller) once `after_tasks` tasks have finished, or once `when(output_lines)` holds (polled
    every 0.1 s, so it may look at the host too). Not killed: the run ended by itself first. With
    `instead`, that is called at that moment (a fault injected elsewhere) and the run goes on."""
    argv = [sys.executable, "-m", "provision", "up", str(inventory), *args]
    started = time.monotonic()
    run = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           # unbuffered: a task's line is read when it is printed, not when a buffer fills
                           start_new_session=True, env={**os.environ, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"})
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert run.stdout is not None
        for line in run.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    task_line = re.compile(TASK_LINE.format(host=re.escape(host)))
    result, seen, ended = KilledRun(False, ""), [], False
    try:
        while not ended and time.monotonic() - started < timeout:
            # every line printed so far first (a sign that looks at the host is slow: judged on the
            # run's output as it is now, not as it was lines ago); a boundary is judged line by line
            waiting = 0.1
            while True:
                try:
                    line = lines.get(timeout=waiting)
                except queue.Empty:
                    break
                waiting = 0
                if line is None:
                    ended = True
                    break
                seen.append(line)
                if matched := task_line.match(line):
                    result.finished.append(matched.group(2))
                    if matched.group(1) == "failed":
                        result.failed.append(matched.group(2))
                if after_tasks is not None and len(result.finished) >= after_tasks:
                    break
            if ended:
                break
            due = (after_tasks is not None and len(result.finished) >= after_tasks) or (when is not None and when(seen))
            if due and instead is not None:
                instead()
                result.injected = True
                after_tasks, when, instead = None, None, None
            elif due:
                os.killpg(run.pid, signal.SIGKILL)
                result.killed = True
                break
        else:
            if not ended:
                os.killpg(run.pid, signal.SIGKILL)
                raise AssertionError(f"the run neither ended nor reached its kill point in {timeout:.0f} s:\n"
                                     + "\n".join(seen[-40:]))
    finally:
        run.wait(timeout=30)
    result.returncode = None if result.killed else run.returncode
    result.output = "\n".join(seen)
    result.seconds = time.monotonic() - started
    return result


def test_killed_at_every_task_boundary_each_next_run_goes_on_and_the_last_converges(lab, tmp_path, figures):
    (host,) = lab.new_hosts(1, prefix="bound")
    inventory = lab.write_inventory(tmp_path / "inventory.yaml", [host])
    kills = 0
    started = time.monotonic()
    for count in range(1, MAX_BOUNDARIES + 1):
        run = run_and_kill(inventory, host.name, "--tags", "docker", after_tasks=count, timeout=300)
        assert not run.failed, run.output
        if not run.killed:
            break
        kills += 1
    assert kills >= 3, f"only {kills} task boundaries were reached"
    final = provision("up", str(inventory), "--tags", "docker", json_path=tmp_path / "final.json")
    again = provision("up", str(inventory), "--tags", "docker", json_path=tmp_path / "again.json")
    converged = final.returncode == 0 and again.returncode == 0 and again.host(host.name)["changed"] == 0
    figures.kills.extend([converged] * kills)
    print(f"killed at {kills} task boundaries in {time.monotonic() - started:.0f} s")
    assert converged, final.output + again.output
    assert host.exec("systemctl is-active docker")[1].strip() == "active"
