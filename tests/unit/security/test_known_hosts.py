"""Host keys checked as OpenSSH checks them (connection/ssh.py, connection/known_hosts.py), against
a real SSH server (paramiko's server side, in the test process): `@revoked` and `@cert-authority`
lines, hashed names (as `ssh-keygen -H` writes them), `[host]:port` names and wildcards, the global
known_hosts file, the advice for a changed key with its port, and every ProxyJump hop under the same
rules as the target (issue 19, item 5)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import paramiko
import pytest

from provision.connection.known_hosts import KnownKey, read_known_hosts
from provision.connection.ssh import SSHConnection
from provision.errors import HostKeyRefused
from tests.unit.security.ssh_server import ssh_server

HOST_KEY = paramiko.ECDSAKey.generate()
OTHER_KEY = paramiko.ECDSAKey.generate()


def key_text(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.get_base64()}"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home of our own: its ~/.ssh/config is the one fabric reads; a client key to log in with."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    (tmp_path / ".ssh").mkdir(mode=0o700)
    paramiko.ECDSAKey.generate().write_private_key_file(str(tmp_path / "id"))
    return tmp_path


@pytest.fixture
def server():
    with ssh_server(HOST_KEY) as port:
        yield port


def connect(home: Path, port: int, known_hosts: str | None, trust_new: bool = False) -> SSHConnection:
    path = None
    if known_hosts is not None:
        path = home / "known_hosts"
        path.write_text(known_hosts)
    connection = SSHConnection("target", "127.0.0.1", port=port, user="root", key_file=home / "id",
                               known_hosts=path, become=False, trust_new_host_keys=trust_new,
                               connect_timeout=5, connect_attempts=1)
    return connection.open()


def test_a_known_key_opens(home, server):
    connect(home, server, f"[127.0.0.1]:{server} {key_text(HOST_KEY)}\n").close()


def test_a_revoked_key_is_refused_even_where_it_is_also_listed(home, server):
    known = f"@revoked * {key_text(HOST_KEY)}\n[127.0.0.1]:{server} {key_text(HOST_KEY)}\n"
    with pytest.raises(HostKeyRefused) as refused:
        connect(home, server, known, trust_new=True)
    assert f"host key of [127.0.0.1]:{server}" in str(refused.value)
    assert f"is REVOKED ({home / 'known_hosts'}:1 marks it @revoked)" in str(refused.value)


def test_a_revoked_line_for_another_key_leaves_a_known_host_alone(home, server):
    connect(home, server, f"@revoked * {key_text(OTHER_KEY)}\n[127.0.0.1]:{server} {key_text(HOST_KEY)}\n").close()


def test_a_cert_authority_line_is_refused_clearly_and_nothing_is_recorded(home, server):
    known = f"@cert-authority *.lab,127.0.0.1,[127.0.0.1]:* {key_text(OTHER_KEY)}\n"
    with pytest.raises(HostKeyRefused, match=r"trusts a certificate authority for \[127.0.0.1\]:\d+ "
                                             r"\(@cert-authority\), but provision \(paramiko\) cannot check"):
        connect(home, server, known, trust_new=True)
    assert (home / "known_hosts").read_text() == known


def test_a_changed_key_names_its_port_as_ssh_keygen_wants_it(home, server):
    known_hosts = home / "known_hosts"
    with pytest.raises(HostKeyRefused) as refused:
        connect(home, server, f"[127.0.0.1]:{server} {key_text(OTHER_KEY)}\n", trust_new=True)
    assert f"ssh-keygen -R '[127.0.0.1]:{server}' -f '{known_hosts}'" in str(refused.value)
    assert "CHANGED" in str(refused.value)


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs OpenSSH's ssh-keygen")
def test_names_hashed_by_ssh_keygen_are_matched(home, server):
    known_hosts = home / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{server} {key_text(HOST_KEY)}\nelsewhere {key_text(OTHER_KEY)}\n")
    subprocess.run(["ssh-keygen", "-H", "-f", str(known_hosts)], check=True, capture_output=True)
    hashed = known_hosts.read_text()
    assert hashed.startswith("|1|") and "127.0.0.1" not in hashed
    connect(home, server, hashed).close()
    changed = hashed.replace(HOST_KEY.get_base64(), OTHER_KEY.get_base64(), 1)
    with pytest.raises(HostKeyRefused, match=rf"ssh-keygen -R '\[127.0.0.1\]:{server}'"):
        connect(home, server, changed)


def test_wildcards_and_negations_as_ssh_reads_them(home, server):
    connect(home, server, f"[127.0.0.?]:*,!other {key_text(HOST_KEY)}\n").close()
    with pytest.raises(HostKeyRefused, match="not known"):
        connect(home, server, f"[127.0.0.?]:*,![127.0.0.1]:{server} {key_text(HOST_KEY)}\n")


PATTERN_LINES = ["[127.0.0.1]:2222", "127.0.0.*", "*.lab,!bad.lab", "[gpu?.lab]:2200", "host-a,host-b",
                 "[10.0.0.1]:*"]
NAMES = ["127.0.0.1", "[127.0.0.1]:2222", "[127.0.0.1]:22", "127.0.0.9", "gpu1.lab", "bad.lab",
         "[gpu1.lab]:2200", "[gpu12.lab]:2200", "host-b", "HOST-A", "[10.0.0.1]:2201", "10.0.0.1"]


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs OpenSSH's ssh-keygen")
@pytest.mark.parametrize("patterns", PATTERN_LINES)
def test_names_match_as_ssh_keygen_finds_them(tmp_path, patterns):
    """The judge is OpenSSH: `ssh-keygen -F NAME` finds the line exactly when we match it."""
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"{patterns} {key_text(HOST_KEY)}\n")
    [line] = read_known_hosts(known_hosts)
    for name in NAMES:
        found = subprocess.run(["ssh-keygen", "-F", name, "-f", str(known_hosts)], capture_output=True)
        assert line.matches(name) == (found.returncode == 0), name


def test_lines_ssh_skips_are_skipped_and_the_rest_read(tmp_path):
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"# a comment\n@unknown-marker host {key_text(OTHER_KEY)}\nshort line\n"
                           f"host ssh-ed25519 not*base64\n@revoked * {key_text(OTHER_KEY)}\n"
                           f"host {key_text(HOST_KEY)} a comment\n")
    lines = read_known_hosts(known_hosts)
    assert [(line.marker, line.patterns, line.where) for line in lines] == [
        ("@revoked", ("*",), f"{known_hosts}:5"), (None, ("host",), f"{known_hosts}:6")]
    assert isinstance(lines[1], KnownKey) and lines[1].is_key(HOST_KEY)


def test_the_global_known_hosts_file_named_in_ssh_config_is_read(home, server):
    (home / "global_known_hosts").write_text(f"[127.0.0.1]:{server} {key_text(HOST_KEY)}\n")
    (home / ".ssh/config").write_text(f"Host *\n    GlobalKnownHostsFile {home / 'global_known_hosts'}\n")
    connect(home, server, "").close()
    assert (home / "known_hosts").read_text() == ""


def test_the_default_global_files_are_openssh_s(home, server, monkeypatch):
    from provision.connection import known_hosts

    assert known_hosts.DEFAULT_GLOBAL_FILES == ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
    global_file = home / "ssh_known_hosts2"
    global_file.write_text(f"[127.0.0.1]:{server} {key_text(HOST_KEY)}\n")
    monkeypatch.setattr(known_hosts, "DEFAULT_GLOBAL_FILES", ("/nonexistent/ssh_known_hosts", str(global_file)))
    from provision.connection import ssh

    monkeypatch.setattr(ssh, "DEFAULT_GLOBAL_FILES", known_hosts.DEFAULT_GLOBAL_FILES)
    connect(home, server, "").close()


@pytest.fixture
def jump():
    jump_key = paramiko.ECDSAKey.generate()
    with ssh_server(jump_key) as port:
        yield port, jump_key


def through(home: Path, jump_port: int) -> None:
    """~/.ssh/config sends 127.0.0.1 through `localhost:jump_port` (another name, so fabric does not
    take the hop for the target itself)."""
    (home / ".ssh/config").write_text(f"Host *\n    IdentityFile {home / 'id'}\n"
                                      f"Host 127.0.0.1\n    ProxyJump root@localhost:{jump_port}\n")


def test_an_unknown_jump_host_key_is_refused(home, server, jump):
    jump_port, _ = jump
    through(home, jump_port)
    with pytest.raises(HostKeyRefused, match=rf"host key of \[localhost\]:{jump_port} is not known"):
        connect(home, server, f"[127.0.0.1]:{server} {key_text(HOST_KEY)}\n")


def test_a_changed_jump_host_key_is_refused_even_with_trust_new(home, server, jump):
    jump_port, _ = jump
    through(home, jump_port)
    known = f"[127.0.0.1]:{server} {key_text(HOST_KEY)}\n[localhost]:{jump_port} {key_text(OTHER_KEY)}\n"
    with pytest.raises(HostKeyRefused, match=rf"CHANGED.*ssh-keygen -R '\[localhost\]:{jump_port}'"):
        connect(home, server, known, trust_new=True)


def test_known_hops_open_and_a_new_one_is_recorded_only_when_asked(home, server, jump):
    jump_port, jump_key = jump
    through(home, jump_port)
    target_line = f"[127.0.0.1]:{server} {key_text(HOST_KEY)}\n"
    connect(home, server, target_line + f"[localhost]:{jump_port} {key_text(jump_key)}\n").close()
    connect(home, server, target_line, trust_new=True).close()
    assert (home / "known_hosts").read_text() == target_line + f"[localhost]:{jump_port} {key_text(jump_key)}\n"
