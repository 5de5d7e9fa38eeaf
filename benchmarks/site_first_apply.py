"""`benchmarks/first_apply.py --site`: the whole site's first apply on a throttled lab laptop, against the link.

Each timed run gets a fresh simulated RTX 5090 laptop (tests/lab/laptop.py: the stand-in NVIDIA
repositories, hub and vLLM image; no nouveau, so the lab flow has no reboot), throttled on the lab's
network (benchmarks/throttle.py): every byte it receives through a tbf of `--per-host-mbit`, the hub and
the registry behind nginx `limit_rate` of `--per-connection-mbit` per request. The weights are
`--weights-mib` in `--shards` files; the vLLM image is the stand-in's plus `--image-mib` of random bytes
in `--image-layers` layers (incompressible, as the real image's layers nearly are). Then
`provision up INVENTORY` (playbooks/site.yaml), timed, in each of `--modes` (the order rotates every round):
  - provision: as shipped;
  - sequential: `-e early_starts=false`, the same steps and downloads in task order;
  - today: the tool as it was when issue 24 was filed, its peer: task order, and each download as it
    was then. `git log -S` on this tree: hf_snapshot fetched one file at a time by one `curl -C -`
    connection before e3b13bc (`hf_download_connections=1 hf_download_files=1` run that same
    `fetch`); daemon.json had no max-concurrent-downloads before 6336eef (dockerd's default 3,
    `docker_max_concurrent_downloads=3` writes the same); the early starts came with 10c007b and
    4546a46 (`early_starts=false`); the apt operation's downloads did not change (apt-get as before).
The limit of a run (issue 24's): the bytes its laptop received on tap0 / the per-host rate, + the
apt work (the apt roles' elapsed, less their own downloads' bytes / rate: those are in the bytes
already) + the reboot (none in this flow; a "reboot for" task's elapsed if there is one) + the vLLM start
and the smoke checks (the vllm and smoke roles' elapsed: they need every byte first), each run's from
its own bytes. Each run also prints what nginx served (hub and registry, from its access log) and the
bytes it sent twice (a GET of the same URL and Range answered again: a download begun afresh). The apt work
is measured once on a fresh laptop of the same link with the downloads tiny (the hub's 2 x 4 MiB
shards, the image without padding); "its own downloads" are that run's bytes less the weights' and the
image's (the hub's file sizes, the registry manifest's layer sizes). Also printed: the floor if all the
apt work overlapped the downloads (bytes / rate + the vLLM start and the smoke checks), not reachable on
one host, and each mode's lower bound (`lower_bound`): only the weights need no apt work first.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import docker

from benchmarks.throttle import PerConnection, host_pid, received, refetched, served, throttle_host
from tests.lab import Lab
from tests.lab.laptop import MODEL_REPO, check_image, gpu_laptop, laptop_variables
from tests.lab.net import MACHINE_FROM_HOSTS, free_port
from tests.standins.hub.cli import start_hub
from tests.standins.hub.server import HubOptions
from tests.standins.nvidia import HostTraits, build_repo, serve
from tests.standins.vllm.build import build_images

REPO = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024
APT_ROLES = ("nvidia_driver", "cuda_toolkit", "docker", "container_toolkit", "office_cache_client")
WEIGHTS_TASK, IMAGE_TASK = "model weights downloaded and verified", "vLLM image pulled"  # roles/model/tasks.yaml
MODES = {"provision": [], "sequential": ["-e", "early_starts=false"],
         "today": ["-e", "early_starts=false", "-e", "hf_download_connections=1", "-e", "hf_download_files=1",
                   "-e", "docker_max_concurrent_downloads=3"]}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--site: the whole site on a throttled lab laptop")
    group.add_argument("--site", action="store_true", help="measure the whole site, not the docker role")
    group.add_argument("--weights-mib", type=int, default=256, help="stand-in weights, in total")
    group.add_argument("--shards", type=int, default=4, help="weight files")
    group.add_argument("--image-mib", type=int, default=256, help="random bytes added to the stand-in vLLM image")
    group.add_argument("--image-layers", type=int, default=4, help="layers they are spread over")
    group.add_argument("--per-connection-mbit", type=float, default=40, help="nginx limit_rate, hub and registry")
    group.add_argument("--per-host-mbit", type=float, default=200, help="tbf on what the laptop receives")
    group.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)} (provision always runs)")


def padded_image(lab: Lab, base: str, mib: int, layers: int, work: Path) -> str:
    """The stand-in vLLM image `base` (as this machine's docker names it) plus `mib` MiB of random
    bytes in `layers` layers, pushed to the lab registry; returns its `repo:tag` there."""
    context = work / "padded"
    context.mkdir()
    lines = [f"FROM {base}"]
    for layer in range(layers):
        with open(context / f"pad{layer}", "wb") as out:
            for _ in range(mib // layers):
                out.write(os.urandom(MIB))
        lines.append(f"COPY pad{layer} /opt/bench-padding/pad{layer}")
    (context / "Dockerfile").write_text("\n".join(lines) + "\n")
    docker.from_env().images.build(path=str(context), tag="provision-bench/vllm-padded:1", rm=True)
    shutil.rmtree(context)
    lab.registry.push("provision-bench/vllm-padded:1", f"vllm/vllm-openai:bench-{mib}m")
    return f"vllm/vllm-openai:bench-{mib}m"


def image_bytes(registry_port: int, reference: str) -> int:
    """The compressed size of `repo:tag` in the registry on this machine: its config and layers."""
    repo, tag = reference.rsplit(":", 1)
    request = urllib.request.Request(f"http://127.0.0.1:{registry_port}/v2/{repo}/manifests/{tag}", headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as reply:
        manifest = json.load(reply)
    return manifest["config"]["size"] + sum(layer["size"] for layer in manifest["layers"])


def early_starts_declared() -> bool:
    """Whether a role declares `early_starts`; before the early starts none does, and the inventory
    declares it so that `-e early_starts=false` is accepted (and changes nothing)."""
    return any("early_starts:" in spec.read_text() for spec in REPO.glob("roles/*/meta/argument_specs.y*ml"))


def roles_elapsed(host: dict[str, Any]) -> dict[str, float]:
    """Seconds per role of a results document's host (its tasks' elapsed)."""
    sums: dict[str, float] = defaultdict(float)
    for task in host["tasks"]:
        sums[task["role"] or "-"] += task["elapsed"]
    return sums


def apt_work_of(roles: dict[str, float], own_bytes: int, rate_bps: float) -> float:
    """The apt work of a run of a host (issue 24's "apt work that cannot overlap"): its apt roles' seconds
    (`roles_elapsed`) less their own downloads' `own_bytes` at `rate_bps` (those are in the limit's bytes)."""
    return sum(roles.get(role, 0.0) for role in APT_ROLES) - own_bytes * 8 / rate_bps


class SiteBench:
    """The lab, its stand-ins and the throttle; `apply` times one first apply on a fresh laptop."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.lab = Lab(work / "lab", log=lambda _: None)
        self.stoppers: list[Any] = []
        self.runs = 0

    def start(self) -> None:
        args, work, lab = self.args, self.work, self.lab
        lab.start()
        images = build_images(f"127.0.0.1:{lab.registry.port}", pull_registry=lab.registry.address_for_hosts,
                              behaviours=("ok",), log=lambda _: None)
        base = images["ok"].split("/", 1)[1]  # vllm/vllm-openai:standin-ok
        padded = padded_image(lab, f"127.0.0.1:{lab.registry.port}/{base}", args.image_mib, args.image_layers, work)
        self.checker = check_image(lab, work / "checker")
        port = free_port(18865, set())
        self.repo = build_repo(work / "nvidia-repo", f"http://{MACHINE_FROM_HOSTS}:{port}")
        self.stoppers.append(serve(self.repo.out_dir, port))
        self.token = "hf_standin_" + secrets.token_hex(12)
        options = HubOptions(token=self.token)
        big = start_hub(work / "hub-big", repo_id=MODEL_REPO, shard_size=args.weights_mib * MIB // args.shards,
                        shards=args.shards, options=options)
        tiny = start_hub(work / "hub-tiny", repo_id=MODEL_REPO, options=HubOptions(token=self.token))
        self.stoppers += [big, tiny]
        self.tiny_payload = sum(f.size for f in tiny.repository.files) + image_bytes(lab.registry.port, base)
        self.weights_bytes = {"big": sum(f.size for f in big.repository.files),
                              "tiny": sum(f.size for f in tiny.repository.files)}
        ports = {name: free_port(20100 + 10 * n, set()) for n, name in enumerate(("big", "tiny", "registry"))}
        nginx = PerConnection(work / "nginx", {ports["big"]: big.server.server_address[1],
                                               ports["tiny"]: tiny.server.server_address[1],
                                               ports["registry"]: lab.registry.port}, args.per_connection_mbit)
        self.stoppers.append(nginx)
        self.nginx_log = nginx.log
        self.ports = {ports["big"]: "hub", ports["tiny"]: "hub", ports["registry"]: "registry"}
        self.registry = f"{MACHINE_FROM_HOSTS}:{ports['registry']}"
        self.sizes = {"big": (f"http://{MACHINE_FROM_HOSTS}:{ports['big']}", f"{self.registry}/{padded}"),
                      "tiny": (f"http://{MACHINE_FROM_HOSTS}:{ports['tiny']}", f"{self.registry}/{base}")}

    def apply(self, size: str, extra: list[str]) -> dict[str, Any]:
        """A first apply of the whole site on a fresh throttled laptop: wall, bytes, per-role seconds."""
        self.runs += 1
        host = gpu_laptop(self.lab, self.work / f"traits-{self.runs}", HostTraits(nouveau_at_boot=False),
                          prefix=f"site{self.runs}")
        try:
            pid = host_pid(host)
            throttle_host(pid, self.args.per_host_mbit)
            endpoint, image = self.sizes[size]
            variables = laptop_variables(self.lab, self.repo, self.checker, endpoint, self.token, image)
            variables["docker_insecure_registries"].append(self.registry)
            variables["preflight_min_free_gib"] = 5  # the stand-ins take MiB; the lab hosts share this disk
            if not early_starts_declared():
                variables["vars_declared"] = {"early_starts": {"type": "bool", "description": "not read on this tree"}}
            inventory = self.lab.write_inventory(self.work / f"site-{self.runs}.yaml", [host], **variables)
            results = self.work / f"results-{self.runs}.json"
            argv = [sys.executable, "-m", "provision", "up", str(inventory), "--json-file", str(results), *extra]
            before = received(pid)
            logged = self.nginx_log.stat().st_size if self.nginx_log.exists() else 0
            began = time.time()
            started = time.monotonic()
            done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
            wall = time.monotonic() - started
            moved = received(pid) - before
            requests = served(self.nginx_log, logged)
        finally:
            host.remove()
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-4000:]}\n"
                             f"{done.stderr[-2000:]}")
        document = next(iter(json.loads(results.read_text())["hosts"].values()))
        reboot = sum(t["elapsed"] for t in document["tasks"] if t["name"].startswith("reboot for") and t["changed"])
        tasks = {t["name"]: t["elapsed"] for t in document["tasks"]}
        by_source: dict[str, int] = defaultdict(int)
        for request in requests:
            by_source[self.ports.get(request.port, str(request.port))] += request.body_bytes
        return {"wall": wall, "bytes": moved, "weights_bytes": self.weights_bytes[size],
                "changed": document["changed"], "reboot": reboot,
                "roles": roles_elapsed(document), "weights": tasks.get(WEIGHTS_TASK, 0.0),
                "image": tasks.get(IMAGE_TASK, 0.0), "served": dict(by_source),
                "again": refetched(requests), "events": events(document, began)}

    def stop(self) -> None:
        for stopper in reversed(self.stoppers):
            stopper.stop()
        self.lab.down()


