"""`provision up` ends with each served host's endpoint URL and where its API key lives."""

from __future__ import annotations

from pathlib import Path

from provision.cli.endpoints import endpoint_lines
from provision.inventory.loader import load_inventory
from provision.playbook.loader import load_playbook
from provision.runner.results import HostResult, RunResult, Status, TaskResult

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "playbooks" / "site.yaml"


def result(check: bool = False, role: str = "vllm", status: Status = Status.CHANGED) -> RunResult:
    task = TaskResult(task="vLLM service released and checked", role=role, status=status)
    return RunResult({"workhorse": HostResult("workhorse", tasks=[task])}, check=check)


def test_the_url_and_the_key_file_never_the_key():
    inventory = load_inventory(REPO / "inventory" / "host.yaml")
    [line] = endpoint_lines(load_playbook(SITE), SITE, inventory, result(), {"vllm_port": 8001})
    assert line == ("workhorse serves workhorse at http://192.168.1.50:8001/v1; "
                    "API key: /etc/provision/vllm/api-key on the host (root only)")
    [line] = endpoint_lines(load_playbook(SITE), SITE, inventory, result(check=True), {"vllm_api_key": "sk-x"})
    assert "would serve" in line and "the inventory's vllm_api_key" in line and "sk-x" not in line


def test_nothing_for_a_run_without_the_serving_role_or_a_failed_host():
    inventory = load_inventory(REPO / "inventory" / "host.yaml")
    assert endpoint_lines(load_playbook(SITE), SITE, inventory, result(role="docker"), {}) == []
    assert endpoint_lines(load_playbook(SITE), SITE, inventory, result(status=Status.FAILED), {}) == []


def test_a_host_behind_a_forwarded_ssh_port_gets_the_tunnel_to_its_endpoint(tmp_path):
    """The lab's laptop (127.0.0.1, SSH forwarded from port 2201, nothing else): before, `up` printed
    http://127.0.0.1:8000/v1, where nothing answers, and nothing said how to reach it."""
    path = tmp_path / "laptop.yaml"
    path.write_text("name: workhorse\naddress: 127.0.0.1\nport: 2201\nuser: root\nkey: id_lab\n")
    inventory = load_inventory(path)
    [line] = endpoint_lines(load_playbook(SITE), SITE, inventory, result(), {})
    assert f"`ssh -N -L 8000:127.0.0.1:8000 -p 2201 -i '{tmp_path / 'id_lab'}' 'root@127.0.0.1'`" in line, line
    assert line.endswith("then use http://127.0.0.1:8000/v1")
    plain = load_inventory(REPO / "inventory" / "host.yaml")
    [line] = endpoint_lines(load_playbook(SITE), SITE, plain, result(), {})
    assert "ssh -N" not in line, "a host on the LAN answers at its own address"


def test_the_office_urls_are_https_with_the_users_certificate():
    """`up`'s office endpoint line and the status page's line share one rule: https once
    office_gateway_tls_certificate is set, the address users reach the gateway by."""
    from provision.cli.endpoints import office_url
    from provision.inventory.model import Host

    gateway = Host(name="gw", address="192.168.1.9")
    plain = {"office_gateway_port": 8000, "office_gateway_tls_certificate": ""}
    assert office_url(gateway, plain, "/v1") == "http://192.168.1.9:8000/v1"
    tls = {"office_gateway_port": 8443, "office_gateway_tls_certificate": "office.pem",
           "office_gateway_address": "llm.office.lan"}
    assert office_url(gateway, tls, "/status") == "https://llm.office.lan:8443/status"
