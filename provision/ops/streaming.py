"""Running a long command whose stdout lines report progress (downloads, pulls).

Connections take `on_output`, called with each stdout line as it arrives (the local connection calls
it once the command is done). A ProgressThrottle keeps a live view (and a plain log,
where every progress call prints a line) from being flooded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from provision.connection.base import CommandResult
from provision.errors import CommandFailed
from provision.secrets import REDACTOR
from provision.shell import Command


def run_streaming(conn: Any, command: Command, on_line: Callable[[str], None], check: bool = True) -> CommandResult:
    """Run `command`, feeding stdout lines to `on_line`; a non-zero exit raises CommandFailed."""
    result: CommandResult = conn.run(command.script, sudo=command.sudo, data=command.data, env=command.env,
                                 timeout=command.timeout, on_output=on_line)
    if check and result.rc != 0:
        raise CommandFailed(command=REDACTOR(command.description or command.script), exit_code=result.rc,
                            stdout=REDACTOR(result.stdout), stderr=REDACTOR(result.stderr), host=conn.host_name)
    return result


class ProgressThrottle:
    """Passes a progress report on when the whole percentage moved or `every` seconds passed."""

    def __init__(self, sink: Callable[[str, float | None, float | None], None], every: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sink = sink
        self.every = every
        self.clock = clock
        self.last_percent: int | None = None
        self.last_time = float("-inf")

    def __call__(self, description: str, completed: float | None, total: float | None) -> None:
        percent = int(100 * (completed or 0) / total) if total else None
        now = self.clock()
        if percent != self.last_percent or now - self.last_time >= self.every:
            self.last_percent, self.last_time = percent, now
            self.sink(description, completed, total)
