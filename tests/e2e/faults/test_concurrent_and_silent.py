"""Two runs on one host at once, a run killed while it holds the lock, and a host that goes silent
mid-run (its network frozen: packets silently dropped, no reset)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.helpers import REPO, provision

# exit 0 while a run holds the host's lock (the lock file exists once a run has asked for it)
LOCK_HELD = "[ -e /var/lib/provision/run.lock ] && ! flock -n /var/lib/provision/run.lock true"


def start_up(inventory: Path, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "provision", "up", str(inventory), "--tags", "docker", *extra]
    return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, "COLUMNS": "200"})


def wait_until(condition, timeout: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return False


def test_a_second_run_is_refused_naming_the_first_then_waits_with_wait_lock(lab, tmp_path, figures):
    (host,) = lab.new_hosts(1, prefix="lock")
    inventory = lab.write_inventory(tmp_path / "inventory.yaml", [host])
    first = start_up(inventory)
    try:
        assert wait_until(lambda: host.exec(LOCK_HELD)[0] == 0, 60), "the first run never took the lock"
        started = time.monotonic()
        second = provision("up", str(inventory), "--tags", "docker", timeout=120)
        refused_in = time.monotonic() - started
        clear = (second.returncode == 1 and "another provision run holds this host" in second.output
                 and f"pid {first.pid}" in second.output and refused_in < 15)
        figures.faults.append(clear)
        if not clear:
            print("holder:", host.exec("cat /var/lib/provision/run.holder.json")[1])
            os.killpg(first.pid, signal.SIGKILL)
            print("first run:", first.communicate(timeout=30)[0][-3000:])
            print("second run:", second.output[-3000:])
        assert clear, f"refused after {refused_in:.1f} s"
        assert first.poll() is None, "the refused run disturbed the first one"

        queued = provision("up", str(inventory), "--tags", "docker", "--wait-lock", "600",
                           json_path=tmp_path / "queued.json", timeout=700)
        assert queued.returncode == 0, queued.output
        assert first.wait(timeout=600) == 0, first.stdout.read() if first.stdout else ""
        assert queued.host(host.name)["changed"] == 0, "the queued run started before the first finished"
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)


def test_a_run_killed_while_holding_the_lock_does_not_block_the_next(lab, tmp_path, figures):
    (host,) = lab.new_hosts(1, prefix="lockkill")
    inventory = lab.write_inventory(tmp_path / "inventory.yaml", [host])
    first = start_up(inventory)
    try:
        assert wait_until(lambda: host.exec(LOCK_HELD)[0] == 0, 60), "the first run never took the lock"
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        first.wait(timeout=30)
    # the holder's session ends with its controller: the lock is free again by itself
    released = wait_until(lambda: host.exec(LOCK_HELD)[0] != 0, 15)
    print("holders:", host.exec("cat /proc/locks; for f in /proc/[0-9]*/fd/*; do "
                                "[ \"$(readlink \"$f\")\" = /var/lib/provision/run.lock ] && echo \"$f\" && "
                                "cat \"${f%/fd/*}/cmdline\" | tr '\\0' ' ' && echo; done 2>/dev/null")[1])
    assert released, "the lock outlived its controller"
    rerun = provision("up", str(inventory), "--tags", "docker", json_path=tmp_path / "rerun.json")
    figures.kills.append(rerun.returncode == 0)
    assert rerun.returncode == 0, rerun.output


def test_a_host_gone_silent_is_reported_unreachable_in_time_naming_the_task(lab, tmp_path, figures):
    (host,) = lab.new_hosts(1, prefix="silent")
    inventory = lab.write_inventory(tmp_path / "inventory.yaml", [host])
    run = start_up(inventory, "--json-file", str(tmp_path / "silent.json"))
    slirp = int((host.dir / "slirp.pid").read_text().split()[0])
    frozen_at = None
    try:
        # freeze the host's network while apt is at work: every packet is dropped, nothing resets
        assert wait_until(lambda: host.exec("pgrep -x apt-get >/dev/null")[0] == 0, 120), "apt never started"
        os.kill(slirp, signal.SIGSTOP)
        frozen_at = time.monotonic()
        output, _ = run.communicate(timeout=90)
        reported_in = time.monotonic() - frozen_at
    finally:
        os.kill(slirp, signal.SIGCONT)
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait(timeout=30)
    clear = (run.returncode == 1 and "unreachable" in output and "went silent" in output
             and "during task" in output and "mid-change" in output and reported_in < 40)
    figures.faults.append(clear)
    print(output)
    assert clear, f"reported after {reported_in:.0f} s"
    rerun = provision("up", str(inventory), "--tags", "docker", json_path=tmp_path / "rerun.json")
    assert rerun.returncode == 0, rerun.output
