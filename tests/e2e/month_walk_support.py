"""What the month walks (test_month_two.py, test_month_two_debian.py) share: commands run on the laptop,
its reboot, `provision up` as a named step of the walk, and the timing of each step."""

from __future__ import annotations

import time
from pathlib import Path

from tests.e2e.helpers import Run, provision, sh
from tests.lab import LabHost

# what apt-daily.service and apt-daily-upgrade.service run (apt.systemd.daily: update, then unattended-upgrade)
UNATTENDED_UPGRADES = "apt-get update -qq && unattended-upgrade -v"
SMI = "nvidia-smi --query-gpu=driver_version --format=csv,noheader"
BOOT_ID = "cat /proc/sys/kernel/random/boot_id"


def model_started(host: LabHost) -> str:
    return sh(host, "docker inspect -f '{{.State.StartedAt}}' vllm")


def reboot(host: LabHost) -> None:
    """`systemctl reboot` inside; the lab's supervisor starts the host again (tests/lab/supervisor.py)."""
    started = host.container.attrs["State"]["StartedAt"]
    host.exec("systemctl reboot")
    deadline = time.monotonic() + 90
    while host.container.attrs["State"]["StartedAt"] == started:
        assert time.monotonic() < deadline, "the host did not come back after the reboot"
        time.sleep(0.3)
    host.wait_for_ssh()
    host.exec("systemctl is-system-running --wait")


class Timer:
    """Seconds since the walk started, marked at each step (printed at the end of the walk: CI time matters)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.timings: list[str] = []

    def mark(self, step: str) -> None:
        self.timings.append(f"{step} {time.monotonic() - self.started:.0f} s")

    def __str__(self) -> str:
        return ", ".join(self.timings)


def up(inventory: Path, host: LabHost, tmp: Path, name: str, timer: Timer) -> Run:
    """`provision up INVENTORY` as step NAME of the walk: its output kept under TMP, its changed tasks on
    HOST printed (the last of its output too when it fails), the step's time marked."""
    run = provision("up", str(inventory), json_path=tmp / f"{name}.json")
    (tmp / f"{name}.out").write_text(run.output)
    changed = run.changed_tasks(host.name) if run.results else "-"
    print(f"\n--- {name}: exit {run.returncode}, changed: {changed}")
    if run.returncode:
        print(run.output[-2500:])
    timer.mark(name)
    return run
