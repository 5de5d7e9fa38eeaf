"""The lab ends only the background processes its pid files name, and only while they are them."""

from __future__ import annotations

import os
from pathlib import Path

from tests.lab import daemon


def test_spawned_process_runs_until_stopped_and_its_pid_file_goes(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleep.pid"
    child = daemon.spawn(["sleep", "30"], pidfile, tmp_path / "sleep.log")
    assert daemon.running(pidfile, "sleep 30") == child.pid
    assert os.getsid(child.pid) == child.pid  # its own session: it outlives the lab command
    daemon.stop(pidfile, "sleep 30")
    assert child.returncode is not None
    assert not pidfile.exists()


def test_a_process_whose_command_line_differs_is_not_the_one_recorded(tmp_path: Path) -> None:
    pidfile = tmp_path / "slirp.pid"
    child = daemon.spawn(["sleep", "30"], pidfile, tmp_path / "sleep.log")
    try:
        assert daemon.running(pidfile, "sleep 31") is None  # e.g. slirp4netns of another netns pid
        pidfile.write_text(f"{os.getpid()}\n")  # a pid that is not our child: judged by /proc
        assert daemon.running(pidfile, "slirp4netns") is None
        daemon.stop(pidfile, "slirp4netns")
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_missing_or_garbled_pid_file_means_not_running(tmp_path: Path) -> None:
    assert daemon.running(tmp_path / "none.pid", "x") is None
    (tmp_path / "bad.pid").write_text("not a pid\n")
    assert daemon.running(tmp_path / "bad.pid", "x") is None
