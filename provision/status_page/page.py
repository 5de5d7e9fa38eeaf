"""`provision status --html FILE`: the status rows as one self-contained HTML page.

Everything an admin looks at per host (GPU, driver, model profile, release and since when, health,
requests running/waiting, KV-cache use, planned vs found KV memory, drift, the last failed upgrade)
as escaped text, and the office bench history (decode tokens/s per stream per release, over time)
as a chart drawn by uPlot, which is inlined with its stylesheet (vendor/SOURCE.md): the page needs no
network, so it opens from a file, a mail attachment, or a phone with no route to a CDN.

Data is data: every value read from a host goes through `html.escape` into text, and the chart's
data travels as JSON in a `<script type="application/json">` element with `<`, `>` and `&` written
as `\\u003c`… so a value cannot close the element; the script reads it with JSON.parse and gives
uPlot numbers only (release names appear in the escaped table under the chart, not in the chart).

Live mode (`render_page(rows, live=LIVE)`): the page `provision up` publishes on the office gateway,
which HAProxy serves at `/status` (provision/office_gateway/publish.sh). The facts that change only at
an `up` (GPU, driver, profile, release and since when, planned vs found KV memory, drift, the last
failed upgrade, the bench history) are written into it then; page.js reads the rest in the browser:
each backend's state (UP, DRAIN, DOWN) from HAProxy's read-only stats CSV every health interval, and
tokens/s, requests and KV use over time from Prometheus's query_range behind the same gateway. What
changes by the second is never written into the page, so a second `up` leaves it unchanged (and
HAProxy, which reads the file when it loads its config, unreloaded).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from html import escape
from importlib.resources import files
from typing import Any

PAGE = files("provision.status_page")
VENDOR = PAGE / "vendor"
UPLOT_VERSION = "1.6.32"

STYLE = """
:root { color-scheme: light dark; --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; --line: #8884; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; padding: 12px; max-width: 1200px; }
h1 { font-size: 1.3em; margin: 0 0 4px; }
.hosts { display: grid; gap: 12px; grid-template-columns: repeat(auto-fit, minmax(min(100%, 520px), 1fr)); }
.host { border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; min-width: 0; }
.host h2 { font-size: 1.1em; margin: 0 0 6px; overflow-wrap: anywhere; }
table.facts { border-collapse: collapse; width: 100%; }
.facts th, .facts td { text-align: left; vertical-align: top; padding: 3px 6px; border-top: 1px solid var(--line);
                       overflow-wrap: anywhere; }
.facts th { width: 38%; font-weight: 600; }
.history { padding-left: 1.2em; margin: 6px 0; } .history li { margin: 3px 0; overflow-wrap: anywhere; }
.ok { color: var(--ok); } .bad { color: var(--bad); font-weight: 600; } .warn { color: var(--warn); }
.badge { font-size: .8em; padding: 1px 8px; border-radius: 10px; border: 1px solid currentColor; }
.chart { width: 100%; min-height: 220px; margin-top: 8px; } .chart:empty { display: none; }
.muted { opacity: .7; font-size: .9em; }
.host h3 { font-size: 1em; margin: 10px 0 0; }
h2.section { font-size: 1.15em; margin: 18px 0 2px; }
@media (max-width: 600px) { body { padding: 6px; font-size: 14px; } .facts th { width: 45%; } }
"""

SCRIPT = """
(function () {
  var data = JSON.parse(document.getElementById('bench-data').textContent);
  document.querySelectorAll('.chart[data-host]').forEach(function (box) {
    var points = data[box.getAttribute('data-host-index')] || [];
    if (!points.length) { return; }
    var xs = points.map(function (p) { return p[0]; });
    var mean = points.map(function (p) { return p[1]; });
    var low = points.map(function (p) { return p[2]; });
    var gate = points.map(function (p) { return p[3]; });
    var opts = {
      width: Math.max(260, box.clientWidth), height: 220,
      // one kept result (a host benched once): uPlot widens it to 1000 days (2027 to 2029); half a day each side
      scales: { x: { time: true, range: function (u, min, max) {
                  return xs.length === 1 ? [xs[0] - 43200, xs[0] + 43200] : [min, max]; } },
                y: { auto: true, range: function (u, min, max) { return [0, max * 1.15]; } } },
      axes: [{}, { label: 'decode tok/s per stream' }],
      series: [{}, { label: 'mean per stream', stroke: '#0969da', width: 2, points: { size: 7 } },
               { label: 'slowest stream', stroke: '#cf222e', width: 1, dash: [4, 4], points: { size: 5 } },
               { label: 'gate', stroke: '#1a7f37', width: 1, points: { show: false } }]
    };
    opts.hooks = { setScale: [function (u, key) {  // the time shown, in seconds (read by the tests)
      if (key === 'x') { box.setAttribute('data-x-span', String(u.scales.x.max - u.scales.x.min)); }
    }] };
    var chart = new uPlot(opts, [xs, mean, low, gate], box);
    new ResizeObserver(function () { chart.setSize({ width: Math.max(260, box.clientWidth), height: 220 }); })
      .observe(box);
  });
})();
"""


@dataclass(frozen=True)
class LiveChart:
    """One chart per host from Prometheus: each series a PromQL query whose result carries the host's
    inventory name in the label `Live.host_label` (numbers only reach the chart)."""

    key: str
    title: str
    unit: str
    series: tuple[tuple[str, str, str], ...]  # (label, colour, PromQL)


@dataclass(frozen=True)
class Live:
    """Where page.js reads the live parts, all paths on the gateway that serves the page."""

    stats: str = "/status/gateway;csv"             # HAProxy's stats, read-only (no `stats admin`)
    backend: str = "vllm"                          # the backend whose servers are the GPU hosts
    query_range: str = "/status/api/v1/query_range"  # Prometheus's HTTP API, proxied by the gateway
    interval_ms: int = 500                         # the gateway's health interval: a state shows within it
    window_s: int = 3600
    step_s: int = 5                                # 720 points an hour: a fresh Prometheus shows a line soon
    chart_refresh_s: int = 5
    host_label: str = "instance"
    charts: tuple[LiveChart, ...] = field(default_factory=lambda: CHARTS)


# vLLM's metric names (https://docs.vllm.ai/en/latest/design/metrics.html); the KV gauge was
# vllm:gpu_cache_usage_perc before v0.10 and is vllm:kv_cache_usage_perc since: either is read. The
# job and the `instance` label (the host's inventory name) are roles/office_metrics's
# (provision/office_metrics/targets.py).
CHARTS: tuple[LiveChart, ...] = (
    LiveChart("tokens", "generated tokens/s", "tok/s", (
        ("tok/s", "#0969da", 'sum by (instance) (rate(vllm:generation_tokens_total{job="vllm"}[1m]))'),)),
    LiveChart("requests", "requests running / waiting", "requests", (
        ("running", "#1a7f37", 'sum by (instance) (vllm:num_requests_running{job="vllm"})'),
        ("waiting", "#cf222e", 'sum by (instance) (vllm:num_requests_waiting{job="vllm"})'))),
    LiveChart("kv", "KV cache in use", "%", (
        ("KV %", "#8250df",
         'max by (instance) ({__name__=~"vllm:(kv|gpu)_cache_usage_perc", job="vllm"}) * 100'),)),
)
LIVE = Live()
# Rows that change by the second: read live in the browser, never written into the live page.
VOLATILE = ("service", "health", "requests running / waiting", "KV cache in use", "generating now")


def json_for_script(value: Any) -> str:
    """JSON safe inside a <script> element: no `<`, `>` or `&` that could end it or open a comment."""
    return (json.dumps(value, default=str).replace("&", "\\u0026").replace("<", "\\u003c")
            .replace(">", "\\u003e"))


def _text(value: Any, empty: str = "-") -> str:
    return escape(empty if value is None or value == "" else str(value))


def _number(value: float | None, fmt: str) -> str:
    return "-" if value is None else escape(fmt.format(value))


def _when(epoch: float | None) -> str:
    return "-" if epoch is None else time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(epoch))


def _row(label: str, cell: str, css: str = "") -> str:
    attribute = f' class="{css}"' if css else ""
    return f"<tr><th>{escape(label)}</th><td{attribute}>{cell}</td></tr>"


def host_rows(row: dict[str, Any], collected_at: float, live: bool = False) -> list[str]:
    """The table rows of one host's card (every cell escaped); live: without the VOLATILE ones."""
    if "error" in row:
        return [_row("reachable", "yes" if row.get("reachable") else "no", "" if row.get("reachable") else "bad"),
                _row("error", _text(row["error"]), "bad")]
    uptime = row.get("uptime_s")
    since = _when(collected_at - uptime) if uptime is not None else "-"
    memory = (f"{_number(row.get('kv_planned_gib'), '{:.2f}')} GiB planned, "
              f"{_number(row.get('kv_found_gib'), '{:.2f}')} GiB found; full-length sequences "
              f"{_number(row.get('sequences_planned'), '{:.2f}')} planned, "
              f"{_number(row.get('sequences_found'), '{:.2f}')} found")
    warnings = [*(row.get("memory_warnings") or []), *(row.get("problems") or [])]
    drift = row.get("flags") or "-"
    rows = [
        _row("GPU / driver", f"{_text(row.get('gpu'))} / {_text(row.get('driver'))}"),
        _row("model profile", _text(row.get("model_profile"))),
        _row("release", f"{_text(row.get('release'))} <span class=\"muted\">{_text(row.get('image'))}</span>"),
        _row("serving since", escape(since)),
        _row("service", _text(row.get("state")), "ok" if str(row.get("state", "")).startswith("active") else "bad"),
        _row("health", _text(row.get("health")), "ok" if row.get("health") == "ok" else "bad"),
        _row("requests running / waiting",
             f"{_number(row.get('running'), '{:.0f}')} / {_number(row.get('waiting'), '{:.0f}')}"),
        _row("KV cache in use", _number(row.get("kv_cache_percent"), "{:.1f}%")),
        _row("generating now", _number(row.get("tokens_per_s"), "{:.0f} tok/s")),
        _row("KV memory", memory),
        _row("drift", _text(drift), "ok" if drift == "in sync" else "bad"),
        _row("last failed upgrade", _text(row.get("last_failed_upgrade"), "none"),
             "bad" if row.get("last_failed_upgrade") else ""),
    ]
    rows += [_row("warning", _text(warning), "warn") for warning in warnings]
    if live:
        heads = tuple(f"<tr><th>{escape(label)}</th>" for label in VOLATILE)
        rows = [line for line in rows if not line.startswith(heads)]
        rows.insert(0, _row("at the gateway", '<span class="counters">-</span>'))
    return rows


def bench_points(history: list[dict[str, Any]]) -> list[list[float | None]]:
    """[time, mean per stream, slowest stream, gate] per kept bench result, oldest first (numbers only)."""
    ordered = sorted(history, key=lambda entry: entry.get("measured_at") or 0)
    return [[entry.get("measured_at"), entry.get("mean_tokens_per_s"), entry.get("min_tokens_per_s"),
             entry.get("gate_tokens_per_s")] for entry in ordered if isinstance(entry.get("measured_at"), int | float)]


def bench_table(history: list[dict[str, Any]]) -> str:
    if not history:
        return ('<p class="muted">no office bench kept on this host yet '
                '(<code>provision bench --workload office</code>)</p>')
    lines = ['<ul class="history">']
    for entry in sorted(history, key=lambda item: item.get("measured_at") or 0, reverse=True):
        verdict = "passed" if entry.get("passed") else "FAILED"
        if entry.get("regression"):
            verdict += "; REGRESSION: " + str(entry["regression"])
        lines.append(
            f"<li><b>{_text(entry.get('release'))}</b> {escape(_when(entry.get('measured_at')))}: "
            f"{_number(entry.get('mean_tokens_per_s'), '{:.1f}')} tok/s per stream, slowest "
            f"{_number(entry.get('min_tokens_per_s'), '{:.1f}')}; "
            f"TTFT p50 {_number(entry.get('ttft_p50_s'), '{:.2f}')} s, "
            f"p95 {_number(entry.get('ttft_p95_s'), '{:.2f}')} s; "
            f"<span class=\"{'ok' if verdict == 'passed' else 'bad'}\">{escape(verdict)}</span></li>")
    return "\n".join(lines) + "</ul>"


def _badge(serving: bool, live: Live | None) -> str:
    if live:  # page.js writes the gateway's state into it
        return '<span class="badge state muted">checking</span>'
    return f'<span class="badge {"ok" if serving else "bad"}">{"serving" if serving else "NOT SERVING"}</span>'


def _live_charts(index: int, live: Live) -> str:
    return "".join(f'<h3>{escape(chart.title)} <span class="muted">(last {live.window_s // 60} min)</span></h3>'
                   f'<div class="chart live" data-chart="{escape(chart.key)}" data-host-index="{index}">'
                   f'<p class="muted empty">waiting for metrics</p></div>' for chart in live.charts)


def _heading(rows: dict[str, dict[str, Any]], collected_at: float, live: Live | None) -> str:
    if live:  # no time in it: the page changes only when the facts do
        return ('<p class="muted" id="gateway-summary">reading the gateway\'s state</p><p class="muted">Live: each '
                f"backend's state from the gateway every {live.interval_ms} ms, charts from Prometheus every "
                f"{live.chart_refresh_s} s; the facts as the last <code>provision up</code> found them. Charts by "
                f"uPlot {UPLOT_VERSION} (MIT).</p>")
    serving_count = sum(1 for row in rows.values() if row.get("serving"))
    return (f'<p class="muted">{serving_count} of {len(rows)} hosts serving; collected {escape(_when(collected_at))}.\n'
            f"Charts by uPlot {UPLOT_VERSION} (MIT).</p>")


def _bytes(value: Any) -> str:
    """Bytes as a person reads them, rounded so that a few more kilobytes do not change the text."""
    if not isinstance(value, int | float):
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value / 1024:.0f} KiB"


