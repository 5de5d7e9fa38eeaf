"""vLLM's log line format, so tools that read `docker logs` see what the real server writes.

vllm/logger.py: `(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s
[%(fileinfo)s:%(lineno)d] %(message)s` with date format `%m-%d %H:%M:%S`, written to stdout.
The engine runs in its own process, the HTTP side in APIServer; tracebacks and uvicorn's own lines
carry only the process prefix. The 2026 logs (v0.20 on, tests/unit/fixtures/vllm_logs/) name the
engine process `EngineCore` (`(EngineCore pid=107)`), not the older `EngineCore_DP0`.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from .real_lines import LINES

API_SERVER = "APIServer"
ENGINE_CORE = "EngineCore"


class VllmLog:
    """Writes log lines as vLLM's two processes would, with their (simulated) pids."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.pids = {API_SERVER: os.getpid(), ENGINE_CORE: os.getpid() + 1}

    def line(self, process: str, level: str, where: str, message: str) -> None:
        """One record: `where` is vLLM's `file.py:LINE` of the call that logs it."""
        stamp = time.strftime("%m-%d %H:%M:%S")
        prefix = f"({process} pid={self.pids[process]}) {level} {stamp} [{where}] "
        text = "".join(prefix + part + "\n" for part in message.split("\n"))
        self.stream.write(text)
        self.stream.flush()

    def info(self, process: str, where: str, message: str) -> None:
        self.line(process, "INFO", where, message)

    def warning(self, process: str, where: str, message: str) -> None:
        self.line(process, "WARNING", where, message)

    def error(self, process: str, where: str, message: str) -> None:
        self.line(process, "ERROR", where, message)

    def raw(self, process: str, text: str) -> None:
        """Unformatted output (uvicorn, tracebacks) behind the process prefix."""
        prefix = f"({process} pid={self.pids[process]}) "
        self.stream.write("".join(prefix + part + "\n" for part in text.split("\n")))
        self.stream.flush()

    def real(self, process: str, key: str, **values: object) -> None:
        """One of vLLM's real lines (real_lines.LINES), at its level and `file.py:LINE`, or raw."""
        line = LINES[key]
        if line.level is None:
            self.raw(process, line.text(**values))
        else:
            self.line(process, line.level, line.where, line.text(**values))
