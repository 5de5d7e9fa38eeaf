"""What every operation is: a pure function from (arguments, facts, probed state) to a Plan.

An operation module defines one `Operation` subclass and registers it with `@register`. The runner:
1. renders a task's arguments, lets the operation `prepare` them (a template's file rendered into
   its content) and validates them into the operation's `Args` model (pydantic, unknown keys refused);
2. asks `probe(args)` for a `Probe`: a shell snippet that prints the state the operation needs, and
   the parser of that output into one typed value; the snippets of many tasks are joined into one
   remote script, so a converged host costs one round trip for all;
3. calls `plan(args, facts, state)` with the parsed value (None for an operation without a probe):
   pure, no I/O, unit-tested on recorded outputs;
4. in check mode reports the plan; otherwise, when the plan has steps, calls `apply(ctx, plan)`,
   which by default runs the plan's commands in order (each one round trip) and stops at the first
   failure. A plan without steps is never applied.

The contract that keeps check mode exact: a plan's `steps` are exactly what apply does, in order. A
step is a `Command` (a shell script apply runs) or an `Action` subclass (work the operation does
itself in Python: an SFTP copy, a poll, a deploy with its checks) that carries the typed inputs apply
needs, so a plan never hides work behind a placeholder command and apply reads nothing but its steps.
`changed` says whether the steps change the host (a wait or a check has steps
and changes nothing; a change always has steps); the runner counts a change from the outcome apply
returns (`ApplyResult.changed`, which is `changed` unless apply found out, as apt's "upgrade if
newer" does) and reports the outcome's `summary` when apply says what it did ("pulled X (digest)").
Plans are never modified after planning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from provision.errors import TaskFailed
from provision.shell import Command

if TYPE_CHECKING:
    from provision.connection.base import Connection
    from provision.facts.model import HostFacts
    from provision.ops.needs import Need


class OpArgs(BaseModel):
    """Base of every operation's arguments: unknown keys are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


State = TypeVar("State")


@dataclass(frozen=True)
class Probe(Generic[State]):
    """What an operation reads on the host: a shell snippet (spliced into the runner's shared probe
    script; it prints `key=value` lines) and the parser of its output into what `plan` receives. A
    parser that finds the output unusable raises TaskFailed quoting it."""

    snippet: str
    parse: Callable[[str], State]


@dataclass(frozen=True)
class Action:
    """A step the operation's own `apply` performs in Python rather than as one shell script: what
    it does, said as check mode lists it (the default apply refuses a plan that holds one). An
    operation subclasses it (a frozen dataclass) with the typed inputs its apply needs for that step
    (`PullImage(image=...)`), and its apply dispatches on the step types it is handed."""

    description: str

    def scripts(self) -> tuple[Command, ...]:
        """The shell scripts this step runs on the host, in order: its `Command` fields (a poll's
        check, a pull, a download)."""
        values = (getattr(self, item.name) for item in fields(self))
        return tuple(value for value in values if isinstance(value, Command))


Step = Command | Action
StepKind = TypeVar("StepKind", bound=Action)


def only_step(plan: Plan, kind: type[StepKind]) -> StepKind:
    """The plan's one step, which must be a `kind`: what an apply of one Python-side step is handed."""
    if len(plan.steps) != 1 or not isinstance(plan.steps[0], kind):
        raise TypeError(f"expected one {kind.__name__} step, got {plan.steps!r}")
    return plan.steps[0]


@dataclass
class Plan:
    """What an operation would do on this host, exactly: `steps` are what apply runs (none when the
    host is as wanted); `changed` is whether they change it (a wait or a re-check does not)."""

    changed: bool
    steps: list[Step] = field(default_factory=list)
    summary: str = ""
    diff: str = ""
    result: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.changed and not self.steps:
            raise ValueError(f"a plan that changes the host names its steps: {self.summary!r}")

    @property
    def commands(self) -> list[Command]:
        """The shell steps, in order."""
        return [step for step in self.steps if isinstance(step, Command)]

    @property
    def scripts(self) -> list[Command]:
        """Every shell script the steps run, in order: the commands and those the actions run."""
        return [script for step in self.steps
                for script in ((step,) if isinstance(step, Command) else step.scripts())]

    @classmethod
    def ok(cls, summary: str = "", **result: Any) -> Plan:
        return cls(changed=False, summary=summary, result=result)


