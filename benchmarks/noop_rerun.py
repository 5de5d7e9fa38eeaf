#!/usr/bin/env python3
"""Converged-rerun cost of the docker role on 1 and on N lab hosts, beside pyinfra and ansible-core.

Starts its own lab, converges the hosts once with `provision up --tags docker`, gives each other tool
one warm-up run (ansible installs python3-apt on its first), then times reruns that have nothing to
do, the tools alternating (the order rotates every round) so a busy machine weighs on all alike:
  - `provision up` (wall time; remote round trips per host from the results document; changed must be 0);
  - `pyinfra` with the same state (directory, daemon.json, docker.io present, docker enabled+running);
  - `ansible-playbook` with the same tasks, tuned (pipelining, no fact gathering, forks = hosts) and
    with its defaults (fact gathering, no pipelining, 5 forks); each run cold (its own ControlPath
    folder, so no SSH master survives from the previous run, as none does for provision); its recap
    must say changed=0.
  - the paramiko floor: a fresh Python that imports paramiko, opens one connection per host (all at
    once, in threads) and runs one exec of the same state check (the four tasks' reads) on each: what
    any Python tool over SSH must pay at least.
Prints medians, the ratio tool/provision (median of the per-round ratios; the floor's ratio is
provision/floor) and each CLI's start-up time (`--version`, median of 10). The other tools come with
`pip install -e '.[bench]'`.

`--host-cpu` measures, instead of wall time, the CPU each run costs the lab hosts (their containers'
cgroup `cpuacct.usage` before and after the run, per host): stable where wall time on a busy machine
is not, and what the hosts' side of the floor is made of. `--base DIR` adds `provision-base`, the
provision source tree in DIR (e.g. `git archive main | tar -x -C DIR`) run by the same Python, so the
code before and after a change alternate in one run.
Usage: benchmarks/noop_rerun.py [--hosts 1,5,10,20] [--repeat 5] [--host-cpu] [--base DIR]
       [--tools provision,pyinfra,ansible-tuned,ansible-default,floor,provision-check] [--startup-only]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.cpu_use import cpu_usage_file  # noqa: E402
from tests.lab import Lab  # noqa: E402

BIN = Path(sys.executable).parent
EXECUTABLES = {"provision": "provision", "pyinfra": "pyinfra", "ansible-tuned": "ansible-playbook",
               "ansible-default": "ansible-playbook", "floor": "python", "provision-check": "provision",
               "provision-base": "python"}

# the floor's per-host exec: what the docker role's four tasks read, as one script
STATE_CHECK = ("stat -c '%F %a %U %G' /etc/docker; sha256sum /etc/docker/daemon.json; "
               "dpkg-query -W -f='${Status} ${Version}\\n' docker.io; "
               "systemctl show -p LoadState,ActiveState,SubState,UnitFileState docker")
FLOOR = """
import sys, threading, paramiko
key, known_hosts, ports, script = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4]
def one(port):
    client = paramiko.SSHClient()
    client.load_host_keys(known_hosts)
    client.connect("127.0.0.1", port=int(port), username="root", key_filename=key, look_for_keys=False,
                   allow_agent=False)
    _, out, _ = client.exec_command(script)
    out.read()
    assert out.channel.recv_exit_status() == 0
    client.close()
threads = [threading.Thread(target=one, args=(port,)) for port in ports]
for thread in threads: thread.start()
for thread in threads: thread.join()
"""

ANSIBLE_PLAYBOOK = """
- hosts: all
  gather_facts: {gather}
  tasks:
    - name: /etc/docker
      file: {{path: /etc/docker, state: directory, mode: "0755"}}
    - name: daemon.json
      copy: {{dest: /etc/docker/daemon.json, content: "{{{{ lookup('file', 'daemon.json') }}}}\\n"}}
    - name: docker.io installed
      apt: {{name: docker.io, state: present}}
    - name: docker running
      service: {{name: docker, state: started, enabled: true}}
"""

PYINFRA_DEPLOY = """
from io import StringIO
from pathlib import Path

from pyinfra.operations import apt, files, systemd

