"""`provision status`, the office cache part: each cache host's services, hit rates and free disk.

A host is an office cache when it is in the group its `office_cache_group` names (`office_cache` by
default, as in roles/office_cache). One round trip per cache host (provision/office_cache/status.sh).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.table import Table
from rich.text import Text

from provision.inventory.model import Host
from provision.office_cache.status import UNITS, parse_cache_status, status_script

DEFAULT_GROUP = "office_cache"
GIB_KIB = 1024 * 1024
RunOn = Callable[[str, float | None], tuple[int, str, str]]  # (script, timeout) -> rc, stdout, stderr on the host


def cache_hosts(hosts: list[Host]) -> list[Host]:
    return [host for host in hosts if str(host.vars.get("office_cache_group", DEFAULT_GROUP)) in host.groups]


def cache_row(host: Host, run_on: RunOn) -> dict[str, Any]:
    """What `provision status --json` shows under a cache host's `office_cache` key."""
    _, stdout, _ = run_on(status_script(), 30)
    status = parse_cache_status(stdout)
    return {
        "healthy": status.healthy, "services": status.units,
        "apt": {"served_bytes": status.apt_served_bytes, "upstream_bytes": status.apt_upstream_bytes,
                "hit_rate": status.apt_hit_rate},
        "hub": {"hit_bytes": status.hub_hit_bytes, "miss_bytes": status.hub_miss_bytes,
                "hit_rate": status.hub_hit_rate, "max_size": status.hub_max_size or None},
        "disk_free_gib": None if status.disk_free_kib is None else round(status.disk_free_kib / GIB_KIB, 1),
        "disk_used_gib": None if status.disk_used_kib is None else round(status.disk_used_kib / GIB_KIB, 1),
    }


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def cache_table(rows: dict[str, dict[str, Any]]) -> Table:
    table = Table(title="OFFICE CACHE", title_justify="left")
    for column in ("host", *UNITS, "apt hit rate (bytes)", "hub hit rate (bytes)", "free disk"):
        table.add_column(column)
    for name, row in rows.items():
        if "error" in row:
            table.add_row(Text(name, style="red"), Text(row["error"][:160], style="red"), *("-",) * (len(UNITS) + 2))
            continue
        units = [Text(row["services"][unit], style="green" if row["services"][unit] == "active" else "bold red")
                 for unit in UNITS]
        free = row["disk_free_gib"]
        table.add_row(Text(name, style="green" if row["healthy"] else "red"), *units, _rate(row["apt"]["hit_rate"]),
                      _rate(row["hub"]["hit_rate"]), "-" if free is None else f"{free} GiB")
    return table