def events(host: dict[str, Any], began: float) -> str:
    """When, from the run's start, the image pull's and the weights' host units ran and dockerd was
    restarted (the handler): where a pull begun early can be cut."""
    marks = []
    for task in host["tasks"]:
        if task["name"] in (WEIGHTS_TASK, IMAGE_TASK) and task.get("early"):
            early = task["early"]
            marks.append(f"{task['name']} unit {early['started'] - began:.1f}-{early['ended'] - began:.1f} s")
        elif task["name"] == "restart docker" and task["changed"]:
            marks.append(f"docker restarted {task['started'] - began:.1f}-"
                         f"{task['started'] + task['elapsed'] - began:.1f} s")
    return "; ".join(marks) or "no host unit, no restart"


def describe(label: str, run: dict[str, Any], rate_bps: float, apt_work: float | None) -> str:
    roles = run["roles"]
    apt = sum(roles.get(role, 0.0) for role in APT_ROLES)
    line = (f"{label:>10}: {run['wall']:7.2f} s, {run['changed']} changed, reboot {run['reboot']:.1f} s, received "
            f"{run['bytes'] / MIB:7.1f} MiB ({run['bytes'] * 8 / rate_bps:6.2f} s at the host rate); apt roles "
            f"{apt:.1f} s, weights {run['weights']:.1f} s, image {run['image']:.1f} s, vllm + smoke "
            f"{after(run):.1f} s")
    if apt_work is not None:
        line += f"; limit {limit(run, rate_bps, apt_work):.2f} s ({run['wall'] / limit(run, rate_bps, apt_work):.2f}x)"
    again = sum(run["again"].values())
    line += ("\n    nginx served " + ", ".join(f"{source} {count / MIB:.1f} MiB" for source, count in
                                           sorted(run["served"].items()))
             + f"; sent again {again / MIB:.1f} MiB" + "".join(f"\n      {count / MIB:6.1f} MiB again: {request}"
                                                            for request, count in run["again"].items()
                                                            if count >= MIB / 10)
             + f"\n    {run['events']}")
    return line


