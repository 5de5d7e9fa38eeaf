"""The run lock (provision/runner/run_lock.sh + run_lock.py) on this machine, through the local
connection with real flock(2) and bash: one holder at a time, refusal naming the holder, release on
close, a provably orphaned holder ended, --wait-lock, and the silence watchdog."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from provision.connection.base import LineStream
from provision.connection.local import LocalConnection
from provision.runner.run_lock import RunLock, RunLockHeld, describe_holder, provably_gone


def lock(tmp_path: Path, wait_s: float = 0, **kwargs) -> tuple[RunLock, LocalConnection]:
    conn = LocalConnection("here", become=False)
    run_lock = RunLock("here", command="provision up test.yaml", wait_s=wait_s, lock_dir=str(tmp_path), **kwargs)
    run_lock.start(conn)
    return run_lock, conn


def test_a_second_run_is_refused_at_once_naming_the_holder(tmp_path: Path):
    first, conn = lock(tmp_path)
    first.confirm(conn)
    try:
        second, conn2 = lock(tmp_path)
        started = time.monotonic()
        with pytest.raises(RunLockHeld) as refused:
            second.confirm(conn2)
        assert time.monotonic() - started < 6
        message = str(refused.value)
        assert "another provision run holds this host" in message
        assert f"pid {first.me['controller_pid']}" in message and first.me["controller_host"] in message
        assert "provision up test.yaml" in message and "--wait-lock" in message
    finally:
        first.release()


def test_closing_the_holder_releases_the_lock(tmp_path: Path):
    first, conn = lock(tmp_path)
    first.confirm(conn)
    record = tmp_path / "run.holder.json"
    assert record.stat().st_mode & 0o777 == 0o600  # who holds it is root's to read
    assert '"lock_pid": ' in record.read_text() and not list(tmp_path.glob("run.holder.json.*"))
    first.release()
    second, conn2 = lock(tmp_path)
    second.confirm(conn2)  # within the 2 s grace: no refusal
    second.release()


def test_wait_lock_queues_until_the_holder_finishes(tmp_path: Path):
    first, conn = lock(tmp_path)
    first.confirm(conn)
    threading.Timer(3, first.release).start()
    waits: list[str] = []
    second, conn2 = lock(tmp_path, wait_s=20, progress=waits.append)
    second.confirm(conn2)
    second.release()
    assert any("waiting for the run lock held by controller" in text for text in waits)


def test_a_holder_whose_controller_is_provably_gone_is_ended(tmp_path: Path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan, conn = lock(tmp_path)
    orphan.me["controller_pid"] = dead.pid  # as if that (now gone) process had taken it
    orphan.confirm(conn)  # the holder's channel opens in the background: wait for it to hold the lock
    orphan.stream.close()
    orphan.start(conn)
    orphan.confirm(conn)
    notes: list[str] = []
    second, conn2 = lock(tmp_path, progress=notes.append)
    second.confirm(conn2)
    second.release()
    assert any("which is gone: taking it over" in note for note in notes)


def test_only_this_controllers_dead_process_is_provably_gone():
    mine, other = "a" * 32, "b" * 32
    holder = {"controller_id": mine, "controller_host": "laptop-7", "controller_pid": 42, "controller_pid_start": "100"}
    assert provably_gone(holder, mine, lambda pid, start: False)
    assert not provably_gone(holder, mine, lambda pid, start: True)
    assert not provably_gone(holder, other, lambda pid, start: False)  # another controller: unknowable
    assert not provably_gone({**holder, "controller_id": ""}, "", lambda pid, start: False)  # no id: never
    assert "controller laptop-7 pid 42" in describe_holder(holder)


class SilentHost:
    """A connection whose lock stream answers, beats twice, then goes silent (packets dropped)."""

    host_name = "silent"

    def __init__(self) -> None:
        self.closed = threading.Event()

    def start(self, script: str, *, sudo: bool = True, env: dict | None = None) -> LineStream:
        def lines():
            yield "lock=taken\n"
            yield "beat\n"
            self.closed.wait(30)
        return LineStream(lines(), lambda: None)

    def close(self) -> None:
        self.closed.set()


def test_a_silent_host_is_cut_off_after_the_silence_timeout():
    host = SilentHost()
    run_lock = RunLock("silent", silent_after_s=1.5)
    run_lock.start(host)
    run_lock.confirm(host)
    assert host.closed.wait(6), "the watchdog never closed the silent connection"
    assert run_lock.silent_for is not None and run_lock.silent_for >= 1.5


def test_a_run_takes_over_from_an_upgrade_guard_holding_the_lock(tmp_path: Path, monkeypatch):
    """Before: the upgrade guard of a run that was cut off held the run lock for its whole wait (up to
    the ready timeout), and every `up` meanwhile was refused. Now the run stops the guard's unit (here
    a systemctl stand-in that ends the guard's shell, as systemd would) and takes the lock."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(f'#!/bin/bash\necho "$*" >> {tmp_path}/calls\n'
                                       f'[ "$1" = stop ] && kill "$(cat {tmp_path}/guard.pid)"\nexit 0\n')
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    (tmp_path / "run.holder.json").write_text(  # as guard.sh writes it
        '{"controller_host": "laptop (upgrade guard)", "controller_pid": 1, "started": "2026-12-02T15:00:00Z", '
        '"command": "upgrade guard of vllm.service", "guard_unit": "provision-guard-vllm"}\n')
    guard = subprocess.Popen(["bash", "-c", f"exec 9>>{tmp_path}/run.lock; flock 9; echo $$ > {tmp_path}/guard.pid; "
                                            "echo held; exec sleep 120"], stdout=subprocess.PIPE, text=True)
    try:
        assert guard.stdout.readline().strip() == "held"
        said: list[str] = []
        run_lock, conn = lock(tmp_path, progress=said.append)
        started = time.monotonic()
        run_lock.confirm(conn)
        run_lock.release()
        assert time.monotonic() - started < 10
        assert (tmp_path / "calls").read_text().splitlines() == ["stop -- provision-guard-vllm"]
        assert any("upgrade guard of vllm.service" in text and "taking over from it" in text for text in said), said
    finally:
        guard.kill()
        guard.wait()


