"""Read-only tasks through the runner (`Runner.read_each`, what `facts`, `status` and `bench` run on
each host): the run's batches and forks, one connection per host opened as a play's is, each host's
value or its error, and the round trips it took."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from provision.connection.base import Connection
from provision.errors import HostUnreachable
from provision.inventory.loader import load_inventory
from provision.inventory.model import Host, Inventory
from provision.runner.connect import EarlyConnections
from provision.runner.events import SilentReporter
from provision.runner.runner import RunConfig, Runner


def local_inventory(tmp_path: Path, names: list[str]) -> Inventory:
    path = tmp_path / "inventory.yaml"
    hosts = "".join(f"    {name}: {{ansible_connection: local}}\n" for name in names)
    path.write_text(f"all:\n  hosts:\n{hosts}")
    return load_inventory(path)


class Overlap:
    """How many tasks ran at once, at most."""

    def __init__(self) -> None:
        self.lock, self.now, self.most = threading.Lock(), 0, 0

    def task(self, host: Host, conn: Connection) -> str:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.05)
        done = conn.run(f"echo read {host.name}", sudo=False)
        with self.lock:
            self.now -= 1
        return done.stdout.strip()


def test_each_host_is_read_once_in_order_with_its_round_trips(tmp_path: Path) -> None:
    inventory = local_inventory(tmp_path, ["a", "b", "c"])
    overlap = Overlap()
    readings = Runner(inventory, RunConfig(forks=10), SilentReporter()).read_each(inventory.hosts, overlap.task)
    assert list(readings) == ["a", "b", "c"]
    assert [reading.value for reading in readings.values()] == ["read a", "read b", "read c"]
    assert all(reading.error is None and reading.round_trips == 1 for reading in readings.values())
    assert overlap.most == 3  # one batch, every host at once


@pytest.mark.parametrize(("config", "most"), [(RunConfig(forks=10, serial=[1]), 1), (RunConfig(forks=2), 2)])
def test_serial_batches_and_forks_bound_the_hosts_read_at_once(tmp_path: Path, config: RunConfig, most: int) -> None:
    inventory = local_inventory(tmp_path, ["a", "b", "c", "d"])
    overlap = Overlap()
    readings = Runner(inventory, config, SilentReporter()).read_each(inventory.hosts, overlap.task)
    assert len(readings) == 4 and overlap.most == most


def test_an_unreachable_host_and_a_failed_read_are_readings_and_a_bug_is_not(tmp_path: Path) -> None:
    inventory = local_inventory(tmp_path, ["down", "odd", "fine"])

    def refuse(host: Host) -> Connection:
        raise HostUnreachable(f"{host.name}: cannot connect after 4 attempts: connection refused")

    early = EarlyConnections([inventory.host("down")], refuse)  # its connection, started early, failed

    def task(host: Host, conn: Connection) -> str:
        if host.name == "odd":
            raise ValueError("the status script printed no section 'service-status'")
        return conn.run("true", sudo=False).stdout

    readings = Runner(inventory, RunConfig(), SilentReporter(), early).read_each(inventory.hosts, task)
    assert readings["down"].unreachable and "cannot connect after 4 attempts" in str(readings["down"].error)
    assert not readings["odd"].unreachable and readings["odd"].error == \
        "the status script printed no section 'service-status'"
    assert readings["odd"].round_trips == 0 and readings["fine"].error is None

    def bug(host: Host, conn: Connection) -> str:
        raise KeyError("service")

    with pytest.raises(KeyError):
        Runner(inventory, RunConfig(), SilentReporter()).read_each(inventory.hosts[1:], bug)
