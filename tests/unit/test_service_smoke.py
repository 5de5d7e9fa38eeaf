"""Smoke checks: the red gradient is red to a decoder that really reads it; answers are judged on
status, content, finish reason and (vision) the word "red"; the host script works against a server."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest

from provision.vllm.endpoint import Endpoint
from provision.vllm.png import data_uri, red_gradient_png
from provision.vllm.smoke import (
    SmokeFailed,
    judge_answer,
    judge_smoke,
    run_smoke,
    smoke_payload,
    smoke_script,
    text_request,
    vision_request,
)
from tests.standins.vllm.png import decode_png, dominant_colour
from tests.unit.ops_support import assert_bash_parses
from tests.unit.serving_support import API_KEY, start_profile_standin, stop


def fields(name: str, status: str, body: object, seconds: str = "0.42") -> str:
    text = body if isinstance(body, str) else json.dumps(body)
    return (f"{name}_status={status}\n{name}_time={seconds}\n"
            f"{name}_body={base64.b64encode(text.encode()).decode()}\n")


def completion(content: str, finish: str = "stop", tokens: int = 3) -> dict[str, object]:
    return {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": finish}],
            "usage": {"completion_tokens": tokens}}


def test_the_test_image_is_a_64x64_red_gradient() -> None:
    png = red_gradient_png()
    width, height, pixels = decode_png(png)
    assert (width, height) == (64, 64)
    assert len({pixel[:3] for pixel in pixels}) > 64, "a gradient, not one flat colour"
    assert all(r > 140 and g < 50 and b < 50 for r, g, b, _ in pixels)
    assert dominant_colour(png) == "Red"
    assert data_uri(png).startswith("data:image/png;base64,iVBORw0KGgo")


def test_vision_request_carries_the_image_as_a_data_uri() -> None:
    body = vision_request("workhorse")
    parts = body["messages"][0]["content"]
    assert body["model"] == "workhorse" and body["temperature"] == 0
    assert parts[1]["type"] == "image_url" and parts[1]["image_url"]["url"] == data_uri(red_gradient_png())
    assert text_request("workhorse")["messages"][0]["content"]


def test_good_answers_pass_with_their_timings() -> None:
    result = judge_answer("vision", fields("vision", "200", completion("Red. The image is mostly red.")), "red")
    assert result.ok and result.seconds == 0.42 and result.tokens == 3 and result.finish_reason == "stop"
    assert judge_answer("text", fields("text", "200", completion("A GPU ...", "length"))).ok


@pytest.mark.parametrize(("status", "body", "expect", "problem"), [
    ("200", completion("Blue. The image is mostly blue."), "red", "does not contain 'red'"),
    ("200", completion("   "), None, "the answer is empty"),
    ("200", completion("Hi", finish="abort"), None, "finish reason 'abort'"),
    ("401", {"error": "Unauthorized"}, None, "HTTP 401: {\"error\": \"Unauthorized\"}"),
    ("000", "", None, "HTTP request failed: no answer"),
    ("200", "<html>proxy</html>", None, "not a chat completion"),
])
def test_bad_answers_fail_saying_what_came_back(status: str, body: object, expect: str | None,
                                                 problem: str) -> None:
    result = judge_answer("check", fields("check", status, body), expect)
    assert not result.ok and problem in result.problem


def test_vision_can_be_turned_off() -> None:
    report = judge_smoke(fields("text", "200", completion("Fine.")), vision=False)
    assert report.ok and report.vision is None and report.summary().startswith("text 0.42s 'Fine.'")


def test_smoke_script_parses_and_never_holds_the_request_in_its_text() -> None:
    endpoint = Endpoint(name="vllm", port=8000, key_file="/etc/provision/vllm/vllm.env", served_name="w")
    script = smoke_script(endpoint, ["text", "vision"], 60)
    assert_bash_parses(script)
    assert "base64," not in script


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "api-key"
    path.write_text(f"{API_KEY}\n")
    return path


def run_here(script: str, payload: bytes | None) -> str:
    from tests.unit.ops_support import run_local
    result = run_local(script, payload)
    assert result.rc == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize(("behaviour", "passes"), [("ok", True), ("wrong-vision", False)])
def test_smoke_checks_against_a_running_server(key_file: Path, behaviour: str, passes: bool) -> None:
    server = start_profile_standin(behaviour)
    try:
        endpoint = Endpoint(name="vllm", port=server.port, key_file=str(key_file), served_name="workhorse")
        if passes:
            report = run_smoke(run_here, endpoint, vision=True, timeout=30)
            assert report.ok and "red" in report.vision.answer.lower() and report.text.answer
        else:
            with pytest.raises(SmokeFailed, match=r"vision: the answer 'Blue.*does not contain 'red'"):
                run_smoke(run_here, endpoint, vision=True, timeout=30)
    finally:
        stop(server)


def test_a_wrong_key_is_reported_as_refused(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong-key"
    wrong.write_text("not-the-key\n")
    server = start_profile_standin()
    try:
        endpoint = Endpoint(name="vllm", port=server.port, key_file=str(wrong), served_name="workhorse")
        with pytest.raises(SmokeFailed, match="text: HTTP 401"):
            run_smoke(run_here, endpoint, vision=False, timeout=30)
        done = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
        assert API_KEY not in done.stdout
    finally:
        stop(server)


def test_payload_is_one_request_a_line() -> None:
    payload = smoke_payload([text_request("w"), vision_request("w")]).decode()
    lines = payload.splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["model"] == "w"
