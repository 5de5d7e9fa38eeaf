#!/usr/bin/env python3
"""A fleet downloads once: the same rollout to N fresh lab hosts without, then with, an office cache.

What each host gets (lighter than the whole GPU laptop, which is too heavy for this 2-core machine
times N): the docker role (docker.io from Debian's archive, through apt-cacher-ng when there is a
cache) and the model role (the weights from the stand-in hub, the stand-in vLLM image from the lab's
registry), i.e. `provision up INV --tags office_cache_client,docker,model`.
  - without a cache: each host fetches from the upstreams itself;
  - with a cache: one more host in the inventory's `office_cache` group, set up first
    (`--limit CACHE --tags office_cache`), then the rollout `--limit '!CACHE' --serial 1,100%`
    (the first host warms the cache, the rest take it from the LAN). The image is named as a
    Docker Hub image (`vllm/vllm-openai:TAG`): dockerd pulls it through its registry-mirrors, and
    the cache's upstream (`office_cache_registry_upstream`) is the lab registry standing for Docker Hub.
Upstream counts: the stand-in hub's request log (GET .../resolve/... per file) and the lab
registry's access log (GET /v2/.../blobs/<digest> per layer). apt: apt-cacher-ng's transfer log on
the cache host (bytes fetched upstream vs served to clients).

With `--throttle` (benchmarks/throttle.py, on the lab's network): each fleet host receives through a tbf
of `--per-host-mbit`, the cache host sends and receives through tbfs of `--cache-mbit` (its link: the
LAN towards the hosts, the upstream fill from the hub and the registry), and nginx `limit_rate` of
`--per-connection-mbit` per request stands in front of the cache's hub mirror and registry mirror
(apt goes to apt-cacher-ng directly: it is an HTTP proxy, not a server nginx can stand in front of).
`--per-connection-at upstream` puts that nginx between the cache and its upstreams (the hub, the
registry) instead: where the hub's CDN limits a connection, while the LAN between the hosts and the
cache limits none (nginx and docker-registry on the cache host set no rate).
`--image-mib` adds random bytes to the stand-in vLLM image. The rollout is then compared with the LAN
limit, from bytes counted on tap0 during the rollout (the fill counted apart from the serving: they
overlap on a full-duplex link, so this errs on the generous side by at most the fill's share):
  - bytes only, all through the cache's link: (the bytes the cache sent + the bytes it received, its
    upstream fill) / `--cache-mbit`; the limit of a rollout of every host at once (`--serial all`);
  - bytes only, with a canary (`--serial 1,100%`, the default), per batch: the user asked for the
    canary and accepts its time, so its batch counts alone at its own link (the bytes the canary host
    received / `--per-host-mbit`), then the rest (the bytes the cache sent less the canary's, + the
    fill) / `--cache-mbit`. Generous towards the tool: the canary's image pull runs on beside the next batch;
  - issue 24's limit, "bytes / rate, plus the apt work that cannot overlap" (no reboot and no vLLM start
    in these tags), a lower bound (but for the fill's share, as above): the rollout cannot beat it. Per
    batch the largest of: its bytes-only limit; its longest host's apt work + that host's bytes other
    than weights (its apt downloads and its image: the batch's bytes less its weights, per host) /
    `--per-host-mbit` (on one host the apt downloads, the installs and the image pull follow one
    another, while the weights need neither apt nor docker, they start early, and another host's
    downloads may run beside this host's installs); its shortest host's apt work + the batch's images
    (its bytes other than weights less its hosts' apt downloads) at the batch's link (no image can
    start before that host's installs end);
  - beside it, the same with the batch's apt work as one block that no other host's apt downloads or
    image pull overlap (as the hosts of a batch run today): the bytes-only limit + per batch max(0, its
    apt work - its weights' time on its link: the canary's / `--per-host-mbit`, the batch's + the fill
    / `--cache-mbit`); and the bytes + all the apt work, as benchmarks/site_first_apply.py adds it
    (task order; here not a bound, the weights run beside the apt work).
`--cpu` samples this machine's CPU over the rollout (benchmarks/cpu_use.py): where it went (per lab host,
per command) and the machine's CPU limit of the rollout, its busy core-seconds / cores: the lab's hosts
share this machine's cores, and the LAN limits above count none of that.
The apt work is measured in the same run the way benchmarks/site_first_apply.py measures it: a rollout
of fresh hosts, the same batches and throttle through the same (then warm) cache, with `--tags
office_cache_client,docker` (no weights, no image: the downloads tiny); each host's apt roles' seconds
less its own downloads' bytes at its share of the link (min(`--per-host-mbit`, `--cache-mbit` / the
batch's hosts)); a batch's, its longest host's (its hosts run at once), and its shortest host's. Warm,
and without the model role's units beside it, the apt work is if anything less than in the rollout.

Usage: benchmarks/office_cache.py [--hosts 5] [--shard-mib 8]   (runs its own lab; root; ~6 min for 5)
       benchmarks/office_cache.py --hosts 5 --throttle [--no-direct] [--image-mib 128] [--cache-mbit 1000]
                                  [--serial all] [--per-connection-at upstream] [--var KEY=VALUE] [--cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cpu_use import CpuUse  # noqa: E402
from benchmarks.cpu_use import describe as describe_cpu  # noqa: E402
from benchmarks.site_first_apply import apt_work_of, padded_image, roles_elapsed  # noqa: E402
from benchmarks.throttle import (  # noqa: E402
    PerConnection,
    host_pid,
    received,
    sent,
    throttle_host,
    throttle_sending,
)
from provision.runner.batches import batches, parse_serial  # noqa: E402
from tests.e2e.office_cache_support import CACHE_PORTS, Upstreams, add_group, apt_cacher_bytes  # noqa: E402
from tests.lab import Lab, LabHost  # noqa: E402
from tests.lab.net import MACHINE_FROM_HOSTS, free_port  # noqa: E402
from tests.standins.hub.cli import start_hub  # noqa: E402
from tests.standins.hub.server import HubOptions  # noqa: E402
from tests.standins.vllm.build import build_images  # noqa: E402

TAGS = "office_cache_client,docker,model"
APT_TAGS = "office_cache_client,docker"  # the apt work's rollout: the same without the model role's downloads
MIB = 1024 * 1024


def provision(*argv: str, json_path: Path, check: bool = True) -> tuple[float, int, str]:
    """Run `provision ARGV --json-file PATH`: (wall time, exit code, output); with `check`, exit on failure."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "provision", *argv, "--json-file", str(json_path)], cwd=REPO,
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    elapsed = time.monotonic() - started
    json_path.with_suffix(".out").write_text(done.stdout + done.stderr)
    if check and done.returncode != 0:
        raise SystemExit(f"provision {' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-4000:]}"
                         f"\n{done.stderr[-2000:]}")
    return elapsed, done.returncode, done.stdout + done.stderr


