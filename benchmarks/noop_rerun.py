#!/usr/bin/env python3
"""Converged-rerun cost of the docker site on 1 and on N lab hosts, beside Ansible doing the same.

Starts its own lab, converges the hosts once, then times reruns that have nothing to do:
  - `provision up` (wall time, and remote round trips per host from the results document);
  - `ansible-playbook` with the equivalent tasks (apt present, directory, daemon.json, service),
    when ansible-core is installed (`pip install ansible-core`), as the comparison run.
Prints a table and the ratio ansible/provision. Usage: benchmarks/noop_rerun.py [--hosts 1,10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.lab import Lab  # noqa: E402

ANSIBLE_PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: /etc/docker
      file: {path: /etc/docker, state: directory, mode: "0755"}
    - name: daemon.json
      copy: {dest: /etc/docker/daemon.json, content: "{{ lookup('file', 'daemon.json') }}\\n"}
    - name: docker.io installed
      apt: {name: docker.io, state: present}
    - name: docker running
      service: {name: docker, state: started, enabled: true}
"""


def timed(argv: list[str], env: dict[str, str] | None = None, cwd: Path = REPO) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return elapsed


def provision_rerun(inventory: Path, results: Path) -> tuple[float, float]:
    elapsed = timed([sys.executable, "-m", "provision", "up", str(inventory), "--tags", "docker",
                     "--json-file", str(results)])
    document = json.loads(results.read_text())
    changed = sum(h["changed"] for h in document["hosts"].values())
    if changed:
        raise SystemExit(f"the rerun changed {changed} tasks: not converged")
    trips = statistics.mean(h["round_trips"] for h in document["hosts"].values())
    return elapsed, trips


def ansible_rerun(work: Path, inventory: Path, hosts) -> float | None:
    if shutil.which("ansible-playbook") is None:
        return None
    host = hosts[0]
    daemon_json = host.exec("cat /etc/docker/daemon.json")[1].rstrip("\n")
    (work / "daemon.json").write_text(daemon_json)
    (work / "site.yml").write_text(ANSIBLE_PLAYBOOK)
    env = {"ANSIBLE_PIPELINING": "False", "ANSIBLE_SSH_ARGS": f"-o UserKnownHostsFile={work / 'known_hosts'}",
           "ANSIBLE_FORKS": "10", "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3"}
    return timed(["ansible-playbook", "-i", str(inventory), str(work / "site.yml")], env=env, cwd=work)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,10", help="host counts to measure (comma-separated)")
    parser.add_argument("--repeat", type=int, default=3, help="reruns timed per measurement (median)")
    args = parser.parse_args()
    counts = [int(n) for n in args.hosts.split(",")]
    work = Path(tempfile.mkdtemp(prefix="plab-bench-", dir="/var/tmp"))
    lab = Lab(work / "lab", log=lambda _: None)
    rows = []
    try:
        lab.start()
        hosts = lab.new_hosts(max(counts), prefix="bench")
        registry = lab.registry.address_for_hosts
        for count in counts:
            inventory = lab.write_inventory(work / f"inventory-{count}.yaml", hosts[:count],
                                            docker_insecure_registries=[registry])
            timed([sys.executable, "-m", "provision", "up", str(inventory), "--tags", "docker"])  # converge
            reruns = [provision_rerun(inventory, work / "results.json") for _ in range(args.repeat)]
            ours = statistics.median(r[0] for r in reruns)
            trips = reruns[0][1]
            theirs_runs = [ansible_rerun(work, inventory, hosts) for _ in range(args.repeat)]
            theirs = statistics.median(theirs_runs) if None not in theirs_runs else None
            rows.append((count, ours, trips, theirs))
    finally:
        lab.down()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'hosts':>5}  {'provision rerun s':>17}  {'round trips/host':>16}  {'ansible rerun s':>15}  {'ratio':>6}")
    for count, ours, trips, theirs in rows:
        ratio = f"{theirs / ours:5.1f}x" if theirs else "   n/a"
        theirs_text = f"{theirs:15.2f}" if theirs else f"{'not installed':>15}"
        print(f"{count:>5}  {ours:17.2f}  {trips:16.1f}  {theirs_text}  {ratio:>6}")


if __name__ == "__main__":
    main()
