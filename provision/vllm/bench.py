"""`provision bench`: the seed's throughput method, run on the host, judged by the stability gate.

One discarded warm-up, then N runs of a fixed long generation (max_tokens, forced with ignore_eos),
streamed with usage; per run: time to first token and decode tokens/s =
completion_tokens / (t_last_token - t_first_token) (REFERENCE.md §5). The requests are made ON the
host by a small stdlib python3 script (so nothing needs a port opened), which prints one JSON line
per run; the statistics and the verdict are computed here, pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from provision.shell import quote
from provision.vllm.endpoint import Endpoint
from provision.vllm.stability import GateThresholds, SeriesStats, Verdict, gate, summarize

PROMPT = ("Write a detailed, well-structured technical report on maintaining a fleet of office laptops "
          "that serve a local language model: hardware, drivers, containers, monitoring, upgrades.")

#: what both bench clients share (this one and office_bench's): the key header, one record a line
#: (print() from threads interleaved two records on one line), and a streamed completion timed
STREAMING = r'''
import json, os, sys, threading, time, urllib.request
headers = {"Content-Type": "application/json"}
if os.environ.get("BENCH_KEY"):
    headers["Authorization"] = "Bearer " + os.environ["BENCH_KEY"]
printing = threading.Lock()
def say(record):
    with printing:
        sys.stdout.write(json.dumps(record) + "\n"); sys.stdout.flush()
def stream(url, body, record, timeout):
    request = urllib.request.Request(url, json.dumps(body).encode(), headers)
    usage = None
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        for raw in reply:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    record["last"] = time.monotonic(); record["first"] = record["first"] or record["last"]
    return usage or {}
'''

CLIENT = STREAMING + r'''
url, model = sys.argv[1], sys.argv[2]
max_tokens, runs, concurrency = (int(value) for value in sys.argv[3:6])
prompt = os.environ["BENCH_PROMPT"]
def one(label):
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "ignore_eos": True, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    record = {"run": label, "start": time.monotonic(), "first": None, "last": None}
    record["completion_tokens"] = stream(url, body, record, 1800).get("completion_tokens")
    say(record)
one("warmup")
for index in range(runs):
    threads = [threading.Thread(target=one, args=(f"{index}.{user}",)) for user in range(concurrency)]
    [t.start() for t in threads]; [t.join() for t in threads]
'''


@dataclass(frozen=True)
class BenchSettings:
    runs: int = 10
    max_tokens: int = 2000
    concurrency: int = 1
    thresholds: GateThresholds = field(default_factory=GateThresholds)


@dataclass(frozen=True)
class Run:
    label: str
    ttft_s: float
    decode_tokens_per_s: float
    completion_tokens: int


@dataclass(frozen=True)
class BenchResult:
    runs: list[Run]
    stats: SeriesStats
    verdict: Verdict
    mean_ttft_s: float


def bench_script(endpoint: Endpoint, settings: BenchSettings) -> str:
    """The bash script that runs the client on the host (key from the root-only env file, never argv)."""
    args = " ".join(quote(a) for a in (endpoint.url("/v1/chat/completions"), endpoint.served_name,
                                       settings.max_tokens, settings.runs, settings.concurrency))
    return (f"{endpoint.auth_prelude()}\n"
            f"export BENCH_PROMPT={quote(PROMPT)} BENCH_KEY=\"$api_key\"\n"
            f"python3 -c {quote(CLIENT)} {args}\n")


def parse_runs(output: str) -> list[Run]:
    """The measured runs (the warm-up dropped); a run without tokens or timings is an error."""
    runs = []
    for line in output.splitlines():
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        if record["run"] == "warmup":
            continue
        first, last, tokens = record["first"], record["last"], record["completion_tokens"]
        if first is None or last is None or not tokens or last <= first:
            raise ValueError(f"run {record['run']}: no streamed tokens or usage ({line.strip()})")
        runs.append(Run(record["run"], first - record["start"], tokens / (last - first), tokens))
    if not runs:
        raise ValueError("the benchmark produced no runs")
    return runs


def judge(runs: list[Run], thresholds: GateThresholds) -> BenchResult:
    stats = summarize([r.decode_tokens_per_s for r in runs], thresholds)
    return BenchResult(runs, stats, gate(stats, thresholds), sum(r.ttft_s for r in runs) / len(runs))