files.directory(name="/etc/docker", path="/etc/docker", mode="755")
files.put(name="daemon.json", src=StringIO(Path(__file__).with_name("daemon.json").read_text() + "\\n"),
          dest="/etc/docker/daemon.json")
apt.packages(name="docker.io installed", packages=["docker.io"])
systemd.service(name="docker running", service="docker", running=True, enabled=True)
"""


def run(argv: list[str], env: dict[str, str] | None = None, cwd: Path = REPO) -> tuple[float, str]:
    """Wall time and stdout of a command that must succeed."""
    started = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return elapsed, done.stdout


def startup(argv: list[str], runs: int = 10) -> float:
    """Median wall time of `argv` (a `--version`), after one untimed run."""
    run(argv)
    return statistics.median(run(argv)[0] for _ in range(runs))


class Bench:
    """One lab, one inventory per host count; each tool's converged rerun as a timed callable."""

    def __init__(self, work: Path, lab: Lab, host_cpu: bool = False, base: Path | None = None) -> None:
        self.work = work
        self.lab = lab
        self.trips: dict[int, float] = {}
        self.host_cpu = host_cpu
        self.base = base

    def provision(self, inventory: Path, count: int, check: bool = False, base: bool = False) -> float:
        results = self.work / "results.json"
        command = [sys.executable, "-m", "provision"] if base else [str(BIN / "provision")]
        argv = [*command, "up", str(inventory), "--tags", "docker", "--json-file", str(results)]
        # the base tree's folder as the working directory too: `python -m` puts it first on sys.path,
        # so from this repository's folder the base run would import this tree, not the base; and a
        # controller cache of its own: a run prefetches the probes its last run used (probe memory),
        # and the other tree's snippets differ, so sharing one would make each run read both trees'
        elapsed, _ = run(argv + (["--check"] if check else []),
                         env={"PYTHONPATH": str(self.base), "PROVISION_CACHE_DIR": str(self.work / "base-cache")}
                         if base and self.base else None,
                         cwd=self.base if base and self.base else REPO)
        if check or base:
            return elapsed
        hosts = json.loads(results.read_text())["hosts"].values()
        changed = sum(h["changed"] for h in hosts)
        if changed:
            raise SystemExit(f"the provision rerun changed {changed} tasks: not converged")
        self.trips[count] = statistics.mean(h["round_trips"] for h in hosts)
        return elapsed

    def pyinfra(self, inventory: Path, count: int) -> float:
        elapsed, _ = run([str(BIN / "pyinfra"), "-y", str(self.work / f"pyinfra-{count}.py"),
                          str(self.work / "deploy.py")], cwd=self.work)
        return elapsed

    def ansible(self, inventory: Path, count: int, tuned: bool, first_apply: bool = False) -> float:
        control = Path(tempfile.mkdtemp(prefix="cp-", dir=self.work))  # cold: no master from the last run
        env = {"ANSIBLE_PIPELINING": str(tuned), "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control),
               "ANSIBLE_SSH_ARGS": f"-C -o ControlMaster=auto -o ControlPersist=60s "
                                   f"-o UserKnownHostsFile={self.work / 'known_hosts'}",
               "ANSIBLE_FORKS": str(max(count, 5) if tuned else 5), "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3"}
        playbook = self.work / ("tuned.yml" if tuned else "default.yml")
        elapsed, out = run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook)], env=env, cwd=self.work)
        changed = [int(n) for n in re.findall(r"changed=(\d+)", out)]
        if len(changed) != count or (any(changed) and not first_apply):
            raise SystemExit(f"ansible's rerun was not converged:\n{out[-2000:]}")
        shutil.rmtree(control, ignore_errors=True)
        return elapsed

    def floor(self, inventory: Path, count: int) -> float:
        ports = ",".join(str(host.ssh_port) for host in self.hosts[:count])
        elapsed, _ = run([sys.executable, "-c", FLOOR, str(self.lab.key_file), str(self.work / "known_hosts"),
                          ports, STATE_CHECK])
        return elapsed

    def runners(self) -> dict[str, Callable[[Path, int], float]]:
        runners: dict[str, Callable[[Path, int], float]] = {
            "provision": self.provision, "pyinfra": self.pyinfra, "floor": self.floor,
            "ansible-tuned": lambda inv, n: self.ansible(inv, n, tuned=True),
            "ansible-default": lambda inv, n: self.ansible(inv, n, tuned=False),
            "provision-check": lambda inv, n: self.provision(inv, n, check=True),
            "provision-base": lambda inv, n: self.provision(inv, n, base=True)}
        if not self.host_cpu:
            return runners
        return {tool: self.on_host_cpu(timed) for tool, timed in runners.items()}

    def on_host_cpu(self, timed: Callable[[Path, int], float]) -> Callable[[Path, int], float]:
        """`timed`, measured as the CPU seconds it cost each of the hosts (the mean over them)."""
        def measured(inventory: Path, count: int) -> float:
            files = [cpu_usage_file(host.container.attrs["State"]["Pid"]) for host in self.hosts[:count]]
            before = [int(f.read_text()) for f in files]
            timed(inventory, count)
            after = [int(f.read_text()) for f in files]
            return statistics.mean(b - a for a, b in zip(before, after, strict=True)) / 1e9
        return measured

    def write_tool_files(self, hosts, count: int) -> None:
        """daemon.json as provision wrote it, the pyinfra inventory of `count` hosts, the playbooks."""
        self.hosts = hosts
        daemon_json = hosts[0].exec("cat /etc/docker/daemon.json")[1].rstrip("\n")
        (self.work / "daemon.json").write_text(daemon_json)
        (self.work / "deploy.py").write_text(PYINFRA_DEPLOY)
        (self.work / "tuned.yml").write_text(ANSIBLE_PLAYBOOK.format(gather="false"))
        (self.work / "default.yml").write_text(ANSIBLE_PLAYBOOK.format(gather="true"))
        data = {"ssh_user": "root", "ssh_key": str(self.lab.key_file), "ssh_hostname": "127.0.0.1",
                "ssh_known_hosts_file": str(self.work / "known_hosts"), "ssh_strict_host_key_checking": "yes"}
        entries = ", ".join(f"({h.name!r}, {{**DATA, 'ssh_port': {h.ssh_port}}})" for h in hosts[:count])
        (self.work / f"pyinfra-{count}.py").write_text(f"DATA = {data!r}\nhosts = [{entries}]\n")


