"""Ansible inventories in every form: INI errors at file:line, what is refused and the way out,
origins for INI lines and group_vars files, templated connection variables, `port`/`user` as
ordinary variables, @retry files, -i, --list-hosts and secrets in `provision inventory`.
(What each value *is* is judged by ansible-core in test_inventory_vs_ansible.py.)"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from provision.connection.become import PROMPT, READY, BecomeFailed, become_command, handshake
from provision.errors import InputError
from provision.inventory import load_inventory
from provision.inventory.model import Origin
from provision.secrets import Secret
from tests.unit.test_cli_input_errors import listener, provision  # noqa: F401 - the fixture
from tests.unit.test_inventory import load_error


def write(folder: Path, name: str, text: str, mode: int = 0o644) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    path.chmod(mode)
    return path


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ("[web]\nw1\n[web:child]\nx\n", 3, "unknown type 'child'"),
    ("[web]\nw1 ansible_port\n", 2, "expected key=value after the host name, got 'ansible_port'"),
    ("[web]\nw1 note='unclosed\n", 2, "check the quotes"),
    ("[web]\nw1\n\n[db:vars]\nx=1\n", 4, "[db:vars] is for a group that is never declared"),
    ("[all:children]\nweb\nmissing\n[web]\nw1\n", 3, "names the group 'missing', which is never declared"),
    ("[web servers]\nw1\n", 1, "invalid section"),
    ("[web]\nw[1:0a]\n", 2, "host range"),
    ("[web:vars]\nno equals sign\n[web]\nw1\n", 2, "expected key=value in [web:vars]"),
])
def test_ini_errors_name_file_and_line(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    path = write(tmp_path, "hosts.ini", text)
    error = load_error(path)
    assert (error.file, error.line) == (path, line)
    assert fragment in str(error)


def test_origins_of_ini_lines_and_vars_files(tmp_path: Path) -> None:
    hosts = write(tmp_path, "hosts", """
        [web]
        w1 http_port=80
        [web:vars]
        tier = front
        """)
    group_file = write(tmp_path, "group_vars/web/10.yml", "# comment\nntp: pool\n")
    host_file = write(tmp_path, "host_vars/w1.yaml", "---\nansible_port: 2222\n")
    inventory = load_inventory(hosts)
    origins = inventory.origins["w1"]
    assert origins["http_port"] == Origin(hosts, 2, "http_port")
    assert origins["tier"] == Origin(hosts, 4, "tier")
    assert origins["ntp"] == Origin(group_file, 2, "ntp")
    assert origins["ansible_port"] == Origin(host_file, 2, "ansible_port")
    assert inventory.line_of("w1", "port") == (host_file, 2)  # the setting, by its field name
    assert inventory.hosts[0].port == 2222


@pytest.mark.parametrize(("name", "text", "mode", "fragment"), [
    ("vault.yml", "$ANSIBLE_VAULT;1.1;AES256\n6162\n", 0o644, "Ansible Vault is not supported"),
    ("dynamic.py", "#!/usr/bin/env python3\nprint('{}')\n", 0o755, "dynamic inventory scripts are not supported"),
    ("aws_ec2.yml", "plugin: amazon.aws.aws_ec2\nregions: [eu-west-1]\n", 0o644, "inventory plugins are not supported"),
])
def test_what_ansible_runs_or_decrypts_is_refused_with_the_way_out(
        tmp_path: Path, listener, name: str, text: str, mode: int, fragment: str) -> None:  # noqa: F811
    path = write(tmp_path, name, text, mode)
    done = provision("up", str(path))
    assert done.returncode == 2, done.stderr
    assert fragment in done.stderr and f"{path}:1" in done.stderr
    assert "ansible-inventory -i" in done.stderr or "!env" in done.stderr
    assert listener[1] == []


def test_a_vault_value_in_group_vars_is_refused_at_its_line(tmp_path: Path) -> None:
    hosts = write(tmp_path, "hosts", "w1\n")
    write(tmp_path, "group_vars/all.yml", "a: 1\nsecret: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  3031\n")
    error = load_error(hosts)
    assert error.file == tmp_path / "group_vars/all.yml" and error.line == 2 and "Vault" in str(error)


def test_jinja_in_connection_variables_is_rendered_before_connecting(tmp_path: Path) -> None:
    path = write(tmp_path, "hosts", """
        [lan]
        nas ansible_host="{{ inventory_hostname }}.{{ domain }}" ansible_port="{{ 2200 + 22 }}"
        [lan:vars]
        domain=home.lan
        """)
    [host] = load_inventory(path).hosts
    assert (host.address, host.port) == ("nas.home.lan", 2222)
    assert load_inventory(path).hostvars["nas"]["ansible_host"] == "{{ inventory_hostname }}.{{ domain }}"


def test_an_undefined_variable_in_a_connection_variable_names_its_line(tmp_path: Path) -> None:
    """Listed as written (as ansible-inventory does), refused when the host is to be contacted."""
    path = write(tmp_path, "hosts", "[lan]\nnas\n[lan:vars]\nansible_host={{ nope }}.lan\n")
    inventory = load_inventory(path)
    assert inventory.hostvars["nas"]["ansible_host"] == "{{ nope }}.lan"
    with pytest.raises(InputError) as caught:
        inventory.check_connectable(inventory.hosts)
    error = caught.value
    assert (error.file, error.line, error.key) == (path, 4, "ansible_host") and "nope" in str(error)


def test_port_and_user_are_ordinary_variables_in_an_ansible_inventory(tmp_path: Path) -> None:
    path = write(tmp_path, "hosts", "app port=8080 user=appuser ansible_user=deploy\n")
    [host] = load_inventory(path).hosts
    assert (host.port, host.user) == (22, "deploy")
    assert host.vars == {"port": 8080, "user": "appuser"}


def test_become_password_variables_are_secrets_and_feed_the_host(tmp_path: Path) -> None:
    path = write(tmp_path, "hosts", "lap ansible_become_pass=s3cret-pass ansible_become_user=admin\n")
    inventory = load_inventory(path)
    [host] = inventory.hosts
    assert host.become_password == Secret("s3cret-pass") and host.become_user == "admin"
    shown = provision("inventory", str(path), "--host", "lap")
    assert json.loads(shown.stdout)["ansible_become_pass"] == "***" and "s3cret-pass" not in shown.stdout


def test_single_host_file_takes_become_password_from_the_environment(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUDO_PW", "from-the-env-123")
    path = write(tmp_path, "host.yaml", "address: 10.0.0.5\nuser: ubuntu\nbecome_password: !env SUDO_PW\n")
    [host] = load_inventory(path).hosts
    assert host.become_password is not None and host.become_password.reveal() == "from-the-env-123"
    assert str(host.become_password) == "***"


def test_limit_from_a_retry_file_and_the_error_lists_the_groups(tmp_path: Path) -> None:
    path = write(tmp_path, "hosts", "[web]\nw1\nw2\n[db]\nd1\n")
    retry = write(tmp_path, "site.retry", "w2\nd1\n\n")
    inventory = load_inventory(path)
    assert [h.name for h in inventory.select(f"@{retry}")] == ["w2", "d1"]
    with pytest.raises(InputError) as caught:
        inventory.select("webb:&db")
    assert "'webb'" in str(caught.value) and "did you mean 'web'" in str(caught.value)
    assert "(groups: ungrouped, web, db)" in str(caught.value)


def test_inventory_folder_and_minus_i(tmp_path: Path) -> None:
    write(tmp_path, "inv/a.ini", "[web]\nw1\n")
    write(tmp_path, "inv/b.yaml", "db:\n  hosts:\n    d1:\n")
    write(tmp_path, "inv/notes.md", "[web]\nnot-a-host\n")
    done = provision("inventory", "-i", str(tmp_path / "inv"), "--graph")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n") == ["@all:", "  |--@ungrouped:", "  |--@web:", "  |  |--w1", "  |--@db:",
                                       "  |  |--d1", ""]


def test_up_list_hosts_and_list_tasks_contact_nobody(tmp_path: Path, listener) -> None:  # noqa: F811
    port, connections = listener
    path = write(tmp_path, "hosts", f"[web]\nw1 ansible_host=127.0.0.1 ansible_port={port}\nw2\n")
    done = provision("up", str(path), "--list-hosts", "--list-tasks", "--limit", "web:!w2", "--tags", "docker")
    assert done.returncode == 0, done.stderr
    assert "hosts (1):" in done.stdout and "      w1" in done.stdout and "w2" not in done.stdout
    assert "docker : " in done.stdout and "preflight : " not in done.stdout
    assert connections == []


# --- sudo -S, as sudo was seen to behave: prompt on stderr, "Sorry, try again." and a new prompt ----

def scripted(stderr_chunks: list[bytes]):
    chunks = list(stderr_chunks)
    written: list[bytes] = []

    def read() -> bytes:
        return chunks.pop(0) if chunks else b""
    return read, written.append, (lambda: not chunks), written


def test_the_password_is_sent_once_when_sudo_asks_and_never_otherwise() -> None:
    read, write_, exited, written = scripted([PROMPT.encode(), b"", f"{READY}\nwarning: x\n".encode()])
    assert handshake(read, write_, exited, Secret("pw-1234"), "h") == b"warning: x\n"
    assert written == [b"pw-1234\n"]
    read, write_, exited, written = scripted([f"{READY}\n".encode()])  # NOPASSWD or cached: nothing sent
    handshake(read, write_, exited, Secret("pw-1234"), "h")
    assert written == []


def test_a_second_prompt_means_a_wrong_password() -> None:
    read, write_, exited, _ = scripted([PROMPT.encode(), f"\nSorry, try again.\n{PROMPT}".encode()])
    with pytest.raises(BecomeFailed, match="incorrect sudo password"):
        handshake(read, write_, exited, Secret("pw-1234"), "h")


def test_sudo_refusing_outright_is_reported_without_the_password() -> None:
    read, write_, exited, _ = scripted([b"laptop is not in the sudoers file.\n"])
    with pytest.raises(BecomeFailed, match="not in the sudoers file"):
        handshake(read, write_, exited, Secret("pw-1234"), "h")


def test_the_become_command_carries_no_password() -> None:
    assert become_command("root", None) == "sudo -n -H -u root -- bash -s"
    command = become_command("root", Secret("pw-1234"))
    assert command.startswith("sudo -S -p ") and "pw-1234" not in command and READY in command


def test_a_plays_hosts_take_ansible_patterns(tmp_path: Path) -> None:
    path = write(tmp_path, "hosts", "[web]\nw1\nw2\n[prod]\nw2\nd1\n")
    write(tmp_path, "roles/noop/tasks.yaml", "- name: say\n  debug: {msg: hi}\n")
    playbook = write(tmp_path, "playbooks/site.yaml", "- hosts: 'web:&prod'\n  roles: [noop]\n"
                                                      "- hosts: 'all:!web'\n  roles: [noop]\n")
    done = provision("up", str(path), "--playbook", str(playbook), "--list-hosts")
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.split("play #2")
    assert "hosts (1):\n      w2\n" in first
    assert "hosts (1):\n      d1\n" in second
