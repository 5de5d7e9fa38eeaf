"""The one rule for `apt-get update` (apt_update.sh): run again when it stalls. The apt and
apt_repository operations refresh the lists through `apt_update_script`; the apt operation shows the
restarts as progress (`update_stall_progress`)."""

from __future__ import annotations

from importlib import resources

from provision.shell import record_fields

# twice apt's own timeout for a quiet connection (apt 2.6.1 gave up on a server that accepted and never
# answered after 60 s, Acquire::http::Timeout): a connection that goes quiet stays apt's to report
APT_UPDATE_STALL_S = 120
APT_UPDATE_ATTEMPTS = 3


def apt_update_script(apt_get: str) -> str:
    """Shell that defines apt_update_watched and runs `apt_get update` under it."""
    watched = resources.files("provision.ops").joinpath("apt_update.sh").read_text(encoding="utf-8")
    return f"{watched}apt_update_watched {APT_UPDATE_STALL_S} {APT_UPDATE_ATTEMPTS} {apt_get}"


def update_stall_progress(line: str) -> str | None:
    """apt_update_watched's `apt_update_stalled=SECONDS<TAB>ATTEMPT<TAB>ATTEMPTS` line as the progress a
    user reads, or None for any other line."""
    if (fields := record_fields(line, "apt_update_stalled", 3)) is None:
        return None
    stalled, attempt, total = fields
    return f"apt-get update wrote nothing for {stalled} s: stopped, run {attempt} of {total.strip()}"
