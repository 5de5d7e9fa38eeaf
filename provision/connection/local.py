"""The local connection: run on this machine (`connection: local`, or a host named localhost)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable

from provision.connection.base import LineStream, RunResult, checked, wrap_script
from provision.ops.base import Command


class LocalConnection:
    """Runs scripts with bash on this machine, through `sudo -n` when root is needed."""

    def __init__(self, host_name: str = "localhost", become: bool = True) -> None:
        self.host_name = host_name
        self.round_trips = 0
        self._become = become

    def open(self) -> LocalConnection:
        return self

    def run(
        self, script: str, *, sudo: bool = True, data: bytes | None = None,
        env: dict[str, str] | None = None, timeout: float | None = None,
        on_output: Callable[[str], None] | None = None,
    ) -> RunResult:
        self.round_trips += 1
        argv = self._argv(sudo)
        try:
            done = subprocess.run(argv, input=wrap_script(script, data, env).encode(), capture_output=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired as expired:
            stdout = (expired.stdout or b"").decode(errors="replace")
            return RunResult(stdout, "(timed out)", -1)
        stdout = done.stdout.decode(errors="replace")
        if on_output:
            for line in stdout.splitlines():
                on_output(line)
        return RunResult(stdout, done.stderr.decode(errors="replace"), done.returncode)

    def run_command(self, command: Command, check: bool = True) -> RunResult:
        return checked(self, command, check)

    def start(self, script: str, *, sudo: bool = True, env: dict[str, str] | None = None) -> LineStream:
        """Start a long-running script; its stdout lines as they come. Closing the stream closes the pipe
        and ends the process."""
        argv = self._argv(sudo)
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   text=True)
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(wrap_script(script, None, env))
        process.stdin.close()

        def stop() -> None:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)

        return LineStream(process.stdout, stop)

    def _argv(self, sudo: bool) -> list[str]:
        argv = ["bash", "-s"]
        if sudo and self._become and os.geteuid() != 0:
            argv = ["sudo", "-n", "-H", "--", *argv]
        return argv

    def close(self) -> None:
        pass
