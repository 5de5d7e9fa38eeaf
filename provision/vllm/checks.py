"""Readiness then smoke, as one `verify(mark)` step for deploys, rollbacks and `provision smoke`.

Also the adapter from a Connection to the `run(script, payload) -> stdout` callable the service
layer uses (it raises CommandFailed on a non-zero exit, with secrets masked).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from provision.errors import CommandFailed
from provision.secrets import REDACTOR
from provision.vllm.endpoint import Endpoint
from provision.vllm.readiness import Progress, StartMark, Waiter
from provision.vllm.smoke import SmokeReport, run_smoke


@dataclass(frozen=True)
class CheckSettings:
    """How long to wait for readiness, and which smoke checks to run (the service's values: ServiceSpec)."""

    ready_timeout: float
    vision: bool
    smoke_timeout: float
    interval: float = 2.0  # seconds between readiness polls


def host_runner(conn: Any, what: str) -> Callable[[str, bytes | None], str]:
    """`run(script, payload)` on `conn` as root; a non-zero exit raises CommandFailed naming `what`."""
    def run(script: str, payload: bytes | None) -> str:
        result = conn.run(script, sudo=True, data=payload)
        if result.rc != 0:
            raise CommandFailed(command=what, exit_code=result.rc, stdout=REDACTOR(result.stdout),
                                stderr=REDACTOR(result.stderr), host=conn.host_name)
        return str(result.stdout)
    return run


def verifier(conn: Any, endpoint: Endpoint, settings: CheckSettings, progress: Progress,
             clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> Callable[[StartMark], dict[str, Any]]:
    """`verify(mark)`: wait for readiness from `mark`, then run the smoke checks; returns the report
    (`ready_seconds`, `smoke`, `summary`) or raises ServiceNotReady / SmokeFailed."""
    def snapshot(script: str) -> str:
        return str(conn.run(script, sudo=True).stdout)

    def verify(mark: StartMark) -> dict[str, Any]:
        waiter = Waiter(run=snapshot, endpoint=endpoint, progress=progress, clock=clock, sleep=sleep,
                        interval=settings.interval)
        ready_seconds = waiter.wait(mark, settings.ready_timeout)
        progress(f"smoke checks of {endpoint.name}", None, None)
        report = run_smoke(host_runner(conn, "smoke checks"), endpoint, vision=settings.vision,
                           timeout=settings.smoke_timeout)
        return checks_report(ready_seconds, report)
    return verify


def checks_report(ready_seconds: float, report: SmokeReport) -> dict[str, Any]:
    """What a passed check of a service reports (`ready_seconds`, `smoke`, `summary`), whether it
    waited (verify) or found the service ready and answering in its probe (`vllm_smoke`)."""
    return {"ready_seconds": round(ready_seconds, 1), "smoke": report.as_dict(),
            "summary": f"ready after {ready_seconds:.0f}s; {report.summary()}"}
