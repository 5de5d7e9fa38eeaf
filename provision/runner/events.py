"""What the runner tells the outside while it works (the CLI's live view implements it)."""

from __future__ import annotations

from typing import Protocol

from provision.runner.results import HostResult, TaskResult


class Reporter(Protocol):
    def host_started(self, host: str) -> None: ...

    def task_started(self, host: str, task: str) -> None: ...

    def task_finished(self, host: str, result: TaskResult) -> None: ...

    def progress(self, host: str, description: str, completed: float | None, total: float | None) -> None: ...

    def host_finished(self, host: str, result: HostResult) -> None: ...

    def message(self, text: str) -> None: ...


class SilentReporter:
    """Reports nothing (library use, tests)."""

    def host_started(self, host: str) -> None:
        pass

    def task_started(self, host: str, task: str) -> None:
        pass

    def task_finished(self, host: str, result: TaskResult) -> None:
        pass

    def progress(self, host: str, description: str, completed: float | None, total: float | None) -> None:
        pass

    def host_finished(self, host: str, result: HostResult) -> None:
        pass

    def message(self, text: str) -> None:
        pass
