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
Usage: benchmarks/noop_rerun.py [--hosts 1,5,10,20] [--repeat 5]
       [--tools provision,pyinfra,ansible-tuned,ansible-default,floor] [--startup-only]
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

from tests.lab import Lab  # noqa: E402

BIN = Path(sys.executable).parent
EXECUTABLES = {"provision": "provision", "pyinfra": "pyinfra", "ansible-tuned": "ansible-playbook",
               "ansible-default": "ansible-playbook", "floor": "python"}

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

    def __init__(self, work: Path, lab: Lab) -> None:
        self.work = work
        self.lab = lab
        self.trips: dict[int, float] = {}

    def provision(self, inventory: Path, count: int) -> float:
        results = self.work / "results.json"
        argv = [str(BIN / "provision"), "up", str(inventory), "--tags", "docker", "--json-file", str(results)]
        elapsed, _ = run(argv)
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
        return {"provision": self.provision, "pyinfra": self.pyinfra, "floor": self.floor,
                "ansible-tuned": lambda inv, n: self.ansible(inv, n, tuned=True),
                "ansible-default": lambda inv, n: self.ansible(inv, n, tuned=False)}

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


def report(rows: list[tuple[int, dict[str, list[float]], float]], tools: list[str]) -> None:
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


def compile_like_an_install() -> None:
    """Byte-compile provision's modules, as `pip install` of the wheel does: the peers' are compiled
    at install, and an editable install under PYTHONDONTWRITEBYTECODE=1 (set on the lab machine)
    would compile ~80 modules again in every timed run (~45 ms there)."""
    import provision

    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(provision.__file__).parent)], check=True,
                   env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""}, stdout=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1,5", help="host counts to measure (comma-separated)")
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds per host count (median)")
    parser.add_argument("--tools", default=",".join(EXECUTABLES), help=f"of {', '.join(EXECUTABLES)}")
    parser.add_argument("--startup-only", action="store_true", help="print the CLIs' start-up times; no lab")
    args = parser.parse_args()
    counts = [int(n) for n in args.hosts.split(",")]
    tools = ["provision"] + [t for t in args.tools.split(",") if t != "provision"]
    missing = [t for t in tools if t != "floor" and not (BIN / EXECUTABLES[t]).exists()]
    if missing:
        raise SystemExit(f"not installed beside this Python: {', '.join(missing)} (pip install -e '.[bench]')")
    compile_like_an_install()
    print("start-up, `--version`, median of 10:")
    for name in dict.fromkeys(EXECUTABLES[t] for t in tools if t != "floor"):
        if (BIN / name).exists():
            print(f"  {name:17} {startup([str(BIN / name), '--version']) * 1000:5.0f} ms")
    print(f"  {'python -c pass':17} {startup([sys.executable, '-c', 'pass']) * 1000:5.0f} ms")
    if args.startup_only:
        return
    work = Path(tempfile.mkdtemp(prefix="plab-bench-", dir="/var/tmp"))
    lab = Lab(work / "lab", log=lambda _: None)
    bench = Bench(work, lab)
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
    report(rows, tools)


if __name__ == "__main__":
    main()
