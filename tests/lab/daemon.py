"""Background processes of the lab (slirp4netns, the registry, the supervisor), tracked by pid files.

They run in their own session (setsid) so they outlive the command that started them; they are
ended by the pid in their pid file, and only if that process is still the one the file names.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

# The children this process started, reaped when they exit (no zombies). Hosts start in parallel
# threads, so every access holds the lock (an unlocked reap once raised "dictionary changed size").
_children: dict[int, subprocess.Popen[bytes]] = {}
_children_lock = threading.Lock()


def spawn(argv: list[str], pidfile: Path, log: Path, cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start `argv` in a new session, output to `log`; record its pid."""
    with _children_lock:
        for pid in [pid for pid, child in _children.items() if child.poll() is not None]:
            del _children[pid]
    with open(log, "ab") as out:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True, cwd=cwd)
    with _children_lock:
        _children[child.pid] = child
    pidfile.write_text(f"{child.pid}\n")
    return child


def running(pidfile: Path, expect: str) -> int | None:
    """The pid in `pidfile` if that process is alive and its command line contains `expect` (so a
    pid another process reused does not count)."""
    try:
        pid = int(pidfile.read_text())
    except (FileNotFoundError, ValueError):
        return None
    with _children_lock:
        child = _children.get(pid)
    if child is not None:  # ours: its command line is known even before /proc shows it (during exec)
        alive, cmdline = child.poll() is None, " ".join(map(str, child.args)) + " "
    else:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            alive = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return None
    return pid if alive and expect in cmdline else None


def stop(pidfile: Path, expect: str, timeout: float = 5.0) -> None:
    """End the process of `pidfile` (TERM, then KILL after `timeout`) and remove the pid file."""
    pid = running(pidfile, expect)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while running(pidfile, expect) and time.monotonic() < deadline:
            time.sleep(0.02)
        if running(pidfile, expect):
            os.kill(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)
