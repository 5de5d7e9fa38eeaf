"""The office status page as a person sees it, served by the real HAProxy 2.6 (Debian 12's) from the office
gateway's rendered config, in front of two stand-in vLLM servers (tests/standins/vllm), and held open in a
real headless Chromium (tests/browser.py): each backend's state read live from the gateway's read-only stats,
the charts drawn with data, the office cache's figures as `up` wrote them, a backend killed shown DOWN within
the health checks' time, the page fitting a phone's width. The lab test (tests/e2e/test_office_gateway.py)
runs the same against real hosts and a real Prometheus through `provision up`. Prometheus is a stand-in here
(STAND-IN below): it answers query_range in the format Prometheus's HTTP API documents
(https://prometheus.io/docs/prometheus/latest/querying/api/#range-queries) with a series per host; the lab
test reads a real one."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from provision.office_cache.status import parse_cache_status
from provision.status_page.page import LIVE, render_page
from tests.browser import PAINTED, SAMPLES, LiveBrowser
from tests.standins.vllm.launch import free_port, start_standin
from tests.unit.serving_support import API_KEY, FAST, profile_arguments, stop
from tests.unit.test_office_gateway_haproxy import Gateway
from tests.unit.test_roles_office_gateway import haproxy_config
from tests.unit.test_status_page import CACHE_OUTPUT, cache_rows

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None or shutil.which("socat") is None,
                                reason="needs haproxy and socat (apt-get install haproxy socat)")

FIXTURE = Path(__file__).parent / "fixtures/status_page/status.json"
HOSTS = ("desk-1", "desk-2")


class PrometheusStandIn(BaseHTTPRequestHandler):
    """STAND-IN for Prometheus's /api/v1/query_range: a matrix with one series per host, labelled
    `instance` as roles/office_metrics labels them, a sample at every step (the queries asked are kept
    in `asked`)."""

    asked: list[str] = []

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        start, end, step = (float(query[key][0]) for key in ("start", "end", "step"))
        type(self).asked.append(query["query"][0])
        times = [start + k * step for k in range(int((end - start) // step) + 1)]
        result = [{"metric": {"instance": host}, "values": [[t, str(20 + 10 * index + 5 * math.sin(t / 300))]
                                                        for t in times]}
                  for index, host in enumerate(HOSTS)]
        body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()
        self.send_response(200 if url.path == "/api/v1/query_range" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def office(tmp_path: Path) -> Iterator[tuple[Gateway, dict, int]]:
    backends = {name: start_standin(profile_arguments(), env={**FAST, "VLLM_API_KEY": API_KEY}) for name in HOSTS}
    prometheus = ThreadingHTTPServer(("127.0.0.1", 0), PrometheusStandIn)
    threading.Thread(target=prometheus.serve_forever, daemon=True).start()
    recorded = json.loads(FIXTURE.read_text())  # a status document `provision status --json` wrote
    rows = {"desk-1": recorded["here"], "desk-2": recorded["laptop-2"]}
    page = tmp_path / "index.html"
    # with the office cache's figures as `up` writes them (recorded on the lab's real office cache)
    page.write_text(render_page(rows, live=LIVE, caches=cache_rows()))
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
    config = haproxy_config(tmp_path, inventory, office_gateway_port=port, office_gateway_bind_address="127.0.0.1",
                            office_gateway_admin_socket=str(tmp_path / "admin.sock"),
                            office_gateway_status_page=str(page), office_metrics_port=prometheus.server_address[1],
                            office_metrics_haproxy_port=free_port())
    assert "backend prometheus" in config  # the route to Prometheus is the metrics role's, here to the stand-in
    (tmp_path / "haproxy.cfg").write_text(config.replace("chroot /var/lib/haproxy", f"chroot {tmp_path}")
                                          .replace("    log /dev/log local0\n", "").replace("    daemon\n", ""))
    haproxy = subprocess.Popen(["haproxy", "-db", "-f", str(tmp_path / "haproxy.cfg")], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    gateway = Gateway(tmp_path, port)
    try:
        for backend in backends.values():
            backend.wait_ready()
        deadline = time.monotonic() + 20  # a loaded machine: haproxy's runtime API may take a while to appear
        while not (tmp_path / "admin.sock").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        for name in backends:
            gateway.wait_for(name, "UP", 10)
        yield gateway, backends, port
    finally:
        haproxy.terminate()
        haproxy.wait(timeout=10)
        prometheus.shutdown()
        for backend in backends.values():
            stop(backend)


def state(name: str) -> str:
    """JS: the state the page shows for host `name` (found by comparing names, as page.js does)."""
    return (f"((Array.from(document.querySelectorAll('.host')).find(c => c.dataset.hostName === {json.dumps(name)})"
            " || {}).dataset.state || '')")


def test_the_page_shows_each_backend_live_draws_the_charts_and_a_killed_one_goes_down(
        office, tmp_path: Path) -> None:
    gateway, backends, port = office
    base = f"http://127.0.0.1:{port}/status"
    with urllib.request.urlopen(base, timeout=10) as response:  # no user key, the whole page from one buffer
        assert response.status == 200 and response.read().decode().endswith("</html>\n")
    browser = LiveBrowser(tmp_path, 1280, 1800)
    try:
        started = time.monotonic()
        browser.open(base)
        live_charts = "Array.from(document.querySelectorAll('.chart.live canvas')).length"
        browser.wait_for(f"{state('desk-1')} === 'UP' && {state('desk-2')} === 'UP' && {live_charts} === 6", 15)
        loaded = time.monotonic() - started
        painted = browser.evaluate(PAINTED)
        # per host: three live charts (tokens/s, requests, KV) then the bench history; each drawn with data
        assert isinstance(painted, list) and len(painted) == 8 and all(count > 1000 for count in painted), painted
        # every chart was given the stand-in's samples, the hour of them (5 s steps)
        assert all(samples >= 720 and peak > 10 for _, samples, peak in browser.evaluate(SAMPLES)), \
            browser.evaluate(SAMPLES)
        assert set(PrometheusStandIn.asked) == {series[2] for chart in LIVE.charts for series in chart.series}
        text = str(browser.evaluate("document.body.innerText"))
        assert "2 of 2 backends UP at the gateway" in text and "NVIDIA GeForce RTX 5090 Laptop GPU" in text
        shot = browser.screenshot("status-gateway-laptop.png")
        # the office cache's card under the hosts: its hit rates, bytes and disk as the page shows them
        cache = parse_cache_status(CACHE_OUTPUT.read_text())
        for item in ("office cache", f"apt hit rate\t{cache.apt_hit_rate:.0%}",
                     f"hub hit rate\t{cache.hub_hit_rate:.0%}", "GiB free", "hub cache bound\t200g"):
            assert item in text, (item, text)
        browser.evaluate("document.querySelector('.host.cache').scrollIntoView()")
        cache_shot = browser.screenshot("status-gateway-cache.png")
        assert browser.evaluate("document.querySelector('.host.cache').getBoundingClientRect().width") > 400
        browser.evaluate("window.scrollTo(0, 0)")

        backends["desk-1"].process.kill()
        shown = browser.wait_for(f"{state('desk-1')} === 'DOWN'", 5)
        print(f"page loaded with live states and charts in {loaded:.2f} s; desk-1 shown DOWN {shown:.2f} s after "
              f"it was killed (checks every 500 ms, down after 2); screenshots {shot}, {cache_shot}")
        # the checks' time (2 x 500 ms) and one poll of the page (500 ms)
        assert shown < 1.6 and browser.evaluate(state("desk-2")) == "UP"
        assert "1 of 2 backends UP" in str(browser.evaluate("document.body.innerText"))

        # a phone's width: nothing wider than the screen, the charts redrawn to fit
        browser.send("Emulation.setDeviceMetricsOverride", browser.session, width=390, height=2400,
                     deviceScaleFactor=1, mobile=True)
        time.sleep(0.5)
        assert browser.evaluate("document.documentElement.scrollWidth") <= 390
        widths = browser.evaluate("Array.from(document.querySelectorAll('.uplot')).map(u => u.offsetWidth)")
        assert isinstance(widths, list) and widths and max(widths) <= 370, widths
        browser.screenshot("status-gateway-phone.png")
    finally:
        browser.close()

    # the stats the page reads are read only: an admin action posted to them changes nothing
    request = urllib.request.Request(f"{base}/gateway", data=b"s=desk-2&action=maint&b=vllm", method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass
    assert gateway.servers()["desk-2"].status == "UP"
