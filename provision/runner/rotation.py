"""Rolling through the office gateway during `up`: an operation that interrupts a host's service
(`Operation.interrupts_service`: the vLLM release swap, a rollback) runs on a backend of an office
gateway of the same inventory only while that backend is drained there.

Order, per backend: the capacity guard (office_min_available other backends serving, waited for up to
office_min_available_wait_s, else the task fails saying so), a marker on the gateway, the drain (no new
request; those in flight finish, waited for up to office_drain_timeout_s), the swap with its readiness
and smoke checks, then back into rotation once the gateway's checks pass, the marker removed. One
backend at a time per gateway (a lock held from the guard to the undrain): the hosts' other tasks run
in parallel, their swaps in turn. A swap that fails leaves its backend drained (the task's error says
so); a rerun whose release is in place undrains a backend a killed or failed run left marked.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from provision.connection.base import Connection
from provision.errors import HostUnreachable, InputError, ProvisionError, TaskFailed
from provision.inventory.model import Host
from provision.office_gateway.admin import ServerView, admin_script, parse_view
from provision.office_gateway.backends import BackendError, backends
from provision.office_gateway.rotation import RotationSettings, drain_script, guard, markers_script, undrain_script
from provision.shell import quote

T = TypeVar("T")
DEFAULT_GROUP = "office_gateway"
DEFAULT_SOCKET = "/run/haproxy/admin.sock"  # roles/office_gateway/defaults.yaml office_gateway_admin_socket
POLL_S = 0.5
BACK_UP_WAIT_S = 60  # after the undrain: how long the gateway's checks may take to see it serving


class GatewayAdmin(Protocol):
    """One gateway's runtime API, as the rotation uses it (over SSH in a run; in memory in the tests)."""

    def show(self) -> list[ServerView] | None: ...   # None: the gateway serves nothing yet (no HAProxy)
    def drain(self, server: str, wait_s: int) -> int: ...   # requests still in flight after the wait
    def undrain(self, server: str) -> None: ...
    def marked(self, server: str) -> bool: ...


Run = Callable[[str], tuple[int, str, str]]  # a script run as root on the gateway: rc, stdout, stderr


class ScriptAdmin:
    """GatewayAdmin through scripts run as root on the gateway host (`run`, one at a time)."""

    def __init__(self, name: str, socket: str, run: Run) -> None:
        self.name, self.socket, self._run = name, socket, run
        self._lock = threading.Lock()
        self._markers: set[str] | None = None  # read once a run: those a killed or failed run left

    def _script(self, script: str, what: str) -> str:
        with self._lock:
            try:
                rc, stdout, stderr = self._run(script)
            except HostUnreachable as error:  # the gateway's, not the backend's: the swap waits for it
                raise TaskFailed(f"office gateway {self.name} unreachable, so its backend is not swapped (a "
                                 f"swap in service would cut its requests): {error}") from error
        if rc != 0:
            raise TaskFailed(f"office gateway {self.name}: {what} failed (exit {rc}): "
                             f"{(stderr.strip() or stdout.strip())[-500:]}")
        return stdout

    def show(self) -> list[ServerView] | None:
        # before the office_gateway play first ran there is no HAProxy: no request goes through it yet
        stdout = self._script(f"if ! [ -S {quote(self.socket)} ]; then echo no-socket; exit 0; fi\n"
                              + admin_script(self.socket, "show"), "show stat")
        return None if stdout.strip() == "no-socket" else parse_view(stdout)[0]

    def drain(self, server: str, wait_s: int) -> int:
        return parse_view(self._script(drain_script(self.socket, server, wait_s), f"drain {server}"))[1] or 0

    def undrain(self, server: str) -> None:
        self._script(undrain_script(self.socket, server), f"undrain {server}")
        if self._markers is not None:
            self._markers.discard(server)

    def marked(self, server: str) -> bool:
        """Left drained by an earlier run (read at the first question of this run: its own drains are
        undone by its own swaps, so one round trip serves every backend's question)."""
        if self._markers is None:
            self._markers = set(self._script(markers_script(), "read the drain markers").split())
        return server in self._markers


