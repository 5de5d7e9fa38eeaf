"""Rolling a release through the office gateway, the pure part: which backend may be drained now (the
capacity guard), and the scripts that mark, drain, undrain and unmark a backend on the gateway host.

`up` drains a backend at its gateway before an operation that interrupts its service (the vLLM
release swap, a rollback), waits for the requests in flight, swaps, and puts it back once its checks
pass; provision/runner/rotation.py does that in order, one backend at a time. Before the drain it
writes a marker on the gateway (`MARKER_DIR/<server>`): a run killed between the drain and the
undrain leaves the marker, and the next run undrains that backend once its release is in place. A
drain by hand (`provision drain`) leaves no marker, so `up` never undoes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from provision.office_gateway.admin import ServerView, admin_script
from provision.office_gateway.backends import SERVER_NAME
from provision.shell import quote

MARKER_DIR = "/var/lib/provision/office-gateway/drained-by-up"
# HAProxy's `show stat` status of a server that takes new requests (not "UP 1/2": falling, nor DRAIN)
SERVING = "UP"


@dataclass(frozen=True)
class RotationSettings:
    """The office's rolling settings (roles/office_gateway/defaults.yaml), read from the backend's
    variables."""

    drain: bool = True               # office_rolling_drain
    drain_timeout_s: int = 300       # office_drain_timeout_s: the longest wait for the requests in flight
    min_available: int = 1           # office_min_available: backends that must stay up meanwhile
    min_available_wait_s: int = 120  # office_min_available_wait_s: how long to wait for them

    @classmethod
    def from_vars(cls, variables: Mapping[str, Any]) -> RotationSettings:
        def number(key: str, default: int) -> int:
            value = variables.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit():
                raise ValueError(f"{key} must be a whole number of at least 0, got {value!r}")
            return int(value)
        drain = variables.get("office_rolling_drain", True)
        return cls(drain=drain if isinstance(drain, bool) else str(drain).strip().lower() in ("true", "yes", "1", "on"),
                   drain_timeout_s=number("office_drain_timeout_s", cls.drain_timeout_s),
                   min_available=number("office_min_available", cls.min_available),
                   min_available_wait_s=number("office_min_available_wait_s", cls.min_available_wait_s))


@dataclass(frozen=True)
class Verdict:
    """The capacity guard's answer: drain now (`go`), wait and ask again, or never (`final`)."""

    go: bool
    reason: str
    final: bool = False


def guard(servers: Iterable[ServerView], host: str, min_available: int) -> Verdict:
    """May `host` be drained now, leaving at least `min_available` other backends serving?

    A backend that serves nothing now (down, drained by an earlier run) may always be taken: its
    drain removes no capacity. A gateway with too few backends can never meet the bound: refused at
    once, naming the setting."""
    servers = list(servers)
    own = next((server for server in servers if server.name == host), None)
    if own is None:
        return Verdict(False, f"{host} is not a server of the gateway's backend (its servers: "
                              f"{', '.join(s.name for s in servers) or 'none'})", final=True)
    if own.status != SERVING:
        return Verdict(True, f"{host} serves no request now ({own.status}): its drain takes nothing away")
    others = [server for server in servers if server.name != host]
    serving = [server.name for server in others if server.status == SERVING]
    if len(others) < min_available:
        return Verdict(False, f"the gateway has {len(servers)} backend(s): draining {host} would leave "
                              f"{len(others)}, fewer than office_min_available {min_available} (set "
                              "office_min_available: 0 to swap it with the office out of service meanwhile)",
                       final=True)
    if len(serving) >= min_available:
        return Verdict(True, f"{len(serving)} other backend(s) serving ({', '.join(serving) or 'none'})")
    waiting = ", ".join(f"{server.name} {server.status}" for server in others if server.status != SERVING)
    return Verdict(False, f"only {len(serving)} other backend(s) serving, office_min_available is "
                          f"{min_available} ({waiting})")


def _marker(server: str) -> str:
    if not SERVER_NAME.fullmatch(server):  # backends.py refuses such a name before any config is written
        raise ValueError(f"not a server name: {server!r}")
    return f"{MARKER_DIR}/{server}"


def drain_script(socket: str, server: str, wait_s: int) -> str:
    """Mark `server` as drained by up, then drain it and wait up to `wait_s` for its requests."""
    marker = _marker(server)
    return f"mkdir -p {quote(MARKER_DIR)} && : > {quote(marker)}\n" + admin_script(socket, "drain", server, wait_s)


def undrain_script(socket: str, server: str) -> str:
    """Back into rotation (once its checks pass), then the marker removed."""
    # admin.sh exits at a refusal (set -e, exit 1): the marker stays unless the gateway took the state
    return admin_script(socket, "ready", server) + f"\nrm -f {quote(_marker(server))}\n"


def marked_script(server: str) -> str:
    """Prints `marked` when a run drained `server` and was never seen to undrain it."""
    return f"if [ -e {quote(_marker(server))} ]; then echo marked; else echo clear; fi"


def markers_script() -> str:
    """Every server a run drained and was never seen to undrain, one a line."""
    return f"ls -1 {quote(MARKER_DIR)} 2>/dev/null || true"
