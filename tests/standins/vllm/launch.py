"""Start the stand-in vLLM server as a local subprocess (for tests and lab checks on this machine)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class StandinProcess:
    """A running `vllm serve` stand-in: its process, port and combined output file."""

    process: subprocess.Popen[bytes]
    port: int
    output_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.output_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until the log says the application started; raise if it exited or timed out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "Application startup complete." in self.output():
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"stand-in exited with {self.process.returncode}:\n{self.output()}")
            time.sleep(0.05)
        raise TimeoutError(f"stand-in not ready after {timeout}s:\n{self.output()}")

    def stop(self) -> int:
        """SIGTERM, then wait (SIGKILL after 5 s); return the exit status."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def start_standin(serve_args: list[str], env: dict[str, str] | None = None, port: int | None = None,
                  host: str = "127.0.0.1") -> StandinProcess:
    """Run `python -m tests.standins.vllm serve ARGS --host HOST --port PORT` from the repository root."""
    port = port or free_port()
    output = Path(tempfile.mkstemp(prefix="vllm-standin-", suffix=".log")[1])
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with output.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.standins.vllm", "serve", *serve_args, "--host", host, "--port", str(port)],
            cwd=REPO_ROOT, env=full_env, stdout=sink, stderr=subprocess.STDOUT,
        )
    return StandinProcess(process=process, port=port, output_path=output)