@dataclass
class Gateway:
    name: str
    admin: GatewayAdmin
    backends: frozenset[str]
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class Rotation:
    """The office gateways of a run's inventory; `swap` and `settle` are called by each host's thread."""

    gateways: list[Gateway]
    say: Callable[[str, str], None] = lambda host, text: None   # progress: host, text
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def of(self, host: str) -> list[Gateway]:
        return sorted((gateway for gateway in self.gateways if host in gateway.backends), key=lambda g: g.name)

    def swap(self, host: str, settings: RotationSettings, apply: Callable[[], T]) -> tuple[T, str, str]:
        """`apply` (the interrupting change) with `host` drained at each of its gateways; returns its
        result and what the gateways saw before and after it, for the task's summary."""
        gateways = self.of(host) if settings.drain else []
        if not gateways:
            return apply(), "", ""
        notes: list[str] = []
        after: list[str] = []
        with contextlib.ExitStack() as held:
            for gateway in gateways:  # in name order: two hosts never hold each other's gateway
                if not gateway.lock.acquire(blocking=False):
                    self.say(host, f"waiting for the office gateway {gateway.name}: another backend is being swapped")
                    gateway.lock.acquire()
                held.callback(gateway.lock.release)
            drained: list[Gateway] = []
            try:
                for gateway in gateways:
                    note = self._drain(gateway, host, settings)
                    notes.append(note)
                    if note.startswith("drained"):
                        drained.append(gateway)
            except TaskFailed:  # refused at a later gateway: nothing is swapped, the earlier ones get it back
                for gateway in drained:
                    self._undrain(gateway, host)
                raise
            try:
                result = apply()
            except ProvisionError as error:
                if isinstance(error, HostUnreachable) or not drained:
                    raise
                names = ", ".join(g.name for g in drained)
                raise TaskFailed(f"{error}; {host} is left drained at the office gateway {names}: a rerun puts "
                                 f"it back once its release passes (or `provision undrain INVENTORY {host}`)"
                                 ) from error
            for gateway in drained:
                after.append(self._undrain(gateway, host))
        return result, "; ".join(notes), "; ".join(after)

    def settle(self, host: str) -> str:
        """`host`'s release is in place and nothing interrupts it: a backend a killed or failed run
        left drained (its marker) goes back into rotation."""
        notes = []
        for gateway in self.of(host):
            if gateway.admin.marked(host):
                with gateway.lock:
                    notes.append(self._undrain(gateway, host, why=" (left drained by an earlier run)"))
        return "; ".join(notes)

    def _drain(self, gateway: Gateway, host: str, settings: RotationSettings) -> str:
        started = self.clock()
        waited = False
        while True:
            servers = gateway.admin.show()
            if servers is None:
                return f"not drained: the office gateway {gateway.name} serves no request yet (no HAProxy there)"
            own = next((server.status for server in servers if server.name == host), None)
            if own is None:
                return f"not drained: {host} is not yet a backend of the office gateway {gateway.name}'s running config"
            if own.startswith(("DRAIN", "MAINT")) and not gateway.admin.marked(host):
                return (f"not drained: {host} was out of rotation at the office gateway {gateway.name} already "
                        f"({own}, by hand): it stays so after the swap (`provision undrain` puts it back)")
            verdict = guard(servers, host, settings.min_available)
            if verdict.go:
                break
            elapsed = self.clock() - started
            if verdict.final or elapsed >= settings.min_available_wait_s:
                after = "" if verdict.final else f" after waiting {elapsed:.0f} s (office_min_available_wait_s)"
                raise TaskFailed(f"office gateway {gateway.name}: {host} not drained, so not swapped: "
                                 f"{verdict.reason}{after}; nothing was changed on {host}")
            if not waited:
                self.say(host, f"waiting up to {settings.min_available_wait_s} s before draining at "
                               f"{gateway.name}: {verdict.reason}")
                waited = True
            self.sleep(POLL_S)
        waited_note = f" after waiting {self.clock() - started:.0f} s for capacity" if waited else ""
        self.say(host, f"draining at the office gateway {gateway.name} (up to {settings.drain_timeout_s} s)")
        drained_at = self.clock()
        left = gateway.admin.drain(host, settings.drain_timeout_s)
        took = self.clock() - drained_at
        if left:
            return (f"drained at {gateway.name}{waited_note}: {left} request(s) still in flight after "
                    f"{took:.0f} s (office_drain_timeout_s), left to vLLM's graceful stop")
        return f"drained at {gateway.name}{waited_note}, no request in flight after {took:.1f} s"

    def _undrain(self, gateway: Gateway, host: str, why: str = "") -> str:
        gateway.admin.undrain(host)
        started = self.clock()
        while True:
            status = next((s.status for s in gateway.admin.show() or [] if s.name == host), "gone")
            if status == "UP":
                return f"back in rotation at {gateway.name}{why} after {self.clock() - started:.1f} s"
            if self.clock() - started >= BACK_UP_WAIT_S:
                return (f"back in rotation at {gateway.name}{why}, but its checks there say {status} after "
                        f"{BACK_UP_WAIT_S} s")
            self.sleep(POLL_S)


class GatewayConnection:
    """The run's own connection to a gateway host, opened at its first use, closed with the run."""

    def __init__(self, open_connection: Callable[[], Connection]) -> None:
        self._open = open_connection
        self._conn: Connection | None = None
        self._lock = threading.Lock()

    def run(self, script: str) -> tuple[int, str, str]:
        with self._lock:
            if self._conn is None:
                self._conn = self._open()
            result = self._conn.run(script, sudo=True)
        return result.rc, result.stdout, result.stderr

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()


def office_gateways(hosts: list[Host], magic: Mapping[str, Any],
                    open_connection: Callable[[Host], Connection]) -> tuple[list[Gateway], list[GatewayConnection]]:
    """Every office gateway of the inventory (a host in the group its `office_gateway_group` names)
    with its backends as its config names them (provision/office_gateway/backends.py)."""
    gateways, connections = [], []
    for host in hosts:
        group = str(host.vars.get("office_gateway_group", DEFAULT_GROUP))
        if group not in host.groups:
            continue
        cache_group = str(host.vars.get("office_cache_group", "office_cache"))
        try:
            names = [backend.name for backend in backends(magic["groups"], magic["hostvars"], cache_group=cache_group,
                                                          gateway_group=group, default_port=1, default_max_requests=1)]
        except BackendError as error:
            raise InputError(f"office gateway {host.name}: {error}") from error
        connection = GatewayConnection(functools.partial(open_connection, host))
        socket = str(host.vars.get("office_gateway_admin_socket", DEFAULT_SOCKET))
        gateways.append(Gateway(host.name, ScriptAdmin(host.name, socket, connection.run), frozenset(names)))
        connections.append(connection)
    return gateways, connections
