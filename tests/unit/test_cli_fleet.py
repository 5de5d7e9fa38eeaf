"""`provision plan | bench | status` as a user runs them, on a local-connection host: the plan on
recorded GPU facts, bench and status against the stand-in server on a free port."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import provision.runner.host_run as host_run
from provision.cli.main import main
from provision.cli.serving import rendered_arguments, serving_play
from provision.facts.probe import parse_probe
from provision.inventory.loader import load_inventory
from provision.playbook.loader import load_playbook
from provision.playbook.templating import Renderer, make_environment
from provision.settings.variables import host_variables
from provision.vllm.argv import fingerprint
from tests.unit.serving_support import API_KEY, REPO_ROOT, start_profile_standin, stop
from tests.unit.test_cli_serving import host_file

FACTS = Path(__file__).parent / "fixtures/facts"
SITE = REPO_ROOT / "playbooks" / "site.yaml"


@pytest.fixture(autouse=True)
def wide_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def with_facts(monkeypatch: pytest.MonkeyPatch, fixture: str) -> None:
    """The local host 'has' the GPU of a recorded facts probe."""
    facts = parse_probe((FACTS / fixture).read_text())
    monkeypatch.setattr(host_run, "facts_from", lambda *_: facts)
    monkeypatch.setattr(host_run, "gather_facts", lambda conn: facts)


def test_plan_table_for_the_seed_on_the_laptop(monkeypatch, tmp_path, capsys) -> None:
    with_facts(monkeypatch, "rtx5090-laptop-ubuntu2404.txt")
    code, out, _ = run(capsys, "plan", str(host_file(tmp_path, 9)))
    assert code == 0, out
    assert "MEMORY PLAN" in out and "RTX 5090 Laptop" in out and "131072" in out and "fits" in out


def test_plan_json_and_the_refusal_naming_what_fits(monkeypatch, tmp_path, capsys) -> None:
    with_facts(monkeypatch, "rtx5090-laptop-ubuntu2404.txt")
    code, out, _ = run(capsys, "plan", str(host_file(tmp_path, 9)), "--json", "-e", "max_model_len=262144")
    assert code == 1
    row = json.loads(out)["here"]
    assert not row["fits"] and "max_model_len 262144 does not fit" in row["error"]
    assert "largest context that fits is" in row["error"]
    code, out, _ = run(capsys, "plan", str(host_file(tmp_path, 9)), "--json", "-e", "max_model_len=auto")
    planned = json.loads(out)["here"]
    assert code == 0 and planned["max_model_len"] == planned["largest_fitting_context"] > 131072


def test_plan_on_a_32_gb_card_fits_262144(monkeypatch, tmp_path, capsys) -> None:
    with_facts(monkeypatch, "h200-driver580.txt")
    code, out, _ = run(capsys, "plan", str(host_file(tmp_path, 9)), "--json", "-e", "max_model_len=262144")
    assert code == 0 and json.loads(out)["here"]["full_sequences"] > 1


def test_auto_renders_the_planned_context_into_the_serve_arguments(tmp_path) -> None:
    play = serving_play(load_playbook(SITE), SITE)
    release = next(t for t in play.tasks if t.op == "vllm_release")
    inventory = host_file(tmp_path, 9, max_model_len="auto")
    host = load_inventory(inventory).select(None)[0]
    variables = {**host_variables(play, host, {}), "inventory_hostname": host.name, "facts": {}}
    planned = Renderer(make_environment(play.template_dirs),
                       {**variables, "memory_plan": {"max_model_len": 151552}}).render(release.args["flags"])
    assert planned["max-model-len"] == 151552
    # without a plan (a command that does not run the plan role) vLLM picks: `--max-model-len auto`
    argv = rendered_arguments(inventory, None, [], SITE)["here"]
    assert argv[argv.index("--max-model-len") + 1] == "auto"


def test_bench_passes_a_steady_server_and_fails_an_alternating_one(tmp_path, capsys) -> None:
    for behaviour, expected in (("ok", 0), ("alternating", 1)):
        process = start_profile_standin(behaviour)
        try:
            report = tmp_path / f"{behaviour}.json"
            code, out, err = run(capsys, "bench", str(host_file(tmp_path, process.port)), "--runs", "4",
                                 "--max-tokens", "200", "--json-file", str(report),
                                 # runs of ~50 ms on a busy 2-core machine jitter; the split is 3.5x
                                 "--max-range-percent", "60", "--max-cv-percent", "30", "--cluster-gap-percent", "60")
        finally:
            stop(process)
        assert code == expected, out + err
        row = json.loads(report.read_text())["hosts"]["here"]
        assert len(row["runs"]) == 4 and row["completion_tokens"] == [200] * 4
        assert "BENCH here" in out and "mean time to first token" in out
        if expected:
            assert "FAILED the stability gate" in out and "2 clusters" in out and row["clusters"] == 2
        else:
            assert "passed" in out and row["passed"]
        assert API_KEY not in out + err + report.read_text()


def fake_docker_inspect(folder: Path, cmd: list[str], image: str) -> None:
    """A `docker` on PATH answering `inspect --format` as the real one does for a running container
    (no dockerd in unit tests; the lab tests read the real one)."""
    folder.mkdir(exist_ok=True)
    script = folder / "docker"
    script.write_text(f"#!/bin/sh\ncase \"$3\" in *Cmd*) echo '{json.dumps(cmd)}';; *) echo '{image}';; esac\n")
    script.chmod(0o755)


def test_status_shows_health_release_and_drift(tmp_path, capsys, monkeypatch) -> None:
    process = start_profile_standin()
    try:
        inventory = host_file(tmp_path, process.port)
        argv = rendered_arguments(inventory, None, [], SITE)["here"][2:]
        pinned = "vllm/vllm-openai@sha256:" + "d" * 64
        fake_docker_inspect(tmp_path / "bin", ["-c", "script", "provision-secrets", "vllm", "serve", *argv], pinned)
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
        (tmp_path / "state").mkdir()
        (tmp_path / "state/release.json").write_text(json.dumps({"current": {
            "id": "abc123", "image": "vllm/vllm-openai:v0.21.0-cu129", "pinned_image": pinned,
            "weights": {"commit": "c0ffee" * 6}, "flags_fingerprint": fingerprint(argv)}}) + "\n")
        code, out, _ = run(capsys, "status", str(inventory), "--json")
        row = json.loads(out)["here"]
        assert code == 0, out
        assert row["health"] == "ok" and row["flags"] == "in sync" and row["weights_commit"].startswith("c0ffee")
        assert row["serving"] is True
        assert row["running"] == 0 and row["kv_cache_percent"] is not None
        code, out, _ = run(capsys, "status", str(inventory), "-e", "max_num_seqs=3")
        assert code == 0, out
    finally:
        stop(process)
    assert "DRIFT: --max-num-seqs" in out and "≠ 3" in out and "sha256:dddddddddddd" in out
    # the endpoint gone: status says so and exits 1 (as `systemctl is-active`), so a monitor can use it
    code, out, _ = run(capsys, "status", str(inventory))
    assert code == 1, out
    assert "here: NOT SERVING | service " in out and "| health down |" in out


def test_status_without_a_terminal_prints_one_plain_line_per_host(tmp_path, capsys, monkeypatch) -> None:
    """Before: piped or in CI, status printed rich's 80-column table, every cell wrapped over lines."""
    monkeypatch.setenv("COLUMNS", "80")
    process = start_profile_standin()
    try:
        code, out, _ = run(capsys, "status", str(host_file(tmp_path, process.port)))
    finally:
        stop(process)
    assert code == 0, out
    line = next(line for line in out.splitlines() if line.startswith("here: "))
    assert line.startswith("here: serving | service ") and "| health ok |" in line and "| flags not deployed |" in line
    assert "┃" not in out and "│" not in out, "no table drawn for a pipe"