@dataclass
class ApplyResult:
    """What apply did: whether it changed the host, what to report ("" keeps the plan's summary),
    and the stdout/rc of the last command, kept for `register`."""

    changed: bool
    summary: str = ""
    stdout: str = ""
    stderr: str = ""
    rc: int = 0
    result: dict[str, Any] = field(default_factory=dict)
    # a secret made in this run that the person running it must see once (a generated API key): the
    # live view shows it only on a terminal; it is never in a summary, a log line or the JSON document
    reveal: str = field(default="", repr=False)


class ProgressSink(Protocol):
    """Where long-running operations report progress (the runner's live view)."""

    def __call__(self, description: str, completed: float | None = None, total: float | None = None) -> None: ...


@dataclass
class ApplyContext:
    """What an operation's apply may use: the connection, the facts, and a progress callback."""

    conn: Connection
    facts: HostFacts
    host_name: str
    progress: ProgressSink
    reconnect: Callable[[], Connection]


class Operation:
    """Base class: subclasses set `name`, `Args`, and implement `probe` and `plan`."""

    name: ClassVar[str]
    Args: ClassVar[type[OpArgs]]
    #: True when applying changes what the facts say (a reboot): the runner gathers them again
    refreshes_facts: ClassVar[bool] = False
    #: True for operations whose summary is the point (debug, memory_plan): shown even when ok
    reports: ClassVar[bool] = False
    #: the HostFacts fields `plan`/`apply` read in Python (templates' reads are found by the runner);
    #: only these and the templates' are gathered, and reading another one raises FactNotGathered
    reads_facts: ClassVar[frozenset[str]] = frozenset()
    #: True when applying stops the host's service for a while (the vLLM release swap): on a backend of
    #: an office gateway, the runner drains it there first and puts it back after (runner/rotation.py)
    interrupts_service: ClassVar[bool] = False
    #: the arguments an offline bundle reads from a task (rendered with the host's variables before the
    #: run, for `offline_needs`); none: the operation needs nothing from a bundle
    offline_arguments: ClassVar[tuple[str, ...]] = ()
    #: True when a task whose `offline_arguments` cannot be rendered before the run (they read a result
    #: registered in it) is reported as unresolved rather than left to the run
    offline_reports_unrendered: ClassVar[bool] = False

    def template_files(self, args: dict[str, Any]) -> list[Any]:
        """The role templates a task's (not yet rendered) arguments name; the facts they read are
        gathered with the task's own."""
        return []

    def prepare(self, rendered: dict[str, Any], render_file: Callable[[str], str]) -> dict[str, Any]:
        """The rendered arguments, completed with what must be rendered before the probe (`template`
        renders its file into `content`); by default unchanged."""
        return rendered

    def offline_needs(self, args: dict[str, Any], render_file: Callable[[str], str]) -> list[Need]:
        """What a task with these rendered `offline_arguments` needs from an offline bundle
        (provision/ops/needs.py); `render_file` renders a role template (TemplateError: reported)."""
        return []

    def arguments(self, rendered: dict[str, Any]) -> Any:
        """A task's rendered arguments as this operation's `Args`; TaskFailed naming every problem."""
        try:
            return self.Args.model_validate(rendered)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or self.name}: {e['msg']}" for e in error.errors())
            raise TaskFailed(f"invalid arguments for {self.name}: {problems}") from error

    def probe(self, args: Any) -> Probe[Any] | None:
        """The snippet that reads what `plan` needs, and its parser; None when the plan needs no state."""
        return None

    def plan(self, args: Any, facts: HostFacts, state: Any) -> Plan:
        """The plan from the arguments, the facts and the probe's parsed state (None without a probe)."""
        raise NotImplementedError

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        """Run the plan's commands in order; the first failure raises CommandFailed. An operation
        whose plans hold an `Action` does that work in its own apply."""
        actions = [step.description for step in plan.steps if isinstance(step, Action)]
        if actions:
            raise TypeError(f"{self.name} planned {actions} but has no apply that performs them")
        last = None
        for command in plan.commands:
            last = ctx.conn.run_command(command)
        return ApplyResult(
            changed=plan.changed,
            stdout=last.stdout if last else "",
            stderr=last.stderr if last else "",
            rc=last.rc if last else 0,
            result=dict(plan.result),
        )


#: operations registered by the modules imported so far (look them up through `provision.ops.REGISTRY`)
REGISTERED: dict[str, Operation] = {}


def register(cls: type[Operation]) -> type[Operation]:
    """Class decorator: make the operation available to tasks under `cls.name`."""
    REGISTERED[cls.name] = cls()
    return cls

