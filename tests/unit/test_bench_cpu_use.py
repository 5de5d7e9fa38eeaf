"""benchmarks/cpu_use.py: what it says this machine's CPU went to, against a process whose use is known."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks.cpu_use import MACHINE, CpuUse, container_of

# /proc/PID/cgroup of sshd in a lab host on this machine (cgroup v1; recorded 2026-12-05, lines cut), and
# under cgroup v2 with docker's systemd cgroup driver, which puts a container in
# /sys/fs/cgroup/system.slice/docker-<longid>.scope (docs.docker.com/engine/containers/runmetrics/)
V1 = """9:name=systemd:/docker/a7eb7dde8f95a1f0cd350bad7068ce6752e4c34cf22c0b4e2d326909a3f13c10/system.slice/ssh.service
8:pids:/docker/a7eb7dde8f95a1f0cd350bad7068ce6752e4c34cf22c0b4e2d326909a3f13c10/system.slice/ssh.service
2:cpuacct:/docker/a7eb7dde8f95a1f0cd350bad7068ce6752e4c34cf22c0b4e2d326909a3f13c10
1:cpu:/docker/a7eb7dde8f95a1f0cd350bad7068ce6752e4c34cf22c0b4e2d326909a3f13c10"""
V2 = "0::/system.slice/docker-a7eb7dde8f95a1f0cd350bad7068ce6752e4c34cf22c0b4e2d326909a3f13c10.scope/init.scope"
OWN = "4:memory:/process_api/be362e32\n0::/"


def test_a_process_is_placed_in_its_container_or_on_this_machine() -> None:
    container = "a7eb7dde8f95a1f0cd350bad7068ce6752e4c34cf22c0b4e2d326909a3f13c10"
    assert container_of(V1) == container
    assert container_of(V2) == container
    assert container_of(OWN) is None


def test_a_busy_process_is_counted_by_command_and_in_the_machines_limit() -> None:
    use = CpuUse(interval=0.2, bucket_s=0.5).start()
    subprocess.run([sys.executable, "-c", "import time; end = time.process_time() + 1.0\n"
                    "while time.process_time() < end: pass"], check=True)
    use.stop()
    spent = use.per_command[(MACHINE, Path(sys.executable).name[:15])]  # comm: the name it was run by
    assert 0.8 <= spent <= 1.3, use.per_command
    assert use.busy_s >= 0.9
    assert use.buckets and max(use.buckets) >= 0.5
