"""`provision smoke | rollback | render` as a user runs them: here on a local-connection host whose
"service" is the stand-in server on a free port (this machine runs no systemd: readiness then rests on
the HTTP answers alone)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision.cli.main import main
from tests.standins.vllm.launch import StandinProcess
from tests.unit.serving_support import API_KEY, REPO_ROOT, start_profile_standin, stop


def host_file(tmp_path: Path, port: int, **extra: object) -> Path:
    key_file = tmp_path / "api-key"
    key_file.write_text(f"{API_KEY}\n")
    lines = ["name: here", "connection: local", "vars:", f"  vllm_port: {port}", f"  vllm_api_key_file: {key_file}",
             "  served_model_name: workhorse", f"  vllm_state_dir: {tmp_path / 'state'}", "  vllm_ready_timeout: 20",
             *(f"  {key}: {json.dumps(value)}" for key, value in extra.items())]
    path = tmp_path / "host.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(autouse=True)
def wide_output(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")


@pytest.fixture
def server() -> Iterator[StandinProcess]:
    process = start_profile_standin()
    yield process
    stop(process)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_smoke_prints_a_table_with_both_checks(server: StandinProcess, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, output = run(capsys, "smoke", str(host_file(tmp_path, server.port)), "--json-file", str(tmp_path / "r.json"))
    assert code == 0, output
    assert "SMOKE" in output and "'Red. The image is mostly red.'" in output and "(stop," in output
    assert API_KEY not in output and API_KEY not in (tmp_path / "r.json").read_text()


def test_smoke_fails_the_host_with_the_wrong_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    process = start_profile_standin("wrong-vision")
    try:
        code, output = run(capsys, "smoke", str(host_file(tmp_path, process.port)))
    finally:
        stop(process)
    assert code == 1
    assert "host here" in output and "does not contain 'red'" in output


def test_smoke_without_vision_checks_text_only(server: StandinProcess, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, output = run(capsys, "smoke", str(host_file(tmp_path, server.port, smoke_vision=False)))
    assert code == 0 and "Red" not in output


def test_rollback_without_a_previous_release_touches_nothing(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, output = run(capsys, "rollback", str(host_file(tmp_path, 9)))
    assert code == 1 and "nothing to roll back to" in output
    assert not (tmp_path / "state").exists()


def test_a_rollback_says_the_next_up_applies_the_inventory_again(tmp_path: Path, capsys, monkeypatch) -> None:
    """Before: the recap alone; a user who rolled back a bad upgrade got it back at the next `up`."""
    import provision.cli.serving as serving
    from provision.runner.results import HostResult, RunResult, Status, TaskResult

    rolled = HostResult("here", tasks=[TaskResult("vLLM rolled back to the previous release", "vllm", Status.CHANGED)])
    monkeypatch.setattr(serving, "run_task_file", lambda *_, **__: (None, RunResult({"here": rolled})))
    code, output = run(capsys, "rollback", str(host_file(tmp_path, 9)))
    assert code == 0
    assert "here: rolled back; the inventory still asks for the release rolled back from, so the next " \
           "`provision up` deploys it again" in " ".join(output.split())


def test_render_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, output = run(capsys, "render", str(REPO_ROOT / "inventory" / "office.yaml"), "--limit", "reception",
                       "--json")
    assert code == 0
    rendered = json.loads(output)
    assert sorted(rendered) == ["desk-1", "desk-2"]
    assert rendered["desk-1"][:3] == ["vllm", "serve", "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit"]


def test_render_refuses_a_secret_flag_naming_where_it_was_set(capsys: pytest.CaptureFixture[str]) -> None:
    code, output = run(capsys, "render", str(REPO_ROOT / "inventory" / "host.yaml"), "-e",
                       '{"vllm_extra_flags": {"api-key": "oops"}}')
    assert code == 2 and "-e: vllm_extra_flags.api-key: set by the variable vllm_api_key" in output
