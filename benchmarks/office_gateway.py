#!/usr/bin/env python3
"""The office gateway under load, in the lab: HAProxy (Debian 12's, converged by `provision up --tags
office_gateway`) in front of 3 backend hosts, each the stand-in vLLM (tests/standins/vllm: at most
max_num_seqs = 4 sequences at once, each stream slower as sequences join, vLLM's SSE chunks, /health
refused until ready) at 140 tok/s, the figure of one stream on the office laptop.

Load generators, run on the gateway host itself, so that "direct" and "through the gateway" take the
same network path but for HAProxy (both reach a backend at 10.0.2.2:PORT, through the lab's NAT):
  - `hey` (Debian 12's package `hey` 0.1.4, its binary copied in): non-streamed requests, requests/s;
  - the project's streaming client (provision/vllm/bench.py STREAMING, the one `provision bench` runs):
    streamed requests, time to the first token, and one record per request (start, end, status).
Scenarios (--scenarios a,b,c,d,e; about 3 minutes of load for all, plus ~2 minutes to set up the lab):
  a  through the gateway vs direct to one backend (the other two drained), alternating rounds:
     time to first streamed token p50 (target: gateway adds < 5 ms) and hey's throughput (within 2%);
  b  a backend killed (SIGKILL) under load: failed requests vs those in flight on it; none after;
  c  a backend that hangs (SIGSTOP for --hang-s seconds, then SIGCONT) under load;
  d  every backend busy: requests wait in the gateway's queue (timeout 5 s here) then get a 503 with
     Retry-After; none lost (every request answered 200 or 503);
  e  the gateway host restarted (power off, on) under load from this machine: the outage, failures
     only while it is down.

Usage: benchmarks/office_gateway.py [--scenarios a,b,c,d,e] [--keep]   (runs its own lab; root)
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from provision.shell import quote  # noqa: E402
from provision.vllm.bench import STREAMING  # noqa: E402
from tests.e2e.office_gateway_support import (  # noqa: E402
    ADMIN_SOCKET,
    GATEWAY_PORT,
    Office,
    open_office,
    start_backend,
)
from tests.lab import Lab, LabHost  # noqa: E402
from tests.unit.serving_support import API_KEY  # noqa: E402

TOKENS_PER_S = 140
QUEUE_TIMEOUT_S = 5
RETRY_AFTER_S = 5
MAX_NUM_SEQS = 4  # the default profile's, so the gateway's maxconn per backend

# The streaming client's driver: one JSON record per request (monotonic times: CLOCK_MONOTONIC is one
# clock for every container of this machine, so they compare with the times the benchmark takes here).
DRIVER = STREAMING + r'''
import urllib.error
def one(url, max_tokens, streamed, label):
    body = {"model": "workhorse", "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": max_tokens, "ignore_eos": True, "stream": streamed}
    if streamed:
        body["stream_options"] = {"include_usage": True}
    record = {"label": label, "start": time.monotonic(), "first": None, "last": None, "status": 0,
              "retry_after": None, "tokens": 0}
    try:
        if streamed:
            record["tokens"] = stream(url, body, record, 600).get("completion_tokens") or 0
            record["status"] = 200
        else:
            request = urllib.request.Request(url, json.dumps(body).encode(), headers)
            with urllib.request.urlopen(request, timeout=600) as reply:
                record["status"] = reply.status
                record["tokens"] = json.loads(reply.read())["usage"]["completion_tokens"]
    except urllib.error.HTTPError as error:
        record["status"], record["retry_after"] = error.code, error.headers.get("Retry-After")
        error.read()
    except Exception as error:
        record["error"] = (type(error).__name__ + ": " + str(error))[:120]
    record["end"] = time.monotonic()
    record["ok"] = record["status"] == 200 and record["tokens"] == max_tokens
    say(record)
    return record["ok"]
mode = sys.argv[1]
if mode == "ttft":  # URL_A URL_B PAIRS: one streamed request to each, alternating which goes first
    a, b, pairs = sys.argv[2], sys.argv[3], int(sys.argv[4])
    for index in range(pairs):
        for label, url in ((("a", a), ("b", b)) if index % 2 == 0 else (("b", b), ("a", a))):
            one(url, 2, True, label)
elif mode == "load":  # URL SECONDS CONCURRENCY MAX_TOKENS STREAMED: users in a loop until SECONDS pass
    url, seconds, users, max_tokens = sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    streamed = sys.argv[6] == "1"
    until = time.monotonic() + seconds
    def user(index):
        while time.monotonic() < until:
            if not one(url, max_tokens, streamed, "u%d" % index):
                time.sleep(0.2)  # a user tries again a moment later, not in a tight loop
    threads = [threading.Thread(target=user, args=(index,)) for index in range(users)]
    [thread.start() for thread in threads]; [thread.join() for thread in threads]
elif mode == "burst":  # URL COUNT:MAX_TOKENS,...: each wave at once, 0.3 s apart, non-streamed
    url, threads = sys.argv[2], []
    for wave in sys.argv[3].split(","):
        count, max_tokens = (int(word) for word in wave.split(":"))
        for _ in range(count):
            threads.append(threading.Thread(target=one, args=(url, max_tokens, False, "w%d" % max_tokens)))
            threads[-1].start()
        time.sleep(0.3)
    [thread.join() for thread in threads]
'''
HEY_BODY = json.dumps({"model": "workhorse", "messages": [{"role": "user", "content": "hello"}],
                       "max_tokens": 16, "ignore_eos": True})


def say(line: str) -> None:
    print(line, flush=True)


def records(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


class Bench:
    """The office, and the load tools on its gateway host."""

    def __init__(self, office: Office) -> None:
        self.office = office
        self.gateway = office.gateway
        self.chat = "/chat/completions"
        self.via_gateway = f"http://127.0.0.1:{GATEWAY_PORT}/v1{self.chat}"
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            tar.add("/usr/bin/hey", arcname="gwbench/hey")
            for name, text in (("driver.py", DRIVER), ("body.json", HEY_BODY)):
                data = text.encode()
                info = tarfile.TarInfo(f"gwbench/{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        self.gateway.container.put_archive("/opt", archive.getvalue())

    def direct(self, backend: LabHost) -> str:
        return self.office.direct_url(backend) + self.chat

    def driver(self, *argv: object, host: LabHost | None = None) -> list[dict[str, Any]]:
        words = " ".join(quote(str(word)) for word in argv)
        rc, output = (host or self.gateway).exec(f"BENCH_KEY={quote(API_KEY)} python3 /opt/gwbench/driver.py {words}")
        assert rc == 0, output[-2000:]
        return records(output)

    def hey(self, url: str, seconds: int, concurrency: int) -> dict[str, Any]:
        rc, output = self.gateway.exec(
            f"/opt/gwbench/hey -z {seconds}s -c {concurrency} -m POST -T application/json "
            f"-H {quote('Authorization: Bearer ' + API_KEY)} -D /opt/gwbench/body.json {quote(url)}")
        assert rc == 0, output[-2000:]
        total = re.search(r"Total:\s+([0-9.]+) secs", output)
        statuses = {int(code): int(count) for code, count in re.findall(r"\[(\d+)\]\s+(\d+) responses", output)}
        # "Error distribution:" lists "  [COUNT]\tMESSAGE" per kind of failed request (no HTTP answer)
        errors = sum(int(count) for count in re.findall(r"^\s+\[(\d+)\]\s", output.partition("Error distribution:")[2],
                                                         re.MULTILINE))
        # throughput: answers that succeeded per second (a fast 503 is not throughput)
        return {"rps": statuses.get(200, 0) / float(total.group(1)) if total else 0.0, "statuses": statuses,
                "errors": errors,
                "raw": output}

    def in_background(self, work: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
        result: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: result.update(value=work()))
        thread.start()
        return thread, result


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def scenario_a(bench: Bench) -> list[str]:
    office = bench.office
    target, others = office.backends[0], office.backends[1:]
    for other in others:
        office.admin("drain", other.name)
    try:
        ttft = bench.driver("ttft", bench.direct(target), bench.via_gateway, 40)
        direct = [r["first"] - r["start"] for r in ttft if r["label"] == "a" and r["ok"]]
        gateway = [r["first"] - r["start"] for r in ttft if r["label"] == "b" and r["ok"]]
        rounds: dict[str, list[float]] = {"direct": [], "gateway": []}
        for index in range(4):
            order = ("direct", "gateway") if index % 2 == 0 else ("gateway", "direct")
            for label in order:
                result = bench.hey(bench.direct(target) if label == "direct" else bench.via_gateway, 8, MAX_NUM_SEQS)
                bad = sum(count for code, count in result["statuses"].items() if code != 200) + result["errors"]
                rounds[label].append(result["rps"])
                say(f"  a: hey {label:7s} round {index + 1}: {result['rps']:.2f} req/s answered 200 ({bad} not 200)")
                if bad:
                    say("  " + result["raw"].partition("Status code distribution:")[2].strip().replace("\n", "\n  "))
    finally:
        for other in others:
            office.admin("ready", other.name)
    added_ms = (p50(gateway) - p50(direct)) * 1000
    ratio = sum(rounds["gateway"]) / sum(rounds["direct"])
    return [f"a: TTFT p50 direct {p50(direct) * 1000:.1f} ms, through the gateway {p50(gateway) * 1000:.1f} ms: "
            f"added {added_ms:+.1f} ms (target < 5 ms; {len(direct)}+{len(gateway)} streamed requests, "
            f"alternating; project's streaming client) -> {'PASS' if added_ms < 5 else 'FAIL'}",
            f"a: throughput (hey -c {MAX_NUM_SEQS}, max_tokens 16, 4 x 8 s each, alternating) direct "
            f"{statistics.mean(rounds['direct']):.2f} req/s, gateway {statistics.mean(rounds['gateway']):.2f} "
            f"req/s: ratio {ratio:.4f} (target >= 0.98) -> {'PASS' if ratio >= 0.98 else 'FAIL'}"]


def under_load(bench: Bench, seconds: int, event: Callable[[], dict[str, Any]], at_s: float, streams: int = 6,
               hey_users: int = 4) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """The streaming client (`streams` users, 100 tokens) and hey (-c `hey_users`) through the gateway
    for `seconds`; `event` runs `at_s` seconds in. Returns the streamed records, hey's result and what
    event said."""
    streamed_thread, streamed = bench.in_background(
        lambda: bench.driver("load", bench.via_gateway, seconds, streams, 100, 1))
    hey_thread, hey = bench.in_background(lambda: bench.hey(bench.via_gateway, seconds, hey_users))
    time.sleep(at_s)
    happened = event()
    streamed_thread.join()
    hey_thread.join()
    return streamed["value"], hey["value"], happened


def failures(hey: dict[str, Any]) -> int:
    return sum(count for code, count in hey["statuses"].items() if code != 200) + hey["errors"]


def scenario_b(bench: Bench) -> list[str]:
    """Twice: a load the two survivors can carry (4 streams + hey -c 2 = 6 <= 8 slots), then one they
    cannot (6 + 4 = 10 > 8)."""
    return kill_one(bench, 0, 4, 2, "within the survivors' capacity") + kill_one(bench, 1, 6, 4, "above it")


def kill_one(bench: Bench, index: int, streams: int, hey_users: int, label: str) -> list[str]:
    office = bench.office
    victim = office.backends[index]

    def kill() -> dict[str, Any]:
        in_flight = office.servers()[victim.name].in_flight
        rc, output = victim.exec("systemctl kill -s KILL standin-vllm")
        killed = time.monotonic()
        assert rc == 0, output
        down = killed + office.wait_for(victim.name, "DOWN", 10)
        return {"in_flight": in_flight, "killed": killed, "down_after": down - killed}

    streamed, hey, event = under_load(bench, 12, kill, 4, streams, hey_users)
    killed = event["killed"]
    failed_streams = [r for r in streamed if not r["ok"]]
    after = [r for r in failed_streams if r["start"] > killed]
    passed = len(failed_streams) + failures(hey) <= event["in_flight"] and not after
    lines = [f"b ({streams} streams + hey -c {hey_users} on 3 x {MAX_NUM_SEQS} slots, {label}): killed {victim.name} "
             f"with {event['in_flight']} requests in flight on it (show stat scur just before); DOWN "
             f"{event['down_after']:.2f} s after the kill; failed: {len(failed_streams)} of {len(streamed)} "
             f"streamed, {failures(hey)} of {sum(hey['statuses'].values()) + hey['errors']} hey requests; "
             f"failed among those started after the kill: {len(after)} -> {'PASS' if passed else 'FAIL'}"]
    for record in failed_streams:
        say(f"  b: failed stream: started {record['start'] - killed:+.2f} s from the kill, "
            f"{record.get('error') or record['status']}")
    start_backend(victim, TOKENS_PER_S)
    say(f"  b: {victim.name} restarted: UP again {office.wait_for(victim.name, 'UP', 60):.2f} s after its start")
    return lines


def scenario_c(bench: Bench, hang_s: float) -> list[str]:
    office = bench.office
    victim = office.backends[1]

    def hang() -> dict[str, Any]:
        rc, output = victim.exec("systemctl kill -s STOP standin-vllm")
        stopped = time.monotonic()
        assert rc == 0, output
        down = office.wait_for(victim.name, "DOWN", hang_s)
        time.sleep(max(0.0, stopped + hang_s - time.monotonic()))
        rc, output = victim.exec("systemctl kill -s CONT standin-vllm")
        resumed = time.monotonic()
        assert rc == 0, output
        up = office.wait_for(victim.name, "UP", 30)
        return {"stopped": stopped, "down_after": down, "up_after": up, "resumed": resumed}

    streamed, hey, event = under_load(bench, 14, hang, 3)
    failed = [r for r in streamed if not r["ok"]]
    stalled = [r for r in streamed if r["start"] < event["resumed"] and r["end"] > event["stopped"] + 1]
    slowest = max((r["end"] - r["start"] for r in streamed), default=0)
    passed = not failed and not failures(hey)
    return [f"c: {victim.name} hung (SIGSTOP) {hang_s:.0f} s: DOWN {event['down_after']:.2f} s after the stop, UP "
            f"{event['up_after']:.2f} s after SIGCONT; failed {len(failed)} of {len(streamed)} streamed, "
            f"{failures(hey)} of {sum(hey['statuses'].values()) + hey['errors']} hey requests; "
            f"{len(stalled)} streams overlapped the hang, the slowest took {slowest:.1f} s "
            f"(in flight on the hung backend: they wait and finish) -> {'PASS' if passed else 'FAIL'}"]


def scenario_d(bench: Bench) -> list[str]:
    capacity = MAX_NUM_SEQS * len(bench.office.backends)
    # wave 1: every slot busy for ~2 s, 3 more wait and are served; wave 2: every slot busy for ~8 s
    # (longer than the queue's 5 s), 6 more wait 5 s and get the 503
    first = bench.driver("burst", bench.via_gateway, f"{capacity}:240,3:16")
    time.sleep(1)
    second = bench.driver("burst", bench.via_gateway, f"{capacity}:1000,6:16")
    lines = []
    for label, wave, extra in (("busy 2 s", first, 3), ("busy 8 s", second, 6)):
        statuses = Counter(r["status"] for r in wave)
        queued = [r for r in wave if r["label"] == "w16"]
        waits = [r["end"] - r["start"] for r in queued]
        answered = statuses[200] + statuses[503]
        retry_after = all(r["retry_after"] == str(RETRY_AFTER_S) for r in wave if r["status"] == 503)
        lines.append(f"d: {label}: {capacity} + {extra} requests -> {dict(statuses)}; the {extra} beyond capacity "
                     f"answered after {min(waits):.1f}-{max(waits):.1f} s; every 503 with Retry-After: "
                     f"{RETRY_AFTER_S}: {retry_after}; lost: {len(wave) - answered}")
    ok = (Counter(r["status"] for r in first) == {200: capacity + 3}
          and Counter(r["status"] for r in second) == {200: capacity, 503: 6}
          and all(r["retry_after"] == str(RETRY_AFTER_S) for r in second if r["status"] == 503))
    lines[-1] += f" -> {'PASS' if ok else 'FAIL'}"
    return lines


def scenario_e(bench: Bench) -> list[str]:
    office = bench.office
    url = office.url + bench.chat  # from this machine: the gateway host's port forward
    local = subprocess.Popen([sys.executable, "-c", DRIVER, "load", url, "40", "3", "20", "1"],
                             stdout=subprocess.PIPE, text=True, env={"BENCH_KEY": API_KEY, "PATH": "/usr/bin:/bin"})
    time.sleep(4)
    before = office.gateway.exec("systemctl show -p MainPID --value haproxy")[1].strip()
    off = time.monotonic()
    office.gateway.stop(timeout=10)
    office.gateway.reboot_restart()
    on = time.monotonic()
    # a new boot: PID 1 (systemd) started seconds ago, haproxy is another process
    booted = office.gateway.exec("ps -o etimes= -p 1; systemctl show -p MainPID --value haproxy")[1].split()
    output, _ = local.communicate(timeout=120)
    done = records(output)
    failed = [r for r in done if not r["ok"]]
    served_after = [r for r in done if r["ok"] and r["start"] > off]
    back = min((r["first"] or r["end"] for r in served_after), default=float("nan"))
    after_back = [r for r in failed if r["start"] > back]
    say(f"  e: haproxy pid {before} before, {booted[1:]} after; the host's PID 1 up for {booted[0]} s")
    return [f"e: gateway host powered off and on ({on - off:.1f} s until its SSH answered again): first streamed "
            f"token again {back - off:.1f} s after the power-off; failed {len(failed)} of {len(done)} streamed "
            f"requests, {len(after_back)} of them started after it was back -> {'PASS' if not after_back else 'FAIL'}"]


def checks_view(office: Office) -> str:
    """Each backend's health-check counters as HAProxy shows them (failed checks, times marked DOWN)."""
    _, output = office.gateway.exec(f"printf 'show stat\\n' | socat stdio {ADMIN_SOCKET}")
    rows = csv.DictReader(line.removeprefix("# ") for line in output.splitlines() if line.strip())
    return "; ".join(f"{row['svname']}: {row['chkfail']} failed checks, {row['chkdown']} DOWN, last "
                     f"{row['check_status']} in {row['check_duration']} ms"
                     for row in rows if row["pxname"] == "vllm" and row["svname"] != "BACKEND")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="a,b,c,d,e")
    parser.add_argument("--hang-s", type=float, default=5)
    parser.add_argument("--keep", action="store_true", help="leave the lab (prints where)")
    args = parser.parse_args()
    chosen = [word.strip() for word in args.scenarios.split(",") if word.strip()]
    unknown = set(chosen) - set("abcde")
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))} (choose among a,b,c,d,e)")
    work = Path(tempfile.mkdtemp(prefix="plab-gw-bench-", dir="/var/tmp"))
    lab = Lab(work / "lab", log=lambda _: None)
    started = time.monotonic()
    try:
        lab.start()
        office = open_office(lab, work, backends=3, tokens_per_s=TOKENS_PER_S,
                             office_gateway_queue_timeout_s=QUEUE_TIMEOUT_S, office_gateway_retry_after_s=RETRY_AFTER_S)
        bench = Bench(office)
        hey = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "hey"], capture_output=True, text=True).stdout
        say(f"lab office ready in {time.monotonic() - started:.0f} s: {office.gateway.name} (HAProxy "
            f"{office.gateway.exec('haproxy -v')[1].split()[2]}) in front of "
            f"{', '.join(host.name for host in office.backends)} (stand-in vLLM, {TOKENS_PER_S} tok/s, "
            f"max_num_seqs {MAX_NUM_SEQS}); hey {hey}")
        figures = []
        runs = {"a": lambda: scenario_a(bench), "b": lambda: scenario_b(bench),
                "c": lambda: scenario_c(bench, args.hang_s), "d": lambda: scenario_d(bench),
                "e": lambda: scenario_e(bench)}
        for name in chosen:
            began = time.monotonic()
            lines = runs[name]()
            for line in lines:
                say(line)
            say(f"  ({name}: {time.monotonic() - began:.0f} s; checks so far: {checks_view(office)})")
            figures += lines
        say("\n".join(["", "=== office gateway figures ===", *figures]))
    finally:
        if args.keep:
            say(f"lab kept: {work / 'lab'}")
        else:
            lab.down()
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
