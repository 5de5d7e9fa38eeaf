"""Connections started before the runner is imported (runner/connect.py): each handed once to the
host's first open, its failure reported as that host's, and those never taken closed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from provision.connection.local import LocalConnection
from provision.errors import HostUnreachable
from provision.inventory.loader import load_inventory
from provision.playbook.loader import load_playbook
from provision.runner.connect import EarlyConnections, first_batch
from provision.runner.events import SilentReporter
from provision.runner.host_run import RunOptions
from provision.runner.runner import RunConfig, Runner
from tests.unit.test_runner_local import project, write  # noqa: F401  (the local project fixture)


class Opened(LocalConnection):
    closed = 0

    def close(self) -> None:
        Opened.closed += 1
        super().close()


def test_the_run_uses_the_connection_started_early_and_opens_no_other(project: Path):  # noqa: F811
    inventory = load_inventory(project / "inventory.yaml")
    plays = load_playbook(project / "playbooks/site.yaml")
    opened: list[str] = []

    def open_host(host):
        opened.append(host.name)
        return Opened(host.name, become=False).open()

    early = EarlyConnections(first_batch(inventory, plays, inventory.hosts, None), open_host)
    config = RunConfig(options=RunOptions(handlers_dir=str(project / "handlers")), lock=False)
    result = Runner(inventory, config, SilentReporter(), early).run(plays)
    early.close_unused()
    assert result.ok and opened == ["here"]
    assert early.take("here") is None  # handed once
    assert (project / "target" / "app.conf").exists()


def test_a_failed_early_connection_is_the_hosts_error(project: Path):  # noqa: F811
    inventory = load_inventory(project / "inventory.yaml")
    plays = load_playbook(project / "playbooks/site.yaml")

    def refuse(host):
        raise HostUnreachable(f"{host.name}: cannot connect to 10.0.0.9:22 after 4 attempts: refused")

    early = EarlyConnections(inventory.hosts, refuse)
    result = Runner(inventory, RunConfig(lock=False), SilentReporter(), early).run(plays)
    host = result.document()["hosts"]["here"]
    assert host["unreachable"] and "cannot connect to 10.0.0.9:22" in host["error"]


def test_connections_nobody_took_are_closed_even_when_still_connecting(project: Path):  # noqa: F811
    inventory = load_inventory(project / "inventory.yaml")
    release = threading.Event()
    Opened.closed = 0

    def slow(host):
        release.wait(5)
        return Opened(host.name, become=False).open()

    early = EarlyConnections(inventory.hosts, slow)
    early.close_unused()  # the run ended (an input error, Ctrl-C) before anyone asked
    release.set()
    deadline = time.monotonic() + 5
    while Opened.closed == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert Opened.closed == 1


def test_only_the_first_batch_of_the_first_play_with_hosts_is_started(tmp_path: Path):
    write(tmp_path / "inventory.yaml", """
        all:
          hosts:
            a: {ansible_connection: local}
            b: {ansible_connection: local}
            c: {ansible_connection: local}
          children:
            gpu: {hosts: {c: {}}}
    """)
    write(tmp_path / "roles/r/tasks.yaml", """
        - name: t
          command: {cmd: "true"}
    """)
    write(tmp_path / "playbooks/site.yaml", """
        - name: none of them
          hosts: nothing_here
          roles: [r]
        - name: rollout
          hosts: all
          serial: 2
          roles: [r]
    """)
    inventory = load_inventory(tmp_path / "inventory.yaml")
    plays = load_playbook(tmp_path / "playbooks/site.yaml")
    assert [h.name for h in first_batch(inventory, plays, inventory.hosts, None)] == ["a", "b"]
    assert [h.name for h in first_batch(inventory, plays, inventory.hosts, [1])] == ["a"]
    assert first_batch(inventory, plays[:1], inventory.hosts, None) == []


@pytest.fixture(autouse=True)
def _no_leftover_threads():
    yield
    for thread in threading.enumerate():
        if thread.name.startswith("connect-"):
            thread.join(5)
