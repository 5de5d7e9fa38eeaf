"""A host that goes silent mid-run, through real paramiko on both ends: an in-process SSH server
behind a relay that can freeze (every byte held, nothing reset: the lab's frozen slirp4netns).

Before: a command asked of the frozen host waited in paramiko's open_channel until the silence
watchdog closed the connection, then raised the transport thread's saved EOFError, with no message;
the runner printed `internal error: EOFError:` and counted the host neither unreachable nor failed.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from provision.connection.ssh import SSHConnection
from provision.errors import HostUnreachable


class AnyKey(paramiko.ServerInterface):
    """A server that lets any public key in and opens any session (what it runs is never reached)."""

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED


class FreezableRelay:
    """127.0.0.1:port -> the server; `freeze()` stops passing bytes either way and closes nothing."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.frozen = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self.frozen.set()

    def _accept(self) -> None:
        client, _ = self.listener.accept()
        server = socket.create_connection(("127.0.0.1", self.target))
        for source, sink in ((client, server), (server, client)):
            threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while data := source.recv(65536):
            while self.frozen.is_set():
                time.sleep(0.05)
            sink.sendall(data)


@pytest.fixture
def frozen_host(tmp_path: Path) -> Iterator[tuple[SSHConnection, FreezableRelay]]:
    host_key = paramiko.RSAKey.generate(1024)
    listener = socket.create_server(("127.0.0.1", 0))
    transports: list[paramiko.Transport] = []

    def serve() -> None:
        sock, _ = listener.accept()
        transport = paramiko.Transport(sock)
        transport.add_server_key(host_key)
        transport.start_server(server=AnyKey())
        transports.append(transport)

    threading.Thread(target=serve, daemon=True).start()
    relay = FreezableRelay(listener.getsockname()[1])
    user_key = tmp_path / "id_rsa"
    paramiko.RSAKey.generate(1024).write_private_key_file(str(user_key))
    conn = SSHConnection("laptop", "127.0.0.1", port=relay.port, user="tester", key_file=user_key,
                         known_hosts=tmp_path / "known_hosts", trust_new_host_keys=True, become=False,
                         connect_attempts=1, keepalive_s=0).open()
    yield conn, relay
    conn.close()
    for transport in transports:
        transport.close()


def test_a_command_asked_of_a_frozen_host_is_unreachable_once_the_watchdog_closes(frozen_host):
    conn, relay = frozen_host
    relay.freeze()
    # what the run lock's silence watchdog does when the host has sent nothing for --silent-timeout
    threading.Timer(0.5, conn.close).start()
    started = time.monotonic()
    with pytest.raises(HostUnreachable, match="laptop: the connection was lost"):
        conn.run("true", timeout=30)
    assert time.monotonic() - started < 5
