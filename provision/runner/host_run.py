"""One play on one host: render, probe (batched), plan, apply or report, notify handlers."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jinja2

from provision import interrupt
from provision.connection.base import Connection
from provision.errors import CommandFailed, HostDidNotComeBack, HostUnreachable, ProvisionError, TaskFailed
from provision.facts.gather import facts_from, gather_facts
from provision.facts.model import HostFacts
from provision.facts.probe import probe_for
from provision.facts.sections import registry as facts_registry
from provision.ops import REGISTRY
from provision.playbook.model import Play, Task
from provision.playbook.templating import Renderer, TemplateError, facts_read
from provision.playbook.unsafe import mark_unsafe
from provision.runner import early, pending_handlers
from provision.runner.events import Reporter
from provision.runner.probe import ProbeCache
from provision.runner.probe_memory import ProbeMemory, secret_values, task_key
from provision.runner.results import HostResult, Status, TaskResult
from provision.runner.run_lock import RunLock
from provision.secrets import REDACTOR

if TYPE_CHECKING:
    from provision.ops.base import ApplyResult, Plan


@dataclass
class RunOptions:
    check: bool = False
    diff: bool = False
    tags: frozenset[str] = frozenset()
    skip_tags: frozenset[str] = frozenset()
    handlers_dir: str = pending_handlers.FOLDER  # where notified, not yet run handlers are kept

    def selects(self, task: Task) -> bool:
        if self.tags and not (task.tags & self.tags or "always" in task.tags):
            return False
        return not (self.skip_tags and task.tags & self.skip_tags)


@dataclass
class HostState:
    """What persists for one host across plays: its connection, facts, registered results, and the
    run lock (asked for with the first batch of probes, confirmed once the facts are in)."""

    name: str
    connect: Callable[[], Connection]
    conn: Connection | None = None
    facts: HostFacts | None = None
    registered: dict[str, Any] = field(default_factory=dict)
    round_trips_before: int = 0
    lock: RunLock | None = None
    lock_confirmed: bool = False
    lock_round_trips: int = 0  # batches that went on the run lock's channel (`fill`)
    opening: Future[Connection] | None = None
    # handlers an earlier run notified and never ran, by play (runner/pending_handlers.py)
    pending_handlers: dict[str, list[str]] | None = None  # None: not read yet in this run
    memory: ProbeMemory | None = None  # the probes each play used here last time (runner/probe_memory.py)
    # last run's snippets of each play's selected tasks, in play order; all plays' from the first round
    # trip on, through one cache (a snippet's output is the host's state, whichever play reads it)
    recalled: dict[str, list[str]] = field(default_factory=dict)
    cache: ProbeCache = field(default_factory=ProbeCache)
    # the run's office gateways (runner/rotation.py `Rotation`): None in check mode or without one
    rotation: Any = None
    # the tasks that start early on this host and what they did (runner/early.py): None in check mode
    early: early.EarlyWork | None = None

    @property
    def known_facts(self) -> HostFacts:
        """The facts, once a play's first round trip gathered them (before any of its tasks is planned)."""
        assert self.facts is not None, "the facts are gathered before a task is planned"
        return self.facts

    def open_early(self, pool: Executor) -> None:
        """Start connecting now, in `pool`, while this host's tasks are still being rendered: the
        handshake waits on the network and the host, not on us."""
        if self.conn is None and self.opening is None:
            self.opening = pool.submit(self._open)

    def connection(self) -> Connection:
        """The connection, the run lock asked for on it (when the first batch did not ask already)."""
        conn = self._connected()
        if self.lock is not None and not self.lock.started:
            self.lock.start(conn)
        return conn

    def _connected(self) -> Connection:
        if self.conn is None:
            opening, self.opening = self.opening, None
            self.conn = opening.result() if opening is not None else self._open()
            if self.lock is not None and self.lock_confirmed:  # a reconnect (after a reboot): take it again
                self.lock.confirm(self.conn)
        return self.conn

    def _open(self) -> Connection:
        return self.connect()

    def fill(self, cache: ProbeCache, snippets: list[str]) -> None:
        """Probe these snippets; the host's first batch goes with the run lock, on its channel: the
        lock script runs it once the lock is taken (one channel and shell less on the host). Where the
        lock is held, the batch runs on its own as before, and `confirm_lock` decides."""
        conn = self._connected()
        lock = self.lock
        if lock is None or lock.started:
            cache.fill(conn, snippets)
            return

        def with_the_lock(script: str, token: str) -> str | None:
            lock.start(conn, batch=(script, token))
            output = lock.batch_output()
            self.lock_round_trips += output is not None
            return output

        cache.fill(conn, snippets, first=with_the_lock)

    def confirm_lock(self) -> bool:
        """Hold the run lock (waiting or refusing as configured); True when it was taken only after
        another run let go, so what was read from the host before it is stale."""
        if self.lock is None or self.lock_confirmed:
            return False
        waited = self.lock.confirm(self.connection())
        self.lock_confirmed = True
        return waited

    def release(self) -> None:
        if self.opening is not None:  # opened early, never used (its play was skipped, or Ctrl-C)
            with contextlib.suppress(Exception):
                self.conn = self.opening.result()
            self.opening = None
        if self.lock is not None:
            self.lock.release()
        if self.conn is not None:
            self.conn.close()

    def reconnect(self) -> Connection:
        if self.conn is not None:
            self.round_trips_before += self.conn.round_trips
            with contextlib.suppress(Exception):  # the old connection is dead anyway
                self.conn.close()
        self.conn = None
        return self.connection()

    @property
    def round_trips(self) -> int:
        return self.round_trips_before + self.lock_round_trips + (self.conn.round_trips if self.conn else 0)