def _rate(value: Any) -> str:
    return f"{value:.0%}" if isinstance(value, int | float) else "-"


def cache_cards(caches: dict[str, dict[str, Any]], read_at: float) -> str:
    """The office cache hosts' cards (`provision status --json`'s `office_cache` rows, cache_status.py):
    services, hit rates by bytes, disk. The figures are those `provision up` read, not live: the time
    they were read is on a line of its own (data-read-at), which publish.sh leaves out when it compares,
    so an `up` that reads the same figures (as shown, rounded) leaves the page unchanged."""
    if not caches:
        return ""
    cards = []
    for name, row in caches.items():
        if "error" in row:
            table = _row("error", _text(row["error"]), "bad")
        else:
            apt, hub = row.get("apt") or {}, row.get("hub") or {}
            services = row.get("services") or {}
            down = [unit for unit, state in services.items() if state != "active"]
            table = "".join([
                _row("services", escape(", ".join(f"{unit} {state}" for unit, state in services.items())),
                     "bad" if down else "ok"),
                _row("apt hit rate", f"{_rate(apt.get('hit_rate'))} <span class=\"muted\">"
                     f"{_bytes(apt.get('served_bytes'))} served, {_bytes(apt.get('upstream_bytes'))} fetched "
                     f"upstream</span>"),
                _row("hub hit rate", f"{_rate(hub.get('hit_rate'))} <span class=\"muted\">"
                     f"{_bytes(hub.get('hit_bytes'))} from the cache, {_bytes(hub.get('miss_bytes'))} fetched "
                     f"from the hub</span>"),
                _row("disk (/var/cache)", f"{_number(row.get('disk_used_gib'), '{:.1f}')} GiB used, "
                     f"{_number(row.get('disk_free_gib'), '{:.1f}')} GiB free"),
                _row("hub cache bound", f"{_text(hub.get('max_size'))} <span class=\"muted\">(nginx max_size; "
                     "the least recently used files go first beyond it)</span>"),
            ])
        healthy = "error" not in row and row.get("healthy")
        cards.append(f'<section class="host cache" data-cache-name="{escape(name)}"><h2>{escape(name)} '
                     f'<span class="badge {"ok" if healthy else "bad"}">office cache'
                     f'{"" if healthy else ": NOT HEALTHY"}</span></h2><table class="facts">{table}</table></section>')
    return (f'<h2 class="section">office cache</h2>\n<p class="muted" data-read-at="{read_at:.0f}">Not live: as '
            f"<code>provision up</code> read them at {escape(_when(read_at))}; an <code>up</code> that reads the "
            f"same figures leaves this page as it is.</p>\n"
            f'<div class="hosts caches">{"".join(cards)}</div>')


