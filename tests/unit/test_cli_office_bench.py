"""`provision bench --workload office` and `provision status --html` as a user runs them, on a
local-connection host against the stand-in vLLM: a good release kept, a bimodal upgrade flagged as a
regression (exit 1), both shown as history on the page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provision.cli.main import main
from tests.standins.vllm.launch import StandinProcess, start_standin
from tests.unit.serving_support import API_KEY, FAST, profile_arguments, stop
from tests.unit.test_cli_serving import host_file

CONTEXT = 8192  # the sweep's largest document is the context's; a small one keeps the prefill short


@pytest.fixture(autouse=True)
def wide_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")


def office_standin(behaviour: str) -> StandinProcess:
    arguments = profile_arguments()
    arguments[arguments.index("--max-model-len") + 1] = str(CONTEXT)
    process = start_standin(arguments, env={**FAST, "STANDIN_TOKENS_PER_S": "600", "STANDIN_BEHAVIOUR": behaviour,
                                            "VLLM_API_KEY": API_KEY})
    process.wait_ready()
    return process


def deployed(tmp_path: Path, release: str) -> None:
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state/release.json").write_text(json.dumps({"current": {
        "id": release, "image": "vllm/vllm-openai:v0.21.0-cu129", "weights": {"commit": "c0ffee" * 6}}}) + "\n")


def office_bench(tmp_path: Path, capsys: pytest.CaptureFixture[str], behaviour: str, release: str,
                 ) -> tuple[int, str, dict]:
    deployed(tmp_path, release)
    process = office_standin(behaviour)
    try:
        report = tmp_path / f"{release}.report.json"
        code = main(["bench", str(host_file(tmp_path, process.port)), "--workload", "office", "--max-tokens", "120",
                     "--json-file", str(report)])
    finally:
        stop(process)
    out = capsys.readouterr().out
    return code, out, json.loads(report.read_text())["hosts"]["here"]


def test_an_upgrade_to_a_bimodal_release_is_flagged_and_both_show_on_the_page(tmp_path, capsys) -> None:
    code, out, row = office_bench(tmp_path, capsys, "ok", "good0release")
    assert code == 0, out
    assert row["passed"] and row["regression"] is None and row["context"] == CONTEXT
    assert sorted(row["per_user"]) == ["0", "1", "2"] and row["errors"] == 0
    assert "OFFICE BENCH here" in out and "passed the promise" in out and API_KEY not in out
    kept = json.loads((tmp_path / "state/bench/good0release.json").read_text())
    assert kept["release"] == "good0release" and kept["min_tokens_per_s"] == row["min_tokens_per_s"]

    code, out, row = office_bench(tmp_path, capsys, "alternating", "dflash1release")
    assert code == 1, out
    assert row["compared_with"] == "good0release"
    assert row["regression"].startswith("slowest stream ") and "of release good0release" in row["regression"]
    assert "REGRESSION" in out
    assert (tmp_path / "state/bench/dflash1release.json").exists()

    deployed(tmp_path, "dflash1release")
    process = office_standin("ok")
    try:
        page = tmp_path / "status.html"
        code = main(["status", str(host_file(tmp_path, process.port)), "--json", "--html", str(page)])
    finally:
        stop(process)
    rows = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [entry["release"] for entry in rows["here"]["bench_history"]].count("good0release") == 1
    html = page.read_text()
    assert "good0release" in html and "dflash1release" in html and "REGRESSION: slowest stream" in html
    assert rows["here"]["model_profile"] and rows["here"]["model_profile"] in html
