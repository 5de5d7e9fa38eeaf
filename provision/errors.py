"""The error types the CLI turns into exit codes and messages.

InputError (exit 2) is raised before any host is touched: it names the file, the line and the key.
HostError (the host fails, exit 1) names the host, the task, the command, its exit code and the
tail of its output, after Invoke's UnexpectedExit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


class ProvisionError(Exception):
    """Base of every error this tool reports as a message rather than a traceback."""


@dataclass
class InputError(ProvisionError):
    """Bad input: a file, line and key that a user can go and fix."""

    message: str
    file: Path | str | None = None
    line: int | None = None
    key: str | None = None

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = str(self.file)
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        key = f"{self.key}: " if self.key else ""
        return f"{where}{key}{self.message}"


@dataclass
class CommandFailed(ProvisionError):
    """A command on a host exited non-zero (or timed out)."""

    command: str
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    host: str = ""
    task: str = ""
    tail_lines: int = field(default=15, repr=False)

    def tail(self) -> str:
        text = (self.stderr.strip() or self.stdout.strip()).splitlines()
        return "\n".join(text[-self.tail_lines :])

    def __str__(self) -> str:
        head = f"host {self.host}, task {self.task!r}: " if self.host else ""
        code = "timed out" if self.exit_code is None else f"exit code {self.exit_code}"
        first_line = self.command.strip().splitlines()[0] if self.command.strip() else ""
        more = " ..." if len(self.command.strip().splitlines()) > 1 else ""
        return f"{head}command failed ({code}): {first_line}{more}\n{self.tail()}".rstrip()


class HostUnreachable(ProvisionError):
    """The host could not be connected to (after retries), or its host key was refused."""


class HostDidNotComeBack(HostUnreachable):
    """A host that was meant to go away (a reboot) did not come back in time: its own message says
    what to do, and the run lock's silence (the host was down on purpose) is not the reason."""


class HostKeyRefused(HostUnreachable):
    """The host's SSH key is unknown (and trust-on-first-use is off) or has changed."""


class TaskFailed(ProvisionError):
    """A task's own check failed (not a command's exit code): a preflight refusal, a failed smoke."""


class FactNotGathered(ProvisionError):
    """A fact was read that this run did not gather: the run gathers only the facts that its tasks'
    templates name and their operations declare (`Operation.reads_facts`); a read past that is a bug
    in the declaration, reported as one instead of passing an empty default for a real value."""

    def __init__(self, name: str) -> None:
        super().__init__(f"fact {name!r} was read but not gathered in this run: name it in the task's template "
                         f"(facts.{name}) or declare it in the operation's reads_facts")
        self.name = name
