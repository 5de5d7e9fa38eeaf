"""The office endpoint on real lab hosts: one gateway host of the `office_gateway` group converged by
`provision up` (HAProxy from Debian's archive, as the office cache gets its packages), three backend hosts
(the issue's lab office: a gateway and 3 GPU hosts) each running the stand-in vLLM (tests/standins/vllm:
vLLM's OpenAI API, /health, SSE chunks) as a plain process. Requests through the gateway reach each;
`provision drain` takes one out while its streamed answer finishes; `undrain` brings it back; a second
`up` changes nothing; with every backend busy, more requests wait in the queue, then get a 503 with
Retry-After; a backend killed is out after its checks (about a second) and every request meanwhile
succeeds.

The hosts reach each other through this machine (10.0.2.2 and each one's forwarded port), so each
backend's `office_gateway_backend_address/_port` say where the gateway finds it, as NAT would."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.office_gateway.admin import admin_script, parse_users, parse_view
from provision.shell import quote
from tests.browser import PAINTED, SAMPLES, LiveBrowser
from tests.e2e.helpers import provision
from tests.e2e.office_cache_support import add_group
from tests.e2e.office_gateway_support import GATEWAY_PORT, VLLM_PORT, standin_archive, start_backend
from tests.lab import Lab, LabHost
from tests.lab.net import MACHINE_FROM_HOSTS
from tests.unit.serving_support import API_KEY

pytestmark = pytest.mark.lab

class Office:
    def __init__(self, tmp: Path, inventory: Path, gateway: LabHost, backends: list[LabHost]) -> None:
        self.tmp, self.inventory, self.gateway, self.backends = tmp, inventory, gateway, backends
        self.url = f"http://127.0.0.1:{gateway.port(GATEWAY_PORT)}/v1"

    def servers(self) -> dict[str, Any]:
        _, output = self.gateway.exec(admin_script("/run/haproxy/admin.sock", "show"))
        return {server.name: server for server in parse_view(output)[0]}

    def chat(self, max_tokens: int = 8, stream: bool = False, key: str = API_KEY) -> tuple[int, str]:
        body = {"model": "workhorse", "max_tokens": max_tokens, "stream": stream, "ignore_eos": True,
                "messages": [{"role": "user", "content": "hello"}]}
        request = urllib.request.Request(f"{self.url}/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Authorization": f"Bearer {key}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError as error:
            return 0, str(error)


@pytest.fixture(scope="module")
def office(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Office]:
    tmp = tmp_path_factory.mktemp("office-gateway")
    gateway, *backends = lab.new_host_set({"prefix": "ogw", "extra_ports": [GATEWAY_PORT]},
                                          *[{"prefix": "obk", "extra_ports": [VLLM_PORT]}] * 3)
    for host in backends:
        host.container.put_archive("/opt", standin_archive())
        start_backend(host)
    for host in backends:
        rc, output = host.exec(f"for _ in $(seq 100); do curl -fsS 127.0.0.1:{VLLM_PORT}/health && exit 0; "
                               "sleep 0.3; done; journalctl -u standin-vllm --no-pager | tail -30; exit 1")
        assert rc == 0, output
        rc, output = gateway.exec(f"curl -sS -m 5 -o /dev/null -w '%{{http_code}}' "
                                  f"http://{MACHINE_FROM_HOSTS}:{host.port(VLLM_PORT)}/health")
        assert rc == 0 and output == "200", f"the gateway host cannot reach {host.name}: {output}"
    # a short queue timeout, so the all-busy test sees its 503 in seconds
    inventory = lab.write_inventory(tmp / "office.yaml", [gateway, *backends], office_gateway_queue_timeout_s=3)
    add_group(inventory, "office_gateway", gateway.name)
    document = yaml.safe_load(inventory.read_text())
    for host in backends:
        document["all"]["hosts"][host.name].update(office_gateway_backend_address=MACHINE_FROM_HOSTS,
                                                   office_gateway_backend_port=host.port(VLLM_PORT))
    inventory.write_text(yaml.safe_dump(document, sort_keys=False))
    yield Office(tmp, inventory, gateway, backends)


@pytest.fixture(scope="module")
def converged(office: Office) -> Any:
    up = provision("up", str(office.inventory), "--limit", office.gateway.name, "--tags", "office_gateway",
                   json_path=office.tmp / "up.json")
    assert up.returncode == 0, up.output
    return up


def wait_for(office: Office, name: str, status: str, timeout: float) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if office.servers()[name].status == status:
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"{name} not {status} after {timeout} s: {office.servers()}")


def test_up_prints_the_office_url_and_requests_reach_both_backends(converged, office) -> None:
    assert f"the office endpoint is http://127.0.0.1:{GATEWAY_PORT}/v1 ({office.gateway.name}:" in converged.output
    assert office.gateway.exec("haproxy -v")[1].startswith("HAProxy version 2.6.")  # Debian 12's
    for host in office.backends:
        wait_for(office, host.name, "UP", 30)
    for _ in range(3 * len(office.backends)):
        assert office.chat()[0] == 200
    assert all(server.served >= 2 for server in office.servers().values()), office.servers()


def test_drain_lets_the_stream_in_flight_finish_and_undrain_brings_the_host_back(converged, office) -> None:
    streamed: dict[str, Any] = {}
    stream = threading.Thread(target=lambda: streamed.update(result=office.chat(max_tokens=200, stream=True)))
    stream.start()  # about 4 s at 50 tokens/s
    busy = None
    while busy is None and stream.is_alive():
        busy = next((name for name, server in office.servers().items() if server.in_flight), None)
    assert busy is not None
    drain = provision("drain", str(office.inventory), busy, "--wait", "60")
    stream.join()
    assert drain.returncode == 0 and f"{busy} drained: no request in flight" in drain.output, drain.output
    status, body = streamed["result"]
    assert status == 200 and body.rstrip().endswith("data: [DONE]") and body.count('"chat.completion.chunk"') > 150
    served = office.servers()[busy].served
    for _ in range(4):
        assert office.chat()[0] == 200
    assert office.servers()[busy].served == served and office.servers()[busy].status == "DRAIN"
    # an `up` that changes the config reloads haproxy: the drained host stays drained
    changed = provision("up", str(office.inventory), "--limit", office.gateway.name, "--tags", "office_gateway",
                        "-e", "office_gateway_retry_after_s=7", json_path=office.tmp / "changed.json")
    assert changed.returncode == 0, changed.output
    assert "reload haproxy" in changed.changed_tasks(office.gateway.name), changed.output
    assert "hdr Retry-After 7" in office.gateway.exec("cat /etc/haproxy/haproxy.cfg")[1]
    assert office.servers()[busy].status == "DRAIN"
    back = provision("up", str(office.inventory), "--limit", office.gateway.name, "--tags", "office_gateway",
                     json_path=office.tmp / "back.json")
    assert back.returncode == 0 and office.servers()[busy].status == "DRAIN", back.output
    undrain = provision("undrain", str(office.inventory), busy)
    assert undrain.returncode == 0 and "back in rotation" in undrain.output, undrain.output
    assert office.servers()[busy].status == "UP"


def test_a_second_up_changes_nothing(converged, office) -> None:
    again = provision("up", str(office.inventory), "--limit", office.gateway.name, "--tags", "office_gateway",
                      json_path=office.tmp / "again.json")
    assert again.returncode == 0 and again.changed_tasks(office.gateway.name) == [], again.output
    assert "status page unchanged" in again.output, again.output


def test_the_status_page_shows_each_host_live_with_charts_and_a_stopped_one_down(converged, office) -> None:
    """/status as a person sees it (issue 23): the page `up` published, in headless Chromium, each
    backend's state read live from the gateway, charts drawn from the real Prometheus beside it (the
    office_metrics role, scraping every 2 s here), a backend stopped shown DOWN within the checks' time."""
    names = [host.name for host in office.backends]
    assert f"status page written: http://127.0.0.1:{GATEWAY_PORT}/status ({office.gateway.name}: {len(names)} hosts)" \
        in converged.output, converged.output
    metrics = provision("up", str(office.inventory), "--limit", office.gateway.name, "--tags", "office_metrics",
                        "-e", "office_metrics_scrape_interval_s=2", json_path=office.tmp / "metrics.json")
    assert metrics.returncode == 0, metrics.output
    browser = LiveBrowser(office.tmp, 1280, 2800)  # the three cards in the screenshot
    done = threading.Event()
    answers: list[int] = []

    def traffic() -> None:  # a user per host, so tokens/s and requests have something to show
        while not done.is_set():
            answers.append(office.chat(max_tokens=100, stream=True)[0])

    users = [threading.Thread(target=traffic) for _ in names]
    for user in users:
        user.start()
    try:
        started = time.monotonic()
        browser.open(office.url.removesuffix("/v1") + "/status")
        browser.wait_for(" && ".join(f"{page_state(name)} === 'UP'" for name in names), 20)
        live = time.monotonic() - started
        canvases = "document.querySelectorAll('.chart.live canvas').length"
        browser.wait_for(f"{canvases} === {3 * len(names)}", 60, every=0.5)  # Prometheus's first samples
        charted = time.monotonic() - started
        # a line, not a point: a few more samples (scraped every 2 s, charted every 5 s)
        browser.wait_for(f"{SAMPLES}.every(chart => chart[1] >= 3)", 30, every=0.5)
        samples = browser.evaluate(SAMPLES)
        assert all(peak > 0 for key, _, peak in samples if key == "tokens"), samples  # each host generated
        painted = browser.evaluate(PAINTED)
        # per card its 3 live charts, then the bench history's (empty here: no bench kept)
        live_painted = [count for index, count in enumerate(painted) if index % 4 != 3]
        assert isinstance(painted, list) and all(count > 1000 for count in live_painted), painted
        shot = browser.screenshot("status-office-lab.png")
        done.set()  # no traffic: the stop is seen by the health checks alone
        for user in users:
            user.join()
        assert answers and set(answers) == {200}, answers
        victim = office.backends[1]
        assert victim.exec("systemctl stop standin-vllm")[0] == 0
        down = browser.wait_for(f"{page_state(victim.name)} === 'DOWN'", 10)
        print(f"/status: every host live in {live:.2f} s, charts drawn with Prometheus data in {charted:.2f} s; "
              f"{victim.name} shown DOWN {down:.2f} s after it was stopped; screenshot {shot}")
        # the checks' time (2 x 500 ms) and one poll of the page (500 ms), with room for a loaded machine
        assert down < 2.0 and browser.evaluate(page_state(names[0])) == "UP"
        browser.screenshot("status-office-lab-down.png")
    finally:
        done.set()
        for user in users:
            user.join()
        browser.close()
        office.backends[1].exec("systemctl stop standin-vllm; systemctl reset-failed standin-vllm")
        start_backend(office.backends[1])
    wait_for(office, office.backends[1].name, "UP", 30)


