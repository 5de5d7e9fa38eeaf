"""Real vLLM logs (tests/unit/fixtures/vllm_logs/, SOURCES.md) are read right: each failed start's
cause and the line that says why, prefixes stripped; each start-up's memory figures in every
wording; the journal filter keeps every line the memory reader needs. Expected values are in
expected.yaml, written by reading the logs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from provision.vllm.fatal import find_fatal
from provision.vllm.startup_log import JOURNAL_FILTER, parse_startup_memory

LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"
EXPECTED = yaml.safe_load((LOGS / "expected.yaml").read_text())
PREFIX_LEFT = re.compile(r"^(?:\((?:APIServer|EngineCore|VllmWorker|Worker)|(?:INFO|ERROR|WARNING|DEBUG) \d\d-"
                         r"|\[rank\d|\[\d{4}-|\[[\w/]+\.py:\d+\])")


def lines(name: str) -> list[str]:
    return (LOGS / name).read_text().splitlines()


@pytest.mark.parametrize(("name", "cause", "reason"),
                         [(name, e["cause"], e["reason"]) for name, e in EXPECTED["failures"].items()])
def test_a_failed_start_is_told_its_cause_and_the_line_that_says_why(name: str, cause: str, reason: str) -> None:
    fatal = find_fatal(lines(name), exited=True)
    assert fatal is not None
    assert (fatal.cause, fatal.specific) == (cause, cause != "unknown")
    assert fatal.line.startswith(reason), fatal.line
    assert not PREFIX_LEFT.match(fatal.line), "the quote carries no vLLM/docker/CI prefix"


@pytest.mark.parametrize(("name", "figures"), list(EXPECTED["startups"].items()))
def test_every_memory_figure_of_a_start_is_read(name: str, figures: dict[str, float]) -> None:
    assert parse_startup_memory((LOGS / name).read_text()).as_dict() == pytest.approx(figures)


@pytest.mark.parametrize("name", [name for name in EXPECTED["startups"] if name.startswith("startup__")])
def test_a_start_up_that_did_not_fail_names_no_cause(name: str) -> None:
    assert find_fatal(lines(name)) is None


@pytest.mark.parametrize("name", list(EXPECTED["startups"]))
def test_the_journal_filter_keeps_every_line_the_memory_reader_needs(name: str) -> None:
    text = (LOGS / name).read_text()
    kept = subprocess.run(["grep", "-E", JOURNAL_FILTER], input=text, capture_output=True, text=True).stdout
    assert parse_startup_memory(kept) == parse_startup_memory(text)


def test_every_log_in_the_corpus_is_judged_and_cited() -> None:
    judged = set(EXPECTED["failures"]) | set(EXPECTED["startups"])
    files = {path.name for path in LOGS.glob("*.log")}
    assert files == judged
    sources = (LOGS / "SOURCES.md").read_text()
    assert [name for name in files if f"`{name}`" not in sources] == []
    assert len(files) >= 30
