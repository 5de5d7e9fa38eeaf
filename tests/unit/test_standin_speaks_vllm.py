"""The stand-in vLLM says what real vLLM says: every line it prints is a real line of the corpus
(tests/unit/fixtures/vllm_logs/, level, `[file.py:LINE]` and text, numbers free), in the order real
logs print them, behind the 2026 process prefixes; each failure mode is read by fatal.py as the
cause real vLLM's log gives, quoting a real line. So the stand-in cannot drift from the corpus."""

from __future__ import annotations

import re
import string
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from provision.vllm.fatal import find_fatal, strip_prefixes
from provision.vllm.startup_log import parse_startup_memory
from tests.standins.vllm.launch import REPO_ROOT, free_port
from tests.standins.vllm.real_lines import LINES, STARTUP_ORDER, RealLine
from tests.standins.vllm.server import FAILURES, VERSION

CORPUS = Path(__file__).parent / "fixtures" / "vllm_logs"
SEED = ["cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit", "--kv-cache-dtype", "fp8", "--max-model-len", "131072",
        "--limit-mm-per-prompt", '{"image":1,"video":0}', "--max-num-seqs", "4", "--max-num-batched-tokens", "8192"]
FAST = {"STANDIN_READY_DELAY": "0", "STANDIN_REQUIRE_WEIGHTS": "0", "PYTHONUNBUFFERED": "1", "PATH": "/usr/bin:/bin"}


def pattern(line: RealLine) -> re.Pattern[str]:
    """The template as a regex: literal text, every {field} any text."""
    parts = [re.escape(literal) + (".+?" if field is not None else "")
             for literal, field, _, _ in string.Formatter().parse(line.template.strip())]
    return re.compile("".join(parts) + ("" if line.tail else r"\Z"))


def corpus_lines(name: str) -> list[str]:
    return (CORPUS / name).read_text().splitlines()


def seen_in(line: RealLine, raw: str) -> bool:
    if not pattern(line).match(strip_prefixes(raw)):
        return False
    return line.level is None or (f"{line.level} " in raw and f"[{line.where}]" in raw)


@pytest.mark.parametrize("key", sorted(LINES))
def test_every_line_is_a_real_vllm_line_from_its_cited_log(key: str) -> None:
    line = LINES[key]
    if line.source is None:
        assert line.note, f"{key}: a line with no corpus source says where its text is from"
        return
    assert any(seen_in(line, raw) for raw in corpus_lines(line.source)), f"{key} is not in {line.source}"


@cache
def run_standin(behaviour: str) -> str:
    """The stand-in's whole output for one start (ok: stopped once it serves)."""
    env = {**FAST, "STANDIN_BEHAVIOUR": behaviour}
    command = [sys.executable, "-m", "tests.standins.vllm", "serve", *SEED, "--port", str(free_port())]
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    lines = []
    assert process.stdout is not None
    for text in process.stdout:
        lines.append(text.rstrip("\n"))
        if "Application startup complete." in text:
            process.terminate()
    process.wait(timeout=30)
    return "\n".join(lines)


def keys_of(output: str) -> list[str]:
    """Which real line each printed line is (the first key whose template and prefix match)."""
    found = []
    for raw in output.splitlines():
        key = next((key for key, line in LINES.items() if line.template.strip() and seen_in(line, raw)), None)
        if key is None and strip_prefixes(raw) == "" and "[utils.py:297]" in raw:
            key = "banner_edge"
        found.append(key or f"? {raw}")
    return found


def is_subsequence(items: list[str], of: tuple[str, ...]) -> bool:
    remaining = iter(of)
    return all(item in remaining for item in items)


def test_a_start_prints_only_real_lines_in_the_order_real_logs_have_them() -> None:
    printed = keys_of(run_standin("ok"))
    assert [key for key in printed if key.startswith("? ")] == [], "every line is one of real_lines.LINES"
    printed = printed[:printed.index("uvicorn_complete") + 1]  # the start; then it was stopped
    runs = [key for index, key in enumerate(printed) if index == 0 or printed[index - 1] != key]
    assert is_subsequence(runs, STARTUP_ORDER), runs
    for source in sorted({LINES[key].source for key in STARTUP_ORDER if LINES[key].source}):
        real = list(dict.fromkeys(key for raw in corpus_lines(source) for key in STARTUP_ORDER
                                  if LINES[key].template.strip() and seen_in(LINES[key], raw)))
        mine = list(dict.fromkeys(key for key in printed if key in real))
        assert mine == [key for key in real if key in mine], f"the order of {source}"
        assert mine, f"the start prints none of {source}'s lines"


def test_a_start_speaks_the_pinned_version_behind_2026_prefixes() -> None:
    output = run_standin("ok")
    assert f"version {VERSION}" in output and f"Initializing a V1 LLM engine (v{VERSION})" in output
    assert VERSION == "0.21.0", "the pinned image is vllm/vllm-openai:v0.21.0-cu129"
    engine = re.findall(r"^\((\w+) pid=\d+\) \w+ \d\d-\d\d [\d:]+ \[gpu_worker.py", output, re.MULTILINE)
    assert set(engine) == {"EngineCore"}, "the 2026 logs (club-3090#612) name the engine process EngineCore"
    assert "(EngineCore pid=107) INFO" in (CORPUS / "startup__club-3090-612-rtx5090.log").read_text()
    assert "Using KV cache scaling factor 1.0 for fp8_e4m3" in output, "the fp8 warning a real start prints"
    assert "CUDA graph memory profiling is enabled (default since v0.21.0)" in output
    assert find_fatal(output.splitlines()) is None, "a start that succeeds names no cause"


CAUSES = {"kv-cache-too-small": "kv_cache_too_small", "cuda-oom": "cuda_oom", "no-kernel-image": "no_kernel_image",
          "no-cache-blocks": "no_cache_blocks", "gpu-memory-taken": "gpu_memory_taken",
          "no-gpu": "no_gpu_in_container", "weights-missing": "weights_missing", "bad-config": "invalid_value",
          "mmap-failed": "unknown"}


@pytest.mark.parametrize("behaviour", FAILURES)
def test_each_failure_mode_is_read_as_real_vllms_cause_quoting_a_real_line(behaviour: str) -> None:
    output = run_standin(behaviour)
    assert "Application startup complete." not in output
    fatal = find_fatal(output.splitlines(), exited=True)
    assert fatal is not None and fatal.cause == CAUSES[behaviour], (fatal, output[-2000:])
    quoted = next(raw for raw in output.splitlines() if strip_prefixes(raw).startswith(fatal.line.removesuffix(" ...")))
    assert LINES[keys_of(quoted)[0]].source, f"the quote is a corpus line: {fatal.line}"
    assert [key for key in keys_of(output) if key.startswith("? ")] == []


def test_a_fixed_kv_cache_reservation_is_printed_as_vllm_prints_it() -> None:
    env = {**FAST, "STANDIN_BEHAVIOUR": "ok"}
    command = [sys.executable, "-m", "tests.standins.vllm", "serve", *SEED, "--kv-cache-memory-bytes", "3221225472",
               "--port", str(free_port())]
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
    assert process.stdout is not None
    output = []
    for text in process.stdout:
        output.append(text)
        if "Application startup complete." in text:
            process.terminate()
    process.wait(timeout=30)
    log = "".join(output)
    assert "reserved 3.00 GiB memory for KV Cache as specified by kv_cache_memory_bytes config" in log
    assert "Available KV cache memory" not in log
    assert parse_startup_memory(log).kv_gib == 3.0
