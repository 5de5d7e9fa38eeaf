"""Ctrl-C: the first stops the run gently, the second exits at once.

The first SIGINT sets STOP: the runner starts no new task, waits that are only waits (`wait_for`,
the wait for a rebooting host, the run lock's queue) end at once, and the changes in flight finish
(a command on the host runs to its end; a vLLM release in flight completes its checks and, when they
fail, its rollback); then the recap is printed and the JSON document written, and the run exits
130. The second SIGINT exits at once (status 130): the host is left as the kill of any moment
leaves it, which every operation is written to survive (atomic changes, a rerun converges).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

from provision.errors import ProvisionError

STOP = threading.Event()
EXIT_INTERRUPTED = 130


class Interrupted(ProvisionError):
    """A wait ended by Ctrl-C."""


def sleep(seconds: float) -> None:
    """time.sleep that ends early, raising Interrupted, once Ctrl-C was pressed."""
    if STOP.wait(max(0.0, seconds)):
        raise Interrupted("interrupted (Ctrl-C) while waiting")


def check() -> None:
    if STOP.is_set():
        raise Interrupted("interrupted (Ctrl-C)")


@contextlib.contextmanager
def gentle_ctrl_c(announce: Callable[[str], None]) -> Iterator[None]:
    """Within this block (main thread), the first Ctrl-C sets STOP and says so, the second exits."""
    presses: list[float] = []
    STOP.clear()

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        presses.append(time.monotonic())
        if len(presses) > 1:
            sys.stderr.write("\ninterrupted again: exiting now\n")
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)
        STOP.set()
        announce("Ctrl-C: starting no new task; changes in flight finish (or roll back), then the recap. "
                 "Ctrl-C again exits at once.")

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
