"""`provision plan | bench | status` against a lab laptop serving the stand-in, and `provision up`
refusing a context that cannot fit before it touches the host; last, the lab office (issue 23): that
laptop, two more GPU lab laptops and a gateway host converged by the whole `provision up`, and the
office's /status page in Chromium showing each host's state from live data.

One host: first a refused `up` while it is fresh, then the whole `provision up`, then the views; the
steps build on each other through module fixtures, so any single test can run alone.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from html import unescape
from typing import Any

import pytest

from provision.office_gateway.admin import admin_script
from tests.browser import PAINTED, SAMPLES, LiveBrowser, load
from tests.e2e.helpers import Run, provision
from tests.e2e.office_cache_support import add_group
from tests.e2e.office_gateway_support import GATEWAY_PORT, VLLM_PORT
from tests.e2e.test_office_gateway import page_state
from tests.e2e.test_serving import HF_TOKEN, SERVED, SERVING, STANDIN_ENV, Laptop, hub, hub_endpoint, sh
from tests.lab import Lab, LabHost
from tests.lab.net import MACHINE_FROM_HOSTS
from tests.standins.nvidia import HostTraits
from tests.standins.vllm.build import build_images

pytestmark = pytest.mark.lab
__all__ = ["hub"]  # the stand-in hub fixture, shared with test_serving.py

BENCH = ("--runs", "4", "--max-tokens", "400")  # 0.2 s a run at the stand-in's 2000 tok/s
NODE_PORT = 9100  # node-exporter's
OFFICE_PORTS = (VLLM_PORT, NODE_PORT)  # forwarded from this machine: the gateway and Prometheus reach them
FAILING = "cuda-oom"  # the stand-in prints real vLLM's CUDA out-of-memory line and exits


@pytest.fixture(scope="module")
def fleet_images(lab: Lab) -> dict[str, str]:
    """The steady and the alternating stand-in (fast, as the serving tests build them), and one that
    fails its start (the office's failed upgrade)."""
    return build_images(f"127.0.0.1:{lab.registry.port}", pull_registry=lab.registry.address_for_hosts,
                        behaviours=("ok", "alternating", FAILING), env=STANDIN_ENV, log=lambda _: None)


@pytest.fixture(scope="module")
def laptop(gpu_host, gpu_inventory, fleet_images, hub, tmp_path_factory) -> Iterator[Laptop]:
    host = gpu_host(HostTraits(), prefix="fleet", extra_ports=OFFICE_PORTS)  # also one of the office's
    base = {"hf_endpoint": hub_endpoint(hub), "hf_token": HF_TOKEN, "office_cache_trusted": True,
            "vllm_image": fleet_images["ok"],
            "served_model_name": SERVED, "vllm_ready_timeout": 180, "smoke_timeout": 60}
    laptop = Laptop(host, tmp_path_factory.mktemp("fleet"), gpu_inventory, base)
    yield laptop
    print("\nfleet runs:\n  " + "\n  ".join(laptop.timings))  # shown with -s


@pytest.fixture(scope="module")
def refused(laptop: Laptop) -> dict[str, Any]:
    """On the fresh host: `provision up -e max_model_len=262144` (24 GB card), then what it left."""
    run = laptop.up("refused", "-e", "max_model_len=262144")
    return {"run": run, "sources": sh(laptop.host, "ls /etc/apt/sources.list.d/"),
            "packages": laptop.host.exec("dpkg-query -W -f '${Package}\\n' | grep -E 'nvidia|cuda|docker'")[1]}


@pytest.fixture(scope="module")
def served(refused, laptop: Laptop) -> Run:
    run = laptop.up("first")
    assert run.returncode == 0, run.output
    return run


def views(laptop: Laptop, command: str, *args: str) -> Run:
    """`provision plan|status` (their --json prints to stdout, so no results file)."""
    return provision(command, str(laptop.inventory), *args)


def test_up_refuses_a_context_that_cannot_fit_before_changing_anything(refused, laptop):
    run = refused["run"]
    assert run.returncode == 1, run.output
    tasks = run.host(laptop.host.name)["tasks"]
    assert not [t["name"] for t in tasks if t["changed"]]
    assert tasks[-1]["name"] == "Model memory plan" and tasks[-1]["status"] == "failed"
    output = " ".join(run.output.split())  # the console wraps long lines
    assert "max_model_len 262144 does not fit" in output and "The largest context that fits is" in output
    assert "nvidia" not in refused["sources"] and "cuda" not in refused["sources"]
    assert refused["packages"].strip() == "", refused["packages"]


def test_up_reports_the_plan_and_plan_prints_it(served, laptop):
    planned = next(t for t in served.host(laptop.host.name)["tasks"] if t["name"] == "Model memory plan")
    assert planned["data"]["max_model_len"] == 131072 and planned["status"] == "ok"
    table = views(laptop, "plan")
    assert table.returncode == 0, table.output
    assert "MEMORY PLAN" in table.stdout and "RTX 5090 Laptop" in table.stdout and "fits" in table.stdout
    document = views(laptop, "plan", "--json", "-e", "max_model_len=auto")
    row = json.loads(document.stdout)[laptop.host.name]
    assert document.returncode == 0 and row["max_model_len"] == row["largest_fitting_context"] >= 131072


def test_status_shows_the_service_in_sync_then_drift(served, laptop):
    run = views(laptop, "status", "--json")
    assert run.returncode == 0, run.output
    row = json.loads(run.stdout)[laptop.host.name]
    image = sh(laptop.host, "docker inspect -f '{{.Config.Image}}' vllm")
    assert row["state"] == "active (running)" and row["health"] == "ok" and row["flags"] == "in sync"
    assert row["image"] == image and "@sha256:" in image and row["gpu"] and row["driver"]
    assert row["uptime_s"] is not None and row["running"] == 0
    assert row["kv_found_gib"] > 0 and row["kv_planned_gib"] > 0 and row["sequences_found"] > 0
    assert row["memory_warnings"] == [], "the stand-in finds what the plan expects"
    table = views(laptop, "status")
    assert "in sync" in table.stdout and image.split("@", 1)[1][:19] in table.stdout
    assert f"{laptop.host.name}: KV cache planned {row['kv_planned_gib']:.2f} GiB, found" in table.stdout
    laptop.set_vars(max_num_seqs=3)  # in the inventory, not applied
    try:
        drifted = views(laptop, "status")
        listed = json.loads(views(laptop, "status", "--json").stdout)[laptop.host.name]["drift"]
    finally:
        laptop.set_vars()
    assert drifted.returncode == 0 and "DRIFT" in drifted.stdout, drifted.output
    # what drifted is listed, read from the running container (before: a bare "DRIFT")
    assert any(d.startswith("--max-num-seqs ") and d.endswith(" ≠ 3") for d in listed), listed
    # a unit edited by hand (not restarted) is drift too (before: "in sync", taken from the record)
    unit = "/etc/systemd/system/vllm.service"
    sh(laptop.host, f"cp {unit} /root/vllm.service.saved && sed -i 's/--max-num-seqs [0-9]*/--max-num-seqs 9/' {unit}")
    try:
        edited = json.loads(views(laptop, "status", "--json").stdout)[laptop.host.name]
    finally:
        sh(laptop.host, f"mv /root/vllm.service.saved {unit}")
    assert edited["flags"].startswith("DRIFT") and any("unit file edited on the host" in d for d in edited["drift"])


def test_bench_passes_the_steady_stand_in(served, laptop):
    run = laptop.run("bench", str(laptop.inventory), *BENCH, name="bench-ok")
    assert run.returncode == 0, run.output
    row = run.results["hosts"][laptop.host.name]
    assert row["passed"] and len(row["runs"]) == 4 and row["completion_tokens"] == [400] * 4
    assert "passed" in run.stdout and "mean time to first token" in run.stdout


@pytest.fixture(scope="module")
def alternating(served, office_ok, laptop: Laptop, fleet_images) -> Iterator[Run]:
    """The bimodal stand-in deployed (kept until the module ends): the office bench of the steady
    release (`office_ok`) is taken first, whatever order the tests run in (in file order the steady
    one was otherwise measured on this release, and the regression had nothing to compare with)."""
    laptop.set_vars(vllm_image=fleet_images["alternating"])
    try:
        deploy = laptop.up("alternating", "--tags", SERVING)
        assert deploy.returncode == 0, deploy.output
        yield laptop.run("bench", str(laptop.inventory), *BENCH, name="bench-alternating")
    finally:
        laptop.set_vars()


def test_bench_fails_the_gate_on_the_alternating_stand_in(alternating, laptop):
    assert alternating.returncode == 1, alternating.output
    row = alternating.results["hosts"][laptop.host.name]
    assert not row["passed"] and row["clusters"] == 2
    assert "FAILED the stability gate" in alternating.stdout and "2 clusters" in alternating.stdout


# ------------------------------------------------------------------ the office workload and the page
OFFICE = ("--workload", "office", "--max-tokens", "300")  # documents up to the served 131072 tokens
STATE = "/var/lib/provision/vllm"  # vllm_state_dir's default


@pytest.fixture(scope="module")
def office_ok(served, laptop: Laptop) -> Run:
    """The office bench on the steady stand-in, before the alternating upgrade."""
    return laptop.run("bench", str(laptop.inventory), *OFFICE, name="office-ok")


def test_office_bench_passes_the_promise_and_is_kept_on_the_host(office_ok, laptop):
    assert office_ok.returncode == 0, office_ok.output
    row = office_ok.results["hosts"][laptop.host.name]
    assert row["passed"] and row["errors"] == 0 and sorted(row["per_user"]) == ["0", "1", "2"]
    assert row["context"] == 131072 and row["largest_prompt_tokens"] > 120000  # the 128K context fits
    kept = json.loads(sh(laptop.host, f"cat {STATE}/bench/{row['release']}.json"))
    assert kept["min_tokens_per_s"] == row["min_tokens_per_s"] and kept["release"] == row["release"]


@pytest.fixture(scope="module")
def office_alternating(office_ok, alternating, laptop: Laptop) -> Run:
    """The office bench after the upgrade to the bimodal stand-in (still deployed: set_vars is the
    inventory only)."""
    return laptop.run("bench", str(laptop.inventory), *OFFICE, name="office-alternating")


def test_office_bench_flags_the_bimodal_upgrade_as_a_regression(office_alternating, office_ok, laptop):
    assert office_alternating.returncode == 1, office_alternating.output
    row = office_alternating.results["hosts"][laptop.host.name]
    before = office_ok.results["hosts"][laptop.host.name]
    assert row["release"] != before["release"] and row["compared_with"] == before["release"]
    assert row["regression"] and row["regression"].startswith("slowest stream")
    assert "REGRESSION" in office_alternating.stdout


def test_the_status_page_shows_the_live_host_and_draws_its_history(office_alternating, laptop, tmp_path):
    page = tmp_path / "status.html"
    run = views(laptop, "status", "--json", "--html", str(page))
    row = json.loads(run.stdout)[laptop.host.name]
    html = unescape(page.read_text())  # the text as shown (an apostrophe is &#x27; in the file)
    # after the --tags upgrade the plan is not recorded (planned: -), what vLLM found is
    found = "-" if row["kv_found_gib"] is None else f"{row['kv_found_gib']:.2f}"
    for item in (row["gpu"], row["driver"], row["model_profile"], row["release"], row["state"], row["flags"],
                 f"GiB planned, {found} GiB found", *(entry["release"] for entry in row["bench_history"])):
        assert item and item in html, item
    assert len(row["bench_history"]) == 2 and "REGRESSION: slowest stream" in html
    _, painted = load(html, tmp_path, 1280, 1100, "status-page-lab.png")
    assert int(painted[0]) > 1000, painted


# ------------------------------------------------------------------ the lab office and its /status page
OFFICE_KEY = "sk-fleet-office-0123456789"  # one vllm_api_key for the office: the gateway's users send it
GPU_ROLES = {"preflight", "plan", "nvidia_driver", "cuda_toolkit", "docker", "container_toolkit", "host_tuning",
             "model", "vllm", "smoke"}
EVIDENCE = "status-office-gpu-lab.png"


class Office:
    """The gateway host in front of three GPU lab laptops (the fleet laptop and two more)."""

    def __init__(self, laptop: Laptop, inventory: Any, gateway: LabHost, hosts: list[LabHost]) -> None:
        self.laptop, self.inventory, self.gateway, self.hosts = laptop, inventory, gateway, hosts
        self.names = [host.name for host in hosts]
        self.url = f"http://127.0.0.1:{gateway.port(GATEWAY_PORT)}"
        self.runs: dict[str, Run] = {}

    def run(self, name: str, *args: str) -> Run:
        self.runs[name] = run = self.laptop.run(args[0], str(self.inventory), *args[1:], name=name)
        return run

    def chat(self) -> int:
        body = {"model": SERVED, "max_tokens": 400, "stream": True, "ignore_eos": True,
                "messages": [{"role": "user", "content": "hello"}]}
        request = urllib.request.Request(f"{self.url}/v1/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Authorization": f"Bearer {OFFICE_KEY}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read()
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return 0


@pytest.fixture(scope="module")
def office(office_alternating, laptop: Laptop, lab: Lab, gpu_host, fleet_images) -> Office:
    """The whole `provision up` of an inventory of a gateway host (no GPU) and three GPU lab laptops:
    the fleet laptop (kept bench history, now back to the steady release), two fresh ones; then a
    failing upgrade of one (rolled back), the office bench once on every GPU host, a unit edited by
    hand on another (drift), and the page published again (`up --tags office_gateway`)."""
    started = time.monotonic()
    with ThreadPoolExecutor(3) as pool:
        made = [pool.submit(gpu_host, HostTraits(), prefix="fleet", extra_ports=OFFICE_PORTS) for _ in range(2)]
        gateway = lab.new_host(prefix="fleetgw", extra_ports=[GATEWAY_PORT, NODE_PORT])
        hosts = [laptop.host, *(future.result() for future in made)]
    every = {host.name: {"office_metrics_node_address": MACHINE_FROM_HOSTS,
                         "office_metrics_node_exporter_port": host.port(NODE_PORT)} for host in [gateway, *hosts]}
    for host in hosts:
        every[host.name].update(office_gateway_backend_address=MACHINE_FROM_HOSTS,
                                office_gateway_backend_port=host.port(VLLM_PORT))
    inventory = laptop.write_inventory(laptop.tmp / "office.yaml", [gateway, *hosts], every,
                                       **{**laptop.base_vars, "vllm_api_key": OFFICE_KEY,
                                          "office_metrics_scrape_interval_s": 2})
    add_group(inventory, "office_gateway", gateway.name)
    office = Office(laptop, inventory, gateway, hosts)
    laptop.timings.append(f"office hosts made: {time.monotonic() - started:.0f} s")
    office.run("office-up", "up")
    failing = office.run("office-failed", "up", "--limit", office.names[2], "--tags", SERVING,
                         "-e", f"vllm_image={fleet_images[FAILING]}")
    office.run("office-bench", "bench", "--limit", ",".join(office.names), *OFFICE)
    unit = "/etc/systemd/system/vllm.service"  # edited by hand, not restarted: drift
    sh(hosts[1], f"cp {unit} /root/vllm.service.saved && sed -i 's/--max-num-seqs [0-9]*/--max-num-seqs 9/' {unit}")
    try:
        office.run("office-publish", "up", "--limit", gateway.name, "--tags", "office_gateway")
        office.runs["status"] = provision("status", str(inventory), "--limit", ",".join(office.names), "--json",
                                          env=laptop.env)
    finally:
        sh(hosts[1], f"mv /root/vllm.service.saved {unit}")
    assert failing.returncode == 1, failing.output[-4000:]
    laptop.timings.append(f"office ready: {time.monotonic() - started:.0f} s")
    return office


def test_the_whole_up_converges_the_office_gpu_roles_on_the_gpu_hosts_only(office: Office) -> None:
    up = office.runs["office-up"]
    assert up.returncode == 0, up.output[-6000:]
    ran = {task["role"] for task in up.host(office.gateway.name)["tasks"] if task["status"] != "skipped"}
    assert ran and not ran & GPU_ROLES, ran  # no GPU there: before, preflight stopped the gateway
    for name in office.names:
        assert not up.host(name)["failed"], up.output[-4000:]
    assert "status page written" in up.output
    failed = office.runs["office-failed"].host(office.names[2])["tasks"][-1]["error"]
    assert "out of GPU memory" in failed and "rolled back to release" in failed, failed
    # the rotation's rule (provision/runner/rotation.py): a failed swap leaves its backend drained
    assert f"is left drained at the office gateway {office.gateway.name}" in failed, failed
    assert office.runs["office-bench"].returncode == 0, office.runs["office-bench"].output[-4000:]
    assert f"status page written: {office.url.replace(str(office.gateway.port(GATEWAY_PORT)), str(GATEWAY_PORT))}" \
           f"/status ({office.gateway.name}: 3 hosts)" in office.runs["office-publish"].output, \
        office.runs["office-publish"].output


def card_text(name: str) -> str:
    return (f"((Array.from(document.querySelectorAll('.host')).find(c => c.dataset.hostName === {json.dumps(name)})"
            " || {}).innerText || '')")


def test_the_office_status_page_shows_every_gpu_host_from_live_data(office: Office, tmp_path) -> None:
    """/status in Chromium (issue 23, item 2): per host the GPU, driver, model profile, release and since
    when, the gateway's state and counters, requests running/waiting, KV use and tokens/s charted from
    the real Prometheus, planned vs found KV memory, drift, the last failed upgrade, the bench history;
    the gateway's backends UP, DRAIN (the failed upgrade's host, left drained) and DOWN (one stopped)."""
    rows = json.loads(office.runs["status"].stdout)
    fleet, drifted, failed = office.names
    browser = LiveBrowser(tmp_path, 1280, 3300)  # the three cards whole in the screenshot
    done = threading.Event()
    answers: list[int] = []

    def user() -> None:  # streams through the gateway, so each host's charts have a line
        while not done.is_set():
            answers.append(office.chat())

    users = [threading.Thread(target=user) for _ in range(4)]
    for thread in users:
        thread.start()
    try:
        browser.open(f"{office.url}/status")
        try:
            browser.wait_for(f"{page_state(fleet)} === 'UP' && {page_state(drifted)} === 'UP' && "
                             f"{page_state(failed)} === 'DRAIN'", 30)
        except AssertionError as error:  # what the page and the gateway said instead
            _, stat = office.gateway.exec(admin_script("/run/haproxy/admin.sock", "show"))
            raise AssertionError(f"{browser.evaluate('document.body.innerText')!s:.4000}\n{stat}") from error
        # samples of every host; tokens and KV above 0 on each (the drained one's from the office bench)
        browser.wait_for(f"{SAMPLES}.length === 9 && {SAMPLES}.every(chart => chart[1] >= 3)", 90, every=0.5)
        browser.wait_for(f"{SAMPLES}.every(chart => chart[0] === 'requests' || chart[2] > 0)", 30, every=0.5)
        samples = browser.evaluate(SAMPLES)
        done.set()
        for thread in users:
            thread.join()
        assert answers and set(answers) == {200}, answers
        sh(office.hosts[1], "systemctl stop vllm")
        browser.wait_for(f"{page_state(drifted)} === 'DOWN'", 30)
        time.sleep(1)  # the charts' next refresh
        painted = browser.evaluate(PAINTED)
        cards = {name: str(browser.evaluate(card_text(name))) for name in office.names}
        summary = str(browser.evaluate("document.getElementById('gateway-summary').innerText"))
        shot = browser.screenshot(EVIDENCE)
    finally:
        done.set()
        for thread in users:
            thread.join()
        browser.close()
    print(f"/status of the GPU lab office: {samples}; screenshot {shot}")
    assert summary.startswith("1 of 3 backends UP"), summary
    badges = [next(line for line in cards[name].splitlines() if line.startswith(name)).split()[-1]
              for name in (fleet, drifted, failed)]  # each card's heading: NAME STATE
    assert badges == ["UP", "DOWN", "DRAIN"], cards
    # per card: 3 live charts (tokens/s, requests, KV), then the bench history's, each drawn
    assert isinstance(painted, list) and len(painted) == 12 and all(count > 1000 for count in painted), painted
    for name, text in cards.items():
        row = rows[name]
        for item in (row["gpu"], row["driver"], row["model_profile"], row["release"],
                     f"{row['kv_planned_gib']:.2f} GiB planned, {row['kv_found_gib']:.2f} GiB found",
                     "in flight", "served; last check", "requests running / waiting", "KV cache in use",
                     "generated tokens/s", *(entry["release"] for entry in row["bench_history"])):
            assert item and str(item) in text, (name, item, text)
        assert "serving since\t-" not in text and "serving since\n-" not in text, text
        assert row["bench_history"] and "no office bench kept" not in text, text
    assert "drift\tin sync" in cards[fleet] and "DRIFT" in cards[drifted] and "unit file edited" in cards[drifted]
    assert "last failed upgrade\tnone" in cards[fleet] and "out of GPU memory" in cards[failed], cards[failed]
    assert "REGRESSION: slowest stream" in cards[fleet]  # the bimodal release's bench, kept on the host
