"""Hosts x plays: forks, serial batches, max-fail, check mode; returns the run's results."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from provision import interrupt
from provision.connection.base import Connection
from provision.errors import HostUnreachable, ProvisionError
from provision.inventory.model import Host, Inventory
from provision.playbook.model import Play
from provision.playbook.templating import make_environment
from provision.runner.batches import batches, too_many_failed
from provision.runner.connect import MAX_CONNECTING, EarlyConnections, Timeouts, Trace, connect
from provision.runner.early import EarlyWork, early_groups
from provision.runner.events import Reporter
from provision.runner.host_run import HostState, PlayOnHost, RunOptions
from provision.runner.probe_memory import ProbeMemory, secret_values, selected_tasks
from provision.runner.results import HostResult, Reading, RunResult
from provision.runner.run_lock import RunLock
from provision.secrets import REDACTOR
from provision.settings.variables import host_variables, inventory_variables

T = TypeVar("T")

INTERRUPTED = "interrupted (Ctrl-C): no new task was started; the changes in flight finished"


@dataclass
class RunConfig:
    forks: int = 10
    serial: list[int | str] | None = None
    max_fail_percentage: float | None = None
    limit: str | None = None
    extra_vars: dict[str, Any] = field(default_factory=dict)
    trust_new_host_keys: bool = False
    options: RunOptions = field(default_factory=RunOptions)
    #: -v / -vv: where each remote command (and with 2 its output) is shown; None: not shown
    trace: Trace | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    lock: bool | None = None  # take the run lock on each host (None: unless in check mode)
    wait_lock_s: float = 0
    probe_memory: Path | None = None  # remember each host's probes here between runs (None: do not)
    #: what the run lock's holder record says this run is: the sub-command and the inventory, no values
    command: str = "provision"


def memory_key(host: Host) -> str:
    """A host as its remembered probes are filed: its name and where and how it is reached."""
    return f"{host.name} {host.connection} {host.user}@{host.address}:{host.port}"


class Runner:
    """Runs plays over an inventory's hosts and collects per-host results."""

    def __init__(self, inventory: Inventory, config: RunConfig, reporter: Reporter,
                 early: EarlyConnections | None = None) -> None:
        self.inventory = inventory
        self.config = config
        self.reporter = reporter
        self.early = early  # connections already under way (runner/connect.py), each taken once
        self.results: dict[str, HostResult] = {}
        self.states: dict[str, HostState] = {}
        self.started: dict[str, float] = {}

    def run(self, plays: list[Play]) -> RunResult:
        selected = self.inventory.select(self.config.limit)
        config = self.config
        locking = config.lock if config.lock is not None else not config.options.check
        for host in selected:
            self.results[host.name] = HostResult(host.name)
            state = HostState(host.name, connect=self.connector(host))
            if locking:
                state.lock = RunLock(host.name, config.command, wait_s=config.wait_lock_s,
                                     silent_after_s=config.timeouts.silent_s,
                                     progress=self.progress_of(host.name))
            if config.probe_memory is not None:
                state.memory = ProbeMemory(config.probe_memory, memory_key(host))
            self.states[host.name] = state
        if not config.options.check:  # check mode starts nothing early: each task plans at its turn
            self.early_work(plays, selected)
        connections = [] if config.options.check else self.office_rotation()
        if config.probe_memory is not None:
            self.recall_probes(plays, selected)
        aborted = None
        try:
            for play in plays:
                aborted = self.run_play(play, selected)
                if aborted:
                    break
        finally:
            for state in self.states.values():
                state.release()
            for connection in connections:
                connection.close()
        return RunResult(self.results, check=self.config.options.check, aborted=aborted)

    def progress_of(self, host_name: str) -> Callable[[str], None]:
        """A line of progress about `host_name` (the run lock's waiting), to the reporter."""
        return lambda text: self.reporter.progress(host_name, text, None, None)

    def early_work(self, plays: list[Play], selected: list[Host]) -> None:
        """Each host's tasks that start early (runner/early.py), those of the plays it is in."""
        groups = early_groups(plays)
        if not groups:
            return
        for host in selected:
            state = self.states[host.name]
            # `early_starts: false` (roles/model/defaults.yaml; `-e early_starts=false`): every task at
            # its turn, today's sequential order (a benchmark's peer); a bool, checked before contact
            mine = {anchor: [item for item in items if host.name in self.play_hosts(item.play)
                             and host_variables(item.play, host, self.config.extra_vars).get("early_starts", True)
                             is not False]
                    for anchor, items in groups.items()}

            def play_on_host(play: Play, host: Host = host, state: HostState = state) -> PlayOnHost:
                variables = {**inventory_variables(self.inventory),
                             **host_variables(play, host, self.config.extra_vars)}
                return PlayOnHost(play, state, variables, make_environment(play.template_dirs), self.config.options,
                                  self.reporter, HostResult(host.name))

            state.early = EarlyWork({anchor: items for anchor, items in mine.items() if items}, play_on_host)

    def office_rotation(self) -> list[Any]:
        """The inventory's office gateways, for the hosts' interrupting changes (runner/rotation.py);
        returns their connections, opened only when used, to close at the end."""
        from provision.runner.rotation import Rotation, office_gateways  # only an office's run needs it

        config = self.config
        gateways, connections = office_gateways(
            self.inventory.hosts, inventory_variables(self.inventory),
            lambda host: connect(host, config.trust_new_host_keys, config.trace, config.timeouts))
        if gateways:
            rotation = Rotation(gateways, say=lambda name, text: self.reporter.progress(name, text, None, None))
            for state in self.states.values():
                state.rotation = rotation
        return connections

    def connector(self, host: Host) -> Callable[[], Connection]:
        """How `host` is opened: the first time by the connection started early for it, if any."""
        config = self.config

        def open_host() -> Connection:
            early = self.early.take(host.name) if self.early is not None else None
            if early is not None:
                return early.result()
            return connect(host, config.trust_new_host_keys, config.trace, config.timeouts)

        return open_host

    def recall_probes(self, plays: list[Play], selected: list[Host]) -> None:
        """Each host's remembered probes of every play it is in, before the first play: its first
        round trip carries them all."""
        for play in plays:
            tasks = selected_tasks(play, self.config.options.selects)
            in_play = self.play_hosts(play)
            for host in selected:
                state = self.states[host.name]
                if host.name in in_play and state.memory is not None:
                    variables = host_variables(play, host, self.config.extra_vars)
                    state.recalled[play.name] = state.memory.recall(play.name, secret_values(variables), tasks,
                                                                    variables)

    def run_play(self, play: Play, selected: list[Host]) -> str | None:
        in_play = self.play_hosts(play)
        hosts = [h for h in selected if h.name in in_play and not self.results[h.name].failed]
        env = make_environment(play.template_dirs)
        serial = self.config.serial or play.serial
        max_fail = self.config.max_fail_percentage
        if max_fail is None:
            max_fail = play.max_fail_percentage
        for batch in batches(hosts, serial):
            if not interrupt.STOP.is_set():
                # every host of the batch starts connecting at once (forks bound the work in flight, not
                # the handshakes, which mostly wait on the network and the hosts)
                with ThreadPoolExecutor(max_workers=min(len(batch), MAX_CONNECTING) or 1) as opener, \
                        ThreadPoolExecutor(max_workers=max(1, self.config.forks)) as pool:
                    for host in batch:
                        self.states[host.name].open_early(opener)
                    list(pool.map(lambda host: self.run_host(play, host, env), batch))
            if interrupt.STOP.is_set():
                return INTERRUPTED
            failed = sum(1 for host in batch if self.results[host.name].failed)
            if too_many_failed(failed, len(batch), max_fail):
                return (f"play {play.name!r}: {failed} of {len(batch)} hosts in the batch failed "
                        f"(max fail {max_fail if max_fail is not None else 'all'}%); stopping the rollout")
        return None

    def play_hosts(self, play: Play) -> set[str]:
        """Names of the hosts a play's pattern matches (none: the play is skipped, see
        `Inventory.play_hosts`)."""
        return {host.name for host in self.inventory.play_hosts(play.hosts)}

    def run_host(self, play: Play, host: Host, env: Any) -> None:
        result = self.results[host.name]
        state = self.states[host.name]
        started = time.monotonic()
        self.reporter.host_started(host.name)
        try:
            variables = {**inventory_variables(self.inventory), **host_variables(play, host, self.config.extra_vars)}
            PlayOnHost(play, state, variables, env, self.config.options, self.reporter, result).run()
        except HostUnreachable as error:
            result.unreachable = True
            result.error = REDACTOR(str(error))
        except ProvisionError as error:
            result.error = REDACTOR(f"host {host.name}: {error}")
        except Exception as error:  # a bug must fail this host, not the whole fleet
            result.error = REDACTOR(f"host {host.name}: internal error: {type(error).__name__}: {error}")
        result.elapsed += time.monotonic() - started
        result.round_trips = state.round_trips
        self.reporter.host_finished(host.name, result)

    def read_each(self, hosts: list[Host], task: Callable[[Host, Connection], T]) -> dict[str, Reading[T]]:
        """Read-only tasks (`facts`, `status`, `bench`): `task(host, connection)` on each host, in the
        run's batches (`serial`) and `forks` at a time, on a connection opened as a play's is (host keys,
        timeouts, the -v trace) and closed after; no run lock, no facts, nothing changed. A host that
        cannot be reached, or whose task fails (ProvisionError, or ValueError for output it could not
        read), is a reading with its error; any other exception is a bug and propagates."""
        def read(host: Host) -> Reading[T]:
            reading: Reading[T] = Reading(host.name)
            started = time.monotonic()
            conn: Connection | None = None
            try:
                conn = self.connector(host)()
                reading.value = task(host, conn)
            except (ProvisionError, ValueError) as error:
                reading.error, reading.exception = REDACTOR(str(error)), error
                reading.unreachable = isinstance(error, HostUnreachable)
            finally:
                if conn is not None:
                    reading.round_trips = conn.round_trips
                    conn.close()
            reading.elapsed = time.monotonic() - started
            return reading

        readings: dict[str, Reading[T]] = {}
        for batch in batches(hosts, self.config.serial):
            with ThreadPoolExecutor(max_workers=max(1, self.config.forks)) as pool:
                readings.update((reading.host, reading) for reading in pool.map(read, batch))
        return readings
