"""User-mode networking for a lab host: slirp4netns on the container's network namespace.

Inside, the host is 10.0.2.100, its DNS 10.0.2.3, and 10.0.2.2 is this machine's loopback. Ports
reach it only through `add_hostfwd` (127.0.0.1:PORT -> guest port). An egress filter inside the
namespace lets packets out only to 10.0.2.0/24 and the Debian archive's addresses (ports 80/443), so
nothing a test does can reach any other address. slirp4netns keeps an old namespace alive after the
container stops, so it is killed by its pid file and started again for each boot.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

from tests.lab import daemon

TAP = "tap0"
SLIRP_SUBNET = "10.0.2.0/24"
MACHINE_FROM_HOSTS = "10.0.2.2"  # the address lab hosts reach this machine's 127.0.0.1 by


class NetError(RuntimeError):
    """slirp4netns could not be started or refused a port forward."""


def attach(netns_pid: int, run_dir: Path, forwards: dict[int, int], allowed: list[str], ssh_only: bool = False) -> None:
    """Give the namespace of `netns_pid` networking, `forwards` (guest port -> 127.0.0.1 port) and
    the egress filter allowing `allowed` addresses (or, `ssh_only`, nothing but the replies of the
    host's SSH server); state files go in `run_dir`."""
    detach(run_dir)
    sock = run_dir / "slirp.sock"
    sock.unlink(missing_ok=True)
    if len(str(sock)) > 100:
        raise NetError(f"{sock}: path too long for a unix socket; use a shorter lab directory")
    log = run_dir / "slirp.log"
    slirp = daemon.spawn(["slirp4netns", "--configure", "--mtu=65520", "--api-socket", str(sock),
                          str(netns_pid), TAP], run_dir / "slirp.pid", log)
    deadline = time.monotonic() + 5
    while not sock.is_socket():
        if time.monotonic() > deadline or slirp.poll() is not None:
            raise NetError(f"slirp4netns did not start for pid {netns_pid}: {log.read_text()[-500:]}")
        time.sleep(0.02)
    apply_egress_filter(netns_pid, allowed, ssh_only)
    for guest_port, host_port in forwards.items():
        add_hostfwd(sock, host_port, guest_port)


def attached(run_dir: Path, netns_pid: int) -> bool:
    """Whether this directory's slirp4netns runs and serves the namespace of `netns_pid`."""
    return daemon.running(run_dir / "slirp.pid", f" {netns_pid} {TAP}") is not None


def detach(run_dir: Path) -> None:
    """Stop this directory's slirp4netns, if it runs."""
    daemon.stop(run_dir / "slirp.pid", "slirp4netns")
    (run_dir / "slirp.sock").unlink(missing_ok=True)


def add_hostfwd(sock: Path, host_port: int, guest_port: int) -> None:
    """Forward 127.0.0.1:`host_port` on this machine to `guest_port` of the lab host."""
    request = {"execute": "add_hostfwd", "arguments": {
        "proto": "tcp", "host_addr": "127.0.0.1", "host_port": host_port, "guest_port": guest_port}}
    with socket.socket(socket.AF_UNIX) as api:
        api.connect(str(sock))
        api.sendall(json.dumps(request).encode())
        api.shutdown(socket.SHUT_WR)
        reply = json.loads(api.recv(65536) or b"{}")
    if "return" not in reply:
        raise NetError(f"forward 127.0.0.1:{host_port} -> guest {guest_port} refused: {reply}")


def egress_ruleset(allowed: list[str], ssh_only: bool = False) -> str:
    """iptables-restore input for the mangle table: out of tap0 only to slirp and `allowed` (80/443);
    `ssh_only`: only the SSH server's packets (the controller's sessions), not even this machine's
    other ports (the lab registry, the stand-in hub) nor DNS."""
    if ssh_only:
        return "\n".join(["*mangle", f"-A POSTROUTING -o {TAP} -p tcp --sport 22 -j ACCEPT",
                          f"-A POSTROUTING -o {TAP} -j DROP", "COMMIT", ""])
    rules = ["*mangle", f"-A POSTROUTING -o {TAP} -d {SLIRP_SUBNET} -j ACCEPT"]
    rules += [f"-A POSTROUTING -o {TAP} -d {address} -p tcp -m multiport --dports 80,443 -j ACCEPT"
              for address in allowed]
    rules += [f"-A POSTROUTING -o {TAP} -j DROP", "COMMIT", ""]
    return "\n".join(rules)


def apply_egress_filter(netns_pid: int, allowed: list[str], ssh_only: bool = False) -> None:
    """Install the egress filter in the namespace (mangle/POSTROUTING also sees forwarded traffic of
    containers inside the host, and docker inside never touches that table); IPv6 is dropped."""
    no_ipv6 = f"*mangle\n-A POSTROUTING -o {TAP} -j DROP\nCOMMIT\n"
    for command, ruleset in (("iptables-restore", egress_ruleset(allowed, ssh_only)), ("ip6tables-restore", no_ipv6)):
        result = subprocess.run(["nsenter", "-t", str(netns_pid), "-n", command, "-w"],
                                input=ruleset, text=True, capture_output=True)
        if result.returncode != 0:
            raise NetError(f"{command} in the namespace of pid {netns_pid} failed: {result.stderr.strip()}")


def dropped_packets(netns_pid: int) -> int:
    """How many packets the egress filter of the namespace of `netns_pid` has dropped."""
    result = subprocess.run(["nsenter", "-t", str(netns_pid), "-n", "iptables-save", "-c", "-t", "mangle"],
                            capture_output=True, text=True, check=True)
    for line in result.stdout.splitlines():
        if line.endswith(f"-A POSTROUTING -o {TAP} -j DROP"):
            return int(line[1:].split(":", 1)[0])
    raise NetError(f"no egress filter in the namespace of pid {netns_pid}")


def port_is_free(port: int) -> bool:
    """Whether nothing listens on (or holds) 127.0.0.1:`port`."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(start: int, taken: set[int]) -> int:
    """The first port from `start` upward that is neither in `taken` nor busy on 127.0.0.1."""
    port = start
    while port in taken or not port_is_free(port):
        port += 1
    return port
