"""The one rule for "who holds the dpkg lock, and wait for it" (dpkg_lock.sh): the apt operation runs
it before apt-get, and the preflight role through the `dpkg_lock_wait` operation; both show the
wait's lines as progress (`lock_wait_progress`)."""

from __future__ import annotations

from importlib import resources

from provision.shell import record_fields


def dpkg_lock_script() -> str:
    """dpkg_lock.sh's text after the lock reader it shares with the facts probe (fcntl_lock.sh); kept
    light: templates import this when an environment is made."""
    shared = resources.files("provision.facts").joinpath("fcntl_lock.sh").read_text(encoding="utf-8")
    return shared + resources.files("provision.ops").joinpath("dpkg_lock.sh").read_text(encoding="utf-8")


def lock_wait_progress(line: str) -> str | None:
    """wait_dpkg_lock's `dpkg_lock=SECONDS<TAB>PID<TAB>COMMAND` line as the progress a user reads, or
    None for any other line."""
    if (fields := record_fields(line, "dpkg_lock", 3)) is None:
        return None
    waited, pid, command = fields
    return f"waiting for the dpkg lock held by process {pid} ({command.strip()}) for {waited} s"
