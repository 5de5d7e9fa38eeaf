#!/usr/bin/env python3
"""First apply of the docker role on fresh lab hosts, beside pyinfra and ansible-core doing the same.

Each timed run gets its own fresh hosts (a first apply changes them), started before the clock runs:
  - `provision up --tags docker` (wall time; changed must be > 0, the rerun's figures are
    benchmarks/noop_rerun.py's);
  - `pyinfra` with the same state (directory, daemon.json as provision writes it, docker.io present,
    docker enabled and running);
  - `ansible-playbook` with the same tasks, tuned (pipelining, no fact gathering, forks = hosts) and
    with its defaults; each cold (its own ControlPath folder). Its first apt task installs python3-apt
    on the host, as it does on a real first run.
The tools alternate (the order rotates every round). Most of a first apply is apt downloading and
installing docker.io from the lab's Debian mirror, the same bytes for every tool: the ratios show what
each tool adds on top. Prints medians and the ratio tool/provision (median of the per-round ratios).
Usage: benchmarks/first_apply.py [--hosts 1,5] [--repeat 3] [--tools provision,pyinfra,ansible-tuned,ansible-default]
With `--site`: the whole site on one throttled lab laptop against the link's limit, and in task order
(benchmarks/site_first_apply.py):
  benchmarks/first_apply.py --site [--weights-mib 256] [--image-mib 256] [--per-host-mbit 200] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from noop_rerun import BIN, EXECUTABLES, Bench, run
from site_first_apply import add_arguments, site_main

from tests.lab import Lab

TOOLS = ("provision", "pyinfra", "ansible-tuned", "ansible-default")


class FirstApply(Bench):
    """Bench's tool files, with a first apply (fresh hosts each time) as the timed callable."""

    def fresh_inventory(self, count: int, tool: str, round_number: int) -> Path:
        hosts = self.lab.new_hosts(count, prefix=f"f{round_number}{tool[:3]}")
        inventory = self.lab.write_inventory(self.work / f"first-{tool}-{round_number}.yaml", hosts,
                                             docker_insecure_registries=[self.lab.registry.address_for_hosts])
        data = {"ssh_user": "root", "ssh_key": str(self.lab.key_file), "ssh_hostname": "127.0.0.1",
                "ssh_known_hosts_file": str(self.work / "known_hosts"), "ssh_strict_host_key_checking": "yes"}
        entries = ", ".join(f"({h.name!r}, {{**DATA, 'ssh_port': {h.ssh_port}}})" for h in hosts)
        (self.work / f"pyinfra-{count}.py").write_text(f"DATA = {data!r}\nhosts = [{entries}]\n")
        self.fresh = hosts
        return inventory

    def first_provision(self, inventory: Path, count: int) -> float:
        results = self.work / "results.json"
        argv = [str(BIN / "provision"), "up", str(inventory), "--tags", "docker", "--json-file", str(results)]
        elapsed, _ = run(argv)
        if not all(h["changed"] for h in json.loads(results.read_text())["hosts"].values()):
            raise SystemExit("a first provision apply changed nothing: the hosts were not fresh")
        return elapsed



def update_on_first_apply(work: Path) -> None:
    """A fresh host has no apt lists: the other tools are told to update them first, as their users
    would write it for a fresh host (pyinfra `update=True, cache_time`, ansible `update_cache`,
    `cache_valid_time`); provision's apt operation updates stale lists by itself."""
    deploy = work / "deploy.py"
    deploy.write_text(deploy.read_text().replace('packages=["docker.io"]',
                                                 'packages=["docker.io"], update=True, cache_time=3600'))
    for playbook in (work / "tuned.yml", work / "default.yml"):
        playbook.write_text(playbook.read_text().replace(
            "apt: {name: docker.io, state: present}",
            "apt: {name: docker.io, state: present, update_cache: true, cache_valid_time: 3600}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1", help="host counts to measure (comma-separated)")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds per host count (median)")
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"of {', '.join(TOOLS)}")
    add_arguments(parser)
    args = parser.parse_args()
    if args.site:
        site_main(args)
        return
    counts = [int(n) for n in args.hosts.split(",")]
    tools = ["provision"] + [t for t in args.tools.split(",") if t != "provision"]
    missing = [t for t in tools if not (BIN / EXECUTABLES[t]).exists()]
    if missing:
        raise SystemExit(f"not installed beside this Python: {', '.join(missing)} (pip install -e '.[bench]')")
    work = Path(tempfile.mkdtemp(prefix="plab-first-", dir="/var/tmp"))
    lab = Lab(work / "lab", log=lambda _: None)
    bench = FirstApply(work, lab)
    rows = []
    try:
        lab.start()
        (model,) = lab.new_hosts(1, prefix="fmodel")  # daemon.json as provision writes it, for the others
        inventory = lab.write_inventory(work / "model.yaml", [model],
                                        docker_insecure_registries=[lab.registry.address_for_hosts])
        run([str(BIN / "provision"), "up", str(inventory), "--tags", "docker"])
        bench.write_tool_files([model], 1)
        update_on_first_apply(work)
        runners = {"provision": bench.first_provision, "pyinfra": bench.pyinfra,
                   "ansible-tuned": lambda inv, n: bench.ansible(inv, n, tuned=True, first_apply=True),
                   "ansible-default": lambda inv, n: bench.ansible(inv, n, tuned=False, first_apply=True)}
        for count in counts:
            times: dict[str, list[float]] = {tool: [] for tool in tools}
            for round_number in range(args.repeat):
                shift = round_number % len(tools)
                for tool in tools[shift:] + tools[:shift]:
                    fresh = bench.fresh_inventory(count, tool, round_number)
                    times[tool].append(runners[tool](fresh, count))
                    for host in bench.fresh:
                        host.remove()
            rows.append((count, times))
            print(f"{count} hosts: " + json.dumps({t: [round(x, 2) for x in v] for t, v in times.items()}), flush=True)
    finally:
        lab.down()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'hosts':>5}" + "".join(f"  {tool:>22}" for tool in tools))
    for count, times in rows:
        cells = [f"{statistics.median(times['provision']):8.2f} s{'':>13}"]
        for tool in tools[1:]:
            ratio = statistics.median(x / p for x, p in zip(times[tool], times["provision"], strict=True))
            cells.append(f"{statistics.median(times[tool]):8.2f} s ({ratio:5.2f}x)")
        print(f"{count:>5}" + "".join(f"  {cell:>22}" for cell in cells))
    print("(x: that tool's time / provision's, median of the per-round ratios; >1 means provision is faster)")


if __name__ == "__main__":
    main()
