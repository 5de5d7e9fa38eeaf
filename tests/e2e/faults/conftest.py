"""The fault suite (`pytest -m fault`): faults injected into real runs on lab hosts.

Each test records what it proved in `figures` (a kill the rerun survived, a fault the run reported
clearly, a secret found where it must not be); the session ends by printing the totals:
`kills survived N/N, faults reported clearly N/N, secrets found 0`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest


@dataclass
class Figures:
    kills: list[bool] = field(default_factory=list)
    faults: list[bool] = field(default_factory=list)
    secrets_found: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"kills survived {sum(self.kills)}/{len(self.kills)}, "
                f"faults reported clearly {sum(self.faults)}/{len(self.faults)}, "
                f"secrets found {len(self.secrets_found)}")


FIGURES = Figures()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "faults" in item.nodeid.split("/"):
            item.add_marker(pytest.mark.fault)
            item.add_marker(pytest.mark.lab)


@pytest.fixture
def figures() -> Iterator[Figures]:
    yield FIGURES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES.kills or FIGURES.faults or FIGURES.secrets_found:
        terminalreporter.section("fault suite")
        terminalreporter.write_line(FIGURES.line())
        for where in FIGURES.secrets_found:
            terminalreporter.write_line(f"secret found: {where}")
