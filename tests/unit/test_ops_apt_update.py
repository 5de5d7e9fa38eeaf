"""apt_update_watched (provision/ops/apt_update.sh): an `apt-get update` that writes nothing for the stall
time is stopped and run again. The stand-in apt-get below behaves as apt 2.6.1 was seen to behind
apt-cacher-ng 3.7.4 in the office lab (2026-12-05, benchmarks/office_cache.py): alive, writing nothing
under the lists, never exiting, until stopped."""

from __future__ import annotations

import os
import time
from pathlib import Path

from provision.ops.apt_update import APT_UPDATE_ATTEMPTS, APT_UPDATE_STALL_S, apt_update_script, update_stall_progress
from tests.unit.ops_support import LocalTestConnection

# run N (counted in a file): "hang" sleeps without writing; "write" writes a list file every 0.3 s for 2.4 s;
# "fail" exits 100 as apt-get does when a source fails; "ok" writes one list file and exits 0
FAKE_APT_GET = """#!/bin/bash
[ "$1" = update ] || exit 64
n=$(( $(cat "$COUNT" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$COUNT"
echo "$$" >> "$PIDS"
mode=$(sed -n "${n}p" "$MODES")
echo "Get:$n http://deb.debian.org/debian bookworm InRelease ($mode)"
case "$mode" in
  hang) exec sleep 600 ;;
  write) for _ in 1 2 3 4 5 6 7 8; do sleep 0.3; date >> "$LISTS/partial_InRelease"; done ;;
  fail) echo "E: Failed to fetch" >&2; exit 100 ;;
  ok) date > "$LISTS/InRelease" ;;
esac
"""


def run_update(tmp_path: Path, modes: list[str], stall: int, attempts: int) -> tuple[object, list[str], float]:
    lists = tmp_path / "lists"
    lists.mkdir()
    fake = tmp_path / "apt-get"
    fake.write_text(FAKE_APT_GET)
    fake.chmod(0o755)
    (tmp_path / "modes").write_text("\n".join(modes) + "\n")
    script = apt_update_script(str(fake)).replace(f"apt_update_watched {APT_UPDATE_STALL_S} {APT_UPDATE_ATTEMPTS} ",
                                                  f"apt_update_watched {stall} {attempts} ")
    env = {"APT_UPDATE_WATCH": str(lists), "COUNT": str(tmp_path / "count"), "PIDS": str(tmp_path / "pids"),
           "MODES": str(tmp_path / "modes"), "LISTS": str(lists)}
    lines: list[str] = []
    started = time.monotonic()
    done = LocalTestConnection().run(script, sudo=False, env=env, on_output=lines.append)
    return done, lines, time.monotonic() - started


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_script_runs_apt_get_update_under_the_watch():
    script = apt_update_script("apt-get -y -q")
    assert script.rstrip().endswith("apt_update_watched 120 3 apt-get -y -q")
    assert "apt_update_watched() {" in script


def test_a_stalled_update_is_stopped_and_run_again(tmp_path):
    done, lines, elapsed = run_update(tmp_path, ["hang", "ok"], stall=2, attempts=3)
    assert done.rc == 0, done.stderr
    assert "apt_update_stalled=2\t2\t3" in lines
    assert (tmp_path / "lists" / "InRelease").exists()
    first = int((tmp_path / "pids").read_text().split()[0])
    assert not alive(first), "the stalled apt-get was left running"
    assert 2 <= elapsed < 15


def test_an_update_that_keeps_writing_is_not_stopped(tmp_path):
    done, lines, elapsed = run_update(tmp_path, ["write"], stall=1, attempts=3)
    assert done.rc == 0, done.stderr
    assert not [line for line in lines if line.startswith("apt_update_stalled=")]
    assert (tmp_path / "count").read_text().strip() == "1"
    assert elapsed >= 2.4


def test_an_update_that_stalls_every_time_fails_saying_so(tmp_path):
    done, lines, _ = run_update(tmp_path, ["hang", "hang"], stall=1, attempts=2)
    assert done.rc == 1
    assert "apt-get update wrote nothing for 1s, 2 times" in done.stderr and "proxy" in done.stderr
    assert [line for line in lines if line.startswith("apt_update_stalled=")] == ["apt_update_stalled=1\t2\t2"]
    assert not any(alive(int(pid)) for pid in (tmp_path / "pids").read_text().split())


def test_an_update_that_fails_is_not_run_again(tmp_path):
    done, _, _ = run_update(tmp_path, ["fail", "ok"], stall=5, attempts=3)
    assert done.rc == 100
    assert "E: Failed to fetch" in done.stderr
    assert (tmp_path / "count").read_text().strip() == "1"


def test_the_stall_line_reads_as_progress():
    assert update_stall_progress("apt_update_stalled=120\t2\t3") == (
        "apt-get update wrote nothing for 120 s: stopped, run 2 of 3")
    assert update_stall_progress("Get:1 http://deb.debian.org/debian bookworm InRelease") is None


def test_a_progress_line_splits_into_its_fields():
    from provision.shell import record_fields

    assert record_fields("dpkg_lock=5\t2839\t/usr/bin/python3 a\tb\n", "dpkg_lock", 3) == [
        "5", "2839", "/usr/bin/python3 a\tb"]
    assert record_fields("apt_update_stalled=120", "apt_update_stalled", 3) == ["120", "", ""]
    assert record_fields("dpkg_lock_other=1\t2", "dpkg_lock", 2) is None
    assert record_fields("Get:1 http://deb.debian.org/debian bookworm InRelease", "dpkg_lock", 3) is None
