"""The office cache's registry reaches its upstream through nginx (roles/office_cache/templates/
registry-fill.nginx.conf.j2), so that each blob is fetched from the upstream once: real nginx, the role's
rendered configuration, and a stand-in for Docker Hub (it cannot be reached here) that answers a blob as
Docker Hub does, with a 307 to its CDN's signed URL (observed: `curl -sI -H "Authorization: Bearer $TOKEN"
https://registry-1.docker.io/v2/library/alpine/blobs/sha256:...` answers 307 with a `Location:` on
production.cloudflare.docker.com). docker-registry 2.8 asks for a cold blob twice at once (HEAD and GET of
storeLocal and copyContent) and once more per client while that pull runs: the requests here do the same."""

from __future__ import annotations

import http.server
import shutil
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from provision.playbook.loader import load_playbook
from provision.playbook.templating import Renderer, make_environment
from tests.lab.net import free_port
from tests.unit.test_roles_gpu_support import SITE, facts, render

FRESH_DEBIAN = "debian12-rtx5090-standin-fresh.txt"
pytestmark = pytest.mark.skipif(shutil.which("nginx") is None, reason="needs nginx (apt-get install nginx-light)")

BLOB = bytes(range(256)) * 4096  # 1 MiB
DIGEST = "sha256:" + "ab" * 32
BLOB_PATH = f"/v2/vllm/vllm-openai/blobs/{DIGEST}"


class Origin(http.server.ThreadingHTTPServer):
    """Docker Hub's part: a blob answers 307 to the CDN, anything else 200; the CDN sends the bytes slowly
    (a WAN), so the other requests arrive while the first is in flight. Both count what they were asked."""

    def __init__(self) -> None:
        self.asked: Counter[str] = Counter()
        self.authorization: list[str | None] = []
        self.cdn_port = 0
        super().__init__(("127.0.0.1", 0), OriginHandler)


class OriginHandler(http.server.BaseHTTPRequestHandler):
    server: Origin

    def do_GET(self) -> None:
        self.server.asked[f"{self.command} {self.path}"] += 1
        if self.path == BLOB_PATH:
            self.send_response(307)
            self.send_header("Location", f"http://127.0.0.1:{self.server.cdn_port}/blobs/ab?verify=signed")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/blobs/ab"):
            self.server.authorization.append(self.headers.get("Authorization"))
            self.send_response(200)
            self.send_header("Content-Length", str(len(BLOB)))
            self.send_header("Cache-Control", "max-age=0")
            self.end_headers()
            for start in range(0, len(BLOB), len(BLOB) // 8):
                self.wfile.write(BLOB[start:start + len(BLOB) // 8])
                time.sleep(0.1)
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_HEAD = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fill(tmp_path: Path) -> Iterator[tuple[int, Origin]]:
    origin = Origin()
    origin.cdn_port = origin.server_address[1]  # one server plays both parts
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    port = free_port(21500, set())
    cache_play = next(play for play in load_playbook(SITE) if play.name == "office cache")
    variables = {**cache_play.defaults, "facts": facts(FRESH_DEBIAN).as_vars(), "inventory_hostname": "nas",
                 "office_cache_dns": {"output": "127.0.0.1"}, "office_cache_seed_unit": {"changed": False},
                 "office_cache_registry_upstream": f"http://127.0.0.1:{origin.server_address[1]}",
                 "office_cache_registry_fill_port": port, "office_cache_registry_fill_dir": str(tmp_path / "cache")}
    render_with = Renderer(make_environment(cache_play.template_dirs), variables)
    task = next(task for task in cache_play.tasks if task.name == "nginx fetches each of the registry's blobs once")
    server = render(task, render_with).args.content.replace("/var/log/nginx", str(tmp_path))
    conf = tmp_path / "nginx.conf"
    conf.write_text(f"user root;\npid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{}}\n"
                    f"http {{\n{server}\n}}\n")
    nginx = subprocess.Popen(["nginx", "-p", str(tmp_path), "-c", str(conf), "-g", "daemon off;"])
    try:
        deadline = time.monotonic() + 10
        while not (tmp_path / "nginx.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        yield port, origin
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
        origin.shutdown()


def ask(port: int, method: str, path: str = BLOB_PATH) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     headers={"Authorization": "Bearer registry-token"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, response.read()


def test_concurrent_requests_for_a_cold_blob_fetch_it_once_and_all_get_its_bytes(fill: tuple[int, Origin]) -> None:
    port, origin = fill
    methods = ["HEAD", "GET", "HEAD", "GET", "GET", "GET"]  # storeLocal and copyContent, then 2 more clients
    with ThreadPoolExecutor(len(methods)) as pool:
        answers = list(pool.map(lambda method: ask(port, method), methods))
    assert [status for status, _ in answers] == [200] * len(methods)
    assert [body for (_, body), method in zip(answers, methods, strict=True) if method == "GET"] == [BLOB] * 4
    assert origin.asked[f"GET {BLOB_PATH}"] + origin.asked[f"HEAD {BLOB_PATH}"] == 1, origin.asked
    assert sum(count for asked, count in origin.asked.items() if "/blobs/ab" in asked) == 1, origin.asked
    assert origin.authorization == [None]  # the registry's token stays with the registry, not the CDN
    assert ask(port, "GET") == (200, BLOB) and sum(origin.asked.values()) == 2  # later: from nginx's copy


def test_manifests_and_the_token_exchange_pass_through_every_time(fill: tuple[int, Origin]) -> None:
    port, origin = fill
    for _ in range(2):
        assert ask(port, "GET", "/v2/vllm/vllm-openai/manifests/latest") == (200, b"{}")
    assert origin.asked["GET /v2/vllm/vllm-openai/manifests/latest"] == 2
