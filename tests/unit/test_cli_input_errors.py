"""Bad input exits 2 naming file, line and key, and no host is contacted (a listener records it)."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP port standing in for a host's sshd: it records every connection made to it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    connections: list[str] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            connections.append(str(peer))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], connections
    stop.set()
    thread.join()
    server.close()


def provision(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=60, check=False)


CASES = {
    "unknown key": ("""
        all:
          hosts:
            lab1: {ansible_host: 127.0.0.1, ansible_port: PORT}
          childern: {}
        """, ":4", "childern", "did you mean 'children'"),
    "wrong type": ("""
        all:
          hosts:
            lab1:
              ansible_host: 127.0.0.1
              ansible_port: twenty-two
        """, ":5", "ansible_port", None),
    "download setting out of range": ("""
        all:
          hosts:
            lab1: {ansible_host: 127.0.0.1, ansible_port: PORT}
          vars:
            hf_download_connections: 0
        """, ":5", "hf_download_connections", "from 1 to 64; got 0"),
    "yaml syntax": ("""
        all:
          hosts:
            lab1: {ansible_host: 127.0.0.1, ansible_port: PORT
        """, ":", "YAML", None),
    "missing address": ("""
        port: PORT
        user: root
        """, ":", "address", None),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_inventory_exits_2_and_contacts_nobody(case, tmp_path, listener):
    port, connections = listener
    text, where, key, hint = CASES[case]
    inventory = tmp_path / "host.yaml"
    inventory.write_text(textwrap.dedent(text).lstrip("\n").replace("PORT", str(port)))
    done = provision("up", str(inventory))
    assert done.returncode == 2, done.stderr
    assert str(inventory) + where in done.stderr
    assert key in done.stderr
    if hint:
        assert hint in done.stderr
    assert connections == []


def test_unknown_flag_is_a_usage_error():
    done = provision("up", "--chekc", "x.yaml")
    assert done.returncode == 2 and "unrecognized arguments: --chekc" in done.stderr


def test_a_connection_setting_in_extra_vars_is_refused_saying_where_it_goes(tmp_path, listener):
    """`-e ansible_become_password=...` was refused with "did you mean 'ansible_become_password'?",
    the very name given. A connection setting comes from the inventory (a password on the command
    line is in every process list): the message says so and names -K."""
    port, connections = listener
    inventory = tmp_path / "host.yaml"
    inventory.write_text(f"name: lab1\naddress: 127.0.0.1\nport: {port}\n")
    done = provision("up", str(inventory), "-e", "ansible_become_password=pw-on-argv-123")
    assert done.returncode == 2, done.stderr
    assert "-e: ansible_become_password: a connection setting is read from the inventory" in done.stderr
    assert "did you mean" not in done.stderr and "-K" in done.stderr
    assert "pw-on-argv-123" not in done.stderr + done.stdout
    assert connections == []


def test_early_starts_takes_a_bool_and_a_wrong_value_is_refused_before_contact(tmp_path, listener):
    """`-e early_starts=false` is the sequential order a benchmark compares with; a value that is not
    a bool is refused naming the key (roles/model/meta/argument_specs.yaml), and no host is contacted."""
    port, connections = listener
    inventory = tmp_path / "host.yaml"
    inventory.write_text(f"name: lab1\naddress: 127.0.0.1\nport: {port}\n")
    done = provision("up", str(inventory), "-e", "early_starts=sometimes")
    assert done.returncode == 2, done.stderr
    assert "early_starts" in done.stderr and "sometimes" in done.stderr, done.stderr
    assert connections == []
