"""The status page (`provision status --html`): every item of a recorded status document shown,
host text escaped, no network needed, and the charts really drawn in a headless Chromium."""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from provision.cli.cache_status import cache_row
from provision.inventory.model import Host
from provision.office_cache.status import parse_cache_status
from provision.status_page.page import LIVE, json_for_script, render_page
from tests.browser import load

FIXTURE = Path(__file__).parent / "fixtures/status_page/status.json"
COLLECTED_AT = 1796230000.0
HOSTILE = "<script>document.title='owned'</script><img src=x onerror=alert(1)>"


def rows() -> dict:
    return json.loads(FIXTURE.read_text())


class Visible(HTMLParser):
    """The page's text as a browser shows it, and the tags it would build (scripts' bodies aside)."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self.in_script = tag in ("script", "style")

    def handle_endtag(self, tag):
        self.in_script = False

    def handle_data(self, data):
        if not self.in_script:
            self.text.append(data)


def visible(html: str) -> Visible:
    parser = Visible()
    parser.feed(html)
    return parser


def test_every_item_of_the_status_is_on_the_page() -> None:
    page = visible(render_page(rows(), COLLECTED_AT))
    text = " ".join(page.text)
    laptop = rows()["laptop-2"]
    for item in ("NVIDIA GeForce RTX 5090 Laptop GPU / 580.95.05", "gemma-4-26b-a4b-awq", "9d3e71c40a2b",
                 "2026-12-01 14:43 UTC",  # serving since: collected at minus 93784 s of uptime
                 "active (running)", "3 / 1", "41.5%", "311 tok/s",
                 "4.12 GiB planned, 3.31 GiB found; full-length sequences 2.79 planned, 2.24 found",
                 "DRIFT: --max-num-seqs 9 ≠ 3", laptop["last_failed_upgrade"], laptop["memory_warnings"][0],
                 "No route to host", "2 of 3 hosts serving"):
        assert item in text, item
    # the bench history: both releases, the regression, the TTFT percentiles
    history = rows()["here"]["bench_history"]
    assert all(entry["release"] in text for entry in history)
    assert "REGRESSION: slowest stream" in text and f"{history[0]['ttft_p95_s']:.2f} s" in text
    charts = [attrs for tag, attrs in page.tags if tag == "div" and "chart" in attrs.get("class", "")]
    assert [chart["data-host"] for chart in charts] == ["here", "laptop-2", "laptop-3"]


def test_host_values_are_shown_as_text_never_as_markup() -> None:
    hostile = copy.deepcopy(rows())
    laptop = hostile["laptop-2"]
    laptop["gpu"] = laptop["last_failed_upgrade"] = laptop["model_profile"] = HOSTILE
    laptop["drift"] = [HOSTILE]
    laptop["flags"] = "DRIFT: " + HOSTILE
    laptop["bench_history"][0]["release"] = HOSTILE
    laptop["bench_history"][0]["measured_at"] = 1796228000.0
    hostile[HOSTILE] = hostile.pop("laptop-3")
    html = render_page(hostile, COLLECTED_AT)
    page = visible(html)
    assert not [attrs for tag, attrs in page.tags if tag == "img"], "a host value became an element"
    assert sum(1 for tag, _ in page.tags if tag == "script") == 3  # the data, uPlot, the page's own
    assert " ".join(page.text).count(HOSTILE) >= 5  # shown, as text
    # the chart data cannot close its <script> element
    data = re.search(r'<script type="application/json" id="bench-data">(.*?)</script>', html, re.S)
    assert data and "<" not in data[1] and json.loads(data[1])
    assert json.loads(json_for_script({"a": "</script><b>&"})) == {"a": "</script><b>&"}


def test_the_page_needs_no_network() -> None:
    html = render_page(rows(), COLLECTED_AT)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html and "uPlot v1.6.32" not in html and "(v1.6.32)" in html


@pytest.mark.parametrize("width,height,name", [(1280, 1000, "laptop"), (390, 2400, "phone")])
def test_the_page_in_a_real_browser_draws_the_charts(tmp_path: Path, width: int, height: int, name: str) -> None:
    dom, painted = load(render_page(rows(), COLLECTED_AT), tmp_path, width, height, f"status-page-{name}.png")
    # hosts with history drew a chart with pixels on it; the unreachable host has none to draw
    assert int(painted[0]) > 1000 and int(painted[1]) > 1000, painted
    assert painted[2] == "none"
    assert dom.count('class="uplot') >= 2 and "owned" not in dom


def test_the_live_page_holds_the_facts_of_an_up_and_leaves_what_changes_by_the_second_to_the_browser() -> None:
    html = render_page(rows(), COLLECTED_AT, live=LIVE)
    page = visible(html)
    text = " ".join(page.text)
    for item in ("NVIDIA GeForce RTX 5090 Laptop GPU / 580.95.05", "gemma-4-26b-a4b-awq", "2026-12-01 14:43 UTC",
                 "4.12 GiB planned, 3.31 GiB found", "DRIFT: --max-num-seqs 9 ≠ 3",
                 rows()["laptop-2"]["last_failed_upgrade"], "REGRESSION: slowest stream"):
        assert item in text, item
    # running/waiting, KV use, tokens/s, health: read live (gateway, Prometheus), never frozen in the file
    for frozen in ("3 / 1", "41.5%", "311 tok/s", "active (running)", "collected"):
        assert frozen not in text, frozen
    # so the page an `up` writes does not change with the clock (a later one reads a longer uptime
    # of the same start): publish.sh finds it unchanged
    later = rows()
    for row in later.values():
        row["uptime_s"] = None if row.get("uptime_s") is None else row["uptime_s"] + 30
    assert render_page(later, COLLECTED_AT + 30, live=LIVE) == html
    charts = [attrs for tag, attrs in page.tags if tag == "div" and "live" in attrs.get("class", "").split()]
    assert [chart["data-chart"] for chart in charts] == ["tokens", "requests", "kv"] * 3
    config = re.search(r'<script type="application/json" id="live-config">(.*?)</script>', html, re.S)
    assert config and json.loads(config[1])["stats"] == "/status/gateway;csv"
    assert json.loads(config[1])["query_range"] == "/status/api/v1/query_range"
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)


def test_the_live_page_shows_host_values_as_text_and_page_js_writes_none_as_markup() -> None:
    hostile = copy.deepcopy(rows())
    hostile["laptop-2"]["gpu"] = HOSTILE
    hostile[HOSTILE] = hostile.pop("laptop-3")
    page = visible(render_page(hostile, COLLECTED_AT, live=LIVE))
    assert not [attrs for tag, attrs in page.tags if tag == "img"]
    assert " ".join(page.text).count(HOSTILE) >= 2
    # what page.js reads (the gateway's CSV, Prometheus's JSON) reaches the page as text or numbers only
    script = (Path(__file__).parents[2] / "provision/status_page/page.js").read_text()
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script and "document.write" not in script


# `provision/office_cache/status.sh`'s output on the lab's real office cache (roles/office_cache on a
# Debian 12 lab host, after two clients were rolled out through it): tests/e2e/test_office_cache.py,
# test_status_shows_the_cache_services_and_hit_rates, keeps it (recorded 2026-12-03; the file says so).
CACHE_OUTPUT = Path(__file__).parent / "fixtures/recorded/office_cache_status.txt"


def cache_rows(output: str | None = None) -> dict:
    """The `office_cache` rows `provision status --json` (and `up`'s publish step) make of the output."""
    text = CACHE_OUTPUT.read_text() if output is None else output
    return {"acache-1": cache_row(Host(name="acache-1", address="127.0.0.1"), lambda *_: (0, text, ""))}


def test_the_live_page_shows_the_office_cache_figures_as_up_read_them_and_when() -> None:
    recorded = parse_cache_status(CACHE_OUTPUT.read_text())
    html = render_page(rows(), COLLECTED_AT, live=LIVE, caches=cache_rows())
    text = " ".join(visible(html).text)
    apt_rate, hub_rate = f"{recorded.apt_hit_rate:.0%}", f"{recorded.hub_hit_rate:.0%}"
    for item in ("office cache", "acache-1", "apt-cacher-ng active", "nginx active",
                 f"apt hit rate {apt_rate}", f"hub hit rate {hub_rate}", "fetched upstream", "fetched from the hub",
                 f"{recorded.disk_used_kib / 1048576:.1f} GiB used, {recorded.disk_free_kib / 1048576:.1f} GiB free",
                 "hub cache bound 200g", "nginx max_size", "Not live: as", "read them at 2026-12-02 16:46 UTC"):
        assert item in text, item
    assert "NOT HEALTHY" not in text
    # read again later, the same figures: only the line that says when differs (publish.sh ignores it)
    hosts_later = rows()  # the GPU hosts' facts the same too (each one's uptime 600 s longer)
    for row in hosts_later.values():
        row["uptime_s"] = None if row.get("uptime_s") is None else row["uptime_s"] + 600
    later = render_page(hosts_later, COLLECTED_AT + 600, live=LIVE, caches=cache_rows())
    changed = [line for line in later.splitlines() if line not in html.splitlines()]
    assert len(changed) == 1 and "data-read-at=" in changed[0], changed
    # more bytes served from the cache: a user sees other figures, so the page differs beyond that line
    more = CACHE_OUTPUT.read_text().replace(f"hub.hit_bytes={recorded.hub_hit_bytes}",
                                            f"hub.hit_bytes={recorded.hub_hit_bytes + (4 << 30)}")
    moved = render_page(hosts_later, COLLECTED_AT + 600, live=LIVE, caches=cache_rows(more))
    assert len([line for line in moved.splitlines() if line not in html.splitlines()]) > 1


def test_a_cache_host_that_is_down_or_hostile_is_shown_as_text() -> None:
    down = CACHE_OUTPUT.read_text().replace("unit.nginx=active", "unit.nginx=failed")
    caches = {**cache_rows(down), HOSTILE: {"error": HOSTILE, "reachable": False}}
    page = visible(render_page(rows(), COLLECTED_AT, live=LIVE, caches=caches))
    text = " ".join(page.text)
    assert "office cache: NOT HEALTHY" in text and "nginx failed" in text
    assert not [attrs for tag, attrs in page.tags if tag == "img"] and text.count(HOSTILE) == 2


def test_a_host_benched_once_gets_a_time_axis_of_hours_not_years(tmp_path: Path) -> None:
    """Seen on the GPU lab office (tests/e2e/test_fleet_views.py): a fresh host's one kept result drew
    an axis from 2027 to 2029 (uPlot widens a zero-width time range); half a day each side now."""
    one = rows()
    first = next(name for name, row in one.items() if row.get("bench_history"))
    one[first]["bench_history"] = one[first]["bench_history"][:1]
    dom, painted = load(render_page(one, COLLECTED_AT), tmp_path, 1280, 1000, "status-page-one-bench.png")
    spans = [float(span) for span in re.findall(r'data-x-span="([0-9.e+]+)"', dom)]
    assert int(painted[0]) > 1000 and spans and spans[0] == 86400, (painted, spans)
