"""The vLLM stand-in behaves like the real server where the tool depends on it.

Command-line behaviour is compared with stderr recorded from the real vLLM 0.33.0 CLI
(tests/standins/vllm/real_cli_errors.txt). Server behaviour runs the stand-in as a subprocess on a
free 127.0.0.1 port with a short start-up and a fast token rate.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import struct
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.standins.vllm import png
from tests.standins.vllm.flags import load_flag_table
from tests.standins.vllm.launch import StandinProcess, start_standin
from tests.standins.vllm.memory import GEMMA4_LIKE_LAYOUT, GIB, MemoryInputs, kv_bytes_for_one_request, plan_memory
from tests.standins.vllm.server import ConfigError, main, parse_command_line

REAL_ERRORS = Path(__file__).resolve().parents[1] / "standins" / "vllm" / "real_cli_errors.txt"
SEED_ARGS = [
    "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit", "--served-model-name", "gemma", "--api-key", "sekrit",
    "--attention-backend", "TRITON_ATTN", "--kv-cache-dtype", "fp8", "--max-model-len", "131072",
    "--gpu-memory-utilization", "0.92", "--max-num-seqs", "4", "--max-num-batched-tokens", "8192",
    "--enable-prefix-caching", "--limit-mm-per-prompt", '{"image":1,"video":0}',
]
FAST = {"STANDIN_READY_DELAY": "0.2", "STANDIN_TOKENS_PER_S": "4000", "STANDIN_REQUIRE_WEIGHTS": "0"}
AUTH = {"Authorization": "Bearer sekrit"}


def real_cases() -> dict[str, tuple[int, list[str]]]:
    cases: dict[str, tuple[int, list[str]]] = {}
    current = ""
    for line in REAL_ERRORS.read_text().splitlines():
        if line.startswith("#"):
            continue
        if line.startswith("=== "):
            current = line[4:]
            cases[current] = (0, [])
        elif line.startswith("exit "):
            cases[current] = (int(line[5:]), [])
        else:
            cases[current][1].append(line)
    return cases


def without_addresses(text: str) -> str:
    return re.sub(r" at 0x[0-9a-f]+", " at 0x", text)


# --- command line ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [c for c, (status, _) in real_cases().items() if status == 2])
def test_rejects_bad_arguments_exactly_like_real_vllm(case: str, capsys: pytest.CaptureFixture[str]) -> None:
    expected_status, expected_lines = real_cases()[case]
    with pytest.raises(SystemExit) as exit_info:
        parse_command_line(case.split(), "vllm")
    assert exit_info.value.code == expected_status
    assert without_addresses(capsys.readouterr().err).splitlines() == [without_addresses(x) for x in expected_lines]


def test_accepts_the_tuned_seed_command() -> None:
    args = parse_command_line(["serve", *SEED_ARGS], "vllm")
    assert args.model == "cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit"
    assert args.served_model_name == ["gemma"] and args.api_key == ["sekrit"]
    assert (args.max_model_len, args.gpu_memory_utilization, args.max_num_seqs) == (131072, 0.92, 4)
    assert args.limit_mm_per_prompt == {"image": 1, "video": 0}
    assert args.enable_prefix_caching is True


@pytest.mark.parametrize(("flag", "value"), [("--enable-prefix-caching", True), ("--disable-prefix-caching", False),
                                             ("--no-enable-prefix-caching", False)])
def test_boolean_flags_have_vllms_on_and_off_spellings(flag: str, value: bool) -> None:
    assert parse_command_line(["serve", "m", flag], "vllm").enable_prefix_caching is value


def test_flexible_spellings_are_accepted_like_vllm() -> None:
    args = parse_command_line(["serve", "m", "--max_model_len=128k", "-O3", "--compilation-config.mode", "3"], "vllm")
    assert args.max_model_len == 128000
    assert args.optimization_level == "3"
    assert args.compilation_config == {"mode": 3}


def test_model_may_be_given_with_the_model_option() -> None:
    assert parse_command_line(["serve", "--model", "org/m", "--port", "9000"], "vllm").model == "org/m"
    api = parse_command_line(["--model", "org/m", "--kv-cache-dtype", "fp8"], "api_server")
    assert (api.model, api.kv_cache_dtype) == ("org/m", "fp8")


def test_flag_table_is_the_real_option_list() -> None:
    spellings = {s for spec in load_flag_table().specs for s in (*spec.spellings, *spec.off_spellings)}
    assert {"--attention-backend", "--max-num-batched-tokens", "--limit-mm-per-prompt", "--api-key"} <= spellings
    assert "--gpu-memory-utilisation" not in spellings
    assert len(spellings) > 300


@pytest.mark.parametrize(("args", "message"), [
    (["--kv-cache-dtype", "fp9"], "Invalid kv_cache_dtype: 'fp9'"),
    (["--attention-backend", "triton_attn_typo"], "Unknown attention backend: 'TRITON_ATTN_TYPO'"),
    (["--gpu-memory-utilization", "1.5"], "Input should be less than or equal to 1"),
])
def test_values_vllm_rejects_after_parsing_end_with_exit_1(args: list[str], message: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_command_line(["serve", "m", *args], "vllm")
    assert main(["serve", "m", *args]) == 1
    printed = capsys.readouterr().out  # vLLM logs to stdout, behind the API server's prefix (MiniCPM#51)
    assert message in printed and printed.startswith("(APIServer pid=")


def test_served_model_name_without_model_fails_like_vllm(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--served-model-name", "x"]) == 1
    assert real_cases()["serve --served-model-name x"][1][-1] in capsys.readouterr().err


# --- memory plan and PNG decoding ----------------------------------------------------------------


def seed_memory(**changes: Any) -> MemoryInputs:
    values: dict[str, Any] = dict(total_gib=24, used_by_others_gib=0, weights_gib=17.12, gpu_memory_utilization=0.92,
                                  kv_cache_dtype="fp8", max_num_batched_tokens=8192, enforce_eager=False,
                                  images_per_prompt=1, videos_per_prompt=0, layout=GEMMA4_LIKE_LAYOUT)
    values.update(changes)
    return MemoryInputs(**values)


def test_memory_plan_follows_reference_numbers() -> None:
    inputs = seed_memory()
    per_request = kv_bytes_for_one_request(inputs, 131072) / GIB
    assert 2.0 < per_request < 2.3  # REFERENCE §2: about 2.1 GiB a sequence at fp8, 128K
    assert 2.5 < plan_memory(inputs).available_kv_gib < 4.0  # "roughly 2-4 GiB"
    assert kv_bytes_for_one_request(seed_memory(kv_cache_dtype="auto"), 131072) / GIB > 4.0
    assert plan_memory(seed_memory(videos_per_prompt=999)).available_kv_gib < per_request


def png_bytes(pixels: list[list[tuple[int, ...]]], colour_type: int, filters: list[int] | None = None) -> bytes:
    """Encode rows of pixels as a PNG, each row with the given filter type (0-4)."""
    channels = {0: 1, 2: 3, 4: 2, 6: 4}[colour_type]
    raw = bytearray()
    previous = bytes(len(pixels[0]) * channels)
    for y, row in enumerate(pixels):
        line = bytes(v for pixel in row for v in pixel)
        kind = (filters or [0])[y % len(filters or [0])]
        encoded = bytearray()
        for x, value in enumerate(line):
            left = line[x - channels] if x >= channels else 0
            up = previous[x]
            up_left = previous[x - channels] if x >= channels else 0
            predictor = [0, left, up, (left + up) // 2, png._paeth(left, up, up_left)][kind]
            encoded.append((value - predictor) & 0xFF)
        raw += bytes([kind]) + encoded
        previous = line

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", len(pixels[0]), len(pixels), 8, colour_type, 0, 0, 0)
    return png.PNG_SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b"")


def gradient(colour: str, size: int = 64) -> bytes:
    """A size x size gradient from dark to full intensity of one primary colour (RGB)."""
    index = {"red": 0, "green": 1, "blue": 2}[colour]
    rows = []
    for _y in range(size):
        row = []
        for x in range(size):
            pixel = [0, 0, 0]
            pixel[index] = 40 + x * 215 // (size - 1)
            row.append(tuple(pixel))
        rows.append(row)
    return png_bytes(rows, 2, filters=[0, 1, 2, 3, 4])


def test_png_decoder_reads_all_filter_types_and_colour_types() -> None:
    rows = [[(x * 16 % 256, y * 32 % 256, (x + y) * 8 % 256, 255) for x in range(7)] for y in range(5)]
    decoded = png.decode_png(png_bytes(rows, 6, filters=[0, 1, 2, 3, 4]))[2]
    assert decoded == [pixel for row in rows for pixel in row]
    grey = png.decode_png(png_bytes([[(10,), (200,)]], 0))[2]
    assert grey == [(10, 10, 10, 255), (200, 200, 200, 255)]


def test_dominant_colour_of_gradients_and_corrupt_files() -> None:
    assert png.dominant_colour(gradient("red")) == "Red"
    assert png.dominant_colour(gradient("blue")) == "Blue"
    corrupted = bytearray(gradient("red"))
    corrupted[60] ^= 0xFF
    with pytest.raises(png.PngError):
        png.dominant_colour(bytes(corrupted))


# --- the running server --------------------------------------------------------------------------


def request(url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
            timeout: float = 10) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def stream_chat(url: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[float]]:
    """POST a streaming chat request; return the JSON events and the arrival time of each content token."""
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json", **AUTH})
    events: list[dict[str, Any]] = []
    token_times: list[float] = []
    with urllib.request.urlopen(req, timeout=30) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                assert line in ("", "data: [DONE]")
                continue
            event = json.loads(line[6:])
            events.append(event)
            if event["choices"] and event["choices"][0]["delta"].get("content"):
                token_times.append(time.monotonic())
    return events, token_times


@pytest.fixture(scope="module")
def server() -> Iterator[StandinProcess]:
    process = start_standin(SEED_ARGS, env=FAST)
    process.wait_ready()
    yield process
    process.stop()


def image_message(*images: bytes, text: str = "What colour is this image? One word.") -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}]
    parts += [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(i).decode()}}
              for i in images]
    return {"model": "gemma", "temperature": 0, "max_tokens": 5, "messages": [{"role": "user", "content": parts}]}


def test_port_refuses_connections_until_ready_then_health_is_200() -> None:
    process = start_standin(SEED_ARGS, env={**FAST, "STANDIN_READY_DELAY": "1.5"})
    try:
        deadline = time.monotonic() + 0.8
        refused = 0
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", process.port)) != 0:
                    refused += 1
            time.sleep(0.1)
        assert refused >= 5, "the port must refuse connections while the engine starts"
        process.wait_ready()
        assert request(process.url + "/health") == (200, b"")
        log = process.output()
        assert "Model loading took 17.12 GiB memory" in log
        assert re.search(r"Available KV cache memory: [\d.]+ GiB", log)
        assert re.search(r"GPU KV cache size: [\d,]+ tokens\n.*Maximum concurrency for [\d,]+ tokens per request", log)
    finally:
        assert process.stop() == 0


def test_models_lists_served_name_with_context_and_needs_the_key(server: StandinProcess) -> None:
    assert request(server.url + "/v1/models")[0] == 401
    assert request(server.url + "/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
    status, body = request(server.url + "/v1/models", headers=AUTH)
    assert status == 200
    assert [(m["id"], m["max_model_len"]) for m in json.loads(body)["data"]] == [("gemma", 131072)]
    assert request(server.url + "/health")[0] == 200
    assert request(server.url + "/metrics")[0] == 200


def test_streaming_generates_exactly_max_tokens_with_usage(server: StandinProcess) -> None:
    body = {"model": "gemma", "messages": [{"role": "user", "content": "Write a long story."}], "max_tokens": 200,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    events, token_times = stream_chat(server.url, body)
    assert len(token_times) == 200
    usage = events[-1]["usage"]
    assert events[-1]["choices"] == []
    assert usage["completion_tokens"] == 200
    assert usage["total_tokens"] == usage["prompt_tokens"] + 200
    assert [e["choices"][0]["finish_reason"] for e in events[:-1]][-1] == "length"
    rate = (len(token_times) - 1) / (token_times[-1] - token_times[0])
    assert 1500 < rate < 6000  # configured 4000 tok/s


def test_non_streaming_answer_stops_at_its_end_without_ignore_eos(server: StandinProcess) -> None:
    status, body = request(server.url + "/v1/chat/completions", {"model": "gemma", "max_tokens": 500,
                                                                 "messages": [{"role": "user", "content": "Hi"}]}, AUTH)
    answer = json.loads(body)
    assert status == 200
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert 0 < answer["usage"]["completion_tokens"] < 500
    assert answer["choices"][0]["message"]["content"]


def test_vision_answers_the_images_dominant_colour(server: StandinProcess) -> None:
    status, body = request(server.url + "/v1/chat/completions", image_message(gradient("red")), AUTH)
    assert status == 200
    assert "red" in json.loads(body)["choices"][0]["message"]["content"].lower()
    status, body = request(server.url + "/v1/chat/completions", image_message(gradient("blue")), AUTH)
    assert "red" not in json.loads(body)["choices"][0]["message"]["content"].lower()


def test_vision_rejects_too_many_images_and_corrupt_ones(server: StandinProcess) -> None:
    status, body = request(server.url + "/v1/chat/completions", image_message(gradient("red"), gradient("red")), AUTH)
    assert (status, json.loads(body)["error"]["message"]) == (400, "At most 1 image(s) may be provided in one prompt.")
    broken = gradient("red")[:200]
    assert request(server.url + "/v1/chat/completions", image_message(broken), AUTH)[0] == 400


def test_unknown_model_is_404_and_overlong_request_is_400(server: StandinProcess) -> None:
    status, body = request(server.url + "/v1/chat/completions",
                           {"model": "other", "messages": [{"role": "user", "content": "x"}]}, AUTH)
    assert (status, json.loads(body)["error"]["type"]) == (404, "NotFoundError")
    status, _ = request(server.url + "/v1/chat/completions",
                        {"model": "gemma", "max_tokens": 131072, "messages": [{"role": "user", "content": "x"}]}, AUTH)
    assert status == 400


def test_completions_endpoint_and_metrics_count_tokens(server: StandinProcess) -> None:
    def generated() -> float:
        text = request(server.url + "/metrics")[1].decode()
        match = re.search(r'^vllm:generation_tokens_total\{engine="0",model_name="gemma"\} (\S+)$', text, re.M)
        assert match and 'vllm:time_to_first_token_seconds_count{engine="0",model_name="gemma"}' in text
        assert 'vllm:kv_cache_usage_perc{engine="0",model_name="gemma"}' in text
        return float(match.group(1))

    before = generated()
    status, body = request(server.url + "/v1/completions", {"model": "gemma", "prompt": "Once", "max_tokens": 7,
                                                            "ignore_eos": True}, AUTH)
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 7
    assert generated() == before + 7


@pytest.mark.parametrize(("behaviour", "line"), [
    ("kv-cache-too-small", "KV cache is needed, which is larger than the available KV cache memory"),
    ("cuda-oom", "CUDA out of memory"),
    ("no-kernel-image", "CUDA error: no kernel image is available for execution on the device"),
])
def test_fatal_behaviours_print_vllms_error_and_exit_nonzero(behaviour: str, line: str) -> None:
    process = start_standin(SEED_ARGS, env={**FAST, "STANDIN_BEHAVIOUR": behaviour})
    assert process.process.wait(timeout=20) == 1
    log = process.output()
    assert line in log
    assert "Engine core initialization failed. See root cause above." in log
    assert "Application startup complete." not in log


def test_kv_cache_that_cannot_hold_the_context_fails_with_estimate() -> None:
    args = [a if a != "fp8" else "auto" for a in SEED_ARGS]  # bf16 KV needs ~4.3 GiB at 128K
    process = start_standin(args, env=FAST)
    assert process.process.wait(timeout=20) == 1
    assert re.search(r"the estimated maximum model length is \d+\.", process.output())


def test_wrong_vision_and_alternating_behaviours() -> None:
    process = start_standin(SEED_ARGS, env={**FAST, "STANDIN_BEHAVIOUR": "alternating", "STANDIN_TOKENS_PER_S": "700"})
    wrong = start_standin(SEED_ARGS, env={**FAST, "STANDIN_BEHAVIOUR": "wrong-vision"})
    try:
        process.wait_ready()
        body = {"model": "gemma", "messages": [{"role": "user", "content": "go"}], "max_tokens": 60, "ignore_eos": True}
        rates = []
        for _ in range(2):
            _, times = stream_chat(process.url, body)
            rates.append((len(times) - 1) / (times[-1] - times[0]))
        assert max(rates) / min(rates) > 2.5  # 220 vs 62 at the default rate: bimodal
        wrong.wait_ready()
        _, answer = request(wrong.url + "/v1/chat/completions", image_message(gradient("red")), AUTH)
        assert "red" not in json.loads(answer)["choices"][0]["message"]["content"].lower()
    finally:
        process.stop()
        wrong.stop()


def test_missing_weights_fail_like_vllm_without_network(tmp_path: Path) -> None:
    env = {**FAST, "STANDIN_REQUIRE_WEIGHTS": "1", "HF_HOME": str(tmp_path), "HF_HUB_CACHE": ""}
    process = start_standin(["org/not-downloaded"], env=env)
    assert process.process.wait(timeout=20) == 1
    assert "couldn't connect to 'https://huggingface.co' to load the files" in process.output()


def test_sigterm_during_start_up_stops_at_once() -> None:
    """As PID 1 in a container an unhandled SIGTERM is ignored; the stand-in handles it like vLLM."""
    process = start_standin(SEED_ARGS, env={**FAST, "STANDIN_READY_DELAY": "20"})
    time.sleep(0.5)
    started = time.monotonic()
    assert process.stop() == 143
    assert time.monotonic() - started < 3
