"""Fleet rollout: serial batches stop when too many hosts of a batch fail."""

from __future__ import annotations

import pytest

from tests.e2e.helpers import provision

pytestmark = pytest.mark.lab


def test_serial_rollout_stops_after_a_failed_batch(lab, tmp_path):
    hosts = lab.new_hosts(3, prefix="roll")
    broken = hosts[0]
    broken.exec("mkdir -p /etc/docker && echo '{not json' > /etc/docker/daemon.json")
    inventory = lab.write_inventory(tmp_path / "inventory.yaml", hosts)
    run = provision("up", str(inventory), "--tags", "docker", "--check", "--serial", "1,100%",
                    "--max-fail-percent", "0", json_path=tmp_path / "out.json")
    assert run.returncode == 1
    assert "stopping the rollout" in run.output
    assert run.results["aborted"]
    failed = run.host(broken.name)
    assert failed["failed"] == 1
    error = next(t["error"] for t in failed["tasks"] if t["error"])
    assert "/etc/docker/daemon.json" in error and broken.name in error
    for host in hosts[1:]:
        assert run.host(host.name)["tasks"] == [], "a host after the failed batch was touched"


def test_without_a_limit_a_batch_that_partly_fails_does_not_stop_the_others(lab, tmp_path):
    hosts = lab.new_hosts(2, prefix="roll")
    hosts[0].exec("mkdir -p /etc/docker && echo '{not json' > /etc/docker/daemon.json")
    inventory = lab.write_inventory(tmp_path / "inventory.yaml", hosts)
    run = provision("up", str(inventory), "--tags", "docker", "--check", json_path=tmp_path / "out.json")
    assert run.returncode == 1 and not run.results["aborted"]
    assert run.host(hosts[0].name)["failed"] == 1
    assert run.host(hosts[1].name)["failed"] == 0 and run.host(hosts[1].name)["changed"] > 0