def describe(label: str, hub: Counter[str], blobs: Counter[str]) -> str:
    hub_max = max(hub.values(), default=0)
    blob_max = max(blobs.values(), default=0)
    return (f"{label}: hub served {len(hub)} files {sum(hub.values())} times (max {hub_max} per file); "
            f"registry served {len(blobs)} layers {sum(blobs.values())} times (max {blob_max} per layer)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=5, help="fleet size (fresh hosts per rollout)")
    parser.add_argument("--shard-mib", type=float, default=8, help="size of each of the 2 weight shards")
    parser.add_argument("--keep", action="store_true", help="leave the lab and its logs (prints where)")
    parser.add_argument("--kill", action="store_true", help="then stop the cache host and roll out one more host")
    parser.add_argument("--cpu", action="store_true",
                        help="sample this machine's CPU over the rollout (benchmarks/cpu_use.py): its CPU limit")
    parser.add_argument("--throttle", action="store_true", help="throttled links (the module's docstring)")
    parser.add_argument("--no-direct", action="store_true", help="skip the rollout without a cache")
    parser.add_argument("--image-mib", type=int, default=0, help="random bytes added to the stand-in vLLM image")
    parser.add_argument("--per-host-mbit", type=float, default=200, help="--throttle: what each host receives")
    parser.add_argument("--cache-mbit", type=float, default=1000, help="--throttle: the cache host's link")
    parser.add_argument("--per-connection-mbit", type=float, default=200, help="--throttle: nginx limit_rate")
    parser.add_argument("--per-connection-at", choices=("lan", "upstream"), default="lan",
                        help="--throttle: nginx limit_rate between the hosts and the cache (lan), or between the "
                             "cache and its upstreams, the hub and the registry (upstream: where a CDN limits)")
    parser.add_argument("--serial", default="1,100%", help="the rollout's batches; all: every host at once")
    parser.add_argument("--var", action="append", default=[], metavar="KEY=VALUE",
                        help="an inventory variable for the fleet (VALUE read as YAML), e.g. "
                             "docker_max_concurrent_downloads=3; repeatable")
    args = parser.parse_args()
    extra_vars = {key: yaml.safe_load(value) for key, _, value in (item.partition("=") for item in args.var)}
    work = Path(tempfile.mkdtemp(prefix="plab-cache-bench-", dir="/var/tmp"))
    lab = Lab(work / "lab", log=lambda _: None)
    hub = nginx = None
    report: dict[str, Any] = {"hosts": args.hosts}
    try:
        lab.start()
        hub = start_hub(work / "hub", shard_size=int(args.shard_mib * MIB), shards=2,
                        options=HubOptions(request_log=work / "hub-requests.jsonl"))
        hub_url = f"http://{MACHINE_FROM_HOSTS}:{hub.server.server_address[1]}"
        image = build_images(f"127.0.0.1:{lab.registry.port}", pull_registry=lab.registry.address_for_hosts,
                             behaviours=("ok",), log=lambda _: None)["ok"]
        if args.image_mib:
            local = f"127.0.0.1:{lab.registry.port}/{image.split('/', 1)[1]}"
            image = f"{lab.registry.address_for_hosts}/{padded_image(lab, local, args.image_mib, 4, work)}"
        upstreams = Upstreams(work / "hub-requests.jsonl", lab.registry.dir / "registry.log")
        registry = lab.registry.address_for_hosts

        direct = [] if args.no_direct else lab.new_hosts(args.hosts, prefix="direct")
        inventory = lab.write_inventory(work / "direct.yaml", direct, hf_endpoint=hub_url, vllm_image=image,
                                        docker_insecure_registries=[registry])
        mark = upstreams.snapshot()
        report["direct_s"] = 0.0
        if not args.no_direct:
            report["direct_s"], _, _ = provision("up", str(inventory), "--tags", TAGS, "--forks", str(args.hosts),
                                                 json_path=work / "direct.json")
        report["direct"] = upstreams.since(mark)
        for host in direct:
            host.remove()

        cache = lab.new_host(prefix="cache", extra_ports=list(CACHE_PORTS.values()))
        fleet = lab.new_hosts(args.hosts, prefix="cached")
        urls = {f"office_cache_{name}_url": f"http://{MACHINE_FROM_HOSTS}:{cache.port(port)}"
                for name, port in CACHE_PORTS.items()}
        upstreams_at = {"hf_endpoint": hub_url, "office_cache_registry_upstream": f"http://{registry}"}
        through_nginx: dict[str, str] = {}
        if args.throttle:
            nginx, through_nginx = throttle_office(args, work, cache, fleet, urls, upstreams_at)
        variables = {"vllm_image": image.replace(f"{registry}/", ""),  # a Docker Hub name: via registry-mirrors
                     "office_cache_min_free_gib": 1, **upstreams_at, **urls, **through_nginx, **extra_vars}
        inventory = lab.write_inventory(work / "cached.yaml", [cache, *fleet], **variables)
        add_group(inventory, "office_cache", cache.name)
        mark = upstreams.snapshot()
        report["cache_setup_s"], _, _ = provision("up", str(inventory), "--limit", cache.name, "--tags", "office_cache",
                                            json_path=work / "cache-setup.json")
        before = (sent(host_pid(cache)), received(host_pid(cache)), received(host_pid(fleet[0]))) \
            if args.throttle else (0, 0, 0)
        serial = [] if args.serial == "all" else ["--serial", args.serial]
        report["serial"] = args.serial
        cpu = CpuUse().start() if args.cpu else None
        report["cached_s"], _, rollout = provision("up", str(inventory), "--limit", f"!{cache.name}", "--tags", TAGS,
                                                   "--forks", str(args.hosts), *serial, json_path=work / "cached.json")
        print("\n".join(timelines(rollout, [fleet[0].name, fleet[-1].name])), flush=True)
        if cpu is not None:
            print("\n".join(describe_cpu(cpu.stop())), flush=True)
            report["cpu_limit_s"], report["cpu_busy_s"] = cpu.limit_s, cpu.busy_s
        report["cached"] = upstreams.since(mark)
        if args.throttle:
            report["cache_sent"] = sent(host_pid(cache)) - before[0]
            report["cache_received"] = received(host_pid(cache)) - before[1]
            canary = args.serial.split(",")[0] == "1"
            report["canary_received"] = received(host_pid(fleet[0])) - before[2] if canary else 0
            report["cache_mbit"], report["per_host_mbit"] = args.cache_mbit, args.per_host_mbit
            report["weights_bytes"] = sum(f.size for f in hub.repository.files)
            for host in fleet:
                host.remove()
            report["apt_work"] = apt_work(args, lab, work, cache, variables)
        report["apt_upstream_bytes"], report["apt_served_bytes"] = apt_cacher_bytes(cache)
        print_figures(report)
        if args.kill:
            report["cache_down"] = cache_down(lab, cache, inventory, work)
            print(f"  cache host stopped, one more fresh host: {report['cache_down']}")
    finally:
        if nginx is not None:
            nginx.stop()
        if hub is not None:
            hub.stop()
        if args.keep:
            print(f"kept: {work}")
        else:
            lab.down()
            shutil.rmtree(work, ignore_errors=True)



def throttle_office(args: argparse.Namespace, work: Path, cache: LabHost, fleet: list[LabHost],
                    urls: dict[str, str], upstreams_at: dict[str, str]) -> tuple[PerConnection, dict[str, str]]:
    """The cache's link and each host's throttled; nginx per connection in front of the cache's hub and
    registry mirrors as the hosts reach them (`urls`, `--per-connection-at lan`), or in front of the hub
    and the registry as the cache reaches them (`upstreams_at`, `upstream`); each variable -> its URL
    (http://HOST:PORT). Returns nginx and the variables that now go through it."""
    throttle_host(host_pid(cache), args.cache_mbit)
    throttle_sending(host_pid(cache), args.cache_mbit)
    for host in fleet:
        throttle_host(host_pid(host), args.per_host_mbit)
    # apt goes to apt-cacher-ng directly (the module's docstring)
    limited = upstreams_at if args.per_connection_at == "upstream" else {
        name: url for name, url in urls.items() if name != "office_cache_apt_url"}
    routes = {name: (free_port(20200 + 10 * n, set()), int(url.rsplit(":", 1)[1]))
              for n, (name, url) in enumerate(limited.items())}
    nginx = PerConnection(work / "nginx", dict(routes.values()), args.per_connection_mbit)
    return nginx, {name: f"http://{MACHINE_FROM_HOSTS}:{port}" for name, (port, _) in routes.items()}


def apt_work(args: argparse.Namespace, lab: Lab, work: Path, cache: LabHost,
             variables: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 24's apt work per batch of the rollout (the module's docstring): the same rollout on fresh
    hosts (same batches, same throttle, the same cache) without the model role, each host's apt roles'
    seconds less its own downloads at its share of the link, the longest host of each batch."""
    hosts = lab.new_hosts(args.hosts, prefix="tiny")
    try:
        for host in hosts:
            throttle_host(host_pid(host), args.per_host_mbit)
        inventory = lab.write_inventory(work / "tiny.yaml", [cache, *hosts], **variables)
        add_group(inventory, "office_cache", cache.name)
        before = {host.name: received(host_pid(host)) for host in hosts}
        serial = None if args.serial == "all" else parse_serial(args.serial)
        elapsed, _, _ = provision("up", str(inventory), "--limit", f"!{cache.name}", "--tags", APT_TAGS, "--forks",
                                  str(args.hosts), *([] if serial is None else ["--serial", args.serial]),
                                  json_path=work / "tiny.json")
        own = {host.name: received(host_pid(host)) - before[host.name] for host in hosts}
    finally:
        for host in hosts:
            host.remove()
    documents = json.loads((work / "tiny.json").read_text())["hosts"]
    print(f"  the apt work's rollout (--tags {APT_TAGS}, fresh hosts): {elapsed:.1f} s", flush=True)
    return [batch_apt_work(batch, {name: roles_elapsed(documents[name]) for name in batch}, own,
                           min(args.per_host_mbit, args.cache_mbit / len(batch)) * 1e6)
            for batch in batches([host.name for host in hosts], serial)]


def batch_apt_work(batch: list[str], roles: dict[str, dict[str, float]], own: dict[str, int],
                   rate_bps: float) -> dict[str, Any]:
    """The apt work of a batch: its longest host's (its hosts run at once), each host's apt roles' seconds
    less its own downloads (`own` bytes) at `rate_bps`, its share of the link."""
    work_of = {name: apt_work_of(roles[name], own[name], rate_bps) for name in batch}
    longest = max(batch, key=lambda name: work_of[name])
    return {"hosts": len(batch), "seconds": round(work_of[longest], 2), "host": longest,
            "own_mib": round(own[longest] / MIB, 1), "rate_mbit": rate_bps / 1e6,
            "shortest": round(min(work_of.values()), 2), "apt_bytes": sum(own[name] for name in batch)}


def cache_down(lab: Lab, cache: LabHost, inventory: Path, work: Path) -> dict[str, Any]:
    """The cache host stopped, one more fresh host rolled out: what it says and whether it converged."""
    late = lab.new_host(prefix="late")
    document = yaml.safe_load(inventory.read_text())
    document["all"]["hosts"][late.name] = {"ansible_host": "127.0.0.1", "ansible_port": late.ssh_port}
    inventory.write_text(yaml.safe_dump(document, sort_keys=False))
    known_hosts = Path(document["all"]["vars"]["known_hosts"])
    lab.write_known_hosts(known_hosts, lab.hosts())
    cache.stop()
    elapsed, rc, output = provision("up", str(inventory), "--limit", late.name, "--tags", TAGS,
                                    json_path=work / "cache-down.json", check=False)
    said = [line.strip() for line in output.splitlines() if "DOWN" in line or "FAILED" in line.upper()]
    _, listing = late.exec("cd /var/lib/provision/huggingface/hub && find . -name '*.part' | wc -l")
    return {"seconds": round(elapsed, 1), "exit": rc, "said": said[:6], "part_files_left": listing.strip()}


def print_figures(report: dict[str, Any]) -> None:
    print(f"fleet of {report['hosts']} fresh hosts, --tags {TAGS}")
    print(f"  without a cache: {report['direct_s']:.1f}s")
    print(f"  with the office cache: setup {report['cache_setup_s']:.1f}s, rollout (--serial {report['serial']}) "
          f"{report['cached_s']:.1f}s")
    print("  " + describe("without", *report["direct"]))
    print("  " + describe("with", *report["cached"]))
    if "cache_sent" in report:
        print_limit(report)
    served, fetched = report["apt_served_bytes"], report["apt_upstream_bytes"]
    print(f"  apt-cacher-ng: {fetched / MIB:.1f} MiB from the archive, {served / MIB:.1f} MiB to the hosts"
          + (f" (hit rate {1 - fetched / served:.0%} of bytes)" if served else ""))
    print(json.dumps({k: v if not isinstance(v, tuple) else [dict(c) for c in v] for k, v in report.items()},
                     indent=None)[:2000], flush=True)


def timelines(output: str, hosts: list[str]) -> list[str]:
    """The recap's timeline of each of `hosts` (where the rollout's time went), as `up` printed it."""
    lines, keep = [], False
    for line in output.splitlines():
        if line.startswith("timeline of "):
            keep = line.split()[2] in hosts
        elif not line.startswith(" "):
            keep = False
        if keep:
            lines.append(line)
    return lines


def print_limit(report: dict[str, Any]) -> None:
    """The LAN limits (the module's docstring): bytes only, and issue 24's with the apt work; each against
    the rollout."""
    rate_bps = report["cache_mbit"] * 1e6
    print(f"  the cache's link ({report['cache_mbit']:g} Mbit/s): sent {report['cache_sent'] / MIB:.1f} MiB "
          f"({report['cache_sent'] * 8 / rate_bps:.2f} s), received {report['cache_received'] / MIB:.1f} MiB "
          f"(the upstream fill, {report['cache_received'] * 8 / rate_bps:.2f} s)")
    for batch in report.get("apt_work", []):
        print(f"  apt work of a batch of {batch['hosts']}: {batch['seconds']:.2f} s ({batch['host']}, less its own "
              f"{batch['own_mib']:.1f} MiB at {batch['rate_mbit']:g} Mbit/s; its shortest host "
              f"{batch['shortest']:.2f} s)")
    limits = lan_limits(report)
    report["lan_limit_s"] = limits["bytes"][-1][1]
    if "issue" in limits:
        report["issue_limit_s"] = limits["issue"][0][1]  # the lower bound; the others are printed beside it
    for how, limit in [entry for entries in limits.values() for entry in entries]:
        print(f"  {how}: {limit:.2f} s; the rollout {report['cached_s']:.1f} s is {report['cached_s'] / limit:.2f}x")
    if "cpu_limit_s" in report:
        cpu_limit = report["cpu_limit_s"]
        print(f"  this machine's CPU limit of the rollout (its busy core-seconds / cores; no schedule of the same "
              f"work on these cores beats it): {cpu_limit:.2f} s; the rollout is {report['cached_s'] / cpu_limit:.2f}x")
        bound = report.get("issue_limit_s", report["lan_limit_s"])
        print(f"  the LAN bound / this machine's CPU limit: {bound / cpu_limit:.2f} (near or below 1 the lab hosts' "
              "work on these cores bounds the rollout as much as the link: the downloads do not dominate, and the "
              "ratio to the LAN bound measures this machine; lower the rates or add bytes)")
    print("  (the machine's load varies wall times)", flush=True)


def lan_limits(report: dict[str, Any]) -> dict[str, list[tuple[str, float]]]:
    """The limits of the module's docstring, each (how it is counted, seconds): "bytes" (bytes only: all
    through the cache's link, and with a canary per batch), "issue" (with the apt work per batch: issue
    24's lower bound, the batch's apt work as one block, as benchmarks/site_first_apply.py adds it) when
    the report has the apt work of each batch."""
    rate, host_rate = report["cache_mbit"] * 1e6, report["per_host_mbit"] * 1e6
    fill = report["cache_received"] * 8 / rate
    canary, hosts, weights = report["canary_received"], report["hosts"], report.get("weights_bytes", 0) * 8
    limits: dict[str, list[tuple[str, float]]] = {
        "bytes": [("LAN limit, bytes only (all through the cache's link)", report["cache_sent"] * 8 / rate + fill)]}
    if canary:
        per_batch = [canary * 8 / host_rate, (report["cache_sent"] - canary) * 8 / rate + fill]
        limits["bytes"].append((f"LAN limit, bytes only, per batch (the canary's {canary / MIB:.1f} MiB at "
                                f"{report['per_host_mbit']:g} Mbit/s {per_batch[0]:.2f} s + the rest and the fill "
                                f"{per_batch[1]:.2f} s)", sum(per_batch)))
        overlap = [weights / host_rate, ((hosts - 1) * weights) / rate + fill]
        # a host's bytes that are not weights (its apt downloads and its image), the rest's mean
        own = [canary * 8 - weights, ((report["cache_sent"] - canary) * 8 - (hosts - 1) * weights) / (hosts - 1)]
        sizes, rates = [1, hosts - 1], [host_rate, rate]
    else:
        per_batch = [limits["bytes"][0][1]]
        overlap = [hosts * weights / rate + fill]
        own = [(report["cache_sent"] * 8 - hosts * weights) / hosts]
        sizes, rates = [hosts], [rate]
    batches_apt = report.get("apt_work", [])
    apt = [batch["seconds"] for batch in batches_apt]
    if len(apt) != len(per_batch):
        return limits
    uncovered = [max(0.0, work - covered) for work, covered in zip(apt, overlap, strict=True)]
    terms = [[batch, work + bits / host_rate] for batch, work, bits in zip(per_batch, apt, own, strict=True)]
    for term, batch, bits, size, batch_rate in zip(terms, batches_apt, own, sizes, rates, strict=True):
        if "shortest" in batch:  # every host's image waits for its apt work: all the batch's images after the least
            term.append(batch["shortest"] + (bits * size - batch["apt_bytes"] * 8) / batch_rate)
    limits["issue"] = [
        ("issue 24's limit, a lower bound, per batch the largest of its bytes, its longest host's apt work + that "
         "host's bytes other than weights at its rate, and its shortest host's apt work + the batch's images: "
         + " + ".join("max(" + ", ".join(f"{x:.2f}" for x in term) + ")" for term in terms),
         sum(max(term) for term in terms)),
        (f"the same with the batch's apt work as one block (bytes {sum(per_batch):.2f} s + the apt work no "
         "download covers: "
         + " + ".join(f"max(0, {work:.2f} - weights (+ fill) {covered:.2f})"
                      for work, covered in zip(apt, overlap, strict=True))
         + ")", sum(per_batch) + sum(uncovered)),
        (f"bytes + all the apt work {sum(apt):.2f} s (as benchmarks/site_first_apply.py adds it)",
         sum(per_batch) + sum(apt))]
    return limits


if __name__ == "__main__":
    main()
