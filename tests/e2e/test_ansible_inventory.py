"""An Ansible user's files drive real hosts: an INI inventory with group_vars/ converges the docker
role on three lab hosts, and a host whose sudo asks for a password converges with -K (typed on a
terminal) and with `become_password: !env`, the password appearing nowhere."""

from __future__ import annotations

import json
import os
import pty
import secrets
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.e2e.helpers import REPO, provision
from tests.lab.sudo_user import add_sudo_password_user

pytestmark = pytest.mark.lab
SUDO_USER = "laptop"


def write_ini_inventory(lab, hosts, folder: Path) -> Path:
    """hosts.ini (the hosts, one a line, INI style) and group_vars/all.yml (how to log in)."""
    (folder / "group_vars").mkdir(parents=True)
    lines = ["[docker_hosts]"] + [f"{h.name} ansible_host=127.0.0.1 ansible_port={h.ssh_port}" for h in hosts]
    lines += ["", "[docker_hosts:vars]", f"docker_insecure_registries=['{lab.registry.address_for_hosts}']"]
    (folder / "hosts.ini").write_text("\n".join(lines) + "\n")
    known_hosts = lab.write_known_hosts(folder / "known_hosts", hosts)
    (folder / "group_vars" / "all.yml").write_text(yaml.safe_dump({
        "ansible_user": "root", "ansible_ssh_private_key_file": str(lab.key_file),
        "known_hosts": str(known_hosts.absolute())}))
    return folder / "hosts.ini"


def test_ini_inventory_with_group_vars_converges_docker_on_three_hosts(lab, tmp_path):
    hosts = lab.new_hosts(3, prefix="ini")
    inventory = write_ini_inventory(lab, hosts, tmp_path / "inventory")
    listed = provision("inventory", str(inventory), "--list")
    assert listed.returncode == 0, listed.output
    assert json.loads(listed.stdout)["_meta"]["hostvars"][hosts[0].name]["ansible_user"] == "root"
    first = provision("up", "-i", str(inventory), "--tags", "docker", json_path=tmp_path / "first.json")
    assert first.returncode == 0, first.output
    for host in hosts:
        assert host.exec("systemctl is-active docker")[1].strip() == "active"
        assert lab.registry.address_for_hosts in host.exec("cat /etc/docker/daemon.json")[1]
    again = provision("up", str(inventory), "--tags", "docker", "--limit", f"docker_hosts:!{hosts[2].name}",
                      json_path=tmp_path / "again.json")
    assert again.returncode == 0, again.output
    assert set(again.results["hosts"]) == {hosts[0].name, hosts[1].name}
    assert all(again.host(h.name)["changed"] == 0 for h in hosts[:2])


@pytest.fixture(scope="module")
def sudo_host(lab):
    """A host whose only login, `laptop`, must type a password for sudo; and that password."""
    (host,) = lab.new_hosts(1, prefix="sudo")
    password = f"pw-{secrets.token_hex(8)}"
    add_sudo_password_user(host, SUDO_USER, password)
    rc, _ = host.exec("sudo -n true", user=SUDO_USER)
    assert rc != 0, "the lab user must need a password for sudo"
    return host, password


class ProcessWatch:
    """Every command line on the host, sampled while a run goes on (`ps -eo args`)."""

    def __init__(self, host) -> None:
        self.host, self.seen, self._stop = host, [], threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.seen.append(self.host.exec("ps -eo args")[1])
            time.sleep(0.1)

    def __enter__(self) -> ProcessWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_on_a_terminal(argv: list[str], answer: str, timeout: float = 900) -> tuple[int, str]:
    """Run `python -m provision ARGV` on a new pty, type `answer` at the password prompt; (rc, transcript)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: provision with the pty as its terminal
        os.chdir(REPO)
        os.execvpe(sys.executable, [sys.executable, "-m", "provision", *argv], {**os.environ, "COLUMNS": "200"})
    transcript, answered, deadline = b"", False, time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child closed the terminal: it has exited
            break
        if not chunk:
            break
        transcript += chunk
        if not answered and b"BECOME password:" in transcript:
            os.write(fd, answer.encode() + b"\n")
            answered = True
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), transcript.decode(errors="replace")


def test_sudo_password_from_the_terminal_and_from_the_environment(lab, sudo_host, tmp_path):
    host, password = sudo_host
    inventory = tmp_path / "hosts.ini"
    known_hosts = lab.write_known_hosts(tmp_path / "known_hosts", [host])
    inventory.write_text(f"{host.name} ansible_host=127.0.0.1 ansible_port={host.ssh_port} ansible_user={SUDO_USER}"
                         f" ansible_ssh_private_key_file={lab.key_file} known_hosts={known_hosts}\n")
    since = host.exec("date '+%Y-%m-%d %H:%M:%S'")[1].strip()
    with ProcessWatch(host) as watch:
        rc, transcript = run_on_a_terminal(["up", str(inventory), "--tags", "docker", "-K",
                                            "--json-file", str(tmp_path / "k.json")], password)
    assert rc == 0, transcript
    assert host.exec("systemctl is-active docker")[1].strip() == "active"
    assert "sudo" in "".join(watch.seen) and len(watch.seen) > 3, "the process watch saw the run"

    host_file = tmp_path / "host.yaml"
    host_file.write_text(yaml.safe_dump({
        "name": host.name, "address": "127.0.0.1", "port": host.ssh_port, "user": SUDO_USER,
        "key": str(lab.key_file), "known_hosts": str(known_hosts)}) + "become_password: !env LAPTOP_SUDO_PASSWORD\n")
    again = provision("up", str(host_file), "--tags", "docker", json_path=tmp_path / "env.json",
                      env={"LAPTOP_SUDO_PASSWORD": password})
    assert again.returncode == 0, again.output
    assert again.host(host.name)["changed"] == 0 and again.host(host.name)["ok"] > 0

    journal = host.exec(f"journalctl --no-pager --since '{since}'")[1]
    assert f"{SUDO_USER} : " in journal or "sudo" in journal, "the journal recorded the sudo sessions"
    for where, text in {"terminal": transcript, "--json (-K)": (tmp_path / "k.json").read_text(),
                        "output (!env)": again.output, "--json (!env)": (tmp_path / "env.json").read_text(),
                        "host ps": "".join(watch.seen), "host journal": journal}.items():
        assert password not in text, f"the sudo password appears in the {where}"


def test_a_wrong_sudo_password_fails_the_host_and_is_not_shown(lab, sudo_host, tmp_path):
    host, _ = sudo_host
    inventory = tmp_path / "hosts.ini"
    known_hosts = lab.write_known_hosts(tmp_path / "known_hosts", [host])
    inventory.write_text(f"{host.name} ansible_host=127.0.0.1 ansible_port={host.ssh_port} ansible_user={SUDO_USER}"
                         f" ansible_ssh_private_key_file={lab.key_file} known_hosts={known_hosts}"
                         " ansible_become_password=not-the-password-123\n")
    run = provision("up", str(inventory), "--tags", "docker", json_path=tmp_path / "wrong.json")
    assert run.returncode == 1
    assert "incorrect sudo password" in run.output
    assert "not-the-password-123" not in run.output + (tmp_path / "wrong.json").read_text()