def after(run: dict[str, Any]) -> float:
    """The work that needs every byte first: the vLLM service started and ready, the smoke checks."""
    return run["roles"].get("vllm", 0.0) + run["roles"].get("smoke", 0.0)


def limit(run: dict[str, Any], rate_bps: float, apt_work: float) -> float:
    """Bytes / rate + the apt work + the reboot + what needs every byte first (none of it overlaps a download
    in task order; the early starts overlap the downloads with the apt work, hence the floor beside it)."""
    return run["bytes"] * 8 / rate_bps + apt_work + run["reboot"] + after(run)


def lower_bound(run: dict[str, Any], rate_bps: float, apt_work: float) -> float:
    """What no order of the same work can beat on this host: the largest of all its bytes at the link's
    rate and the apt work + the bytes that are not weights (the apt downloads come before their installs,
    the image pull needs docker installed; only the weights need neither), + the reboot + what needs every
    byte first."""
    others = (run["bytes"] - run["weights_bytes"]) * 8 / rate_bps
    return max(run["bytes"] * 8 / rate_bps, apt_work + others) + run["reboot"] + after(run)


def site_main(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="plab-site-link-", dir="/var/tmp"))
    bench = SiteBench(args, work)
    rate_bps = args.per_host_mbit * 1e6
    modes = ["provision"] + [m for m in args.modes.split(",") if m != "provision"]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise SystemExit(f"--modes: no mode {', '.join(unknown)} (the modes: {', '.join(MODES)})")
    rows: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    try:
        bench.start()
        print(f"weights {args.weights_mib} MiB in {args.shards} files, image +{args.image_mib} MiB in "
              f"{args.image_layers} layers; per connection {args.per_connection_mbit} Mbit/s (nginx limit_rate), "
              f"per host {args.per_host_mbit} Mbit/s (tbf); the machine's load varies wall times", flush=True)
        print("early_starts: " + ("declared by a role" if early_starts_declared() else
                                  "no role declares it on this tree: both columns run in task order"), flush=True)
        tiny = bench.apply("tiny", [])
        own_downloads = (tiny["bytes"] - bench.tiny_payload) * 8 / rate_bps
        apt_work = apt_work_of(tiny["roles"], tiny["bytes"] - bench.tiny_payload, rate_bps)
        print(describe("tiny", tiny, rate_bps, None) + f"; apt work {apt_work:.2f} s (less its own downloads "
              f"{(tiny['bytes'] - bench.tiny_payload) / MIB:.1f} MiB, {own_downloads:.2f} s)", flush=True)
        for round_number in range(args.repeat):
            shift = round_number % len(modes)
            for mode in modes[shift:] + modes[:shift]:
                run = bench.apply("big", MODES[mode])
                rows[mode].append(run)
                print(f"round {round_number + 1} " + describe(mode, run, rate_bps, apt_work), flush=True)
    finally:
        bench.stop()
        shutil.rmtree(work, ignore_errors=True)
    summary(rows, rate_bps, apt_work)


