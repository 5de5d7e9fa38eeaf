"""The office workload bench: its statistics against known stream timings, the regression flag, the
atomic keep, and its per-user figures against the stand-in server's own record of what it sent."""

from __future__ import annotations

import base64
import json
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from provision.vllm.office_bench import (
    CLIENT,
    OfficeWorkload,
    keep_script,
    parse_output,
    previous_result,
    regression,
    request_of,
    summarize,
)
from provision.vllm.png import red_gradient_png
from provision.vllm.release import Layout
from tests.standins.vllm.launch import start_standin
from tests.unit.serving_support import FAST, profile_arguments, stop


def record(user: int, size: int, start: float, first: float, last: float, tokens: int = 1000, **extra: object) -> str:
    return json.dumps({"user": user, "size": size, "start": start, "first": first, "last": last,
                       "completion_tokens": tokens, "prompt_tokens": size + 300, **extra})


def test_statistics_from_known_stream_timings() -> None:
    # user 0: 1000 tokens in 5 s and in 8 s (200 and 125 tok/s); user 1: 4 s (250); TTFTs 0.5, 2, 1 s
    output = "\n".join([json.dumps({"context": 131072}), record(0, 1000, 10, 10.5, 15.5),
                        record(0, 120000, 20, 22, 30), record(1, 120000, 0, 1, 5)])
    _, context, _, requests = parse_output(output)
    summary = summarize(requests, OfficeWorkload(users=2), context)
    assert summary["per_user"] == {"0": {"mean_tokens_per_s": 162.5, "min_tokens_per_s": 125.0, "requests": 2,
                                         "errors": 0},
                                   "1": {"mean_tokens_per_s": 250.0, "min_tokens_per_s": 250.0, "requests": 1,
                                         "errors": 0}}
    assert summary["ttft_p50_s"] == 1.0 and summary["ttft_p95_s"] == 2.0  # nearest rank of 0.5, 1, 2
    assert summary["passed"] and summary["errors"] == 0 and summary["context"] == 131072


def test_a_slow_stream_an_error_or_an_unserved_long_document_fails_the_promise() -> None:
    slow = summarize([request_of(json.loads(record(0, 100, 0, 1, 21)))], OfficeWorkload(), 8192)  # 50 tok/s
    assert not slow["passed"] and "slowest stream 50.0 tok/s is not above 100 tok/s at 3 users" in slow["reasons"][0]
    failed = [request_of(json.loads(record(0, 100, 0, 0.1, 2.1))),
              request_of({"user": 1, "size": 7000, "start": 0, "error": "HTTPError: HTTP Error 400: Bad Request"})]
    summary = summarize(failed, OfficeWorkload(), 8192)
    assert not summary["passed"] and summary["errors"] == 1 and summary["per_user"]["1"]["errors"] == 1
    assert any("1 request(s) failed: HTTPError" in reason for reason in summary["reasons"])
    assert any("the largest document (7000 words of a 8192-token context) was not served" in reason
               for reason in summary["reasons"])


def test_a_bimodal_release_is_flagged_against_the_previous_release() -> None:
    kept = [{"release": "old", "measured_at": 100, "mean_tokens_per_s": 127.0, "min_tokens_per_s": 121.0},
            {"release": "older", "measured_at": 50, "mean_tokens_per_s": 90.0, "min_tokens_per_s": 80.0},
            {"release": "new", "measured_at": 200, "mean_tokens_per_s": 1.0, "min_tokens_per_s": 1.0}]
    previous = previous_result(kept, "new")
    assert previous is not None and previous["release"] == "old"
    # DFlash: runs of 220 and 60 tok/s: the mean looks better, the slowest stream halves
    flag = regression({"mean_tokens_per_s": 140.0, "min_tokens_per_s": 60.0}, previous, 10)
    assert flag == "slowest stream 60.0 tok/s < 121.0 of release old (-50%, band 10%)"
    assert regression({"mean_tokens_per_s": 120.0, "min_tokens_per_s": 112.0}, previous, 10) is None
    assert regression({"mean_tokens_per_s": 10.0, "min_tokens_per_s": 10.0}, None, 10) is None


def test_the_result_is_kept_atomically_per_release(tmp_path: Path) -> None:
    layout = Layout("vllm", "/dev/null", str(tmp_path / "state"), "/etc/provision/vllm/api-key")
    result = {"release": "abc123", "note": "it's <data>; $(reboot)"}
    subprocess.run(["bash", "-e"], input=keep_script(layout, "abc123", result), text=True, check=True)
    assert json.loads((tmp_path / "state/bench/abc123.json").read_text()) == result
    assert sorted(p.name for p in (tmp_path / "state/bench").iterdir()) == ["abc123.json"]
    with pytest.raises(ValueError, match=r"cannot keep a bench result for release '\.\./x'"):
        keep_script(layout, "../x", result)


def test_per_user_figures_agree_with_the_stand_ins_own_record(tmp_path: Path) -> None:
    """The client's per-user decode rate (its clock, its parsing of the stream) against the server's
    record of the tokens it sent and when (STANDIN_REQUEST_LOG): within 5% for every user."""
    log = tmp_path / "requests.jsonl"
    arguments = profile_arguments()
    arguments[arguments.index("--max-model-len") + 1] = "8192"
    server = start_standin(arguments, env={**FAST, "STANDIN_TOKENS_PER_S": "400", "STANDIN_REQUEST_LOG": str(log)})
    try:
        server.wait_ready()
        done = subprocess.run(
            ["python3", "-c", CLIENT, server.url, "workhorse", "3", "200", "0.05,0.5,1.0", "1024"],
            env={"BENCH_IMAGE": base64.b64encode(red_gradient_png()).decode(), "PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, timeout=120, check=True)
    finally:
        stop(server)
    _, context, _, requests = parse_output(done.stdout)
    summary = summarize(requests, OfficeWorkload(), context)
    assert summary["passed"], summary["reasons"]
    assert summary["largest_prompt_tokens"] > 0.85 * 8192  # the sweep reached the context
    served: dict[str, list[float]] = defaultdict(list)
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        served[entry["user"].removeprefix("office-")].append(entry["tokens"] / (entry["last"] - entry["first"]))
    assert sorted(served) == ["0", "1", "2"] and all(len(rates) == 3 for rates in served.values())
    for user, figures in summary["per_user"].items():
        independent = sum(served[user]) / len(served[user])
        assert abs(figures["mean_tokens_per_s"] - independent) / independent < 0.05, (user, figures, independent)
    print("per user (bench vs server record):",
          {user: (f["mean_tokens_per_s"], round(sum(served[user]) / len(served[user]), 2))
           for user, f in summary["per_user"].items()})
