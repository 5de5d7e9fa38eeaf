"""The lab hosts' egress filter and port choice."""

from __future__ import annotations

import socket

from tests.lab import net


def test_egress_ruleset_accepts_slirp_and_archive_web_ports_then_drops_everything_else() -> None:
    rules = net.egress_ruleset(["203.0.113.80", "203.0.113.81"]).splitlines()
    assert rules[0] == "*mangle" and rules[-1] == "COMMIT"
    assert rules[1:-1] == [
        "-A POSTROUTING -o tap0 -d 10.0.2.0/24 -j ACCEPT",
        "-A POSTROUTING -o tap0 -d 203.0.113.80 -p tcp -m multiport --dports 80,443 -j ACCEPT",
        "-A POSTROUTING -o tap0 -d 203.0.113.81 -p tcp -m multiport --dports 80,443 -j ACCEPT",
        "-A POSTROUTING -o tap0 -j DROP",
    ]


def test_free_port_skips_taken_and_busy_ports() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert not net.port_is_free(port)
        chosen = net.free_port(port - 1, taken={port - 1})
        assert chosen > port
