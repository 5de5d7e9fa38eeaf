"""`-v` / `-vv`: every script sent to a host, its exit code and (with -vv) its output, secrets ***.

A wrapper around any Connection, so SSH and local runs are traced alike. A script is shown by its
first meaningful line and its length (whole scripts are long and travel on stdin); its output with
-vv is the last lines of stdout and stderr. Everything shown passes through the secrets redactor,
and the output of a probe that reads a secret (the API key's) is not shown at all.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from provision.connection.base import CommandResult, Connection, LineStream, checked
from provision.secrets import REDACTOR, hide_secret_sections
from provision.shell import Command

WORD = re.compile(r"[A-Za-z]")
OUTPUT_LINES = 40
SHOWN_CHARS = 160


def headline(script: str) -> str:
    """The first line of a script that does something (not a comment, `set`, or a blank)."""
    lines = [line.strip() for line in script.splitlines()]
    useful = [line for line in lines if WORD.search(line) and not line.startswith(("#", "set "))]
    first = useful[0] if useful else "(empty script)"
    more = f"  (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
    return (first if len(first) <= SHOWN_CHARS else first[:SHOWN_CHARS] + " ...") + more


class TracedConnection:
    """Delegates to `inner`; says what it runs (verbosity 1) and what came back (verbosity 2)."""

    def __init__(self, inner: Connection, verbosity: int, say: Callable[[str], None]) -> None:
        self.inner = inner
        self.verbosity = verbosity
        self.say = say

    @property
    def host_name(self) -> str:
        return self.inner.host_name

    @property
    def round_trips(self) -> int:
        return self.inner.round_trips

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def run(self, script: str, *, sudo: bool = True, data: bytes | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None, on_output: Callable[[str], None] | None = None) -> CommandResult:
        started = time.monotonic()
        self.say(REDACTOR(f"{self.host_name} | $ {headline(script)}"))
        result = self.inner.run(script, sudo=sudo, data=data, env=env, timeout=timeout, on_output=on_output)
        self.say(f"{self.host_name} | exit {result.rc} after {time.monotonic() - started:.1f}s")
        if self.verbosity >= 2:
            # a secret probe's section is hidden: its value is not known to the redactor before it is parsed
            for stream, text in (("out", hide_secret_sections(result.stdout)), ("err", result.stderr)):
                for line in text.splitlines()[-OUTPUT_LINES:]:
                    self.say(REDACTOR(f"{self.host_name} | {stream}: {line}"))
        return result

    def run_command(self, command: Command, check: bool = True) -> CommandResult:
        return checked(self, command, check)

    def start(self, script: str, *, sudo: bool = True, env: dict[str, str] | None = None) -> LineStream:
        return self.inner.start(script, sudo=sudo, env=env)

    def upload(self, local: Path, remote: str, offset: int, advance: Callable[[int], None]) -> None:
        self.inner.upload(local, remote, offset, advance)

    def close(self) -> None:
        self.inner.close()
