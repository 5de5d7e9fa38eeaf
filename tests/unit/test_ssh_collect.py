"""Reading a command's output over SSH: whole only at the channel's EOF, not at its exit status.

sshd sends `exit-status` as soon as it reaps the command, and the rest of the command's output after
it, then EOF and close (OpenSSH session.c, session_exit_message; ManageIQ/integration_tests#6816
saw the same race). A CI run cut a state probe short this way ("probe output is incomplete (1 of 1
sections)", exit code 0). The channel below replays that order of messages.
"""

from __future__ import annotations

import os
import threading

from provision.connection.ssh import _collect


class ChannelReplay:
    """A paramiko Channel's reading side, fed SSH messages one poll at a time, in a recorded order."""

    def __init__(self, events: list[tuple[str, bytes | int]]) -> None:
        self._events = list(events)
        self._stdout = b""
        self._stderr = b""
        self._status: int | None = None
        self.eof_received = False
        self.closed = False
        # what _collect waits on between reads (paramiko's fileno() pipe, its status_event): always
        # ready here, so each wait lets the next recorded message arrive
        self._ready_read, ready_write = os.pipe()
        os.write(ready_write, b"x")
        self.status_event = threading.Event()
        self.status_event.set()

    def fileno(self) -> int:
        return self._ready_read

    def _arrive(self) -> None:
        if not self._events:
            return
        kind, value = self._events.pop(0)
        if kind == "stdout":
            self._stdout += value  # type: ignore[operator]
        elif kind == "exit-status":
            self._status = value  # type: ignore[assignment]
        elif kind == "eof":
            self.eof_received = True
        elif kind == "close":
            self.closed = True

    def settimeout(self, _: float) -> None:
        pass

    def recv_ready(self) -> bool:
        return bool(self._stdout)

    def recv_stderr_ready(self) -> bool:
        return bool(self._stderr)

    def recv(self, size: int) -> bytes:
        chunk, self._stdout = self._stdout[:size], self._stdout[size:]
        return chunk

    def recv_stderr(self, size: int) -> bytes:
        chunk, self._stderr = self._stderr[:size], self._stderr[size:]
        return chunk

    def exit_status_ready(self) -> bool:
        self._arrive()
        return self.closed or self._status is not None

    def recv_exit_status(self) -> int:
        return -1 if self._status is None else self._status

    def get_transport(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True


def test_output_that_arrives_after_the_exit_status_is_kept():
    channel = ChannelReplay([("stdout", b"@@t 0\n"), ("exit-status", 0), ("stdout", b"LoadState=loaded\n@@t end\n"),
                             ("eof", b""), ("close", b"")])
    result = _collect(channel, timeout=5, on_output=None)  # type: ignore[arg-type]
    assert result.rc == 0
    assert result.stdout == "@@t 0\nLoadState=loaded\n@@t end\n"


def test_a_background_process_holding_stdout_does_not_hold_the_run(monkeypatch):
    monkeypatch.setattr("provision.connection.ssh.EOF_AFTER_EXIT_S", 0.05)
    channel = ChannelReplay([("stdout", b"started\n"), ("exit-status", 0)])  # no EOF ever comes
    result = _collect(channel, timeout=5, on_output=None)  # type: ignore[arg-type]
    assert (result.rc, result.stdout) == (0, "started\n")
