"""The connection contract: run a script on a host (as one round trip), with or without sudo.

Scripts travel on stdin, never on the command line: the host's process list shows `bash -s`, not
the script, its secrets or its payload. A payload (file content) follows the script: the script
is wrapped so that the payload is readable on file descriptor 3 (`cat <&3 > "$tmp"`).
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from provision.errors import CommandFailed
from provision.secrets import REDACTOR
from provision.shell import quote

if TYPE_CHECKING:
    from pathlib import Path

    from provision.shell import Command


@dataclass(frozen=True)
class CommandResult:
    """What one command on a host gave back (a run's result is `runner.results.RunResult`)."""

    stdout: str
    stderr: str
    rc: int


def wrap_script(script: str, data: bytes | None, env: dict[str, str] | None = None,
                keep_stdin: bool = False) -> str:
    """The text fed to `bash -s` for a script and its optional payload (on fd 3). With `keep_stdin`
    (a started script) stdin stays the controller's side of the session, which sends nothing more:
    end of file there means the controller let go."""
    lines = ["set -euo pipefail", "export DEBIAN_FRONTEND=noninteractive LC_ALL=C"]
    for key, value in (env or {}).items():
        lines.append(f"export {key}={quote(value)}")
    if data is not None:
        encoded = base64.b64encode(data).decode()
        # the payload is decoded into a temp file that fd 3 reads; it never appears in argv
        lines.append('__payload=$(mktemp)')
        lines.append("base64 -d > \"$__payload\" <<'__PROVISION_PAYLOAD__'")
        lines.extend(encoded[i : i + 76] for i in range(0, len(encoded), 76))
        lines.append("__PROVISION_PAYLOAD__")
        lines.append('exec 3<"$__payload"; rm -f "$__payload"')
    lines.append(script)
    # bash -s reads its script from stdin as it goes: a command that reads stdin would eat the rest
    # of the script. A brace group is parsed whole before it runs, and runs with stdin closed.
    return "{\n" + "\n".join(lines) + ("\n}\n" if keep_stdin else "\n} </dev/null\n")



def read_at_once(text: str) -> bytes:
    """`text` as sent to `bash -s` over a pipe: bash reads a script from a pipe one byte a read(2)
    (it must not read past the line it runs), ~0.15 ms of the host's CPU a KB in every channel. A first
    line makes it read the rest with one `read -N` (bytes: LC_ALL=C, as the script sets anyway) and run
    it with eval; a script cut short (the channel lost mid-send) is not run at all."""
    body = text.encode()
    loader = f'export LC_ALL=C; IFS= read -r -N {len(body)} __provision_script && eval "$__provision_script"\n'
    return loader.encode() + body


class LineStream:
    """The stdout lines of a long-running remote script (`Connection.start`), read as they come;
    `close()` ends it (the script's next write fails, so it stops by itself on the host too)."""

    def __init__(self, source: Iterable[str] | Iterable[bytes], stop: Callable[[], None]) -> None:
        self._source = source
        self._stop = stop

    def __iter__(self) -> Iterator[str]:
        for line in self._source:
            # bytes are decoded here, a byte that is not UTF-8 replaced: a host's odd byte (a probe's
            # output) must not end the stream (the run lock's beat is read from it)
            text = line.decode(errors="replace") if isinstance(line, bytes) else line
            yield text.rstrip("\n")

    def close(self) -> None:
        with contextlib.suppress(Exception):  # already closed, or the connection is gone
            self._stop()


class Connection(Protocol):
    """A host we can run scripts on. Implementations: SSHConnection, LocalConnection."""

    @property
    def host_name(self) -> str: ...

    @property
    def round_trips(self) -> int:
        """Round trips to the host so far (the figure a run reports)."""
        ...

    def run(
        self, script: str, *, sudo: bool = True, data: bytes | None = None,
        env: dict[str, str] | None = None, timeout: float | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> CommandResult:
        """Run `script` with bash on the host; never raises on non-zero exit. `on_output` gets each
        stdout line as it arrives (for progress)."""
        ...

    def start(self, script: str, *, sudo: bool = True, env: dict[str, str] | None = None) -> LineStream:
        """Start a long-running script (a lock holder, a watcher); its stdout lines as they arrive.
        Its stdin stays open until the stream is closed: end of file there tells the script at once
        that the controller let go."""
        ...

    def close(self) -> None: ...

    def upload(self, local: Path, remote: str, offset: int, advance: Callable[[int], None]) -> None:
        """Append the file `local`, from byte `offset`, to the host's `remote` (as the login user)."""
        ...

    def run_command(self, command: Command, check: bool = True) -> CommandResult:
        """Run an operation's Command; raise CommandFailed on non-zero exit when `check`."""
        ...


def checked(conn: Connection, command: Command, check: bool = True) -> CommandResult:
    """Shared body of run_command: run, and turn a non-zero exit into CommandFailed."""
    result = conn.run(command.script, sudo=command.sudo, data=command.data, env=command.env,
                      timeout=command.timeout)
    if check and result.rc != 0:
        raise CommandFailed(
            command=REDACTOR(command.description or command.script),
            exit_code=result.rc,
            stdout=REDACTOR(result.stdout),
            stderr=REDACTOR(result.stderr),
            host=conn.host_name,
        )
    return result
