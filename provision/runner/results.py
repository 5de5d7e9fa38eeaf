"""Results of a run: per task, per host, and the JSON document `--json` writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Generic, TypeVar

from provision.secrets import REDACTOR


class Status(StrEnum):
    OK = "ok"
    CHANGED = "changed"
    FAILED = "failed"
    SKIPPED = "skipped"
    UNREACHABLE = "unreachable"
    NOT_CHECKED = "not checked"  # check mode: a check or wait that only a run does (not verified, not ok)


@dataclass
class TaskResult:
    task: str
    role: str | None
    status: Status
    elapsed: float = 0.0
    summary: str = ""
    diff: str = ""
    error: str | None = None
    ignored: bool = False
    report: bool = False  # the summary is what the task is for: show it even when ok
    data: dict[str, Any] = field(default_factory=dict)
    reveal: str = field(default="", repr=False)  # shown on a terminal only, never in the document
    started: float = 0.0  # wall clock (time.time) when the task began: the recap's timeline
    # a task started early (runner/early.py): its unit, the role after which it started, when it
    # started and ended (wall clock), how long its turn waited, and its bytes when the plan knows them
    early: dict[str, Any] | None = None

    @property
    def changed(self) -> bool:
        return self.status == Status.CHANGED


@dataclass
class HostResult:
    host: str
    tasks: list[TaskResult] = field(default_factory=list)
    unreachable: bool = False
    interrupted: bool = False  # Ctrl-C stopped it before a task: not a failure of the host
    error: str | None = None
    elapsed: float = 0.0
    round_trips: int = 0

    def count(self, status: Status) -> int:
        return sum(1 for task in self.tasks if task.status == status and not task.ignored)

    @property
    def failed(self) -> bool:
        return self.unreachable or self.error is not None or self.count(Status.FAILED) > 0

    def counts(self) -> dict[str, int]:
        return {
            "ok": self.count(Status.OK),
            "changed": self.count(Status.CHANGED),
            "failed": self.count(Status.FAILED),
            "skipped": self.count(Status.SKIPPED),
            "not_checked": self.count(Status.NOT_CHECKED),
            "unreachable": 1 if self.unreachable else 0,
        }


T = TypeVar("T")


@dataclass
class Reading(Generic[T]):
    """What a read-only task (`Runner.read_each`) got from one host: its value, or the error that
    stopped it (`unreachable` when the host could not be reached or went silent)."""

    host: str
    value: T | None = None
    error: str | None = None
    unreachable: bool = False
    elapsed: float = 0.0
    round_trips: int = 0
    exception: Exception | None = field(default=None, repr=False)  # for a caller that stops at it


@dataclass
class RunResult:
    hosts: dict[str, HostResult]
    check: bool = False
    aborted: str | None = None

    @property
    def ok(self) -> bool:
        return self.aborted is None and not any(h.failed for h in self.hosts.values())

    def document(self) -> dict[str, Any]:
        from provision.runner.timeline import document as timeline  # it reads these results

        return {
            "check": self.check,
            "ok": self.ok,
            "aborted": self.aborted,
            "hosts": {
                name: {
                    **host.counts(),
                    "interrupted": host.interrupted,
                    "elapsed": round(host.elapsed, 3),
                    "round_trips": host.round_trips,
                    "error": host.error,
                    "tasks": [
                        {
                            "name": t.task, "role": t.role, "status": str(t.status), "changed": t.changed,
                            "elapsed": round(t.elapsed, 3), "started": round(t.started, 3), "summary": t.summary,
                            "error": t.error,
                            **({"early": t.early} if t.early else {}),
                            **({"diff": t.diff} if t.diff else {}),
                            **({"data": t.data} if t.data else {}),
                        }
                        for t in host.tasks
                    ],
                    **({"timeline": timeline(host)} if not self.check else {}),
                }
                for name, host in self.hosts.items()
            },
        }

    def write_json(self, path: Path) -> None:
        text = REDACTOR.json(self.document(), indent=2)
        path.write_text(text + "\n")
