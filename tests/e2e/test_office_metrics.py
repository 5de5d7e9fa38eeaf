"""The office's metrics on real lab hosts: `provision up` converges a gateway host (HAProxy, and
Prometheus beside it, both from Debian's archive) and a GPU host running the stand-in vLLM
(tests/standins/vllm, whose /metrics has vLLM's names) with node-exporter. The real Prometheus scrapes
the stand-in's /metrics, both node-exporters, HAProxy's exporter and itself; a vLLM series and the GPU
host's textfile reading are queried through the gateway's /status/api/v1/ path without a key, which
refuses every other method and path; a second `up` changes nothing.

The hosts reach each other through this machine (10.0.2.2 and each one's forwarded port), so the
inventory says where Prometheus finds each exporter, as NAT would."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.helpers import provision
from tests.e2e.office_cache_support import add_group
from tests.e2e.test_office_gateway import GATEWAY_PORT, VLLM_PORT, standin_archive, start_backend
from tests.lab import Lab, LabHost
from tests.lab.net import MACHINE_FROM_HOSTS

pytestmark = pytest.mark.lab

NODE_PORT = 9100


class Office:
    def __init__(self, tmp: Path, inventory: Path, gateway: LabHost, backend: LabHost) -> None:
        self.tmp, self.inventory, self.gateway, self.backend = tmp, inventory, gateway, backend
        self.base = f"http://127.0.0.1:{gateway.port(GATEWAY_PORT)}/status/api/v1"

    def api(self, path: str, method: str = "GET", **params: str) -> tuple[int, Any]:
        url = f"{self.base}/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, error.headers.get("Allow")


@pytest.fixture(scope="module")
def office(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Office]:
    tmp = tmp_path_factory.mktemp("office-metrics")
    gateway, backend = lab.new_host_set({"prefix": "omg", "extra_ports": [GATEWAY_PORT, NODE_PORT]},
                                        {"prefix": "omb", "extra_ports": [VLLM_PORT, NODE_PORT]})
    backend.container.put_archive("/opt", standin_archive())
    start_backend(backend)
    inventory = lab.write_inventory(tmp / "office.yaml", [gateway, backend])
    add_group(inventory, "office_gateway", gateway.name)
    document = yaml.safe_load(inventory.read_text())
    document["all"].setdefault("vars", {}).update(office_metrics_scrape_interval_s=2,
                                                  office_metrics_retention_size_mib=256)
    for host in (gateway, backend):
        document["all"]["hosts"][host.name].update(office_metrics_node_address=MACHINE_FROM_HOSTS,
                                                   office_metrics_node_exporter_port=host.port(NODE_PORT))
    document["all"]["hosts"][backend.name].update(office_gateway_backend_address=MACHINE_FROM_HOSTS,
                                                  office_gateway_backend_port=backend.port(VLLM_PORT))
    inventory.write_text(yaml.safe_dump(document, sort_keys=False))
    yield Office(tmp, inventory, gateway, backend)


def up(office: Office, name: str) -> Any:
    done = provision("up", str(office.inventory), "--tags", "office_gateway,office_metrics",
                     json_path=office.tmp / f"{name}.json")
    assert done.returncode == 0, done.output
    return done


@pytest.fixture(scope="module")
def converged(office: Office) -> Any:
    return up(office, "up")


def wait_for_targets(office: Office, timeout: float) -> list[dict[str, Any]]:
    started = time.monotonic()
    while True:
        status, body = office.api("targets")
        targets = body["data"]["activeTargets"] if status == 200 else []
        if targets and all(target["health"] == "up" for target in targets):
            return targets
        if time.monotonic() - started > timeout:
            raise AssertionError(f"targets not all up after {timeout} s: {status} {body}")
        time.sleep(0.5)


def query(office: Office, expression: str) -> list[dict[str, Any]]:
    status, body = office.api("query", query=expression)
    assert status == 200 and body["status"] == "success", (status, body)
    return body["data"]["result"]


def test_every_target_is_up_and_a_vllm_series_is_read_through_the_gateway(converged, office) -> None:
    targets = wait_for_targets(office, 60)
    found = sorted((t["labels"]["job"], t["labels"]["instance"]) for t in targets)
    gateway, backend = office.gateway.name, office.backend.name
    assert found == sorted([("haproxy", gateway), ("node", backend), ("node", gateway), ("prometheus", gateway),
                            ("vllm", backend)])
    series = query(office, "vllm:num_requests_running")
    assert [s["metric"]["instance"] for s in series] == [backend], series
    # HAProxy's own view of the backend, and the GPU host's textfile reading (no GPU in the lab: 0)
    assert query(office, 'haproxy_server_status{proxy="vllm",state="UP"}')[0]["value"][1] == "1"
    reading = query(office, "nvidia_smi_up")
    assert [(s["metric"]["instance"], s["value"][1]) for s in reading] == [(backend, "0")], reading


def test_only_reads_pass_and_nothing_asks_for_a_key(converged, office) -> None:
    assert office.api("query", method="POST", query="up") == (405, "GET")
    for path in ("admin/tsdb/delete_series", "status/config", "query/../admin/tsdb/snapshot", "series"):
        assert office.api(path)[0] == 403, path
    status, body = office.api("query_range", query="up", start=str(time.time() - 60), end=str(time.time()),
                              step="5")
    assert status == 200 and body["data"]["result"], body


def test_prometheus_keeps_the_configured_bounds_and_a_second_up_changes_nothing(converged, office) -> None:
    rc, flags = office.gateway.exec("tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value prometheus)/cmdline")
    assert rc == 0 and "--storage.tsdb.retention.size=256MB" in flags and "--storage.tsdb.retention.time=15d" in flags
    second = up(office, "again")
    for host in (office.gateway, office.backend):
        assert second.changed_tasks(host.name) == [], (host.name, second.output)
