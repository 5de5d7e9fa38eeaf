"""Progress for every transfer of a bundle (rich): bytes so far of the total, and the rate."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)


def transfer_progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}", markup=False), BarColumn(), DownloadColumn(),
                    TransferSpeedColumn(), TimeRemainingColumn(), console=console, transient=False)


class Transfer:
    """One transfer's bar: `advance(n)` as bytes move; `total` may be learned late."""

    def __init__(self, progress: Progress, description: str, total: int | None = None) -> None:
        self.progress = progress
        self.task: TaskID = progress.add_task(description, total=total)

    def advance(self, count: int) -> None:
        self.progress.advance(self.task, count)

    def set(self, completed: int | None = None, total: int | None = None, description: str | None = None) -> None:
        self.progress.update(self.task, completed=completed, total=total, description=description)

    def finish(self, description: str | None = None) -> None:
        task = self.progress.tasks[[t.id for t in self.progress.tasks].index(self.task)]
        self.progress.update(self.task, total=task.completed, description=description)
