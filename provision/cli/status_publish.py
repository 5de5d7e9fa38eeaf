"""`provision up` on an office gateway: the live status page (provision/status_page, live mode)
published where HAProxy serves it at /status, after the run.

The page holds the facts of every backend of the gateway as `provision status` reads them now (so
`up --limit GATEWAY` still shows every host), and the office cache's figures (hit rates, bytes, disk)
when the inventory has a cache host, as `provision status` reads them, with the time they were read;
page.js reads the live parts in the browser.
provision/office_gateway/publish.sh writes it on the gateway only when it changed, and reloads
HAProxy then; the line `up` prints says which.
"""

from __future__ import annotations

import base64
from functools import partial
from pathlib import Path
from typing import Any

from provision.cli.cache_status import cache_hosts, cache_row
from provision.cli.endpoints import office_gateways, office_url
from provision.cli.fleet import on_each_host, run_on, status_rows
from provision.cli.gateway import backend_names
from provision.cli.inputs import Invocation
from provision.inventory.model import Inventory
from provision.playbook.model import Play
from provision.runner.results import RunResult
from provision.secrets import REDACTOR
from provision.shell import quote
from provision.status_page.page import LIVE, render_page

# HAProxy answers /status from one buffer (tune.bufsize 131072 in roles/office_gateway's config),
# headers included: a page larger than this is refused here, before it reaches the gateway.
MAX_PAGE_BYTES = 120_000


def publish_script(page_path: str, config_path: str, page: str) -> str:
    words = [page_path, config_path, base64.b64encode(page.encode()).decode()]
    body = (Path(__file__).parents[1] / "office_gateway" / "publish.sh").read_text()
    return f"set -- {' '.join(quote(word) for word in words)}\n{body}"


def publish_lines(inv: Invocation, inventory: Inventory, plays: list[Play], result: RunResult,
                  extra_vars: dict[str, Any]) -> list[str]:
    """For each office gateway whose run included its role and did not fail: the page published, and
    one line that says whether it changed (not in check mode: nothing is written then)."""
    if result.check:
        return []
    lines: list[str] = []
    caches: dict[str, dict[str, Any]] | None = None  # read once, for the first gateway that needs them
    for name, gateway, variables in office_gateways(plays, inv.playbook, inventory, result, extra_vars):
        names = backend_names(inventory, gateway)
        rows: dict[str, dict[str, Any]] = {}
        if names:
            _, rows = status_rows(inv.selecting(",".join(names)))
        if caches is None:
            caches = on_each_host(inv, cache_hosts(inventory.hosts), lambda host, conn: cache_row(
                host, partial(run_on, conn)))
        page = render_page(REDACTOR.document(rows), live=LIVE, caches=REDACTOR.document(caches))
        url = office_url(gateway, variables, "/status")
        if len(page.encode()) > MAX_PAGE_BYTES:
            lines.append(f"{name}: the status page is not published: {len(page.encode())} bytes, more than the "
                         f"{MAX_PAGE_BYTES} HAProxy answers from one buffer")
            continue
        script = publish_script(str(variables["office_gateway_status_page"]), str(variables["office_gateway_config"]),
                                page)
        published = inv.read_each([gateway], lambda _, conn: run_on(conn, script, 60))[gateway.name]  # noqa: B023
        if published.exception is not None:
            raise published.exception
        assert published.value is not None
        rc, stdout, stderr = published.value
        said = stdout.strip().splitlines()[-1:] or [""]
        if rc == 0 and said[0] in ("status page written", "status page unchanged"):
            cached = f", office cache {', '.join(caches)}" if caches else ""
            lines.append(f"{said[0]}: {url} ({name}: {len(rows)} hosts{cached})")
        else:
            lines.append(f"{name}: the status page is not published: {(stderr.strip() or stdout.strip())[-500:]}")
    return lines
