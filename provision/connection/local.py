"""The local connection: run on this machine (`connection: local`, or a host named localhost)."""

from __future__ import annotations

import contextlib
import io
import os
import pwd
import select
import subprocess
from collections.abc import Callable
from pathlib import Path

from provision.connection.base import CommandResult, LineStream, checked, wrap_script
from provision.connection.become import become_command, handshake
from provision.secrets import Secret
from provision.shell import Command


class LocalConnection:
    """Runs scripts with bash on this machine, through sudo when another user (root) is needed."""

    def __init__(self, host_name: str = "localhost", become: bool = True, become_user: str = "root",
                 become_password: Secret | None = None) -> None:
        self.host_name = host_name
        self.round_trips = 0
        self._become = become
        self._become_user = become_user
        self._become_password = become_password

    def open(self) -> LocalConnection:
        return self

    def upload(self, local: Path, remote: str, offset: int, advance: Callable[[int], None]) -> None:
        """Append `local` from byte `offset` to `remote` (as this user, as SSH's upload is as the login user)."""
        self.round_trips += 1
        with local.open("rb") as source, open(remote, "ab") as target:
            source.seek(offset)
            while chunk := source.read(1024 * 1024):
                target.write(chunk)
                advance(len(chunk))

    def run(
        self, script: str, *, sudo: bool = True, data: bytes | None = None,
        env: dict[str, str] | None = None, timeout: float | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> CommandResult:
        self.round_trips += 1
        process, early = self._spawn(sudo)
        try:
            stdout_bytes, stderr_bytes = process.communicate(wrap_script(script, data, env).encode(), timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout_bytes, _ = process.communicate()
            return CommandResult(stdout_bytes.decode(errors="replace"), "(timed out)", -1)
        stdout = stdout_bytes.decode(errors="replace")
        if on_output:
            for line in stdout.splitlines():
                on_output(line)
        return CommandResult(stdout, (early + stderr_bytes).decode(errors="replace"), process.returncode)

    def run_command(self, command: Command, check: bool = True) -> CommandResult:
        return checked(self, command, check)

    def start(self, script: str, *, sudo: bool = True, env: dict[str, str] | None = None) -> LineStream:
        """Start a long-running script; its stdout lines as they come. Closing the stream closes the pipe
        and ends the process."""
        process, _ = self._spawn(sudo)
        stdin = process.stdin
        assert stdin is not None and process.stdout is not None
        stdin.write(wrap_script(script, None, env, keep_stdin=True).encode())
        stdin.flush()

        def stop() -> None:
            with contextlib.suppress(OSError):
                stdin.close()
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)

        return LineStream(io.TextIOWrapper(process.stdout, errors="replace"), stop)

    def _spawn(self, sudo: bool) -> tuple[subprocess.Popen[bytes], bytes]:
        """bash reading a script on stdin, through sudo when another user is needed; a sudo password is
        given only at sudo's own prompt (never on a command line). Returns the process and what sudo
        wrote on stderr before bash started."""
        command = "bash -s"
        if sudo and self._become and pwd.getpwuid(os.geteuid()).pw_name != self._become_user:
            command = become_command(self._become_user, self._become_password)
        process = subprocess.Popen(["bash", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        assert process.stdin is not None and process.stderr is not None
        if not (command.startswith("sudo -S") and self._become_password is not None):
            return process, b""
        stdin, stderr = process.stdin, process.stderr

        def read_stderr() -> bytes:
            ready, _, _ = select.select([stderr], [], [], 0.05)
            return os.read(stderr.fileno(), 65536) if ready else b""

        def write(data: bytes) -> None:
            stdin.write(data)
            stdin.flush()

        try:
            return process, handshake(read_stderr, write, lambda: process.poll() is not None,
                                      self._become_password, self.host_name)
        except Exception:
            process.kill()
            process.wait()
            raise

    def close(self) -> None:
        pass
