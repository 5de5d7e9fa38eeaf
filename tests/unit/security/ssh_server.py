"""An SSH server in the test process (paramiko's server side): it shows a given host key, lets any
public key in, and forwards `direct-tcpip` channels, so it can stand as a ProxyJump hop. Enough for
what the controller decides before it authenticates: which host keys it accepts, on every hop."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import paramiko


class _Server(paramiko.ServerInterface):
    def __init__(self) -> None:
        self.destinations: list[tuple[str, int]] = []

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED

    def check_channel_direct_tcpip_request(self, chanid: int, origin: tuple[str, int],
                                           destination: tuple[str, int]) -> int:
        self.destinations.append(destination)
        return paramiko.OPEN_SUCCEEDED


def _pump(source: paramiko.Channel | socket.socket, target: paramiko.Channel | socket.socket) -> None:
    with suppress(OSError, EOFError):
        while data := source.recv(65536):
            target.sendall(data)
    with suppress(OSError, EOFError):
        target.close()


def _serve(client: socket.socket, host_key: paramiko.PKey) -> None:
    transport = paramiko.Transport(client)
    transport.add_server_key(host_key)
    server = _Server()
    with suppress(paramiko.SSHException, EOFError, OSError):
        transport.start_server(server=server)
        while transport.is_active():
            channel = transport.accept(timeout=1)
            if channel is None or not server.destinations:
                continue
            forwarded = socket.create_connection(server.destinations.pop(0))
            threading.Thread(target=_pump, args=(channel, forwarded), daemon=True).start()
            threading.Thread(target=_pump, args=(forwarded, channel), daemon=True).start()


@contextmanager
def ssh_server(host_key: paramiko.PKey) -> Iterator[int]:
    """A server showing `host_key` on 127.0.0.1; yields its port."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stopping = threading.Event()

    def accept() -> None:
        while not stopping.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=_serve, args=(client, host_key), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stopping.set()
        thread.join()
        listener.close()
