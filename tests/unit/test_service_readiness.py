"""Readiness: ready only when /v1/models lists the served name; stop early on vLLM's fatal lines, quoting
the one that names the cause; bounded by a timeout; the host script parses and reads a live server."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest

from provision.vllm.endpoint import Endpoint
from provision.vllm.fatal import find_fatal
from provision.vllm.readiness import (
    ServiceNotReady,
    Snapshot,
    StartMark,
    Waiter,
    judge,
    parse_snapshot,
    snapshot_script,
)
from tests.standins.vllm.launch import free_port, start_standin
from tests.standins.vllm.server import FAILURES
from tests.unit.ops_support import assert_bash_parses, run_local
from tests.unit.serving_support import API_KEY, FAST, profile_arguments, start_profile_standin, stop

LOGS = Path(__file__).parent / "fixtures" / "vllm_logs"
ENDPOINT = Endpoint(name="vllm", port=8000, key_file="/etc/provision/vllm/vllm.env", served_name="workhorse")
MARK = StartMark(cursor="s=abc", restarts=0)


def log_lines(name: str) -> list[str]:
    return (LOGS / f"{name}.log").read_text().splitlines()


def output(health: str = "000", models: str | None = None, active: str = "active", sub: str = "running",
           restarts: int = 0, log: list[str] | None = None, load: str = "loaded") -> str:
    lines = [f"health={health}"]
    if models is not None:
        lines.append(f"models={base64.b64encode(models.encode()).decode()}")
    lines += [f"LoadState={load}", f"ActiveState={active}", f"SubState={sub}", f"NRestarts={restarts}",
              "log=" + base64.b64encode("\n".join(log or []).encode()).decode()]
    return "\n".join(lines) + "\n"


def models_body(*names: str, status: int = 200) -> str:
    return json.dumps({"object": "list", "data": [{"id": name} for name in names]}) + f"\n{status}"


@pytest.mark.parametrize(("log", "cause", "quoted"), [
    ("cuda_oom__vllm-14452-rtx5080", "out of GPU memory", "torch.OutOfMemoryError: CUDA out of memory."),
    ("kv_cache_too_small__xinference-4926", "lower max_model_len", "KV cache is needed, which is larger than the"),
    ("no_kernel_image__vllm-14452", "no kernels for this GPU", "no kernel image is available for execution on the"),
    ("badflag", "rejected its command line", "vllm: error: unrecognized arguments: --gpu-memory-utilisation"),
])
def test_the_line_that_names_the_cause_is_quoted(log: str, cause: str, quoted: str) -> None:
    fatal = find_fatal(log_lines(log))
    assert fatal is not None and fatal.specific
    assert cause in fatal.meaning and quoted in fatal.line
    assert not fatal.line.startswith(("(", "ERROR")), "vLLM's process/time prefix is cut from the quote"


def test_generic_engine_failure_is_found_but_not_specific() -> None:
    fatal = find_fatal(["(EngineCore pid=7) ERROR 11-30 15:00:00 [core.py:1584] EngineCore failed to start."])
    assert fatal is not None and not fatal.specific and fatal.line == "EngineCore failed to start."
    assert find_fatal(["INFO all fine", "Loading weights took 3.2 seconds"]) is None


def test_ready_only_when_models_lists_the_served_name() -> None:
    assert judge(parse_snapshot(output("200", models_body("workhorse"))), ENDPOINT, MARK).state == "ready"
    wrong = judge(parse_snapshot(output("200", models_body("other"))), ENDPOINT, MARK)
    assert wrong.state == "failed" and "['other'], not 'workhorse'" in wrong.detail
    refused = judge(parse_snapshot(output("200", '{"error": "Unauthorized"}\n401')), ENDPOINT, MARK)
    assert refused.state == "failed" and "API key" in refused.detail


def test_waiting_shows_what_the_server_is_doing() -> None:
    verdict = judge(parse_snapshot(output(log=["(EngineCore pid=8) INFO 11-30 15:00:00 [monitor.py:34] "
                                                "Starting torch.compile"])), ENDPOINT, MARK)
    assert verdict.state == "waiting" and verdict.detail == "Starting torch.compile"


@pytest.mark.parametrize(("snapshot", "detail"), [
    (output(restarts=1, log=["something odd"]), "exited and systemd restarted it"),
    (output(sub="auto-restart"), "exited and systemd restarted it"),
    (output(active="failed", sub="failed"), "is failed"),
    (output(health="503"), "engine died"),
    (output(load="not-found", active="inactive", sub="dead"), "not installed"),
])
def test_a_service_that_died_fails_at_once(snapshot: str, detail: str) -> None:
    verdict = judge(parse_snapshot(snapshot), ENDPOINT, MARK)
    assert verdict.state == "failed" and detail in verdict.detail


def test_restart_counts_are_compared_only_from_a_known_start() -> None:
    assert judge(parse_snapshot(output(restarts=3)), ENDPOINT, StartMark()).state == "waiting"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def waiter(replies: list[str], clock: Clock, progress: list[tuple[str, float | None, float | None]]) -> Waiter:
    def run(_script: str) -> str:
        return replies.pop(0)
    return Waiter(run=run, endpoint=ENDPOINT, progress=lambda d, c, t: progress.append((d, c, t)),
                  clock=clock, sleep=clock.sleep)


def test_wait_polls_with_progress_until_ready() -> None:
    clock, progress = Clock(), []
    replies = [output(log=["Loading weights"]), output(log=["Loading weights", "Starting torch.compile"]),
               output("200", models_body("workhorse"))]
    assert waiter(replies, clock, progress).wait(MARK, timeout=60) == 4.0
    assert [p[0] for p in progress] == ["waiting for vllm: Loading weights", "waiting for vllm: Starting torch.compile"]
    assert progress[-1][1:] == (2.0, 60)


def test_wait_stops_early_on_a_fatal_line_and_takes_a_second_look_for_the_cause() -> None:
    clock, progress = Clock(), []
    generic = ["(EngineCore pid=7) ERROR 11-30 15:00:00 [core.py:1584] EngineCore failed to start."]
    real = log_lines("kv_cache_too_small__xinference-4926")
    replies = [output(log=["Loading"]), output(log=generic), output(log=real)]
    with pytest.raises(ServiceNotReady) as failure:
        waiter(replies, clock, progress).wait(MARK, timeout=1200)
    assert "KV cache is needed" in str(failure.value) and failure.value.fatal is not None
    assert clock.now < 10, "did not wait out the timeout"


def test_wait_times_out_with_what_it_last_saw() -> None:
    clock, progress = Clock(), []
    replies = [output(log=["Loading weights"])] * 20
    with pytest.raises(ServiceNotReady, match=r"not ready after 10s \(still: Loading weights\)"):
        waiter(replies, clock, progress).wait(MARK, timeout=10)


def test_snapshot_script_parses_for_every_kind_of_start_mark() -> None:
    for mark in (StartMark(cursor="s=1;i=2"), StartMark(since=1700000000), StartMark()):
        assert_bash_parses(snapshot_script(ENDPOINT, mark))


def test_snapshot_script_reports_a_refused_port_and_goes_on(tmp_path: Path) -> None:
    """It runs under the connection's `set -euo pipefail`: a refused connection must not end it."""
    endpoint = Endpoint(name="vllm", port=free_port(), key_file=str(tmp_path / "no-key"), served_name="w")
    done = run_local(snapshot_script(endpoint, StartMark(since=1)))
    assert done.rc == 0 and "health=000" in done.stdout and "log=" in done.stdout


