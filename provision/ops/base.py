"""What every operation is: a pure function from (arguments, facts, probed state) to a Plan.

An operation module defines one `Operation` subclass and registers it with `@register`. The runner:
1. validates a task's arguments into the operation's `Args` model (pydantic, unknown keys refused);
2. asks `probe(args)` for a shell snippet that prints the state the operation needs; the snippets of
   many tasks are joined into one remote script, so a converged host costs one round trip for all;
3. calls `plan(args, facts, probe_output)`: pure, no I/O, unit-tested on recorded outputs;
4. in check mode reports the plan; otherwise calls `apply(ctx, plan)`, which by default runs the
   plan's commands in order (each one round trip) and stops at the first failure.
Operations that must wait or talk to the host in between (reboot, wait_for, pulls with progress)
override `apply`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from provision.errors import TaskFailed
from provision.shell import Command

if TYPE_CHECKING:
    from provision.connection.base import Connection
    from provision.facts.model import HostFacts


class OpArgs(BaseModel):
    """Base of every operation's arguments: unknown keys are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


@dataclass
class Plan:
    """What an operation would do on this host, exactly; `changed` is False when nothing would.

    `needs_apply` marks work that must run although it changes nothing (waiting for a port, an apt
    cache refresh on its own): the runner applies a plan when `wants_apply`, and counts it as a
    change only when `changed`.
    """

    changed: bool
    commands: list[Command] = field(default_factory=list)
    summary: str = ""
    diff: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    needs_apply: bool = False

    @property
    def wants_apply(self) -> bool:
        """Whether the runner (outside check mode) must call apply."""
        return self.changed or self.needs_apply

    @classmethod
    def ok(cls, summary: str = "", **result: Any) -> Plan:
        return cls(changed=False, summary=summary, result=result)


@dataclass
class ApplyResult:
    """What apply did: stdout/rc of the last command are kept for `register`."""

    changed: bool
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

    def arguments(self, rendered: dict[str, Any]) -> Any:
        """A task's rendered arguments as this operation's `Args`; TaskFailed naming every problem."""
        try:
            return self.Args.model_validate(rendered)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or self.name}: {e['msg']}" for e in error.errors())
            raise TaskFailed(f"invalid arguments for {self.name}: {problems}") from error

    def probe(self, args: Any) -> str:
        """Shell snippet whose stdout `plan` parses; "" when the plan needs no state."""
        return ""

    def plan(self, args: Any, facts: HostFacts, state: str) -> Plan:
        raise NotImplementedError

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        """Run the plan's commands in order; the first failure raises CommandFailed."""
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

