"""Becoming root through sudo: `sudo -n` (no password), or `sudo -S` fed a password on stdin.

With a password, the remote command is

    sudo -S -p '<marker prompt>' -H -u root -- bash -c 'echo <ready marker> >&2; exec bash -s'

and the script is not sent until sudo has let bash start: the tool reads stderr until either
sudo's prompt (then it sends the password line, once) or the ready marker (sudo needed no password,
or took it). So the password is written only when sudo asks for it, and never lands in bash's
input; it is never in argv (the host's `ps` shows the line above), in a log, a diff or the JSON
document. A second prompt means sudo refused the password: the channel is closed and the host
fails with "incorrect sudo password", the password not shown.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable

from provision.errors import ProvisionError
from provision.secrets import REDACTOR, Secret

PROMPT = "[provision] sudo password:"
READY = "__PROVISION_BECOME_READY__"
HANDSHAKE_TIMEOUT_S = 60


class BecomeFailed(ProvisionError):
    """sudo did not let the tool become the requested user (wrong password, not in sudoers, ...)."""


def become_command(user: str, password: Secret | None) -> str:
    """The command line that runs `bash -s` as `user` through sudo."""
    target = shlex.quote(user)
    if password is None:
        return f"sudo -n -H -u {target} -- bash -s"
    inner = shlex.quote(f"echo {READY} >&2; exec bash -s")
    return f"sudo -S -p {shlex.quote(PROMPT)} -H -u {target} -- bash -c {inner}"


def handshake(read_stderr: Callable[[], bytes], write: Callable[[bytes], None], exited: Callable[[], bool],
              password: Secret, host: str) -> bytes:
    """Answer sudo's prompt until bash is ready; returns what stderr held after the ready marker.

    `read_stderr` returns the bytes available now (b"" when none), `exited` whether the command has
    ended."""
    seen = b""
    prompts = 0
    deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
    while True:
        chunk = read_stderr()
        seen += chunk
        if READY.encode() in seen:
            return seen.split(READY.encode(), 1)[1].lstrip(b"\n")
        if seen.count(PROMPT.encode()) > prompts:
            prompts = seen.count(PROMPT.encode())
            if prompts > 1:
                raise BecomeFailed(f"{host}: incorrect sudo password")
            write(password.reveal().encode() + b"\n")
        if not chunk:
            if exited() or time.monotonic() > deadline:
                said = REDACTOR(seen.decode(errors="replace").replace(PROMPT, "").strip())
                raise BecomeFailed(f"{host}: sudo did not start the command as root: {said or 'no output'}")
            time.sleep(0.01)