class PlayOnHost:
    """Runs one play's tasks and notified handlers on one host."""

    def __init__(self, play: Play, state: HostState, host_vars: dict[str, Any], env: jinja2.Environment,
                 options: RunOptions, reporter: Reporter, result: HostResult) -> None:
        self.play = play
        self.state = state
        self.host_vars = host_vars
        self.env = env
        self.options = options
        self.reporter = reporter
        self.result = result
        self.cache = state.cache
        self.notified: list[str] = []
        self.persisted: set[str] = set()  # handler names written on the host as pending
        self.applying = False
        self._renderer: tuple[Any, tuple[str, ...], Renderer] | None = None
        self.secrets = secret_values(host_vars)
        self.used: list[tuple[str, str]] = []  # (task, snippet) each task planned from, in order
        self.ran: set[str] = set()  # the tasks that ran (or were skipped) in this run

    def renderer(self) -> Renderer:
        """A renderer over the variables, facts and results known now; made again only when the facts
        or a registered result changed. What the host sent (facts, results) is marked unsafe here, where
        it enters the variables: a process named `{{ ... }}` is text, never a template (unsafe.py)."""
        key = [self.state.facts, *self.state.registered.items()]  # compared by identity: kept alive here
        notified = tuple(self.notified)
        if self._renderer is None or not _same(self._renderer[0], key) or self._renderer[1] != notified:
            facts = mark_unsafe(self.state.facts.as_vars()) if self.state.facts else {}
            # notified_handlers: the play's handlers due at its end (this run's and a killed run's left
            # over), so a task can leave a check to the handler that checks after the restart
            variables = {**self.host_vars, **mark_unsafe(self.state.registered), "facts": facts,
                         "inventory_hostname": self.state.name, "notified_handlers": list(notified)}
            self._renderer = (key, notified, Renderer(self.env, variables))
        return self._renderer[2]

    def run(self) -> bool:
        """Run all tasks, then the handlers; False when the host failed. The probes used are
        remembered for the next run (those of the tasks that did not run stay as they were)."""
        memory = self.state.memory
        try:
            return self.run_tasks_and_handlers()
        finally:
            if memory is not None:
                memory.keep(self.play.name, self.used, self.ran, self.secrets,
                            {task_key(task) for task in self.play.tasks})

    def run_tasks_and_handlers(self) -> bool:
        tasks = [t for t in self.play.tasks if self.options.selects(t)]
        self.gather_facts_and_states(tasks)
        if self.state.confirm_lock():
            # read while another run still held the host (--wait-lock): read it again under the lock
            self.cache.invalidate()
            self.state.pending_handlers = None
            self.gather_facts_and_states(tasks)
        key = pending_handlers.play_key(self.play.name)
        pending = (self.state.pending_handlers or {}).get(key, [])
        left_over = [n for n in pending if n in {h.name for h in self.play.handlers}]
        self.notified.extend(n for n in left_over if n not in self.notified)
        self.persisted.update(pending)
        if left_over:
            self.gather_missing_facts([h for h in self.play.handlers if h.name in left_over])
        work = self.state.early
        points = early.triggers(self.play, tasks, set(work.groups)) if work is not None else {}
        for index, task in enumerate(tasks):
            if self.interrupted(task):
                return False
            for anchor in points.get(index, []):
                self.start_early(anchor)
            ran_early = work.done.pop(task_key(task), None) if work is not None else None
            if work is not None and ran_early is not None:  # reported when it ran; in its turn's place
                self.ran.add(task_key(task))
                self.used.extend(pair for pair in work.used if pair[0] == task_key(task))
                self.result.tasks.append(ran_early)
                if ran_early.status == Status.FAILED and not task.ignore_errors:
                    return False
                continue
            if not self.run_task(task, tasks[index + 1:]):
                return False
        if not interrupt.STOP.is_set():
            for anchor in points.get(len(tasks), []):
                self.start_early(anchor)
        handlers = [h for h in self.play.handlers if h.name in self.notified]
        ran = all(not self.interrupted(handler) and self.run_task(handler, handlers[index + 1:])
                  for index, handler in enumerate(handlers))
        if ran and work is not None and not interrupt.STOP.is_set():
            deferred, work.deferred = work.deferred, []
            for item, anchor in deferred:
                work.play_on_host(item.play).run_early(item.task, anchor)
        if ran and self.persisted and not self.options.check:
            self.run_on_host(pending_handlers.clear_script(key, self.options.handlers_dir),
                             "forget the handlers that ran")
            (self.state.pending_handlers or {}).pop(key, None)
        return ran

    def start_early(self, anchor: str) -> None:
        """The tasks that start once role `anchor` has run (runner/early.py): each with the tasks it
        needs, run now through a PlayOnHost of its own play; one that needs a handler of this play,
        once this play's handlers have run."""
        work = self.state.early
        assert work is not None
        now, later = early.after_handlers(work.groups.pop(anchor, []), self.play)
        work.deferred += [(item, anchor) for item in later if self.options.selects(item.task)]
        for item in now:
            if self.options.selects(item.task) and not interrupt.STOP.is_set():
                work.play_on_host(item.play).run_early(item.task, anchor)

    def run_early(self, task: Task, anchor: str) -> None:
        """This play's `task` started early: the tasks it needs run now (their results kept for their
        turn), then its change starts in a unit on the host. A needed task runs early only when it
        changes nothing (it is there for its result: a registered value, a probe that finds curl):
        one that would change the host keeps its turn, and so does the task. Work moved ahead of the
        roles between could undo their order (an apt task's `dpkg --configure -a` before the driver
        role's DKMS check: tests/e2e/test_month_two_debian.py); only the task's own change moves."""
        work = self.state.early
        assert work is not None
        needed = [t for t in self.play.tasks if t.name in task.needs and self.options.selects(t)
                  and task_key(t) not in work.done]
        self.gather_missing_facts([*needed, task])
        try:  # a task its `when` skips (no draft model) starts nothing and runs no need early
            if task.when is not None and not self.renderer().condition(task.when):
                return
        except (ProvisionError, TemplateError, jinja2.TemplateError):
            pass  # its `when` reads a need's result: it is read again once the needs ran
        for index, need in enumerate(needed):
            planned = self.plan_now(need)
            if planned is None or (planned[1] is not None and planned[1].changed):
                why = "it would change the host first" if planned else "it cannot be planned yet"
                self.reporter.progress(self.state.name, f"{task.name}: not started early ({need.name}: {why}); "
                                       "both run at their turn", None, None)
                return
            ok = self.run_task(need, needed[index + 1:])
            work.done[task_key(need)] = self.result.tasks[-1]
            if not ok:
                return  # at its turn the failure is in the results, in order; nothing started early
        self.start_in_unit(task, anchor)
        work.used.extend(self.used)

    def plan_now(self, task: Task) -> tuple[Any, Plan | None] | None:
        """The task's arguments and its plan from the host as it is now (the probe kept in the run's
        cache, so its turn reads it again); (None, None) when it is skipped (`when`); None when it cannot be
        planned (its turn runs as it always did and says what went wrong)."""
        op = REGISTRY[task.op]
        try:
            renderer = self.renderer()
            if task.when is not None and not renderer.condition(task.when):
                return None, None
            args = self.validate(task, renderer)
            probe = op.probe(args)
            if probe is not None and probe.snippet not in self.cache:
                self.cache.fill(self.state.connection(), [probe.snippet])
            plan = op.plan(args, self.state.known_facts, probe.parse(self.cache.get(probe.snippet)) if probe else None)
        except (ProvisionError, TemplateError, jinja2.TemplateError):
            return None
        if probe is not None:
            self.used.append((task_key(task), probe.snippet))
        return args, plan

    def start_in_unit(self, task: Task, anchor: str) -> None:
        """Plan the task now; when its plan changes the host, start its first script
        (`early.first_script`) in a unit on the host; the rest runs at its turn, its apply following
        that unit. Anything else (converged, a plan that fails, one whose first step runs no script) is
        left to its turn, which then runs as it always did and says what went wrong."""
        work = self.state.early
        assert work is not None
        planned = self.plan_now(task)
        if planned is None:
            return
        args, plan = planned
        if plan is None:
            return
        first = early.first_script(plan)
        if first is None:
            return
        unit = early.unit_name(task_key(task))
        begun = time.time()
        result = self.state.connection().run(early.start_script(unit, task.name), sudo=True,
                                             data=early.unit_script(unit, first).encode())
        self.cache.invalidate()  # the unit is changing what the probes read
        if result.rc != 0:
            self.reporter.progress(self.state.name, f"{task.name}: not started early (it runs at its turn): "
                                   f"{REDACTOR(result.stderr.strip()[-300:])}", None, None)
            return
        work.units[task_key(task)] = early.Started(unit, anchor, args, plan, first, begun)
        earlier = early.earlier_failure(unit, result.stdout)
        if earlier is not None:
            self.reporter.progress(self.state.name, f"{task.name}: {REDACTOR(earlier)}", None, None)
        self.reporter.progress(self.state.name, f"started early: {task.name} (host unit {unit})", None, None)

    def await_early(self, task: Task, started: early.Started, renderer: Renderer) -> TaskResult | None:
        """At its turn, a task started early waits for its unit, following its output through the
        operation's own apply; None when its arguments changed since (the normal course follows)."""
        op = REGISTRY[task.op]
        args = self.validate(task, renderer)
        waiting = time.time()
        follow = early.FollowConnection(self.state.connection(), started.command, started.unit)
        applied = self.apply(op, started.plan, conn=follow)
        ended = follow.ended or time.time()
        if args != started.args:
            return None
        self.register(task, self.registered_value(started.plan, applied, True))
        waited = time.time() - waiting
        note = (f"started early after role {started.anchor}, in host unit {started.unit}; "
                f"waited {waited:.0f} s for it")
        summary = applied.summary or started.plan.summary
        transferred = started.plan.result.get("transferred_bytes")
        return TaskResult(task.name, task.role, Status.CHANGED, summary=REDACTOR(f"{summary} ({note})"),
                          early={"unit": started.unit, "after": started.anchor, "started": started.started,
                                 "ended": ended, "waited": waited,
                                 **({"bytes": transferred} if isinstance(transferred, int) else {})})

    def interrupted(self, task: Task) -> bool:
        """After a Ctrl-C no new task starts: the host stops here, saying where (a rerun goes on)."""
        if not interrupt.STOP.is_set():
            return False
        where = f"{task.role + ': ' if task.role else ''}{task.name}"
        self.result.interrupted = True
        self.result.error = f"interrupted (Ctrl-C) before task {where!r}; nothing of it ran, a rerun goes on from here"
        return True

    def gather_facts_and_states(self, tasks: list[Task]) -> None:
        """The facts these tasks read that are not known yet, and the state of every task that renders
        without them, in one round trip.

        Only the facts that the tasks' (and the handlers they notify) templates name, through the
        variables they use too, and that their operations declare (`reads_facts`) are gathered; a
        task skipped by a `when` that needs no fact reads none. A task whose arguments or `when` read
        facts fails to render here (StrictUndefined) and is probed later at its turn; probes are
        cached by snippet text, so a snippet rendered here is only ever used by a task that renders
        to the same text with the real facts.
        """
        known = self.state.facts
        wanted = self.facts_needed([*tasks, *self.handlers_notifiable_by(tasks)])
        missing = wanted if known is None else frozenset() if known.gathered is None else \
            None if wanted is None else wanted - known.gathered
        facts_probe = probe_for(missing) if missing is None or missing else ""
        # every play's pending handlers are read at once, in the host's first round trip of the run
        pending_probe = "" if self.state.pending_handlers is not None else \
            pending_handlers.read_snippet(self.options.handlers_dir)
        # rendered before asking for the connection: the handshake proceeds meanwhile
        snippets = [facts_probe, pending_probe, *self.probe_ahead(tasks), *self.recalled_from_here()]
        self.state.fill(self.cache, snippets)
        if facts_probe:
            gathered = facts_from(self.cache.get(facts_probe), self.state.name)
            self.state.facts = gathered if known is None else known.merged(gathered)
        elif known is None:
            self.state.facts = HostFacts(gathered=frozenset())
        if pending_probe:
            self.state.pending_handlers = pending_handlers.parse(self.cache.get(pending_probe))

    def recalled_from_here(self) -> list[str]:
        """Last run's snippets of this play and the plays after it."""
        names = list(self.state.recalled)
        later = names[names.index(self.play.name):] if self.play.name in names else []
        return [snippet for name in later for snippet in self.state.recalled[name]]

    def gather_missing_facts(self, tasks: list[Task]) -> None:
        """The facts these tasks read that were not gathered (a killed run's left-over handlers, known
        only from the first round trip): one more round trip, only when there are any."""
        known = self.state.facts
        wanted = self.facts_needed(tasks)
        if known is None or known.gathered is None or (wanted is not None and wanted <= known.gathered):
            return
        facts_probe = probe_for(None if wanted is None else wanted - known.gathered)
        self.cache.fill(self.state.connection(), [facts_probe])
        self.state.facts = known.merged(facts_from(self.cache.get(facts_probe), self.state.name))

    def handlers_notifiable_by(self, tasks: list[Task]) -> list[Task]:
        """The play's handlers that these tasks may notify (the only ones that can run after them)."""
        names = {name for task in tasks for name in task.notify}
        return [handler for handler in self.play.handlers if handler.name in names]

    def facts_needed(self, tasks: list[Task]) -> frozenset[str] | None:
        """The HostFacts fields these tasks can read (None: all of them)."""
        renderer = self.renderer()
        fields: set[str] = set()
        for task in tasks:
            if task.when is not None and not self.may_run(task.when, renderer):
                continue
            op = REGISTRY[task.op]
            values: list[Any] = [task.args, *(_as_template(w) for w in _conditions(task.when)),
                                 *(_as_template(w) for w in _conditions(task.changed_when))]
            for name in op.template_files(task.args):
                source = self.template_source(name)
                if source is None:
                    return None
                values.append(source)
            read = facts_read(self.env, values, self.host_vars)
            if read is None:
                return None
            fields |= read | op.reads_facts
        return frozenset(fields & facts_registry().fact_fields)

    def template_source(self, name: Any) -> str | None:
        """A role template's text, to find the facts it reads ("" when there is none: the task fails
        with its own error when it runs; None when the name is itself a template)."""
        if not isinstance(name, str) or "{" in name or self.env.loader is None:
            return None
        try:
            return self.env.loader.get_source(self.env, name)[0]
        except jinja2.TemplateNotFound:
            return ""

    @staticmethod
    def may_run(when: str | list[str], renderer: Renderer) -> bool:
        """False only when a task's `when` is false already without facts or later results."""
        try:
            return renderer.condition(when)
        except (TemplateError, jinja2.TemplateError, ProvisionError):
            return True

    def run_task(self, task: Task, following: list[Task]) -> bool:
        self.reporter.task_started(self.state.name, task.name)
        wall = time.time()
        started = time.monotonic()
        self.applying = False
        try:
            outcome = self.execute(task, following)
        except HostUnreachable as error:
            raise HostUnreachable(self.describe_unreachable(task, error)) from error
        except (ProvisionError, TemplateError) as error:
            outcome = TaskResult(task.name, task.role, Status.FAILED, error=REDACTOR(self.describe_error(task, error)),
                                 ignored=task.ignore_errors)
        outcome.elapsed = time.monotonic() - started
        outcome.started = wall
        self.result.tasks.append(outcome)
        self.reporter.task_finished(self.state.name, outcome)
        return outcome.status != Status.FAILED or task.ignore_errors

    def describe_unreachable(self, task: Task, error: HostUnreachable) -> str:
        """Which task was in flight, and whether the host may be mid-change (and what a rerun does)."""
        lock = self.state.lock
        silent_for = lock.silent_for if lock is not None else None
        silent = silent_for and not isinstance(error, HostDidNotComeBack)
        why = f"no answer for {silent_for:.0f} s (the host went silent)" if silent else str(error)
        where = f"{task.role + ': ' if task.role else ''}{task.name}"
        if self.applying:
            state = ("the host may be mid-change: this task was applying its change (each change is atomic); "
                     "the next run checks the host again and finishes or redoes it")
        else:
            state = "the task was only reading the host's state; nothing was being changed"
        return f"{self.state.name}: unreachable: {why}, during task {where!r}; {state}"

    def describe_error(self, task: Task, error: Exception) -> str:
        if isinstance(error, CommandFailed):
            error.host = self.state.name
            error.task = task.name
            return str(error)
        return f"host {self.state.name}, task {task.name!r} ({task.source}): {error}"

    def execute(self, task: Task, following: list[Task]) -> TaskResult:
        self.ran.add(task_key(task))
        renderer = self.renderer()
        started = self.state.early.units.pop(task_key(task), None) if self.state.early is not None else None
        if started is not None:
            awaited = self.await_early(task, started, renderer)
            if awaited is not None:
                return awaited
            renderer = self.renderer()
        if task.when is not None and not renderer.condition(task.when):
            self.register(task, {"skipped": True, "changed": False})
            return TaskResult(task.name, task.role, Status.SKIPPED)
        op = REGISTRY[task.op]
        args = self.validate(task, renderer)
        probe = op.probe(args)
        if probe is not None and probe.snippet not in self.cache:
            self.cache.fill(self.state.connection(), [probe.snippet, *self.probe_ahead(following)])
        if probe is not None:
            self.used.append((task_key(task), probe.snippet))
        plan = op.plan(args, self.state.known_facts, probe.parse(self.cache.get(probe.snippet)) if probe else None)
        if plan.changed and not self.options.check:
            self.persist_notified(task)
        applied = self.apply_in_rotation(op, plan) if not self.options.check else None
        changed = applied.changed if applied else plan.changed
        if task.changed_when is not None:
            changed = renderer.condition(task.changed_when) if isinstance(task.changed_when, str) else task.changed_when
        if changed:
            self.notified.extend(n for n in task.notify if n not in self.notified)
        self.register(task, self.registered_value(plan, applied, changed))
        summary = applied.summary if applied and applied.summary else plan.summary
        status = Status.CHANGED if changed else Status.OK
        if self.options.check and plan.steps and not changed:
            status = Status.NOT_CHECKED  # its steps are the check (a verify deferred, a wait): not run
        return TaskResult(task.name, task.role, status, summary=REDACTOR(summary),
                          diff=REDACTOR(plan.diff) if self.options.diff else "",
                          report=op.reports, data=_plain_data(_reported(plan, applied)) if op.reports else {},
                          reveal=applied.reveal if applied else "")

    def persist_notified(self, task: Task) -> None:
        """Before a change that notifies: its handlers, written on the host as pending."""
        names = [name for name in task.notify if name not in self.persisted]
        if names:
            self.run_on_host(pending_handlers.record_script(pending_handlers.play_key(self.play.name), names,
                                                           self.options.handlers_dir),
                             "record the handlers a change notifies")
            self.persisted.update(names)

    def run_on_host(self, script: str, what: str) -> None:
        result = self.state.connection().run(script, sudo=True)
        if result.rc != 0:
            raise CommandFailed(command=what, exit_code=result.rc, stdout=result.stdout, stderr=result.stderr,
                                host=self.state.name)

    def validate(self, task: Task, renderer: Renderer) -> Any:
        op = REGISTRY[task.op]
        return op.arguments(op.prepare(renderer.render(task.args), renderer.render_file))

    def probe_ahead(self, following: list[Task]) -> list[str]:
        """Probe snippets of the tasks after this one that can be rendered now (best effort)."""
        snippets = []
        renderer = self.renderer()
        for task in following:
            try:
                if task.when is not None and not renderer.condition(task.when):
                    continue
                args = self.validate(task, renderer)
            except (TemplateError, TaskFailed, ProvisionError):
                continue
            probe = REGISTRY[task.op].probe(args)
            if probe is not None:
                snippets.append(probe.snippet)
        return snippets

    def apply_in_rotation(self, op: Any, plan: Plan) -> ApplyResult | None:
        """Apply the plan (when it has steps); a change that interrupts the service of a backend of an
        office gateway runs while the gateway has it drained, and a converged one puts back a backend
        an earlier run left drained (runner/rotation.py)."""
        rotation = self.state.rotation if op.interrupts_service else None
        if rotation is None or not rotation.of(self.state.name):
            return self.apply(op, plan) if plan.steps else None
        from provision.office_gateway.rotation import RotationSettings

        renderer = self.renderer()
        try:
            settings = RotationSettings.from_vars({key: renderer.render(self.host_vars[key]) for key in (
                "office_rolling_drain", "office_drain_timeout_s", "office_min_available",
                "office_min_available_wait_s") if key in self.host_vars})
        except ValueError as error:
            raise TaskFailed(str(error)) from error
        if not plan.steps:
            note = rotation.settle(self.state.name)
            if not note:
                return None
            from provision.ops.base import ApplyResult

            # the host is as the inventory says (not a change of it); the gateway's undrain is said
            return ApplyResult(changed=False, summary=f"{plan.summary}; {note}" if plan.summary else note,
                               result=dict(plan.result))
        applied, before, after = rotation.swap(self.state.name, settings, lambda: self.apply(op, plan))
        if before or after:
            applied.summary = "; ".join(part for part in (before, applied.summary or plan.summary, after) if part)
        return applied

    def apply(self, op: Any, plan: Plan, conn: Any = None) -> ApplyResult:
        from provision.ops.base import ApplyContext  # here: `up` connects before any operation is imported

        state = self.state
        context = ApplyContext(
            conn=conn or state.connection(), facts=state.known_facts, host_name=state.name,
            progress=lambda description, completed=None, total=None: self.reporter.progress(
                state.name, description, completed, total),
            reconnect=state.reconnect,
        )
        self.applying = True
        applied = op.apply(context, plan)
        self.applying = False
        self.cache.invalidate()  # it ran steps: what the probes read may have moved
        if op.refreshes_facts:
            state.facts = gather_facts(state.connection())
        return applied

    def register(self, task: Task, value: dict[str, Any]) -> None:
        if task.register:
            self.state.registered[task.register] = value

    @staticmethod
    def registered_value(plan: Plan, applied: ApplyResult | None, changed: bool) -> dict[str, Any]:
        value: dict[str, Any] = {"changed": changed, "skipped": False, "failed": False, **plan.result}
        if applied:
            value.update(applied.result, rc=applied.rc, stdout=applied.stdout, stderr=applied.stderr,
                         stdout_lines=applied.stdout.splitlines())
        return value


