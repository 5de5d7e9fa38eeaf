"""Lookups in inventories (issue 25): listing and graphing never render (as `ansible-inventory
--list`, judged in test_inventory_vs_ansible.py on a real inventory that uses one); `up` renders the
read-only lookups Ansible ships that make sense on the controller, `env` and `file`, and refuses any
other by name for the selected hosts that need it, before contacting any host (exit 2).

The idiom `lookup('env', 'X') | default('...', true)` is the real inventories' (e.g. an inventory
with `ansible_host: "{{ lookup('env', 'WEB_01_IP') | default('192.168.1.10') }}"`, and
sripwoud/auberge's key path from `lookup('env', 'HOME')`, tests/inventories/auberge-lookups)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision.errors import InputError
from provision.inventory.loader import load_inventory

REPO = Path(__file__).resolve().parents[2]


def inventory_file(tmp_path: Path, hosts: dict[str, dict[str, object]]) -> Path:
    path = tmp_path / "hosts.yaml"
    path.write_text(json.dumps({"all": {"hosts": hosts}}, indent=2))
    return path


def provision(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provision", *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "1000"})


def test_env_and_file_lookups_give_the_selected_hosts_their_settings(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPU_DESK_IP", "10.0.0.7")
    monkeypatch.setenv("SUDO_PASS", "hunter2-lookup")
    monkeypatch.delenv("UNSET_IP", raising=False)
    (tmp_path / "files").mkdir()
    (tmp_path / "files/desk-2.addr").write_text("10.0.0.8\n")
    inventory = load_inventory(inventory_file(tmp_path, {
        "desk-1": {"ansible_host": "{{ lookup('env', 'GPU_DESK_IP') }}",
                   "ansible_become_password": "{{ lookup('env', 'SUDO_PASS') }}"},
        "desk-2": {"ansible_host": "{{ lookup('file', 'desk-2.addr') }}",
                   "ansible_port": "{{ query('env', 'NOPE', default='2222') | first }}"},
        "desk-3": {"ansible_host": "{{ lookup('env', 'UNSET_IP') | default('10.0.0.9', true) }}"},
    }))
    assert [host.address for host in inventory.hosts] == ["10.0.0.7", "10.0.0.8", "10.0.0.9"]
    assert inventory.host("desk-2").port == 2222
    password = inventory.host("desk-1").become_password
    assert password is not None and password.reveal() == "hunter2-lookup" and "hunter2" not in str(password)
    assert not inventory.problems


@pytest.mark.parametrize(("value", "named"), [
    ("{{ lookup('community.hashi_vault.hashi_vault', 'secret/desk') }}", "'community.hashi_vault.hashi_vault'"),
    ("{{ lookup('pipe', 'touch MARKER') }}", "'pipe'"),
    ("{{ query('password', '/tmp/pw length=20') | first }}", "'password'"),
    ("{{ lookup('p' ~ 'ipe', 'touch MARKER') }}", "a lookup named by an expression"),
])
@pytest.mark.parametrize("where", ["ansible_host", "served_model_name"])
def test_up_refuses_any_other_lookup_by_name_before_contact(tmp_path: Path, value: str, named: str,
                                                            where: str) -> None:
    marker = tmp_path / "pwned"
    hosts = {"desk-1": {"ansible_host": "192.0.2.1", where: value.replace("MARKER", str(marker))},
             "desk-2": {"ansible_host": "192.0.2.2"}}
    path = inventory_file(tmp_path, hosts)
    done = provision(tmp_path, "up", str(path), "--limit", "desk-1", "--check")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"lookup {named}" in done.stderr or named in done.stderr, done.stderr
    assert f"{path.name}:" in done.stderr and where in done.stderr and "Traceback" not in done.stderr
    assert not marker.exists()
    # listing never renders it, and the other host is not held back by it
    listed = provision(tmp_path, "inventory", str(path), "--list")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["_meta"]["hostvars"]["desk-1"][where] == value.replace("MARKER", str(marker))
    graph = provision(tmp_path, "inventory", str(path), "--graph")
    assert graph.returncode == 0 and "desk-1" in graph.stdout
    inventory = load_inventory(path)
    inventory.check_connectable([inventory.host("desk-2")])
    with pytest.raises(InputError, match="desk-1"):
        inventory.check_connectable([inventory.host("desk-1")])
    assert not marker.exists()


@pytest.mark.parametrize(("target", "why"), [("/dev/zero", "not a regular file"),
                                             ("big.txt", "over 1,048,576 bytes"),
                                             ("missing.txt", "no such file")])
def test_a_file_lookup_reads_only_a_regular_file_of_bounded_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 target: str, why: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "big.txt").write_bytes(b"1" * (1024 * 1024 + 1))
    value = f"{{{{ lookup('file', '{target}') }}}}"
    inventory = load_inventory(inventory_file(tmp_path, {"desk-1": {"ansible_host": value}}))
    with pytest.raises(InputError, match=why) as refused:
        inventory.check_connectable(inventory.hosts)
    assert refused.value.key == "ansible_host" and refused.value.line is not None


def test_a_secret_from_an_env_lookup_is_rendered_and_stays_secret(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`hf_token: "{{ lookup('env', 'HF_TOKEN') }}"` in an inventory: the token, masked wherever shown."""
    from provision.playbook.templating import Renderer, make_environment
    from provision.secrets import REDACTOR

    monkeypatch.setenv("HF_TOKEN_FOR_TEST", "hf_lookupsecretvalue")
    inventory = load_inventory(inventory_file(tmp_path, {"desk-1": {
        "hf_token": "{{ lookup('env', 'HF_TOKEN_FOR_TEST') }}"}}))
    renderer = Renderer(make_environment(), dict(inventory.host("desk-1").vars))
    assert renderer.render("Authorization: Bearer {{ hf_token }}") == "Authorization: Bearer hf_lookupsecretvalue"
    assert "hf_lookupsecretvalue" not in REDACTOR(f"token {renderer.variables['hf_token']}")
    assert REDACTOR("hf_lookupsecretvalue") != "hf_lookupsecretvalue"
