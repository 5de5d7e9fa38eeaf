"""`benchmarks/first_apply.py --site`: the whole site's first apply on a throttled lab laptop, against the link.

Each timed run gets a fresh simulated RTX 5090 laptop (tests/lab/laptop.py: the stand-in NVIDIA
repositories, hub and vLLM image; no nouveau, so the lab flow has no reboot), throttled on the lab's
network (benchmarks/throttle.py): every byte it receives through a tbf of `--per-host-mbit`, the hub and
the registry behind nginx `limit_rate` of `--per-connection-mbit` per request. The weights are
`--weights-mib` in `--shards` files; the vLLM image is the stand-in's plus `--image-mib` of random bytes
in `--image-layers` layers (incompressible, as the real image's layers nearly are). Then
`provision up INVENTORY` (playbooks/site.yaml), timed, alternating (the order rotates every round):
  - provision: as shipped;
  - sequential: `-e early_starts=false`, the same steps in task order (a variable the early starts
    read; before them every run is in task order and both columns measure the same thing).
The limit of a run: the bytes its laptop received on tap0 / the per-host rate, plus the work that is
not the large downloads (apt installs, services starting, vLLM loading, the smoke checks, and the
reboot if the flow had one), measured once on a fresh laptop of the same link with the downloads tiny
(the hub's 2 x 4 MiB shards, the image without padding): its wall minus its own bytes / rate.
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
from collections import defaultdict
from pathlib import Path
from typing import Any

import docker

from benchmarks.throttle import PerConnection, host_pid, received, throttle_host
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
MODES = {"sequential": ["-e", "early_starts=false"], "provision": []}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--site: the whole site on a throttled lab laptop")
    group.add_argument("--site", action="store_true", help="measure the whole site, not the docker role")
    group.add_argument("--weights-mib", type=int, default=256, help="stand-in weights, in total")
    group.add_argument("--shards", type=int, default=4, help="weight files")
    group.add_argument("--image-mib", type=int, default=256, help="random bytes added to the stand-in vLLM image")
    group.add_argument("--image-layers", type=int, default=4, help="layers they are spread over")
    group.add_argument("--per-connection-mbit", type=float, default=40, help="nginx limit_rate, hub and registry")
    group.add_argument("--per-host-mbit", type=float, default=200, help="tbf on what the laptop receives")


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


def roles_elapsed(host: dict[str, Any]) -> dict[str, float]:
    """Seconds per role of a results document's host (its tasks' elapsed)."""
    sums: dict[str, float] = defaultdict(float)
    for task in host["tasks"]:
        sums[task["role"] or "-"] += task["elapsed"]
    return sums


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
        ports = {name: free_port(20100 + 10 * n, set()) for n, name in enumerate(("big", "tiny", "registry"))}
        nginx = PerConnection(work / "nginx", {ports["big"]: big.server.server_address[1],
                                               ports["tiny"]: tiny.server.server_address[1],
                                               ports["registry"]: lab.registry.port}, args.per_connection_mbit)
        self.stoppers.append(nginx)
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
            inventory = self.lab.write_inventory(self.work / f"site-{self.runs}.yaml", [host], **variables)
            results = self.work / f"results-{self.runs}.json"
            argv = [sys.executable, "-m", "provision", "up", str(inventory), "--json-file", str(results), *extra]
            before = received(pid)
            started = time.monotonic()
            done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
            wall = time.monotonic() - started
            moved = received(pid) - before
        finally:
            host.remove()
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-4000:]}\n"
                             f"{done.stderr[-2000:]}")
        document = next(iter(json.loads(results.read_text())["hosts"].values()))
        reboots = sum(1 for t in document["tasks"] if "reboot" in t["name"].lower() and t["changed"])
        return {"wall": wall, "bytes": moved, "changed": document["changed"], "reboots": reboots,
                "roles": roles_elapsed(document)}

    def stop(self) -> None:
        for stopper in reversed(self.stoppers):
            stopper.stop()
        self.lab.down()


def describe(label: str, run: dict[str, Any], rate_bps: float, other: float | None) -> str:
    roles = run["roles"]
    apt = sum(roles.get(role, 0.0) for role in APT_ROLES)
    line = (f"{label:>10}: {run['wall']:7.2f} s, {run['changed']} changed, reboots {run['reboots']}, received "
            f"{run['bytes'] / MIB:7.1f} MiB ({run['bytes'] * 8 / rate_bps:6.2f} s at the host rate); apt roles "
            f"{apt:.1f} s, model {roles.get('model', 0):.1f} s, vllm {roles.get('vllm', 0):.1f} s")
    if other is not None:
        limit = run["bytes"] * 8 / rate_bps + other
        line += f"; limit {limit:.2f} s ({run['wall'] / limit:.2f}x)"
    return line


def site_main(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="plab-site-link-", dir="/var/tmp"))
    bench = SiteBench(args, work)
    rate_bps = args.per_host_mbit * 1e6
    rows: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    try:
        bench.start()
        print(f"weights {args.weights_mib} MiB in {args.shards} files, image +{args.image_mib} MiB in "
              f"{args.image_layers} layers; per connection {args.per_connection_mbit} Mbit/s (nginx limit_rate), "
              f"per host {args.per_host_mbit} Mbit/s (tbf); the machine's load varies wall times", flush=True)
        floor = bench.apply("tiny", [])
        other = floor["wall"] - floor["bytes"] * 8 / rate_bps
        print(describe("tiny", floor, rate_bps, None) + f"; not the downloads: {other:.2f} s", flush=True)
        modes = list(MODES)
        for round_number in range(args.repeat):
            for mode in modes if round_number % 2 == 0 else modes[::-1]:
                run = bench.apply("big", MODES[mode])
                rows[mode].append(run)
                print(f"round {round_number + 1} " + describe(mode, run, rate_bps, other), flush=True)
    finally:
        bench.stop()
        shutil.rmtree(work, ignore_errors=True)
    fast, slow = rows["provision"], rows["sequential"]
    limits = [r["bytes"] * 8 / rate_bps + other for r in fast]
    print(f"median: limit {statistics.median(limits):.2f} s (bytes / host rate "
          f"{statistics.median(r['bytes'] * 8 / rate_bps for r in fast):.2f} s + not the downloads {other:.2f} s) | "
          f"provision {statistics.median(r['wall'] for r in fast):.2f} s "
          f"({statistics.median(r['wall'] / limit for r, limit in zip(fast, limits, strict=True)):.2f}x the limit) | "
          f"sequential {statistics.median(r['wall'] for r in slow):.2f} s | sequential / provision "
          f"{statistics.median(s['wall'] / f['wall'] for s, f in zip(slow, fast, strict=True)):.2f}x")