def _plain_data(result: dict[str, Any]) -> dict[str, Any]:
    """A reporting operation's result for the JSON document: JSON-safe values only (nested dicts and
    lists too: the smoke checks' `smoke` entries), secrets masked."""
    return _plain(result)


_UNSAFE = object()


def _plain(value: Any) -> Any:
    if isinstance(value, str):
        return REDACTOR(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        items = {str(k): _plain(v) for k, v in value.items()}
        return {k: v for k, v in items.items() if v is not _UNSAFE}
    if isinstance(value, list | tuple):
        return [item for item in map(_plain, value) if item is not _UNSAFE]
    return _UNSAFE


def _reported(plan: Plan, applied: ApplyResult | None) -> Any:
    """What a reporting task found: its apply's result when it ran (a smoke check), else its plan's."""
    return applied.result if applied is not None and applied.result is not None else plan.result


def _conditions(condition: str | list[str] | bool | None) -> list[str]:
    """A `when`/`changed_when` as its list of expressions (a bool has none)."""
    if isinstance(condition, str):
        return [condition]
    return [str(item) for item in condition] if isinstance(condition, list) else []


def _as_template(expression: str) -> str:
    text = expression.strip()
    return text if text.startswith("{{") else "{{ " + text + " }}"


def _same(before: list[Any], now: list[Any]) -> bool:
    """The same objects (facts, then (name, result) pairs), in the same order."""
    def identity(item: Any) -> Any:
        return (item[0], id(item[1])) if isinstance(item, tuple) else id(item)
    return len(before) == len(now) and all(identity(a) == identity(b) for a, b in zip(before, now, strict=True))