def test_snapshot_script_reads_a_running_server_with_the_key_from_the_key_file(tmp_path: Path) -> None:
    env_file = tmp_path / "api-key"
    env_file.write_text(f"{API_KEY}\n")
    server = start_profile_standin()
    try:
        endpoint = Endpoint(name="vllm", port=server.port, key_file=str(env_file), served_name="workhorse")
        done = run_local(snapshot_script(endpoint, StartMark(since=1)))
        snapshot: Snapshot = parse_snapshot(done.stdout)
        assert snapshot.health == 200 and snapshot.models == ["workhorse"]
        assert API_KEY not in done.stdout + done.stderr
    finally:
        stop(server)


def test_an_api_server_that_died_of_no_known_cause_is_quoted_by_its_exception() -> None:
    log = ["(APIServer pid=1) INFO 05-01 10:00:00 [api_server.py:1805] vLLM API server version 0.21.0",
           "(APIServer pid=1) Traceback (most recent call last):",
           "(APIServer pid=1) OSError: [Errno 98] Address already in use"]
    verdict = judge(parse_snapshot(output(active="failed", sub="failed", log=log)), ENDPOINT, MARK)
    assert verdict.state == "failed" and verdict.fatal is not None
    assert ("is failed (failed): no known cause; vLLM's last error: 'OSError: [Errno 98] Address already in use'"
            in verdict.detail)


@pytest.mark.parametrize("behaviour", FAILURES)
def test_each_stand_in_failure_ends_the_wait_in_seconds_with_its_cause(behaviour: str) -> None:
    """The real Waiter (real clock) polling a live stand-in's log: a failed start is told within
    seconds, not after the readiness timeout, with the line that says why."""
    process = start_standin(profile_arguments(), env={**FAST, "STANDIN_BEHAVIOUR": behaviour,
                                                      "STANDIN_READY_DELAY": "1"})
    try:
        def run(_script: str) -> str:
            exited = process.process.poll() is not None
            return output(active="failed" if exited else "activating", sub="failed" if exited else "start",
                          log=process.output().splitlines())
        started = time.monotonic()
        with pytest.raises(ServiceNotReady) as failure:
            Waiter(run=run, endpoint=ENDPOINT, progress=lambda *_: None, interval=0.2).wait(MARK, timeout=120)
        took = time.monotonic() - started
    finally:
        process.stop()
    assert failure.value.fatal is not None and took < 10, (took, str(failure.value))
    assert failure.value.fatal.line in str(failure.value)
