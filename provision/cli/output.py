"""What a person sees: a live per-host view while running, then a recap table and the errors."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from provision.runner.results import HostResult, RunResult, Status, TaskResult
from provision.secrets import REDACTOR

STATUS_STYLE = {
    Status.OK: "green", Status.CHANGED: "yellow", Status.FAILED: "bold red",
    Status.SKIPPED: "cyan", Status.UNREACHABLE: "bold magenta", Status.NOT_CHECKED: "yellow",
}


@dataclass
class HostLine:
    task: str = "connecting"
    state: str = "running"
    counts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "changed": 0, "failed": 0, "skipped": 0})
    progress: tuple[str, float | None, float | None] | None = None
    started: float = field(default_factory=time.monotonic)


class ConsoleReporter:
    """A Reporter: a rich live table on a terminal; one line per task otherwise (logs, CI)."""

    def __init__(self, console: Console, check: bool = False, show_diff: bool = False) -> None:
        self.console = console
        self.check = check
        self.show_diff = show_diff
        self.lines: dict[str, HostLine] = {}
        self.lock = threading.Lock()
        self.writing = threading.Lock()
        self.live: Live | None = None
        if console.is_terminal:
            self.live = Live(self.render(), console=console, refresh_per_second=8, transient=True)

    def __enter__(self) -> ConsoleReporter:
        if self.live:
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.live.stop()

    def refresh(self) -> None:
        if self.live:
            self.live.update(self.render())

    def render(self) -> Table:
        table = Table(box=None, show_header=True, header_style="bold")
        for column in ("host", "state", "task", "ok", "changed", "failed", "elapsed"):
            table.add_column(column)
        for host, line in sorted(self.lines.items()):
            task: Text | Group = Text(line.task)
            if line.progress:
                description, completed, total = line.progress
                if total:
                    task = Group(Text(f"{line.task}: {description}"),
                                 ProgressBar(total=total, completed=completed or 0, width=40))
                else:
                    task = Text(f"{line.task}: {description}")
            table.add_row(host, line.state, task, str(line.counts["ok"]), str(line.counts["changed"]),
                          str(line.counts["failed"]), f"{time.monotonic() - line.started:.0f}s")
        return table

    def print(self, text: str | Text) -> None:
        if self.live is None and self.console.color_system is None:
            # a log, a pipe, CI: the line as it is, unwrapped (rich would fold it at 80 columns and read
            # brackets in a command's output as markup), and for a fraction of rich's rendering cost
            line = text.plain if isinstance(text, Text) else REDACTOR(text)
            with self.writing:
                self.console.file.write(line + "\n")
                self.console.file.flush()
            return
        target = self.live.console if self.live else self.console
        target.print(text if isinstance(text, Text) else REDACTOR(text), highlight=False)

    def host_started(self, host: str) -> None:
        """A host begins a play: running again (the next play's start after the previous one's `done`)."""
        with self.lock:
            line = self.lines.setdefault(host, HostLine())
            if line.state == "done":
                line.state = "running"
        self.refresh()

    def task_started(self, host: str, task: str) -> None:
        with self.lock:
            line = self.lines.setdefault(host, HostLine())
            line.task, line.progress = task, None
        self.refresh()

    def task_finished(self, host: str, result: TaskResult) -> None:
        with self.lock:
            line = self.lines.setdefault(host, HostLine())
            key = str(result.status)
            if key in line.counts:
                line.counts[key] += 1
            line.progress = None
        status = str(result.status)
        if self.check and result.status == Status.CHANGED:
            status = "would change"
        elif result.status == Status.NOT_CHECKED:
            status = "not checked (check mode)"
        text = Text.assemble((f"{host}", "bold"), " | ", (status, STATUS_STYLE[result.status]), " | ",
                             f"{result.role + ': ' if result.role else ''}{result.task}")
        if result.summary and (result.status in (Status.CHANGED, Status.NOT_CHECKED) or result.report):
            text.append(f"  ({REDACTOR(result.summary)})", style="dim")
        if result.status != Status.SKIPPED or not self.live:
            self.print(text)
        if result.reveal:
            self.reveal(host, result)
        if self.show_diff and result.diff:
            self.print(Text(REDACTOR(result.diff), style="dim"))
        if result.error:
            self.print(Text(REDACTOR(result.error), style="red"))
        self.refresh()

    def reveal(self, host: str, result: TaskResult) -> None:
        """A secret made in this run, shown once and only to a person at a terminal (never in logs: a
        pipe or a CI log gets where to read it, which the task's summary already says)."""
        if not self.console.is_terminal:
            return
        target = self.live.console if self.live else self.console
        target.print(Text.assemble((f"{host}", "bold"), " | ", ("shown once, on this terminal only: ", "yellow"),
                                   result.reveal), highlight=False)

    def progress(self, host: str, description: str, completed: float | None, total: float | None) -> None:
        with self.lock:
            self.lines.setdefault(host, HostLine()).progress = (REDACTOR(description), completed, total)
        if not self.live:
            percent = f" {100 * (completed or 0) / total:.0f}%" if total else ""
            self.print(f"{host} | ... | {REDACTOR(description)}{percent}")
        self.refresh()

    def host_finished(self, host: str, result: HostResult) -> None:
        with self.lock:
            line = self.lines.setdefault(host, HostLine())
            line.state = host_state(result)
            line.task = ""
        if result.error:
            self.print(Text(f"{host} | {line.state} | {REDACTOR(result.error)}", style="red"))
        self.refresh()

    def message(self, text: str) -> None:
        self.print(text)


def host_state(result: HostResult) -> str:
    """How a host ended, the same word on its line and in the recap."""
    if result.unreachable:
        return "unreachable"
    if result.interrupted and not result.count(Status.FAILED):
        return "interrupted"
    return "failed" if result.failed else "done"


def recap_table(run: RunResult) -> Table:
    """PLAY RECAP: one row per host with Ansible's counters and the time it took (in check mode also
    the checks only a run does: "not checked")."""
    table = Table(title="PLAY RECAP" + (" (check mode: nothing was changed)" if run.check else ""),
                  title_justify="left")
    counters = ("ok", "changed", "failed", "skipped", "unreachable", *(("not_checked",) if run.check else ()))
    for column in ("host", *counters, "elapsed"):
        table.add_column(column.replace("_", " "), justify="right" if column != "host" else "left")
    for name, host in run.hosts.items():
        counts = host.counts()
        state = host_state(host)
        style = {"interrupted": "yellow", "done": "yellow" if counts["changed"] else "green"}.get(state, "red")
        label = f"{name} (interrupted)" if state == "interrupted" else name
        table.add_row(Text(label, style=style), *(str(counts[k]) for k in counters), f"{host.elapsed:.1f}s")
    return table
