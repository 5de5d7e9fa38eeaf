#!/usr/bin/env python3
"""Does a day of the office's metrics fit Prometheus's disk bound? A simulated day, compressed by the
real Prometheus TSDB (`promtool tsdb create-blocks-from openmetrics`), measured on disk.

The series count is the office's, read from the real exporters run here for a few seconds: Debian's
node-exporter (on every host), HAProxy 2.6 with the gateway's config rendered for the office
(its built-in exporter), Prometheus itself, the GPU readings program on a real H200's nvidia-smi
output, Prometheus's 5 series per target (up, scrape_*). vLLM cannot run here: its series per GPU host
are counted from its metric definitions (vllm/v1/metrics/loggers.py at 005a810b, max_model_len
131072: 14 histograms, 10 counters, 5 gauges; `_created` series included) plus an allowance for its
process, Python and HTTP series (`--vllm-extra`).

A day of samples at the scrape interval is simulated for every one of those series (their real names
and labels; at 30% of the steps, chosen at random, a counter rises by a random amount and a gauge takes
a new random value: a conservative model, random floats compress worst), turned into a 24 h block (what
Prometheus's compaction makes of a day at 15 days' retention: blocks up to 10% of it) by the real
TSDB, and its size on disk compared with the bound. `--sample N` simulates N of them and scales.

Usage: benchmarks/metrics_retention.py [--gpu-hosts 3] [--sample N]
Needs promtool, prometheus, prometheus-node-exporter and haproxy on PATH (`apt-get install prometheus
haproxy`, or `apt-get download` + `dpkg -x` and PATH). ~3 min on 2 cores.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.unit.test_roles_office_gateway import haproxy_config  # noqa: E402
from tests.unit.test_roles_office_metrics import H200, metrics_tasks, run_gpu_program  # noqa: E402

DAY_S = 86400
SYNTHETIC_PER_TARGET = 5  # up, scrape_duration_seconds, scrape_samples_scraped, _post_metric_relabeling, _series_added
# vLLM's own series per engine (vllm/v1/metrics/loggers.py at 005a810b): histogram buckets 16 x 5 (1-2-5 up to
# max_model_len 131072) + 13 + 5 + 22 + 19 + 10 + 21 x 5 = 254, plus +Inf, _sum, _count, _created for each of 14;
# 10 counters (_total, _created); 4 gauges and vllm:cache_config_info
VLLM_SERIES = 254 + 14 * 4 + 10 * 2 + 5
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(url: str, timeout: float = 20) -> str:
    started = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.read().decode()
        except OSError:
            if time.monotonic() - started > timeout:
                raise
            time.sleep(0.2)


def series_of(text: str) -> list[tuple[str, str, str]]:
    """(family type, name, labels) of every sample of a Prometheus text exposition."""
    types: dict[str, str] = {}
    found = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            types[name] = kind
        elif line and not line.startswith("#") and (match := SAMPLE.match(line)):
            name, labels = match.group(1), match.group(2) or "{}"
            family = re.sub(r"_(bucket|sum|count|total|created)$", "", name)
            kind = types.get(name, types.get(family, "gauge"))
            found.append(("counter" if kind in ("counter", "histogram", "summary") else "gauge", name, labels))
    return found


def running(argv: list[str], url: str) -> str:
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return scrape(url)
    finally:
        process.terminate()
        process.wait(10)


def exporters(work: Path, gpu_hosts: int) -> dict[str, list[tuple[str, str, str]]]:
    """The series of each exporter, read from the real ones (one of each)."""
    node_port, prom_port, ha_port = free_port(), free_port(), free_port()
    node = running(["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{node_port}",
                    f"--collector.textfile.directory={work}"], f"http://127.0.0.1:{node_port}/metrics")
    (work / "prometheus.yml").write_text("global: {scrape_interval: 15s}\n")
    prom = running(["prometheus", f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'p'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}"], f"http://127.0.0.1:{prom_port}/metrics")
    hosts = "\n".join(f"    desk-{i}: {{ansible_host: 192.168.1.{60 + i}}}" for i in range(1, gpu_hosts + 1))
    office = (f"all:\n  hosts:\n{hosts}\n  children:\n    office_cache:\n      hosts:\n"
              "        nas: {ansible_host: 192.168.1.10}\n    office_gateway:\n      hosts:\n"
              "        gw: {ansible_host: 192.168.1.5}\n")
    config = haproxy_config(work, office).replace("chroot /var/lib/haproxy", f"chroot {work}")
    config = config.replace("/run/haproxy/admin.sock", str(work / "admin.sock")).replace("    daemon\n", "")
    config = config.replace("bind :8000", f"bind 127.0.0.1:{free_port()}").replace(
        "bind 127.0.0.1:8405", f"bind 127.0.0.1:{ha_port}")
    (work / "haproxy.cfg").write_text(config)
    haproxy = running(["haproxy", "-f", str(work / "haproxy.cfg")], f"http://127.0.0.1:{ha_port}/metrics")
    _, textfiles = run_gpu_program(work, (H200 / "query-gpu-metrics-noheader-nounits.csv").read_text())
    gpu = (textfiles / "gpu.prom").read_text()
    return {"node": series_of(node), "prometheus": series_of(prom), "haproxy": series_of(haproxy),
            "gpu": series_of(gpu)}


def office_series(found: dict[str, list[tuple[str, str, str]]], gpu_hosts: int, vllm_extra: int,
                  ) -> tuple[list[tuple[str, str, str]], Counter[str]]:
    """Every series of the office: node-exporter on each host (GPU hosts, gateway, cache), GPU readings and
    vLLM on each GPU host, HAProxy and Prometheus on the gateway, 5 per target."""
    hosts = [f"desk-{i}" for i in range(1, gpu_hosts + 1)] + ["gw", "nas"]
    everything: list[tuple[str, str, str]] = []
    by_job: Counter[str] = Counter()

    def add(job: str, host: str, series: list[tuple[str, str, str]]) -> None:
        for kind, name, labels in series:
            extra = f'job="{job}",instance="{host}"'
            everything.append((kind, name, "{" + extra + ("," + labels[1:] if labels != "{}" else "}")))
        by_job[job] += len(series) + SYNTHETIC_PER_TARGET
        everything.extend(("gauge", name, f'{{job="{job}",instance="{host}"}}') for name in
                          ("up", "scrape_duration_seconds", "scrape_samples_scraped",
                           "scrape_samples_post_metric_relabeling", "scrape_series_added"))

    vllm = [("counter", f"vllm:simulated_{i}", '{model_name="workhorse",engine="0"}')
            for i in range(VLLM_SERIES + vllm_extra)]
    for host in hosts:
        add("node", host, found["node"] + (found["gpu"] if host.startswith("desk-") else []))
    for host in hosts[:gpu_hosts]:
        add("vllm", host, vllm)
    add("haproxy", "gw", found["haproxy"])
    add("prometheus", "gw", found["prometheus"])
    return everything, by_job


def write_day(path: Path, series: list[tuple[str, str, str]], interval_s: int, seed: int) -> int:
    """A day of OpenMetrics samples of these series, each family's lines together; the sample count."""
    rng = random.Random(seed)
    start = (int(time.time()) // DAY_S - 3) * DAY_S  # a whole day a few days back (promtool refuses the head's range)
    steps = range(start, start + DAY_S, interval_s)
    families: dict[str, list[tuple[str, str]]] = {}
    for kind, name, labels in series:
        families.setdefault(name, []).append((kind, labels))
    count = 0
    with path.open("w") as out:
        for name, members in families.items():
            for kind, labels in members:
                value = rng.uniform(0, 1000)
                lines = []
                for at in steps:
                    if rng.random() < 0.3:
                        value = value + rng.expovariate(0.05) if kind == "counter" else rng.uniform(0, 1000)
                    lines.append(f"{name}{labels} {value:.3f} {at}\n")
                out.writelines(lines)
                count += len(lines)
        out.write("# EOF\n")
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu-hosts", type=int, default=3)
    parser.add_argument("--sample", type=int, default=0,
                        help="simulate this many of the series (then scale the size); 0: all of them")
    parser.add_argument("--vllm-extra", type=int, default=150, help="vLLM's process/Python/HTTP series allowance")
    parser.add_argument("--seed", type=int, default=23)
    args = parser.parse_args()
    for tool in ("promtool", "prometheus", "prometheus-node-exporter", "haproxy"):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is not on PATH (see the usage above)")
    with tempfile.TemporaryDirectory(prefix="metrics-retention-") as tmp:
        work = Path(tmp)
        defaults = metrics_tasks(work, "gw")["prometheus's flags (retention, listen address)"].args.content
        days = int(re.search(r"retention\.time=(\d+)d", defaults).group(1))
        bound_mib = int(re.search(r"retention\.size=(\d+)MB", defaults).group(1))
        interval = int(re.search(r"scrape_interval: (\d+)s",
                                 metrics_tasks(work, "gw")["prometheus scrapes the office"].args.content).group(1))
        found = exporters(work, args.gpu_hosts)
        series, by_job = office_series(found, args.gpu_hosts, args.vllm_extra)
        sample = random.Random(args.seed).sample(series, min(args.sample or len(series), len(series)))
        started = time.monotonic()
        samples = write_day(work / "day.om", sample, interval, args.seed)
        blocks = work / "blocks"
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h",
                        str(work / "day.om"), str(blocks)], check=True, capture_output=True)
        block_bytes = sum(f.stat().st_size for f in blocks.rglob("*") if f.is_file())
        elapsed = time.monotonic() - started
    per_day = block_bytes * len(series) / len(sample)
    bound = bound_mib * 2**20
    print(f"office: {args.gpu_hosts} GPU hosts + gateway + office cache, scrape every {interval} s")
    print("series by job: " + ", ".join(f"{job} {n}" for job, n in sorted(by_job.items())) + f"; total {len(series)}")
    print(f"  per host: node-exporter {len(found['node'])} (measured here), GPU readings {len(found['gpu'])} a GPU, "
          f"vLLM {VLLM_SERIES} + {args.vllm_extra} allowance; HAProxy {len(found['haproxy'])}, "
          f"Prometheus {len(found['prometheus'])}")
    print(f"simulated: {len(sample)} series x {DAY_S // interval} samples = {samples} samples, one 24 h block of "
          f"{block_bytes / 2**20:.1f} MiB ({block_bytes / samples:.2f} bytes/sample) in {elapsed:.0f} s")
    print(f"a day of the office: {per_day / 2**20:.1f} MiB; bound {bound_mib} MiB "
          f"(office_metrics_retention_size_mib): a day is {per_day / bound:.3f} of it")
    print(f"{days} days (office_metrics_retention_days) need {days * per_day / 2**20:.0f} MiB = "
          f"{days * per_day / bound:.2f} of the bound; the bound holds {bound / per_day:.1f} days")
    return 0


if __name__ == "__main__":
    sys.exit(main())