def test_the_first_probe_batch_runs_on_the_lock_channel_once_the_lock_is_taken(tmp_path: Path):
    from provision.runner.probe import build_script, split_output
    from provision.shell import QUICK_PROBE

    # the probes do not inherit the lock's descriptor (fd 9): none of them can hold the lock past the run
    script = build_script(["echo one", QUICK_PROBE + "printf 'two \\xff\\n'; [ -e /proc/self/fd/9 ] && echo fd9"],
                          "tok")
    first = RunLock("here", lock_dir=str(tmp_path))
    conn = LocalConnection("here", become=False)
    first.start(conn, batch=(script, "tok"))
    assert split_output(first.batch_output() or "", "tok", 2) == ["one\n", "two \ufffd\n"]
    assert first.confirm(conn) is False
    try:
        second, conn2 = lock(tmp_path)  # the lock is still held after the batch: its beat goes on
        with pytest.raises(RunLockHeld):
            second.confirm(conn2)
        third = RunLock("here", lock_dir=str(tmp_path))
        third.start(conn2, batch=(script, "tok"))
        assert third.batch_output() is None  # held elsewhere: the batch did not run there
    finally:
        first.release()


def test_an_older_world_readable_holder_record_is_made_0600_and_then_written_in_place(tmp_path: Path):
    record = tmp_path / "run.holder.json"
    record.write_text('{"controller_host": "old"}\n')
    record.chmod(0o644)  # as a version before the umask left it
    for _ in range(2):
        holder, conn = lock(tmp_path)
        holder.confirm(conn)
        try:
            assert record.stat().st_mode & 0o777 == 0o600 and '"lock_pid": ' in record.read_text()
            assert sorted(p.name for p in tmp_path.iterdir()) == ["run.holder.0600", "run.holder.json", "run.lock"]
        finally:
            holder.release()
