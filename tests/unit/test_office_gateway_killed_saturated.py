"""A backend killed behind a NAT port forward while the other backends are all at max_num_seqs: the
requests that come after the kill wait in the gateway's queue and are served; none is answered 502.

The forward is what slirp4netns does in the lab (benchmarks/office_gateway.py scenario b; tcpdump on
the lab's loopback): it accepts the connection itself, then, its target refusing, sends FIN, then RST
to the request. HAProxy 2.6 meets an empty response, retries (retry-on empty-response), and leastconn
hands the retry back to the dead server when no other can take it (src/lb_fwlc.c,
fwlc_get_next_server: `if (!srv) srv = avoided;`), which answers it empty again at once: the retries
are spent in a millisecond, long before the checks take it out. With the config of 19:07 UTC (no
maxqueue) every request sent in that window was answered 502; with maxqueue = max_num_seqs (until
2026-12-04) those beyond the survivors' queues were (this test's burst: 2 to 4 of 6, every run)."""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.standins.vllm.launch import free_port, start_standin
from tests.unit.serving_support import API_KEY, FAST, profile_arguments, stop
from tests.unit.test_office_gateway_empty_response import servers
from tests.unit.test_roles_office_gateway import local_haproxy_config

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None or shutil.which("socat") is None,
                                reason="needs haproxy and socat (apt-get install haproxy socat)")

SLOTS = 2  # max_num_seqs of each backend: the gateway's maxconn per server


