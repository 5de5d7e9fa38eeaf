"""Shared fixtures: the test lab (real hosts as containers), started once per test session.

Tests that use it carry the `lab` marker. Where the lab cannot run (no docker, no root, missing
tools) they are skipped with the reason, except under CI=true, where that is an error.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.lab import Lab, LabHost
from tests.lab.lab import unavailable_reason


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "lab: end-to-end tests against real lab hosts (containers with systemd and sshd)")


_SECONDS_PER_FILE: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _SECONDS_PER_FILE[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """With --durations: the seconds each test file took (setup, call and teardown summed; a
    session fixture counts where it was first built), slowest first: where CI's budget goes."""
    if config.getoption("durations", None) is None:
        return
    terminalreporter.write_sep("=", "seconds per test file")
    for path, seconds in sorted(_SECONDS_PER_FILE.items(), key=lambda item: -item[1])[:40]:
        terminalreporter.write_line(f"{seconds:8.1f}s {path}")
    for folder in ("tests/e2e/", "tests/unit/"):
        total = sum(seconds for path, seconds in _SECONDS_PER_FILE.items() if path.startswith(folder))
        terminalreporter.write_line(f"{total:8.1f}s {folder} in all")


_STARTED_LAB: list[Lab] = []  # the session's lab, once a test asked for it


@pytest.fixture(scope="module", autouse=True)
def lab_hosts_end_with_their_module() -> Iterator[None]:
    """The hosts a test file made are removed when its last test ends: kept to the session's end,
    the suite's hosts (0.01-1.2 GB of disk each, 29 GB by its last third) filled a CI machine's
    disk: serve2's preflight found 4 GiB free where the first run had found 5. No host is shared
    across files: host fixtures are module-scoped at most; the session ones only make hosts."""
    kept = {host.name for lab in _STARTED_LAB for host in lab.hosts()}
    yield
    for lab in _STARTED_LAB:
        lab.remove_hosts_except(kept)


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """A lab (image, registry, supervisor) in a fresh directory under /var/tmp (bind mounts need a
    real filesystem); every host it made is removed and the directory deleted at session end."""
    reason = unavailable_reason()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the test lab cannot run: {reason}", pytrace=False)
        pytest.skip(f"test lab unavailable: {reason}")
    lab_dir = Path(tempfile.mkdtemp(prefix="plab-test-", dir="/var/tmp"))
    lab = Lab(lab_dir)
    try:
        lab.start()
        _STARTED_LAB.append(lab)
        yield lab
    finally:
        lab.down()
        shutil.rmtree(lab_dir, ignore_errors=True)


@pytest.fixture
def lab_hosts(lab: Lab) -> Callable[..., list[LabHost]]:
    """`lab_hosts(n, **options)`: `n` fresh hosts, reachable over SSH (options: see Lab.new_host).
    They live until the end of the test file (lab_hosts_end_with_their_module)."""
    def make(n: int = 1, **options: object) -> list[LabHost]:
        return lab.new_hosts(n, **options)
    return make
