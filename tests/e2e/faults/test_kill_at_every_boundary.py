"""`provision up --tags docker` on a fresh host, SIGKILLed at every task boundary in turn (after the
first task, then after the second, ...), each kill followed by the next run; the last run converges
and a rerun changes nothing. (Kills inside long tasks: test_killed_run.py (apt), test_serving.py
(the weights download), test_upgrade_guard.py (the release swap).)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

from tests.e2e.helpers import REPO, provision

MAX_BOUNDARIES = 12


def run_until_task(inventory, host: str, count: int) -> tuple[bool, str]:
    """Start `up`, SIGKILL it once `count` tasks have finished; (killed, output)."""
    argv = [sys.executable, "-m", "provision", "up", str(inventory), "--tags", "docker"]
    run = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True, env={**os.environ, "COLUMNS": "200"})
    watchdog = threading.Timer(300, lambda: os.killpg(run.pid, signal.SIGKILL))
    watchdog.start()
    finished, killed, lines = 0, False, []
    task_line = re.compile(rf"^{re.escape(host)} \| (ok|changed|skipped|failed) \|")
    try:
        assert run.stdout is not None
        for line in run.stdout:
            lines.append(line)
            if task_line.match(line):
                finished += 1
                if finished == count:
                    os.killpg(run.pid, signal.SIGKILL)
                    killed = True
                    break
    finally:
        watchdog.cancel()
        run.wait(timeout=30)
    return killed, "".join(lines)


def test_killed_at_every_task_boundary_each_next_run_goes_on_and_the_last_converges(lab, tmp_path, figures):
    (host,) = lab.new_hosts(1, prefix="bound")
    inventory = lab.write_inventory(tmp_path / "inventory.yaml", [host])
    kills = 0
    started = time.monotonic()
    for count in range(1, MAX_BOUNDARIES + 1):
        killed, output = run_until_task(inventory, host.name, count)
        assert "| failed |" not in output, output
        if not killed:
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
