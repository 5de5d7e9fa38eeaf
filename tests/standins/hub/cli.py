"""Command line and in-process starter for the stand-in hub.

    python -m tests.standins.hub --port 0 --repo cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit \
        --file-size-mib 8 --throttle-kib 0 [--shards 2] [--token T] [--drop-after-kib N] \
        [--data-dir DIR] [--request-log FILE] [--host 127.0.0.1]

Prints one line `READY <url> <commit>` on stdout once it listens (port 0 picks a free port), then
serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .repo import Repository, generate_repository
from .server import HubOptions, HubServer, HubState

DEFAULT_REPO = "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit"


@dataclass
class RunningHub:
    """A hub serving in a background thread of this process (for tests)."""

    server: HubServer
    state: HubState
    thread: threading.Thread

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def repository(self) -> Repository:
        return self.state.repository

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def start_hub(data_dir: Path, *, repo_id: str = DEFAULT_REPO, shard_size: int = 4 * 1024 * 1024,
              shards: int = 2, options: HubOptions | None = None, host: str = "127.0.0.1",
              port: int = 0) -> RunningHub:
    """Generate the repository under `data_dir` and serve it from a background thread."""
    repository = generate_repository(repo_id, data_dir, shard_size, shards)
    state = HubState(repository=repository, options=options or HubOptions())
    server = HubServer((host, port), state)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    return RunningHub(server=server, state=state, thread=thread)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.standins.hub", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--repo", default=DEFAULT_REPO)
    parser.add_argument("--file-size-mib", type=float, default=4.0, help="size of each safetensors shard")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--throttle-kib", type=float, default=0.0, help="KiB/s per download, 0 = unlimited")
    parser.add_argument("--token", default=None, help="require 'Authorization: Bearer TOKEN'")
    parser.add_argument("--drop-after-kib", type=float, default=0.0,
                        help="cut the first download of each shard after this many KiB (tests resume)")
    parser.add_argument("--data-dir", type=Path, default=None, help="where to generate the files")
    parser.add_argument("--request-log", type=Path, default=None, help="JSON-lines log of every request")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="standin-hub-"))
    options = HubOptions(token=args.token, throttle_bytes_per_s=int(args.throttle_kib * 1024),
                         drop_after_bytes=int(args.drop_after_kib * 1024), request_log=args.request_log)
    hub = start_hub(data_dir, repo_id=args.repo, shard_size=int(args.file_size_mib * 1024 * 1024),
                    shards=args.shards, options=options, host=args.host, port=args.port)
    stopped = threading.Event()

    def stop(_signum: int, _frame: Any) -> None:
        stopped.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"READY {hub.url} {hub.repository.commit}", flush=True)
    stopped.wait()
    hub.stop()
    return 0
