#!/usr/bin/env python3
"""The weights download on a lab host behind a throttled link, against the link's limit.

The link is set on the lab's network, not in the stand-ins' code:
  - a rate per connection, as the hub's CDN limits one connection: nginx (Debian's nginx-light) in
    front of the stand-in hub with `limit_rate` (nginx.org/en/docs/http/ngx_http_core_module.html
    #limit_rate: "The limit is set per a request"). tc cannot do it here: this kernel has no sch_fq,
    sch_sfq, fq_codel nor netem rate (`tc qdisc add ... fq`: "Specified qdisc kind is unknown"), so no
    per-flow qdisc exists; tbf and htb are there, and limit an aggregate.
  - a rate per host, the laptop's link: in the lab host's network namespace, what arrives on tap0
    (slirp4netns' side) is redirected to an ifb device (ingress qdisc + mirred) whose root qdisc is a
    tbf at that rate. Everything the host receives goes through it (SSH included).
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

NGINX_CONF = """user root;
worker_processes 2;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/body; proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi; uwsgi_temp_path {prefix}/uwsgi; scgi_temp_path {prefix}/scgi;
  server {{
    listen 127.0.0.1:{port};
    location / {{
      limit_rate {rate};
      proxy_pass http://127.0.0.1:{upstream};
      proxy_http_version 1.1;
      proxy_max_temp_file_size 0;
    }}
  }}
}}
"""


def nsenter(pid: int, script: str) -> str:
    done = subprocess.run(["nsenter", "-t", str(pid), "-n", "sh", "-ec", script], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"in the namespace of {pid}: {script}\n{done.stderr}")
    return done.stdout


def throttle_host(pid: int, mbit: int) -> None:
    """What the host receives on tap0 goes through a tbf of `mbit` (ingress -> ifb -> tbf)."""
    nsenter(pid, "ip link add ifb0 type ifb; ip link set ifb0 up; tc qdisc add dev tap0 handle ffff: ingress; "
                 "tc filter add dev tap0 parent ffff: protocol all u32 match u32 0 0 "
                 "action mirred egress redirect dev ifb0; "
                 f"tc qdisc add dev ifb0 root tbf rate {mbit}mbit burst 1mb latency 100ms")


def received(pid: int) -> int:
    """tap0's received bytes (/proc/net/dev is the reader's namespace's; /sys is the mount namespace's)."""
    return int(nsenter(pid, "awk '$1 == \"tap0:\" { print $2 }' /proc/net/dev").strip())


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
    if not shutil.which("nginx"):
        raise SystemExit("nginx is not installed: apt-get install nginx-light")
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
    (work / "nginx").mkdir()
    conf = work / "nginx" / "nginx.conf"
    conf.write_text(NGINX_CONF.format(prefix=work / "nginx", port=port, upstream=hub.server.server_address[1],
                                      rate=f"{args.per_connection_mbit * 125}k"))  # nginx k = 1024 bytes
    nginx = subprocess.Popen(["nginx", "-p", str(work / "nginx"), "-c", str(conf), "-g", "daemon off;"])
    rows: list[tuple[str, float, int, float]] = []
    try:
        lab.start()
        (host,) = lab.new_hosts(1, prefix="lnk")
        pid = host.container.attrs["State"]["Pid"]
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
        nginx.terminate()
        nginx.wait(timeout=10)
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
