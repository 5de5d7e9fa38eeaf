"""`provision plan | bench | status` against a lab laptop serving the stand-in, and `provision up`
refusing a context that cannot fit before it touches the host.

One host: first a refused `up` while it is fresh, then the whole `provision up`, then the views; the
steps build on each other through module fixtures, so any single test can run alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from html import unescape
from typing import Any

import pytest

from tests.browser import load
from tests.e2e.helpers import Run, provision
from tests.e2e.test_serving import HF_TOKEN, SERVED, SERVING, STANDIN_ENV, Laptop, hub, hub_endpoint, sh
from tests.lab import Lab
from tests.standins.nvidia import HostTraits
from tests.standins.vllm.build import build_images

pytestmark = pytest.mark.lab
__all__ = ["hub"]  # the stand-in hub fixture, shared with test_serving.py

BENCH = ("--runs", "4", "--max-tokens", "400")  # 0.2 s a run at the stand-in's 2000 tok/s


@pytest.fixture(scope="module")
def fleet_images(lab: Lab) -> dict[str, str]:
    """The steady and the alternating stand-in (fast, as the serving tests build them)."""
    return build_images(f"127.0.0.1:{lab.registry.port}", pull_registry=lab.registry.address_for_hosts,
                        behaviours=("ok", "alternating"), env=STANDIN_ENV, log=lambda _: None)


@pytest.fixture(scope="module")
def laptop(gpu_host, gpu_inventory, fleet_images, hub, tmp_path_factory) -> Iterator[Laptop]:
    host = gpu_host(HostTraits(), prefix="fleet")
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