def summary(rows: dict[str, list[dict[str, Any]]], rate_bps: float, apt_work: float) -> None:
    """Medians per mode, each run against the limit from its own bytes; the peers' time / provision's
    (the median of the per-round ratios)."""
    median = statistics.median
    fast = rows["provision"]
    floors = [r["bytes"] * 8 / rate_bps + after(r) for r in fast]
    print(f"apt work {apt_work:.2f} s; the floor if all apt work overlapped (provision's bytes): "
          f"{median(floors):.2f} s (provision {median(r['wall'] / x for r, x in zip(fast, floors, strict=True)):.2f}x)")
    for mode, runs in rows.items():
        limits = [limit(r, rate_bps, apt_work) for r in runs]
        line = (f"median {mode:>10}: {median(r['wall'] for r in runs):7.2f} s, received "
                f"{median(r['bytes'] for r in runs) / MIB:.1f} MiB (sent again "
                f"{median(sum(r['again'].values()) for r in runs) / MIB:.1f} MiB), limit {median(limits):.2f} s "
                f"(bytes {median(r['bytes'] * 8 / rate_bps for r in runs):.2f} s + apt work + reboot "
                f"{median(r['reboot'] for r in runs):.2f} s + vllm and smoke {median(after(r) for r in runs):.2f} s): "
                f"{median(r['wall'] / x for r, x in zip(runs, limits, strict=True)):.2f}x its limit")
        bounds = [lower_bound(r, rate_bps, apt_work) for r in runs]
        line += (f"; its lower bound {median(bounds):.2f} s (max(bytes, apt work + bytes other than weights) + "
                 f"reboot + vllm and smoke): {median(r['wall'] / x for r, x in zip(runs, bounds, strict=True)):.2f}x")
        if mode != "provision":
            line += (f"; {mode} / provision "
                     f"{median(r['wall'] / f['wall'] for r, f in zip(runs, fast, strict=True)):.2f}x")
        print(line, flush=True)