def measure(bench: Bench, inventory: Path, count: int, tools: list[str], repeat: int) -> dict[str, list[float]]:
    """Each tool's rerun times, `repeat` rounds, the order rotating every round."""
    runners = bench.runners()
    for tool in tools:  # warm-up: converge what the tool itself considers its state
        runners[tool](inventory, count)
    times: dict[str, list[float]] = {tool: [] for tool in tools}
    for round_number in range(repeat):
        shift = round_number % len(tools)
        for tool in tools[shift:] + tools[:shift]:
            times[tool].append(runners[tool](inventory, count))
    return times


def report(rows: list[tuple[int, dict[str, list[float]], float]], tools: list[str], host_cpu: bool = False) -> None:
    if host_cpu:
        report_host_cpu(rows, tools)
        return
    header = f"{'hosts':>5}  {'trips/host':>10}" + "".join(f"  {tool:>22}" for tool in tools)
    print(header)
    for count, times, trips in rows:
        cells = []
        for tool in tools:
            median = statistics.median(times[tool])
            if tool == "provision":
                cells.append(f"{median:8.2f} s{'':>13}")
            elif tool == "floor":
                ratio = statistics.median(p / f for f, p in zip(times[tool], times["provision"], strict=True))
                cells.append(f"{median:8.2f} s ({ratio:5.2f}x)")
            else:
                ratio = statistics.median(t / p for t, p in zip(times[tool], times["provision"], strict=True))
                cells.append(f"{median:8.2f} s ({ratio:5.2f}x)")
        print(f"{count:>5}  {trips:10.1f}" + "".join(f"  {cell:>22}" for cell in cells))
    print("(x: that tool's time / provision's, median of the per-round ratios; >1 means provision is faster;\n"
          " floor: provision's time / the floor's, how far provision is above one connection + one exec)")