def render_page(rows: dict[str, dict[str, Any]], collected_at: float | None = None, live: Live | None = None,
                caches: dict[str, dict[str, Any]] | None = None) -> str:
    """The whole page for `provision status`'s rows (its --json document), one card per host; with
    `live`, the page the office gateway serves (page.js fills in the live parts); with `caches`, the
    office cache hosts' figures under them (cache_cards)."""
    collected_at = time.time() if collected_at is None else collected_at
    cards, chart_data = [], {}
    for index, (name, row) in enumerate(rows.items()):
        history = row.get("bench_history") or []
        chart_data[str(index)] = bench_points(history)
        cards.append(
            f'<section class="host" data-host-name="{escape(name)}"><h2>{escape(name)} '
            f'{_badge(bool(row.get("serving")), live)}</h2>'
            f'<table class="facts">{"".join(host_rows(row, collected_at, live is not None))}</table>'
            f'{_live_charts(index, live) if live else ""}'
            f'<h3>office bench history</h3>'
            f'<div class="chart" data-host="{escape(name)}" data-host-index="{index}"></div>'
            f"{bench_table(history)}</section>")
    title = "office status" if live else "provision status"
    live_parts = ""
    if live:
        live_parts = (f'<script type="application/json" id="live-config">{json_for_script(asdict(live))}</script>'
                      f'<script>{(PAGE / "page.js").read_text()}</script>')
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{(VENDOR / "uPlot.min.css").read_text()}</style>
<style>{STYLE}</style>
</head><body>
<h1>{title}</h1>
{_heading(rows, collected_at, live)}
<div class="hosts">
{"".join(cards)}
</div>
{cache_cards(caches or {}, collected_at)}
<script type="application/json" id="bench-data">{json_for_script(chart_data)}</script>
<script>{(VENDOR / "uPlot.iife.min.js").read_text()}</script>
<script>{SCRIPT}</script>
{live_parts}
</body></html>
"""
