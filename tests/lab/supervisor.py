"""The lab's power button: brings a lab host back by itself after a reboot inside it.

A real machine comes back after `reboot`; a container whose systemd rebooted just exits (code 129).
This process follows docker's events for one lab's containers and, when one exits with the reboot
code and the lab did not stop it (no `stopped` marker), starts it again and gives its new network
namespace networking, within about a second. A poweroff inside (code 130) leaves it off, as on a
real machine.

Run as `python -m tests.lab.supervisor LAB_DIR`; `Lab.up()` starts it in its own session.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import docker.errors

from tests.lab.host import LABEL_LAB, REBOOT_EXIT_CODE, LabHost, docker_client


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def bring_back(lab_dir: Path, host_name: str) -> None:
    """Restart `host_name` if it exited because it rebooted, not because the lab stopped it."""
    host_dir = lab_dir / "hosts" / host_name
    if not (host_dir / "host.json").is_file():
        return
    host = LabHost.load(host_dir)
    try:
        state = host.container.attrs["State"]
    except docker.errors.NotFound:
        return
    if state["Running"] or host.stopped_by_lab() or state["ExitCode"] != REBOOT_EXIT_CODE:
        return
    started = time.monotonic()
    host.reboot_restart(wait=False)
    log(f"{host_name}: rebooted, started again in {time.monotonic() - started:.1f} s")


def watch(lab_dir: Path) -> None:
    """Handle reboots that happened while nobody watched, then every container exit as it happens."""
    client = docker_client()
    label = f"{LABEL_LAB}={lab_dir}"
    for container in client.containers.list(all=True, filters={"label": label, "status": "exited"}):
        bring_back(lab_dir, container.labels["provision-lab.host"])
    events = client.events(decode=True, filters={"label": label, "type": "container", "event": "die"})
    for event in events:
        try:
            bring_back(lab_dir, event["Actor"]["Attributes"]["provision-lab.host"])
        except Exception as error:  # one host failing to come back must not stop the others
            log(f"could not bring back {event['Actor']['Attributes'].get('name')}: {error!r}")


def main(argv: list[str]) -> None:
    lab_dir = Path(argv[0]).absolute()
    log(f"watching the containers of the lab in {lab_dir}")
    while True:
        try:
            watch(lab_dir)
        except Exception as error:  # e.g. dockerd restarted: follow it again
            log(f"docker: {error!r}; watching again in 1 s")
        time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1:])