def page_state(name: str) -> str:
    """JS: the state the status page shows for host `name`."""
    return (f"((Array.from(document.querySelectorAll('.host')).find(c => c.dataset.hostName === {json.dumps(name)})"
            " || {}).dataset.state || '')")


def ask(office: Office, max_tokens: int) -> tuple[int, str, float]:
    """One non-streamed request: its status, Retry-After header and how long it took."""
    body = {"model": "workhorse", "max_tokens": max_tokens, "ignore_eos": True,
            "messages": [{"role": "user", "content": "hello"}]}
    request = urllib.request.Request(f"{office.url}/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
            return response.status, response.headers.get("Retry-After", ""), time.monotonic() - started
    except urllib.error.HTTPError as error:
        error.read()
        return error.code, error.headers.get("Retry-After", ""), time.monotonic() - started


def test_every_backend_busy_requests_wait_in_the_queue_then_get_a_503_with_retry_after(converged, office) -> None:
    """3 backends x max_num_seqs 4 = 12 requests of 10-11 s (500 tokens at 50 tok/s) fill the office; 2 more
    wait in the gateway's queue for its timeout (3 s here), then get the 503 with Retry-After; none lost.
    (With 5-6 s requests, CI's load once kept every poll of HAProxy's view from seeing all 12 at once.)"""
    for host in office.backends:
        wait_for(office, host.name, "UP", 30)
    answers: list[tuple[int, str, float]] = []
    slots = 4 * len(office.backends)  # max_num_seqs 4 per stand-in (profile_arguments)
    busy = [threading.Thread(target=lambda: answers.append(ask(office, 500))) for _ in range(slots)]
    for thread in busy:
        thread.start()
    deadline = time.monotonic() + 10
    while sum(server.in_flight for server in office.servers().values()) < slots:
        assert time.monotonic() < deadline, office.servers()
    extra: list[tuple[int, str, float]] = []
    waiting = [threading.Thread(target=lambda: extra.append(ask(office, 8))) for _ in range(2)]
    for thread in waiting:  # at once: both queue while the others run
        thread.start()
    for thread in [*waiting, *busy]:
        thread.join()
    assert [(status, retry_after) for status, retry_after, _ in extra] == [(503, "5")] * 2, extra
    assert all(2.5 < waited < 4.5 for _, _, waited in extra), extra  # queued for 3 s, not refused at once
    assert sorted(status for status, _, _ in answers) == [200] * slots, answers


def test_a_killed_backend_is_out_after_its_checks_and_requests_keep_succeeding(converged, office) -> None:
    """Every request after the kill succeeds (a request that meets the dead backend is retried on the
    other: retry-on empty-response, redispatch), and the backend is DOWN after its checks fail twice
    (fall 2 x inter 500 ms). Behind the lab's NAT a killed backend's port still accepts: slirp4netns's
    port forward completes the handshake itself, then closes (tcpdump on this machine's lo: SYN, SYN-ACK,
    FIN, then RST to the request), so HAProxy meets an empty response, never a refused connection, and
    observe layer4 cannot take it out before its checks; a real refusal (on 127.0.0.1: out one fast check
    after it) is measured in tests/unit/test_office_gateway_haproxy.py. The time is taken on the gateway host, from
    HAProxy's view polled every 50 ms there (CLOCK_MONOTONIC is one clock for this machine's containers)."""
    victim = office.backends[0]
    wait_for(office, victim.name, "UP", 30)
    watch = (f"while ! printf 'show stat\\n' | socat stdio /run/haproxy/admin.sock | grep -q '^vllm,{victim.name},"
             ".*,DOWN,'; do sleep 0.05; done; python3 -c 'import time; print(time.monotonic())'")
    watched: dict[str, Any] = {}
    watcher = threading.Thread(target=lambda: watched.update(
        result=office.gateway.exec(f"timeout 10 bash -c {quote(watch)}")))
    watcher.start()
    assert victim.exec("systemctl kill -s KILL standin-vllm")[0] == 0
    killed = time.monotonic()
    answers = []
    while watcher.is_alive():
        answers.append(office.chat()[0])
    rc, output = watched["result"]
    assert rc == 0, output
    out_after = float(output.split()[-1]) - killed
    print(f"{victim.name} DOWN {out_after:.2f} s after it was killed; {len(answers)} requests meanwhile: {answers}")
    # checks every 500 ms, fall 2: the second failed check at most 1 s after the kill, plus the check itself
    assert out_after < 1.3 and answers == [200] * len(answers), (out_after, answers)
    assert [office.chat()[0] for _ in range(10)] == [200] * 10


ALICE_KEY = "alice-office-key-0123456789"


def users_inventory(office: Office, users: list[dict[str, str]]) -> Path:
    """The office's inventory with one fleet-wide vllm_api_key (the stand-ins' own) and these users on
    the gateway, alice's key `!env OFFICE_ALICE_KEY`."""
    document = yaml.safe_load(office.inventory.read_text())
    document["all"].setdefault("vars", {})["vllm_api_key"] = API_KEY  # secret by its name
    document["all"]["hosts"][office.gateway.name]["office_users"] = users
    path = office.tmp / "users.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False).replace("key: ALICE", "key: !env OFFICE_ALICE_KEY"))
    return path


def test_office_users_a_wrong_key_is_refused_a_users_key_streams_and_a_revoked_one_is_refused(converged,
                                                                                               office) -> None:
    """Last in this module: it leaves the gateway with a user (bob) configured."""
    # the generated keys' file in the test's folder; the controller cache too (its key is in the config folder)
    env = {"OFFICE_ALICE_KEY": ALICE_KEY, "XDG_CONFIG_HOME": str(office.tmp / "config"),
           "PROVISION_CACHE_DIR": str(office.tmp / "cache")}
    up = provision("up", str(users_inventory(office, [{"name": "alice", "key": "ALICE"}, {"name": "bob"}])),
                   "--limit", office.gateway.name, "--tags", "office_gateway", env=env)
    assert up.returncode == 0, up.output
    bob = json.loads((office.tmp / "config/provision/office-users" / f"{office.gateway.name}.json").read_text())["bob"]
    assert "office user bob: a new key, kept in" in up.output and bob not in up.output and ALICE_KEY not in up.output
    _, modes = office.gateway.exec("stat -c '%a %U' /etc/haproxy/office-users.map /etc/haproxy/office-backend-key.map;"
                                   f" grep -c -e {ALICE_KEY} -e {API_KEY} /etc/haproxy/haproxy.cfg")
    assert modes.split() == ["600", "root", "600", "root", "0"], modes  # the keys only in root's maps
    status, body = office.chat(key=API_KEY)  # the backends' key is no user's
    assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key", body
    status, body = office.chat(max_tokens=20, stream=True, key=ALICE_KEY)
    assert status == 200 and body.rstrip().endswith("data: [DONE]"), body
    assert office.chat(key=bob)[0] == 200
    revoke = provision("up", str(users_inventory(office, [{"name": "bob"}])), "--limit", office.gateway.name,
                       "--tags", "office_gateway", env=env)
    assert revoke.returncode == 0 and "reload haproxy" in revoke.output, revoke.output
    assert office.chat(key=ALICE_KEY)[0] == 401
    assert office.chat(key=bob)[0] == 200
    # counted per user since the reload (alice's refused request is not: the 401 comes before the count)
    assert parse_users(office.gateway.exec(admin_script("/run/haproxy/admin.sock", "show"))[1]) == {"bob": 1}
