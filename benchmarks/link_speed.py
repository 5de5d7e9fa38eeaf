#!/usr/bin/env python3
"""The weights download on a lab host behind a throttled link, against the link's limit.

The link is set on the lab's network (benchmarks/throttle.py): nginx `limit_rate` per connection in
front of the stand-in hub, a tbf per host on what the host receives.
Each round removes the host's HF cache, then runs `provision up --playbook` of one role holding the
model role's weights task, alternating:
  - provision: the model role's download settings (roles/model/defaults.yaml);
  - sequential: one connection, one file at a time (the settings before ranged downloads).
The limit is the bytes the host actually received on tap0 (its counter, headers included: what tbf
counts) over the per-host rate. Prints per round and the medians with ratios to the limit.
Usage (root, the lab's packages installed; takes the lab lock for its run):
  CI=true flock -o /tmp/provision-lab.lock .venv/bin/python benchmarks/link_speed.py \
      [--shard-mib 128] [--shards 4] [--per-connection-mbit 40] [--per-host-mbit 200] [--repeat 2]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.throttle import PerConnection, host_pid, received, throttle_host
from tests.lab import Lab
from tests.lab.net import MACHINE_FROM_HOSTS, free_port
from tests.standins.hub.cli import start_hub

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
HF_HOME = "/var/lib/provision/huggingface"
MIB = 1024 * 1024

WEIGHTS_TASK = """- name: model weights downloaded and verified
  hf_snapshot:
    repo: "{{ hf_model }}"
    cache_dir: "HF_HOME/hub"
    endpoint: "{{ hf_endpoint }}"
    attempts: 3
    connections: "{{ hf_download_connections }}"
    parallel_files: "{{ hf_download_files }}"
    chunk_mib: "{{ hf_download_chunk_mib }}"
""".replace("HF_HOME", HF_HOME)

WEIGHTS_SPECS = """options:
  hf_model: {type: str, description: the repository}
  hf_endpoint: {type: str, description: the hub behind the throttled link}
  hf_download_connections: {type: int, description: ranged connections per file}
  hf_download_files: {type: int, description: files at once}
  hf_download_chunk_mib: {type: int, description: chunk size}
"""

def download(work: Path, inventory: Path, pid: int, host_exec, settings: dict[str, int]) -> tuple[float, int]:
    """Wall time of `provision up` with these download settings on an empty cache, and bytes received."""
    host_exec(f"rm -rf {HF_HOME}")
    before = received(pid)
    argv = [str(BIN / "provision"), "up", str(inventory), "--playbook", str(work / "playbooks" / "weights.yaml")]
    for key, value in settings.items():
        argv += ["-e", f"{key}={value}"]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return elapsed, received(pid) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shard-mib", type=int, default=128)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--per-connection-mbit", type=int, default=40)
    parser.add_argument("--per-host-mbit", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    defaults = yaml.safe_load((REPO / "roles/model/defaults.yaml").read_text())
    modes = {
        "provision": {k: defaults[k] for k in ("hf_download_connections", "hf_download_files",
                                               "hf_download_chunk_mib")},
        "sequential": {"hf_download_connections": 1, "hf_download_files": 1, "hf_download_chunk_mib": 64},
    }
    work = Path(tempfile.mkdtemp(prefix="plab-link-", dir="/var/tmp"))
    (work / "playbooks").mkdir()
    (work / "roles/weights").mkdir(parents=True)
    (work / "roles/weights/tasks.yaml").write_text(WEIGHTS_TASK)
    (work / "roles/weights/meta").mkdir()
    (work / "roles/weights/meta/argument_specs.yaml").write_text(WEIGHTS_SPECS)
    (work / "playbooks/weights.yaml").write_text("- name: weights\n  hosts: all\n  roles: [weights]\n")
    lab = Lab(work / "lab", log=lambda _: None)
    hub = start_hub(work / "repo", shard_size=args.shard_mib * MIB, shards=args.shards)
    port = free_port(20000, set())
    nginx = PerConnection(work / "nginx", {port: hub.server.server_address[1]}, args.per_connection_mbit)
    rows: list[tuple[str, float, int, float]] = []
    try:
        lab.start()
        (host,) = lab.new_hosts(1, prefix="lnk")
        pid = host_pid(host)
        throttle_host(pid, args.per_host_mbit)
        inventory = lab.write_inventory(work / "inventory.yaml", [host], hf_model=hub.repository.repo_id,
                                        hf_endpoint=f"http://{MACHINE_FROM_HOSTS}:{port}")
        payload = sum(f.size for f in hub.repository.files)
        print(f"payload {payload / MIB:.0f} MiB in {len(hub.repository.files)} files; per connection "
              f"{args.per_connection_mbit} Mbit/s (nginx limit_rate), per host {args.per_host_mbit} Mbit/s (tbf)")
        for round_number in range(args.repeat):
            order = list(modes) if round_number % 2 == 0 else list(reversed(modes))
            for mode in order:
                elapsed, moved = download(work, inventory, pid, host.exec, modes[mode])
                limit = moved * 8 / (args.per_host_mbit * 1e6)
                rows.append((mode, elapsed, moved, limit))
                print(f"round {round_number + 1} {mode:>10}: {elapsed:7.2f} s  received {moved / MIB:7.1f} MiB  "
                      f"limit {limit:6.2f} s  ({elapsed / limit:.2f}x the limit)", flush=True)
    finally:
        nginx.stop()
        hub.stop()
        lab.down()
        shutil.rmtree(work, ignore_errors=True)
    fast = [r for r in rows if r[0] == "provision"]
    slow = [r for r in rows if r[0] == "sequential"]
    limit = statistics.median(r[3] for r in rows)
    print(f"median: limit {limit:.2f} s | provision {statistics.median(r[1] for r in fast):.2f} s "
          f"({statistics.median(r[1] / r[3] for r in fast):.2f}x the limit) | sequential "
          f"{statistics.median(r[1] for r in slow):.2f} s "
          f"({statistics.median(r[1] / r[3] for r in slow):.2f}x the limit) "
          f"| sequential / provision {statistics.median(s[1] / f[1] for s, f in zip(slow, fast, strict=False)):.2f}x")


if __name__ == "__main__":
    main()
