"""Opening a host's connection, and opening it early: before the playbook's operations are imported.

A handshake mostly waits: on the network, on the host's sshd (key exchange, a forked session, PAM).
`up` therefore starts the first batch's connections as soon as the inventory and the playbook are read
and checked, and imports the runner, the operations and the output while they proceed (on a lab host
the handshake took 100-150 ms, those imports ~100 ms of CPU; the wall-time gain was within this
2-core machine's noise). This module imports only the connection layer, so that it can run first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass

from provision.connection.base import Connection
from provision.connection.local import LocalConnection
from provision.connection.ssh import SSHConnection
from provision.connection.traced import TracedConnection
from provision.inventory.model import Host, Inventory
from provision.playbook.model import Play
from provision.runner.batches import batches

MAX_CONNECTING = 64  # connections opened at once, a bound on threads and sockets, not on the hosts of a batch


@dataclass(frozen=True)
class Timeouts:
    """How long a host may take: to connect, to run one command, to stay silent mid-run."""

    connect_s: float = 10
    command_s: float = 7200  # a command without its own timeout (an operation's downloads set theirs)
    silent_s: float = 20     # no run-lock beat for this long: the host is reported unreachable


@dataclass(frozen=True)
class Trace:
    verbosity: int
    say: Callable[[str], None]


def connect(host: Host, trust_new_host_keys: bool, trace: Trace | None = None,
            timeouts: Timeouts | None = None) -> Connection:
    """Open the connection a host asks for (local, or SSH with host keys checked), traced with -v."""
    conn: Connection
    if host.connection == "local":
        conn = LocalConnection(host.name, become=host.become, become_user=host.become_user,
                               become_password=host.become_password).open()
    else:
        timeouts = timeouts or Timeouts()
        conn = SSHConnection(
            host.name, host.address, port=host.port, user=host.user, key_file=host.key,
            known_hosts=host.known_hosts, become=host.become, become_user=host.become_user,
            become_password=host.become_password, trust_new_host_keys=trust_new_host_keys,
            connect_timeout=timeouts.connect_s, command_timeout_s=timeouts.command_s,
        ).open()
    return TracedConnection(conn, trace.verbosity, trace.say) if trace and trace.verbosity > 0 else conn


def first_batch(inventory: Inventory, plays: list[Play], selected: list[Host],
                serial: list[int | str] | None) -> list[Host]:
    """The hosts a run opens first: the first batch of the first play that has any of `selected`
    (a later batch is opened when it starts, or its connections would sit idle through a rollout)."""
    for play in plays:
        in_play = {host.name for host in inventory.play_hosts(play.hosts)}
        hosts = [host for host in selected if host.name in in_play]
        if hosts:
            return batches(hosts, serial or play.serial)[0]
    return []


class EarlyConnections:
    """Connections started now, each handed once to whoever opens that host first (`take`).

    Daemon threads, not a pool: a host that is never asked for (its play was skipped, the run stopped
    at an error) must not keep the process alive through its connect retries. What was opened and not
    taken is closed by `close_unused`."""

    def __init__(self, hosts: Iterable[Host], open_host: Callable[[Host], Connection]) -> None:
        self._futures: dict[str, Future[Connection]] = {}
        self._lock = threading.Lock()
        slots = threading.BoundedSemaphore(MAX_CONNECTING)
        for host in hosts:
            future: Future[Connection] = Future()
            self._futures[host.name] = future
            threading.Thread(target=self._open, args=(host, open_host, future, slots), daemon=True,
                             name=f"connect-{host.name}").start()

    @staticmethod
    def _open(host: Host, open_host: Callable[[Host], Connection], future: Future[Connection],
              slots: threading.BoundedSemaphore) -> None:
        with slots:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(open_host(host))
            except BaseException as error:  # handed to the taker, who reports it as the host's
                future.set_exception(error)

    def take(self, name: str) -> Future[Connection] | None:
        """The connection started for `name` (once; None after, or when none was started)."""
        with self._lock:
            return self._futures.pop(name, None)

    def close_unused(self) -> None:
        """Close the connections nobody took; those still connecting are cancelled or left to exit."""
        with self._lock:
            futures, self._futures = list(self._futures.values()), {}
        for future in futures:
            if future.cancel():
                continue
            if future.done() and future.exception() is None:
                future.result().close()
            else:
                future.add_done_callback(_close_when_opened)


def _close_when_opened(future: Future[Connection]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().close()
