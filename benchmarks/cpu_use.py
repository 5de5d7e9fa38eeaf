"""Where this machine's CPU went during a benchmark's run: sampled from /proc, attributed to the lab hosts.

The lab's hosts are containers on this machine, sharing its cores with each other, with the lab's own
processes (slirp4netns for their networks, the throttle's nginx, the registry, the stand-in hub) and
with the tool itself. A rollout of several hosts can be bound by those cores rather than by the link a
LAN limit counts; this says how much, from what the machine measured, not from a model of it:
  - busy core-seconds over the run (/proc/stat: all but idle and iowait), and so the machine's CPU
    limit for the run: busy / cores, the time no schedule of the same work on these cores can beat;
  - per lab host, its container's cgroup counter (every process it ran, however short-lived);
  - per command, in a host or on this machine: each process's utime + stime from /proc/PID/stat at
    every sample (`interval`), a process first seen counted from its start; a process that started
    and ended between two samples is in its host's counter but not here, so these are at least what
    each command used;
  - busy per `bucket_s` seconds, to read beside the run's timelines.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import docker

HZ = os.sysconf("SC_CLK_TCK")
MACHINE = "(this machine)"


def cpu_usage_file(pid: int) -> Path:
    """The cgroup v1 `cpuacct.usage` of the lab host `pid` runs in (its container's cgroup: the host's
    own services' groups are below it, and the counter includes them)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        container = container_of(line)
        if container and path.startswith("/docker/"):
            path = f"/docker/{container}"
        if "cpuacct" in controllers.split(","):
            for mount in ("cpu,cpuacct", "cpuacct"):
                usage = Path("/sys/fs/cgroup", mount, path.lstrip("/"), "cpuacct.usage")
                if usage.exists():
                    return usage
    raise SystemExit(f"no cgroup v1 cpuacct.usage for pid {pid} (needs cgroup v1's cpuacct)")


def container_id(pid: str) -> str | None:
    """The docker container a process runs in, or None (this machine's own, or gone)."""
    try:
        return container_of(Path(f"/proc/{pid}/cgroup").read_text())
    except OSError:
        return None


def container_of(cgroup: str) -> str | None:
    """The docker container a /proc/PID/cgroup text names: cgroup v1's `/docker/<id>`, v2's `docker-<id>.scope`
    (the systemd cgroup driver's, docs.docker.com/engine/containers/runmetrics/). Per-host counters are read
    on cgroup v1 only (`cpu_usage_file`); on v2 the per-command figures still name the hosts."""
    for line in cgroup.splitlines():
        path = line.split(":", 2)[-1]
        if path.startswith("/docker/"):
            return path.split("/")[2]
        for part in path.split("/"):
            if part.startswith("docker-") and part.endswith(".scope"):
                return part[len("docker-"):-len(".scope")]
    return None


def busy_ticks() -> int:
    """Busy clock ticks of every core since boot (all but idle and iowait), from /proc/stat's first line."""
    with open("/proc/stat") as stat:
        ticks = [int(value) for value in stat.readline().split()[1:]]
    return sum(ticks) - ticks[3] - ticks[4]


def process_ticks(pid: str) -> tuple[str, int, int] | None:
    """(command name, start time, utime + stime ticks) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return text[text.index("(") + 1:text.rindex(")")], int(fields[19]), int(fields[11]) + int(fields[12])


@dataclass
class CpuUse:
    """A sampler thread between `start()` and `stop()`; then the figures of the module's docstring."""
    interval: float = 0.5
    bucket_s: float = 5.0
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    busy_s: float = 0.0
    wall_s: float = 0.0
    per_host: Counter[str] = field(default_factory=Counter)
    per_command: Counter[tuple[str, str]] = field(default_factory=Counter)
    buckets: list[float] = field(default_factory=list)  # busy cores, the mean over each bucket

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._names: dict[str, str] = {}
        self._hosts: dict[str, str | None] = {}  # pid -> container id (None: this machine)
        self._seen: dict[str, tuple[str, int, int]] = {}
        self._usage: dict[str, int] = {}
        self._own_pid = str(os.getpid())

    def start(self) -> CpuUse:
        self._began, self._busy0 = time.monotonic(), busy_ticks()
        self._sample(first=True)
        self._thread.start()
        return self

    def stop(self) -> CpuUse:
        self._stop.set()
        self._thread.join()
        self._sample()
        self.wall_s = time.monotonic() - self._began
        self.busy_s = (busy_ticks() - self._busy0) / HZ
        return self

    @property
    def limit_s(self) -> float:
        """The machine's CPU limit of the run: busy core-seconds over its cores."""
        return self.busy_s / self.cores

    def _run(self) -> None:
        bucket_began, bucket_busy = time.monotonic(), busy_ticks()
        while not self._stop.wait(self.interval):
            self._sample()
            now = time.monotonic()
            if now - bucket_began >= self.bucket_s:
                busy = busy_ticks()
                self.buckets.append((busy - bucket_busy) / HZ / (now - bucket_began))
                bucket_began, bucket_busy = now, busy

    def _host_name(self, container: str | None) -> str:
        if container is None:
            return MACHINE
        if container not in self._names:
            try:
                self._names[container] = docker.from_env().containers.get(container).name
            except docker.errors.DockerException:
                self._names[container] = container[:12]
        return self._names[container]

    def _sample(self, first: bool = False) -> None:
        seen: dict[str, tuple[str, int, int]] = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            ticks = process_ticks(pid)
            if ticks is None:
                continue
            if pid not in self._seen or self._seen[pid][1] != ticks[1]:  # a new process (or a pid taken again)
                self._hosts[pid] = container_id(pid)
            seen[pid] = ticks
            if not first:
                _, started, before = self._seen.get(pid, ticks)
                if pid not in self._seen or started != ticks[1]:  # new, or the pid taken by another process
                    before = 0
                command = "(this benchmark, its sampler)" if pid == self._own_pid else ticks[0]
                self.per_command[(self._host_name(self._hosts[pid]), command)] += (ticks[2] - before) / HZ
        self._seen = seen
        members = {container: pid for pid, container in self._hosts.items() if container and pid in seen}
        for container, pid in members.items():
            self._count_container(container, pid, first)

    def _count_container(self, container: str, pid: str, first: bool) -> None:
        """The container's cgroup counter since the first sample (a host that ended keeps what it had)."""
        try:
            usage = int(cpu_usage_file(int(pid)).read_text())
        except (OSError, SystemExit, ValueError):
            return
        before = self._usage.setdefault(container, usage if first else 0)
        self.per_host[self._host_name(container)] += (usage - before) / 1e9
        self._usage[container] = usage


def describe(use: CpuUse, top: int = 12) -> list[str]:
    """The figures as lines."""
    share = use.busy_s / use.wall_s / use.cores
    lines = [f"this machine's CPU over the run ({use.cores} cores, sampled every {use.interval:g} s): busy "
             f"{use.busy_s:.1f} of {use.wall_s * use.cores:.1f} core-seconds ({share:.0%}); "
             f"the machine's CPU limit (busy / cores) {use.limit_s:.2f} s",
             "  by lab host (its cgroup): " + (", ".join(f"{name} {seconds:.1f} s"
                                                        for name, seconds in use.per_host.most_common())
                                              or "none (no lab host ran, or no cgroup v1 cpuacct counter to read)")]
    in_hosts: Counter[str] = Counter()
    on_machine: Counter[str] = Counter()
    for (host, command), seconds in use.per_command.items():
        (on_machine if host == MACHINE else in_hosts)[command] += seconds
    lines.append("  by command in the hosts (sampled, at least): " + ", ".join(
        f"{command} {seconds:.1f} s" for command, seconds in in_hosts.most_common(top)))
    lines.append("  by command on this machine (the lab's networking and throttle, the tool): " + ", ".join(
        f"{command} {seconds:.1f} s" for command, seconds in on_machine.most_common(top // 2)))
    lines.append(f"  busy cores per {use.bucket_s:g} s: " + " ".join(f"{cores:.1f}" for cores in use.buckets))
    return lines