def report_host_cpu(rows: list[tuple[int, dict[str, list[float]], float]], tools: list[str]) -> None:
    """Host CPU per host and run, ms: median [min-max], and each tool's median ratio to the floor's."""
    print(f"{'hosts':>5}" + "".join(f"  {tool:>26}" for tool in tools))
    for count, times, _ in rows:
        cells = []
        for tool in tools:
            values = [t * 1000 for t in times[tool]]
            cell = f"{statistics.median(values):5.1f} [{min(values):3.0f}-{max(values):3.0f}] ms"
            if "floor" in times and tool != "floor":
                ratio = statistics.median(t / f for t, f in zip(times[tool], times["floor"], strict=True))
                cell += f" {ratio:4.2f}x"
            cells.append(cell)
        print(f"{count:>5}" + "".join(f"  {cell:>26}" for cell in cells))
    print("(host CPU of one run per host, ms: median [min-max]; x: that run's / the floor's in the same round,\n"
          " median of the rounds; the floor is one paramiko connection + one exec of the state check)")


def compile_like_an_install(base: Path | None = None) -> None:
    """Byte-compile provision's modules (and the base tree's), as `pip install` of the wheel does: the
    peers' are compiled at install, and an editable install under PYTHONDONTWRITEBYTECODE=1 (set on
    the lab machine) would compile ~80 modules again in every timed run (~45 ms there)."""
    import provision

    for folder in [Path(provision.__file__).parent, *([base / "provision"] if base else [])]:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(folder)], check=True,
                       env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""}, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,5", help="host counts to measure (comma-separated)")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds per host count (median)")
    parser.add_argument("--tools", default=",".join(EXECUTABLES), help=f"of {', '.join(EXECUTABLES)}")
    parser.add_argument("--startup-only", action="store_true", help="print the CLIs' start-up times; no lab")
    parser.add_argument("--host-cpu", action="store_true", help="measure the hosts' CPU per run, not wall time")
    parser.add_argument("--base", type=Path, help="a provision source tree to compare (tool provision-base)")
    args = parser.parse_args()
    counts = [int(n) for n in args.hosts.split(",")]
    tools = ["provision"] + [t for t in args.tools.split(",") if t != "provision"]
    if args.base and "provision-base" not in tools:
        tools.append("provision-base")
    missing = [t for t in tools if EXECUTABLES[t] != "python" and not (BIN / EXECUTABLES[t]).exists()]
    if missing:
        raise SystemExit(f"not installed beside this Python: {', '.join(missing)} (pip install -e '.[bench]')")
    compile_like_an_install(args.base)
    print("start-up, `--version`, median of 10:")
    for name in dict.fromkeys(EXECUTABLES[t] for t in tools if EXECUTABLES[t] != "python"):
        if (BIN / name).exists():
            print(f"  {name:17} {startup([str(BIN / name), '--version']) * 1000:5.0f} ms")
    print(f"  {'python -c pass':17} {startup([sys.executable, '-c', 'pass']) * 1000:5.0f} ms")
    if args.startup_only:
        return
    work = Path(tempfile.mkdtemp(prefix="plab-bench-", dir="/var/tmp"))
    lab = Lab(work / "lab", log=lambda _: None)
    bench = Bench(work, lab, host_cpu=args.host_cpu, base=args.base)
    rows = []
    try:
        lab.start()
        hosts = lab.new_hosts(max(counts), prefix="bench")
        registry = lab.registry.address_for_hosts
        for count in counts:
            inventory = lab.write_inventory(work / f"inventory-{count}.yaml", hosts[:count],
                                            docker_insecure_registries=[registry])
            run([str(BIN / "provision"), "up", str(inventory), "--tags", "docker"])  # converge
            bench.write_tool_files(hosts, count)
            times = measure(bench, inventory, count, tools, args.repeat)
            rows.append((count, times, bench.trips[count]))
            print(f"{count} hosts: " + json.dumps({t: [round(x, 3) for x in v] for t, v in times.items()}), flush=True)
    finally:
        lab.down()
        shutil.rmtree(work, ignore_errors=True)
    report(rows, tools, args.host_cpu)


if __name__ == "__main__":
    main()
