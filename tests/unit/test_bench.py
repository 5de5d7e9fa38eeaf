import json
import subprocess

from provision.vllm.bench import BenchSettings, bench_script, judge, parse_runs
from provision.vllm.endpoint import Endpoint
from provision.vllm.stability import GateThresholds


def line(label, first, last, tokens=2000, start=0.0):
    return json.dumps({"run": label, "start": start, "first": first, "last": last, "completion_tokens": tokens})


def test_decode_rate_is_tokens_over_first_to_last_token_and_warmup_is_dropped():
    output = "\n".join([line("warmup", 1, 2), line("0.0", 0.5, 20.5), line("1.0", 0.4, 10.4)])
    runs = parse_runs(output)
    assert [r.decode_tokens_per_s for r in runs] == [100.0, 200.0]
    assert runs[0].ttft_s == 0.5


def test_steady_runs_pass_and_bimodal_runs_fail():
    steady = [line(f"{i}.0", 0.1, 0.1 + 2000 / 136) for i in range(10)]
    assert judge(parse_runs("\n".join(steady)), GateThresholds()).verdict.passed
    rates = [218, 229, 62, 223, 215, 103, 62, 224, 62, 221]
    split = [line(f"{i}.0", 0.1, 0.1 + 2000 / r) for i, r in enumerate(rates)]
    result = judge(parse_runs("\n".join(split)), GateThresholds())
    assert not result.verdict.passed and "clusters" in result.verdict.reasons[0]


def test_script_keeps_the_key_out_of_argv_and_is_valid_bash():
    script = bench_script(Endpoint("vllm", 8000, "/etc/provision/vllm.env", "workhorse"), BenchSettings(runs=3))
    assert "api_key=$(head -n 1 '/etc/provision/vllm.env'" in script
    assert "Authorization" not in script.split("python3 -c")[1].split("'")[-1]
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_client_measures_a_stand_in_server(tmp_path):
    """The host-side client against the stand-in vLLM server on 127.0.0.1: steady, then alternating."""
    from provision.vllm.bench import CLIENT, PROMPT
    from tests.standins.vllm.launch import start_standin

    verdicts = {}
    for behaviour in ("ok", "alternating"):
        env = {"STANDIN_REQUIRE_WEIGHTS": "0", "STANDIN_READY_DELAY": "0", "STANDIN_TOKENS_PER_S": "2000",
               "STANDIN_BEHAVIOUR": behaviour, "VLLM_API_KEY": "bench-key-123"}
        seed_flags = ["--kv-cache-dtype", "fp8", "--gpu-memory-utilization", "0.92", "--max-model-len", "8192",
                      "--limit-mm-per-prompt", '{"image":1,"video":0}']
        server = start_standin(["some/model", "--served-model-name", "m", *seed_flags], env=env)
        try:
            server.wait_ready()
            done = subprocess.run(
                ["python3", "-c", CLIENT, f"{server.url}/v1/chat/completions", "m", "200", "6", "1"],
                env={"BENCH_PROMPT": PROMPT, "BENCH_KEY": "bench-key-123", "PATH": "/usr/bin:/bin"},
                capture_output=True, text=True, timeout=120, check=True)
        finally:
            server.stop()
        result = judge(parse_runs(done.stdout), GateThresholds())
        assert len(result.runs) == 6 and all(r.completion_tokens == 200 for r in result.runs)
        verdicts[behaviour] = result.verdict.passed
    assert verdicts == {"ok": True, "alternating": False}
