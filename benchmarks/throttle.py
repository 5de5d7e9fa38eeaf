"""A throttled link for lab hosts, set on the lab's network, not in the stand-ins' code.

Shared by benchmarks/link_speed.py, benchmarks/first_apply.py (`--site`) and benchmarks/office_cache.py
(`--throttle`):
  - a rate per connection, as the hub's CDN or a registry limits one connection: nginx (Debian's
    nginx-light) in front of a server with `limit_rate` (nginx.org/en/docs/http/ngx_http_core_module.html
    #limit_rate: "The limit is set per a request"). tc cannot do it here: this kernel has no sch_fq,
    sch_sfq, fq_codel nor netem rate (`tc qdisc add ... fq`: "Specified qdisc kind is unknown"), so no
    per-flow qdisc exists; tbf and htb are there, and limit an aggregate.
  - a rate per host, the host's link: in the lab host's network namespace, what arrives on tap0
    (slirp4netns' side) is redirected to an ifb device (ingress qdisc + mirred) whose root qdisc is a
    tbf at that rate (`throttle_host`); what leaves on tap0 goes through a root tbf on tap0 itself
    (`throttle_sending`, an office cache's link towards the LAN). Everything goes through it (SSH too).
The bytes are tap0's counters (`received`, `sent`): what tbf counts, headers included. What nginx served
is in its access log, a line per request with the body bytes sent (`served`): which request carried
the bytes, and which were sent twice (`refetched`).
A host's tc settings live in its network namespace: a reboot of the lab host (a new namespace) drops them.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

NGINX_CONF = """user root;
worker_processes 2;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 1024; }}
http {{
  log_format bytes '$msec $server_port $status $body_bytes_sent "$request" "$http_range"';
  access_log {prefix}/access.log bytes;
  client_body_temp_path {prefix}/body; proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi; uwsgi_temp_path {prefix}/uwsgi; scgi_temp_path {prefix}/scgi;
{servers}
}}
"""
# Host: as the client sent it, so that a registry's or hub's absolute Location points back at nginx
SERVER = """  server {{
    listen {listen}:{port};
    client_max_body_size 0;
    location / {{
      limit_rate {rate};
      proxy_pass http://127.0.0.1:{upstream};
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_max_temp_file_size 0;
    }}
  }}
"""


def write_conf(prefix: Path, routes: Mapping[int, int], mbit: float) -> Path:
    """nginx.conf under `prefix`: a server per route (listen port -> upstream port), `mbit` per request."""
    prefix.mkdir(parents=True, exist_ok=True)
    rate = f"{int(mbit * 125)}k"  # nginx k = 1024 bytes: 2.4% above mbit, as link_speed.py measured it
    servers = "".join(SERVER.format(listen="127.0.0.1", port=port, upstream=upstream, rate=rate)
                      for port, upstream in routes.items())
    conf = prefix / "nginx.conf"
    conf.write_text(NGINX_CONF.format(prefix=prefix, servers=servers))
    return conf


class PerConnection:
    """nginx limiting each request to `mbit`, in front of local servers: `routes` maps the port nginx
    listens on (on 127.0.0.1: lab hosts reach it at MACHINE_FROM_HOSTS) to the upstream's port."""

    def __init__(self, prefix: Path, routes: Mapping[int, int], mbit: float) -> None:
        if not shutil.which("nginx"):
            raise SystemExit("nginx is not installed: apt-get install nginx-light")
        conf = write_conf(prefix, routes, mbit)
        self.log = prefix / "access.log"
        self.process = subprocess.Popen(["nginx", "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"])

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


@dataclass(frozen=True)
class Served:
    """One request nginx answered (a line of its access log, NGINX_CONF's `bytes` format): when it
    ended, the port it came on, its status, the body bytes sent (those a client that went away got
    too), the request line and its Range header ("-" for none)."""

    ended: float
    port: int
    status: int
    body_bytes: int
    request: str
    range: str


def served(log: Path, offset: int = 0) -> list[Served]:
    """The requests logged in `log` from byte `offset` on (the log's size before a run)."""
    if not log.exists():
        return []
    with open(log, "rb") as handle:
        handle.seek(offset)
        text = handle.read().decode("utf-8", "replace")
    entries = []
    for line in text.splitlines():
        ended, port, status, body, request, ranged = shlex.split(line)
        entries.append(Served(float(ended), int(port), int(status), int(body), request, ranged))
    return entries


def refetched(entries: Iterable[Served]) -> dict[str, int]:
    """Bytes sent again: for each GET of the same URL and Range answered more than once, all but its
    largest answer (a download restarted from its beginning; a resumed one asks for another Range)."""
    sent_per_request: dict[tuple[int, str, str], list[int]] = defaultdict(list)
    for entry in entries:
        if entry.request.startswith("GET ") and entry.body_bytes:
            sent_per_request[(entry.port, entry.request, entry.range)].append(entry.body_bytes)
    return {request + ("" if ranged == "-" else f" ({ranged})"): sum(sizes) - max(sizes)
            for (_, request, ranged), sizes in sent_per_request.items() if len(sizes) > 1}


def nsenter(pid: int, script: str) -> str:
    """Run `script` with sh in the network namespace of `pid`; its output (exit on failure)."""
    done = subprocess.run(["nsenter", "-t", str(pid), "-n", "sh", "-ec", script], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"in the namespace of {pid}: {script}\n{done.stderr}")
    return done.stdout


def host_pid(host: object) -> int:
    """The lab host's (tests.lab.LabHost) PID 1 as this machine sees it: the handle on its namespace."""
    return int(host.container.attrs["State"]["Pid"])  # type: ignore[attr-defined]


def throttle_host(pid: int, mbit: float) -> None:
    """What the host receives on tap0 goes through a tbf of `mbit` (ingress -> ifb -> tbf)."""
    nsenter(pid, "ip link add ifb0 type ifb; ip link set ifb0 up; tc qdisc add dev tap0 handle ffff: ingress; "
                 "tc filter add dev tap0 parent ffff: protocol all u32 match u32 0 0 "
                 "action mirred egress redirect dev ifb0; "
                 f"tc qdisc add dev ifb0 root tbf rate {mbit}mbit burst 1mb latency 100ms")


def throttle_sending(pid: int, mbit: float) -> None:
    """What the host sends on tap0 goes through a tbf of `mbit` (its link's other direction)."""
    nsenter(pid, f"tc qdisc add dev tap0 root tbf rate {mbit}mbit burst 1mb latency 100ms")


def counter(pid: int, column: int) -> int:
    """A tap0 column of /proc/net/dev (the reader's namespace's; /sys is the mount namespace's)."""
    return int(nsenter(pid, f"awk '$1 == \"tap0:\" {{ print ${column} }}' /proc/net/dev").strip())


def received(pid: int) -> int:
    """Bytes the host has received on tap0."""
    return counter(pid, 2)


def sent(pid: int) -> int:
    """Bytes the host has sent on tap0."""
    return counter(pid, 10)
