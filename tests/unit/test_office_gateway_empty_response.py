"""A backend that accepts the connection and closes it without answering, as a dead vLLM does behind a
NAT port forward (tcpdump on the lab's loopback: slirp4netns answers the SYN itself, then FIN, then
RST to the request; benchmarks/office_gateway.py scenario b): the office gateway's config, run by the
real HAProxy 2.6, retries the request on the other backend (retry-on empty-response, redispatch), so
no user sees it. Without `option http-buffer-request` HAProxy 2.6 answered 502 to 4 POSTs of 10 here."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.standins.vllm.launch import free_port, start_standin
from tests.unit.serving_support import API_KEY, FAST, profile_arguments, stop
from tests.unit.test_roles_office_gateway import local_haproxy_config

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None or shutil.which("socat") is None,
                                reason="needs haproxy and socat (apt-get install haproxy socat)")


def closing_listener() -> socket.socket:
    """Answers /health 200 (its last check passed) and closes every other request unanswered."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            if connection.recv(65536).startswith(b"GET /health "):
                connection.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            connection.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener


def servers(folder: Path, column: int = 17) -> dict[str, str]:
    """One `show stat` column per server of the backend (17: status, 7: requests sent to it)."""
    stat = subprocess.run(["socat", "stdio", f"UNIX-CONNECT:{folder / 'admin.sock'}"], input="show stat\n",
                          capture_output=True, text=True, check=False).stdout
    return {row[1]: row[column] for row in (line.split(",") for line in stat.splitlines())
            if row[0] == "vllm" and row[1] != "BACKEND"}


def test_a_request_that_meets_an_empty_response_is_retried_on_the_other_backend(tmp_path: Path) -> None:
    dead = closing_listener()
    live = start_standin(profile_arguments(), env={**FAST, "VLLM_API_KEY": API_KEY})
    port = free_port()
    inventory = f"""all:
  hosts:
    dead: {{ansible_host: 127.0.0.1, vllm_port: {dead.getsockname()[1]}}}
    live: {{ansible_host: 127.0.0.1, vllm_port: {live.port}}}
  children:
    office_gateway:
      hosts:
        gw: {{ansible_host: 127.0.0.1}}
"""
    local_haproxy_config(tmp_path, inventory, port, office_gateway_check_interval_ms=100)
    live.wait_ready()
    haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(tmp_path / "haproxy.cfg")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while set(servers(tmp_path).values()) != {"UP"}:
            assert time.monotonic() < deadline, servers(tmp_path)
            time.sleep(0.1)
        statuses = []
        for _ in range(10):
            body = {"model": "workhorse", "max_tokens": 4, "messages": [{"role": "user", "content": "hello"}]}
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                             {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=30) as reply:
                    statuses.append(reply.status)
            except urllib.error.HTTPError as error:
                statuses.append(error.code)
        served = servers(tmp_path, column=7)
        assert int(served["dead"]) >= 3, served  # leastconn sent it its share: each one retried on `live`
        assert statuses == [200] * 10
    finally:
        haproxy.terminate()
        haproxy.wait(timeout=10)
        dead.close()
        stop(live)
