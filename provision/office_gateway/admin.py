"""`provision drain|undrain HOST` and the gateway's view in `provision status`: the script that runs on
the gateway host (admin.sh, through HAProxy's admin socket) and the parse of what it prints."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from provision.office_gateway.backends import BACKEND
from provision.shell import quote


@dataclass(frozen=True)
class ServerView:
    """One backend as the gateway sees it (`show stat`)."""

    name: str
    status: str        # UP, DOWN, DRAIN, MAINT, "UP 1/2" while rising or falling
    in_flight: int     # scur: requests being served
    queued: int        # qcur: requests waiting for this server
    served: int        # stot: requests sent to it since haproxy started
    check: str         # the last health check's result (L7OK, L4CON, ...)


def admin_script(socket: str, action: str, server: str = "", wait_s: int = 0) -> str:
    """admin.sh with its arguments: `show`, `drain` (waiting up to `wait_s`) or `ready`."""
    words = [socket, action] + ([server, str(wait_s)] if action != "show" else [])
    body = Path(__file__).with_name("admin.sh").read_text()
    return f"set -- {' '.join(quote(word) for word in words)}\n{body}"


# a `show table` entry (HAProxy 2.6: `0x55..: key=alice use=0 exp=0 shard=0 http_req_cnt=3`)
TABLE_ENTRY = re.compile(r"^0x[0-9a-f]+: key=(?P<key>\S+) .*\bhttp_req_cnt=(?P<requests>\d+)", re.MULTILINE)


def parse_users(stdout: str) -> dict[str, int]:
    """Requests per office user since HAProxy last started or reloaded (the `office_users` stick table
    that admin.sh prints before `show stat`); {} when the gateway has no users."""
    section = stdout.partition("--- show table office_users\n")[2].partition("--- show stat\n")[0]
    return {match["key"]: int(match["requests"]) for match in TABLE_ENTRY.finditer(section)}


def parse_view(stdout: str) -> tuple[list[ServerView], int | None]:
    """Each server of the backend from the `show stat` CSV that follows the `--- show stat` line, and
    the requests still in flight after a drain (None when the script did not drain)."""
    before, _, table = stdout.partition("--- show stat\n")
    in_flight = next((int(line.split("=", 1)[1]) for line in before.splitlines()
                      if line.startswith("in_flight=") and line.split("=", 1)[1].isdigit()), None)
    rows = csv.DictReader(line.removeprefix("# ") for line in table.splitlines() if line.strip())
    servers = [ServerView(row["svname"], row["status"], int(row["scur"] or 0), int(row["qcur"] or 0),
                          int(row["stot"] or 0), row.get("check_status") or "")
               for row in rows if row.get("pxname") == BACKEND and row.get("svname") not in ("FRONTEND", "BACKEND")]
    return servers, in_flight
