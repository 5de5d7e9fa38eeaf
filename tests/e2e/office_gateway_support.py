"""A lab office for the gateway: one gateway host (the inventory's `office_gateway` group, converged by
`provision up --tags office_gateway`: HAProxy from Debian's archive) in front of N backend hosts, each
running the stand-in vLLM (tests/standins/vllm) as a systemd unit `standin-vllm`. The hosts reach each
other through this machine (10.0.2.2 and each one's forwarded port), so each backend's
`office_gateway_backend_address/_port` say where the gateway finds it, as NAT would.
Shared by benchmarks/office_gateway.py (and usable by tests/e2e/test_office_gateway.py)."""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path
from typing import Any

import yaml

from provision.office_gateway.admin import ServerView, admin_script, parse_view
from provision.shell import quote
from tests.e2e.helpers import provision
from tests.e2e.office_cache_support import add_group
from tests.lab import Lab, LabHost
from tests.lab.net import MACHINE_FROM_HOSTS
from tests.unit.serving_support import API_KEY, FAST, profile_arguments

VLLM_PORT = 8000
GATEWAY_PORT = 8000
ADMIN_SOCKET = "/run/haproxy/admin.sock"
STANDIN = Path(__file__).resolve().parents[1] / "standins" / "vllm"


def standin_archive() -> bytes:
    """The stand-in server's files as the package `vllm` under /opt/standin (as in its image)."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as archive:
        for path in [*STANDIN.glob("*.py"), STANDIN / "vllm_flags.txt", *STANDIN.glob("entrypoints/**/*.py")]:
            archive.add(path, arcname=f"standin/vllm/{path.relative_to(STANDIN)}")
    return data.getvalue()


def start_backend(host: LabHost, tokens_per_s: float = 50, ready_delay: float = 0) -> None:
    """The stand-in vLLM serving the default profile (max_num_seqs 4) on VLLM_PORT, as unit standin-vllm."""
    env = {**FAST, "STANDIN_TOKENS_PER_S": str(tokens_per_s), "STANDIN_READY_DELAY": str(ready_delay),
           "VLLM_API_KEY": API_KEY, "PYTHONPATH": "/opt/standin"}
    setenv = " ".join(f"--setenv={key}={value}" for key, value in env.items())
    argv = " ".join(quote(word) for word in profile_arguments())  # with --host 0.0.0.0 --port 8000
    rc, output = host.exec("systemctl reset-failed standin-vllm 2>/dev/null; "
                           f"systemd-run --unit=standin-vllm {setenv} /usr/bin/python3 -m vllm serve {argv}")
    assert rc == 0, output


def wait_healthy(host: LabHost) -> None:
    rc, output = host.exec(f"for _ in $(seq 100); do curl -fsS 127.0.0.1:{VLLM_PORT}/health && exit 0; "
                           "sleep 0.3; done; journalctl -u standin-vllm --no-pager | tail -30; exit 1")
    assert rc == 0, output


class Office:
    """The gateway host, its backends, the inventory, and the gateway's runtime view."""

    def __init__(self, tmp: Path, inventory: Path, gateway: LabHost, backends: list[LabHost]) -> None:
        self.tmp, self.inventory, self.gateway, self.backends = tmp, inventory, gateway, backends
        self.url = f"http://127.0.0.1:{gateway.port(GATEWAY_PORT)}/v1"  # from this machine

    def servers(self) -> dict[str, ServerView]:
        _, output = self.gateway.exec(admin_script(ADMIN_SOCKET, "show"))
        return {server.name: server for server in parse_view(output)[0]}

    def admin(self, action: str, server: str) -> None:
        rc, output = self.gateway.exec(admin_script(ADMIN_SOCKET, action, server))
        assert rc == 0, output

    def direct_url(self, backend: LabHost) -> str:
        """A backend's API as the gateway host reaches it (the same path HAProxy takes)."""
        return f"http://{MACHINE_FROM_HOSTS}:{backend.port(VLLM_PORT)}/v1"

    def wait_for(self, name: str, status: str, timeout: float) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.servers()[name].status == status:
                return time.monotonic() - started
            time.sleep(0.05)
        raise AssertionError(f"{name} not {status} after {timeout} s: {self.servers()}")


def open_office(lab: Lab, tmp: Path, backends: int = 2, tokens_per_s: float = 50,
                **gateway_vars: Any) -> Office:
    """Start the hosts and the stand-ins, write the inventory (with `gateway_vars` for every host),
    converge the gateway; every backend UP when this returns."""
    gateway, *hosts = lab.new_host_set({"prefix": "ogw", "extra_ports": [GATEWAY_PORT]},
                                       *[{"prefix": "obk", "extra_ports": [VLLM_PORT]}] * backends)
    for host in hosts:
        host.container.put_archive("/opt", standin_archive())
        start_backend(host, tokens_per_s)
    for host in hosts:
        wait_healthy(host)
    inventory = lab.write_inventory(tmp / "office.yaml", [gateway, *hosts], **gateway_vars)
    add_group(inventory, "office_gateway", gateway.name)
    document = yaml.safe_load(inventory.read_text())
    for host in hosts:
        document["all"]["hosts"][host.name].update(office_gateway_backend_address=MACHINE_FROM_HOSTS,
                                                   office_gateway_backend_port=host.port(VLLM_PORT))
    inventory.write_text(yaml.safe_dump(document, sort_keys=False))
    office = Office(tmp, inventory, gateway, hosts)
    up = provision("up", str(inventory), "--limit", gateway.name, "--tags", "office_gateway",
                   json_path=tmp / "up.json")
    assert up.returncode == 0, up.output
    for host in hosts:
        office.wait_for(host.name, "UP", 30)
    return office
