"""The office gateway's config run by the real HAProxy 2.6 (Debian 12's, on this machine) in front of
two stand-in vLLM servers (tests/standins/vllm, vLLM's OpenAI API and its SSE chunks) on 127.0.0.1, and
its runtime API driven by the real admin.sh (socat): requests reach both backends; a streamed request
on a drained backend finishes while new ones go elsewhere; undrain brings it back; a backend killed
is out within a second and no request fails. The lab test (tests/e2e/test_office_gateway.py) runs the
same on real hosts through `provision up/drain/undrain`."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision.office_gateway.admin import ServerView, admin_script, parse_view
from tests.standins.vllm.launch import StandinProcess, free_port, start_standin
from tests.unit.serving_support import API_KEY, FAST, profile_arguments, stop
from tests.unit.test_roles_office_gateway import local_haproxy_config

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None or shutil.which("socat") is None,
                                reason="needs haproxy and socat (apt-get install haproxy socat)")


class Gateway:
    def __init__(self, folder: Path, port: int) -> None:
        self.socket = str(folder / "admin.sock")
        self.url = f"http://127.0.0.1:{port}/v1"

    def admin(self, action: str, server: str = "", wait_s: int = 0) -> tuple[int, list[ServerView], int | None]:
        done = subprocess.run(["bash", "-c", admin_script(self.socket, action, server, wait_s)],
                              capture_output=True, text=True, timeout=60, check=False)
        return (done.returncode, *parse_view(done.stdout))

    def servers(self) -> dict[str, ServerView]:
        return {server.name: server for server in self.admin("show")[1]}

    def wait_for(self, name: str, status: str, timeout: float) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.servers()[name].status == status:
                return time.monotonic() - started
            time.sleep(0.05)
        raise AssertionError(f"{name} not {status} after {timeout} s: {self.servers()[name]}")

    def chat(self, max_tokens: int = 8, stream: bool = False) -> tuple[int, str]:
        body = {"model": "workhorse", "max_tokens": max_tokens, "stream": stream, "ignore_eos": True,
                "messages": [{"role": "user", "content": "hello"}]}
        request = urllib.request.Request(f"{self.url}/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Authorization": f"Bearer {API_KEY}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()


@pytest.fixture()
def office(tmp_path: Path) -> Iterator[tuple[Gateway, dict[str, StandinProcess]]]:
    backends = {name: start_standin(profile_arguments(), env={**FAST, "STANDIN_TOKENS_PER_S": "50",
                                                                 "VLLM_API_KEY": API_KEY})
                for name in ("desk-1", "desk-2")}
    port = free_port()
    inventory = f"""all:
  hosts:
    desk-1: {{ansible_host: 127.0.0.1, vllm_port: {backends['desk-1'].port}}}
    desk-2: {{ansible_host: 127.0.0.1, vllm_port: {backends['desk-2'].port}}}
  children:
    office_gateway:
      hosts:
        gw: {{ansible_host: 127.0.0.1}}
"""
    local_haproxy_config(tmp_path, inventory, port)
    haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(tmp_path / "haproxy.cfg")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    gateway = Gateway(tmp_path, port)
    try:
        for backend in backends.values():
            backend.wait_ready()
        for name in backends:
            gateway.wait_for(name, "UP", 10)
        yield gateway, backends
    finally:
        haproxy.terminate()
        haproxy.wait(timeout=10)
        for backend in backends.values():
            stop(backend)


def test_requests_reach_both_backends_and_a_drained_one_finishes_its_stream(office) -> None:
    gateway, _ = office
    for _ in range(6):
        status, _ = gateway.chat()
        assert status == 200
    assert all(server.served >= 2 for server in gateway.servers().values()), gateway.servers()

    streamed: dict[str, object] = {}
    stream = threading.Thread(target=lambda: streamed.update(result=gateway.chat(max_tokens=150, stream=True)))
    stream.start()  # about 3 s at 50 tokens/s
    busy = None
    while busy is None and stream.is_alive():
        busy = next((name for name, server in gateway.servers().items() if server.in_flight), None)
    assert busy is not None
    rc, servers, in_flight = gateway.admin("drain", busy, 30)
    stream.join()
    status, body = streamed["result"]  # type: ignore[misc]
    assert rc == 0 and in_flight == 0 and {s.name: s.status for s in servers}[busy] == "DRAIN"
    assert status == 200 and body.rstrip().endswith("data: [DONE]") and body.count('"chat.completion.chunk"') > 100
    before = gateway.servers()[busy].served
    for _ in range(4):
        assert gateway.chat()[0] == 200
    assert gateway.servers()[busy].served == before  # no new request went to the drained backend

    assert gateway.admin("ready", busy)[0] == 0
    assert gateway.servers()[busy].status == "UP"
    assert gateway.admin("drain", "nosuchhost", 1)[0] == 1


def test_a_killed_backend_is_out_at_once_and_only_its_requests_in_flight_fail(office) -> None:
    gateway, backends = office
    failures: list[float] = []
    done = threading.Event()

    def load() -> None:
        while not done.is_set():
            if gateway.chat()[0] != 200:
                failures.append(time.monotonic())

    clients = [threading.Thread(target=load) for _ in range(3)]
    for client in clients:
        client.start()
    time.sleep(1)
    in_flight = gateway.servers()["desk-1"].in_flight
    backends["desk-1"].process.kill()
    out_after = gateway.wait_for("desk-1", "DOWN", 5)
    out_at = time.monotonic()
    time.sleep(2)
    done.set()
    for client in clients:
        client.join()
    print(f"desk-1 DOWN {out_after:.2f} s after it was killed; failed requests: {len(failures)} "
          f"({in_flight} in flight on it)")
    # out one fast check after the first refused connection (observe layer4, sudden-death, fastinter
    # 100 ms), not after the checks (2 x 500 ms: 0.96 s here)
    assert out_after < 0.5
    # a request cut mid-answer fails (its bytes may have reached the client: never retried); none after
    assert len(failures) <= max(in_flight, 1) and all(when <= out_at for when in failures), failures
    assert gateway.servers()["desk-2"].status == "UP"
