"""`provision up` with the docker role on fresh lab hosts: check mode, converge, rerun, recap."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.helpers import Run, provision, tiny_image

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def fleet(lab, tmp_path_factory):
    """Three fresh hosts: --check, the first run and the rerun, with their results."""
    tmp = tmp_path_factory.mktemp("fleet")
    hosts = lab.new_hosts(3, prefix="dock")
    registry = lab.registry.address_for_hosts
    inventory = lab.write_inventory(tmp / "inventory.yaml", hosts, docker_insecure_registries=[registry])
    check = provision("up", str(inventory), "--tags", "docker", "--check", json_path=tmp / "check.json")
    untouched = {h.name: h.exec("test -e /etc/docker/daemon.json || dpkg -s docker.io")[0] for h in hosts}
    first = provision("up", str(inventory), "--tags", "docker", json_path=tmp / "first.json")
    second = provision("up", str(inventory), "--tags", "docker", json_path=tmp / "second.json")
    return {"hosts": hosts, "inventory": inventory, "check": check, "untouched": untouched,
            "first": first, "second": second, "tmp": tmp, "registry": registry}


def test_check_mode_changes_nothing(fleet):
    check: Run = fleet["check"]
    assert check.returncode == 0, check.output
    assert all(rc != 0 for rc in fleet["untouched"].values()), "check mode wrote to a host"


def test_check_mode_predicts_the_first_run_exactly(fleet):
    for host in fleet["hosts"]:
        assert fleet["check"].changed_tasks(host.name) == fleet["first"].changed_tasks(host.name)
        assert fleet["first"].changed_tasks(host.name), "a fresh host must need changes"


def test_first_run_converges_every_host(fleet):
    first: Run = fleet["first"]
    assert first.returncode == 0, first.output
    for host in fleet["hosts"]:
        assert host.exec("systemctl is-active docker")[1].strip() == "active"
        assert host.exec("systemctl is-enabled docker")[1].strip() == "enabled"
        rc, daemon_json = host.exec("cat /etc/docker/daemon.json")
        assert rc == 0 and '"log-driver": "json-file"' in daemon_json
        assert '"max-concurrent-downloads": 6' in daemon_json
        assert fleet["registry"] in daemon_json
    assert "PLAY RECAP" in first.stdout


def test_rerun_changes_nothing(fleet):
    second: Run = fleet["second"]
    assert second.returncode == 0, second.output
    for host in fleet["hosts"]:
        counts = second.host(host.name)
        assert counts["changed"] == 0 and counts["failed"] == 0 and counts["unreachable"] == 0
        # a converged host: the connection, then the facts and every task's state in one round trip
        assert counts["round_trips"] == 2


def test_json_results_document(fleet):
    results = fleet["first"].results
    host = results["hosts"][fleet["hosts"][0].name]
    assert set(host) >= {"ok", "changed", "failed", "skipped", "unreachable", "elapsed", "tasks"}
    task = host["tasks"][0]
    assert set(task) >= {"name", "status", "changed", "elapsed", "error"}


def test_engine_pulls_from_the_configured_registry(fleet, lab):
    image = tiny_image(lab, fleet["tmp"])
    host = fleet["hosts"][0]
    rc, out = host.exec(f"docker run --rm {image} echo pulled-and-ran")
    assert rc == 0 and "pulled-and-ran" in out, out


def test_daemon_json_is_merged_not_overwritten(fleet):
    host = fleet["hosts"][1]
    host.exec("""python3 - <<'EOF'
import json
path = "/etc/docker/daemon.json"
data = json.load(open(path))
data["debug"] = True
data["insecure-registries"].append("mirror.example:5000")
json.dump(data, open(path, "w"))
EOF""")
    run = provision("up", str(fleet["inventory"]), "--tags", "docker", "--limit", host.name,
                    json_path=fleet["tmp"] / "merge.json")
    assert run.returncode == 0, run.output
    assert run.changed_tasks(host.name) == [], "the user's own settings are kept; nothing to merge"
    daemon_json = host.exec("cat /etc/docker/daemon.json")[1]
    assert '"debug": true' in daemon_json and "mirror.example:5000" in daemon_json


def test_changed_setting_restarts_docker_once(fleet):
    host = fleet["hosts"][2]
    before = host.exec("systemctl show -p ExecMainStartTimestampMonotonic docker")[1]
    run = provision("up", str(fleet["inventory"]), "--tags", "docker", "--limit", host.name, "-e",
                    '{"docker_daemon_config": {"log-driver": "local"}}', json_path=fleet["tmp"] / "change.json")
    assert run.returncode == 0, run.output
    assert run.changed_tasks(host.name) == ["daemon.json settings merged", "restart docker"]
    after = host.exec("systemctl show -p ExecMainStartTimestampMonotonic docker")[1]
    assert before != after
    assert '"log-driver": "local"' in host.exec("cat /etc/docker/daemon.json")[1]


def test_rollout_can_be_limited(fleet):
    run = provision("up", str(fleet["inventory"]), "--tags", "docker", "--limit", fleet["hosts"][0].name, "--check",
                    json_path=Path(fleet["tmp"]) / "limit.json")
    assert list(run.results["hosts"]) == [fleet["hosts"][0].name]