def slirp_like_forward(target: int, port: int = 0) -> socket.socket:
    """A stand-in for slirp4netns's port forward to `target`: it accepts every connection itself, then
    connects to the target; when that is refused it sends FIN, waits for the request, answers it RST."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)

    def pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:  # one side reset (the target killed mid-answer): both sides closed, as slirp does
            for end in (sink, source):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def forward(client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", target))
        except OSError:
            client.shutdown(socket.SHUT_WR)  # FIN
            client.settimeout(1)
            with contextlib.suppress(OSError):
                client.recv(65536)  # the request
            # HAProxy 2.6 retries only if it reads the FIN before the RST: a reset read first is a read
            # error, answered 502 without retry (src/http_ana.c, http_wait_for_response, case 1). On a
            # loaded machine that race was lost 1 run in ~10 here; the RST waits 50 ms to keep it out.
            time.sleep(0.05)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()  # RST
            return
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
        pump(client, upstream)

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=forward, args=(client,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return listener


def chat(port: int, max_tokens: int, stream: bool) -> int:
    body = {"model": "workhorse", "max_tokens": max_tokens, "stream": stream, "ignore_eos": True,
            "messages": [{"role": "user", "content": "hello"}]}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(),
                                     {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            reply.read()
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code
    except (OSError, http.client.HTTPException):  # a stream cut mid-answer (IncompleteRead)
        return 0


def start_gateway(tmp_path: Path, ports: dict[str, int]) -> tuple[int, subprocess.Popen[bytes]]:
    """The role's haproxy.cfg for these backends (max_num_seqs SLOTS each), run by the real HAProxy."""
    port = free_port()
    hosts = "".join(f"    {name}: {{ansible_host: 127.0.0.1, vllm_port: {ports[name]}, max_num_seqs: {SLOTS}}}\n"
                    for name in ports)
    inventory = (f"all:\n  hosts:\n{hosts}"
                 "  children:\n    office_gateway:\n      hosts:\n        gw: {ansible_host: 127.0.0.1}\n")
    local_haproxy_config(tmp_path, inventory, port)
    return port, subprocess.Popen(["haproxy", "-db", "-f", str(tmp_path / "haproxy.cfg")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_requests_after_a_kill_wait_for_a_slot_when_the_survivors_are_full(tmp_path: Path) -> None:
    """Every slot busy, one backend killed, then a burst of 3 x max_num_seqs requests before its checks
    take it out: more retries than the survivors' queues held when maxqueue was max_num_seqs (2 x 2);
    each waits for a slot on a survivor and is answered 200."""
    env = {**FAST, "STANDIN_TOKENS_PER_S": "50", "VLLM_API_KEY": API_KEY}
    standins = {name: start_standin(profile_arguments(), env=env) for name in ("desk-1", "desk-2", "desk-3")}
    forward = slirp_like_forward(standins["desk-3"].port)
    ports = {"desk-1": standins["desk-1"].port, "desk-2": standins["desk-2"].port,
             "desk-3": forward.getsockname()[1]}
    port, haproxy = start_gateway(tmp_path, ports)
    for standin in standins.values():
        standin.wait_ready()
    threads: list[threading.Thread] = []
    results: dict[str, list[int]] = {"before": [], "after": []}

    def start(kind: str, max_tokens: int, stream: bool) -> None:
        thread = threading.Thread(target=lambda: results[kind].append(chat(port, max_tokens, stream)))
        thread.start()
        threads.append(thread)

    try:
        deadline = time.monotonic() + 10
        while set(servers(tmp_path).values()) != {"UP"}:
            assert time.monotonic() < deadline, servers(tmp_path)
            time.sleep(0.1)
        for _ in range(3 * SLOTS):  # every slot of every backend: streams of about 3 s at 50 tokens/s
            start("before", 150, True)
        while sum(int(n) for n in servers(tmp_path, column=4).values()) < 3 * SLOTS:  # 4: current sessions
            time.sleep(0.02)
        standins["desk-3"].process.kill()
        standins["desk-3"].process.wait()
        for _ in range(3 * SLOTS):  # at once: its checks take desk-3 out 0.1 to 0.6 s after the kill
            start("after", 4, False)
        for thread in threads:
            thread.join(timeout=60)
        assert len(results["before"]) + len(results["after"]) == len(threads)
        state = servers(tmp_path)
        print(f"before the kill: {results['before']}; after: {results['after']}; {state}")
        assert state["desk-3"] == "DOWN" and state["desk-1"] == state["desk-2"] == "UP", state
        assert results["after"] == [200] * 3 * SLOTS  # each waited for a slot on desk-1 or desk-2
        assert results["before"].count(200) >= 2 * SLOTS  # only desk-3's own streams may fail
    finally:
        haproxy.terminate()
        haproxy.wait(timeout=10)
        forward.close()
        for standin in standins.values():
            stop(standin)


def test_one_refused_connection_leaves_the_only_healthy_server_in(tmp_path: Path) -> None:
    """One connect refused by a healthy backend (its listener gone for a few ms), the only one in rotation:
    it stays in, and the requests after it are answered. With `on-error mark-down` (before 2026-12-03
    19:45 UTC) it was DOWN at once and the gateway answered 503 until its checks brought it back."""
    standin = start_standin(profile_arguments(), env={**FAST, "VLLM_API_KEY": API_KEY})
    forward = slirp_like_forward(standin.port)
    backend = forward.getsockname()[1]
    standin.wait_ready()
    port, haproxy = start_gateway(tmp_path, {"desk-1": backend})
    try:
        deadline = time.monotonic() + 10
        while servers(tmp_path) != {"desk-1": "UP"}:
            assert time.monotonic() < deadline, servers(tmp_path)
            time.sleep(0.1)
        forward.shutdown(socket.SHUT_RDWR)  # no listener: the next connect is refused
        forward.close()
        refused = threading.Thread(target=lambda: statuses.append(chat(port, 4, False)))
        statuses: list[int] = []
        refused.start()
        deadline = time.monotonic() + 5
        while servers(tmp_path)["desk-1"] == "UP":  # "UP 1/2" once HAProxy met the refusal (sudden-death);
            assert time.monotonic() < deadline, servers(tmp_path)  # with mark-down: "DOWN"
            time.sleep(0.005)
        forward = slirp_like_forward(standin.port, backend)  # back before the fast check (100 ms)
        states = []
        for _ in range(10):
            statuses.append(chat(port, 4, False))
            states.append(servers(tmp_path)["desk-1"])
        refused.join(timeout=30)
        # in rotation all along ("UP 1/2": one failed check from DOWN, the check after fastinter passed)
        assert statuses == [200] * 11 and all(state.startswith("UP") for state in states), (statuses, states)
    finally:
        haproxy.terminate()
        haproxy.wait(timeout=10)
        forward.close()
        stop(standin)
