"""Host keys are checked, unreachable hosts are reported as such, sudo (become) works, and a play's
`vars:` reach the host as `provision vars` shows them."""

from __future__ import annotations

import json

import pytest

from tests.e2e.helpers import provision
from tests.lab.inventory import render_inventory

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def host(lab):
    (host,) = lab.new_hosts(1, prefix="keys")
    return host


def inventory_for(lab, host, tmp_path, known_hosts_text: str, **vars):
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(known_hosts_text)
    return lab.write_inventory(tmp_path / "inventory.yaml", [host], known_hosts=str(known_hosts), **vars), known_hosts


def test_unknown_host_key_is_refused_with_a_way_forward(lab, host, tmp_path):
    inventory, known_hosts = inventory_for(lab, host, tmp_path, "")
    run = provision("facts", str(inventory))
    assert run.returncode == 1
    assert "not known" in run.output and "--trust-new-host-keys" in run.output
    assert known_hosts.read_text() == ""


def test_trust_new_host_keys_records_the_key_then_checks_it(lab, host, tmp_path):
    inventory, known_hosts = inventory_for(lab, host, tmp_path, "")
    run = provision("facts", str(inventory), "--trust-new-host-keys", "--json")
    assert run.returncode == 0, run.output
    recorded = known_hosts.read_text()
    assert f"[127.0.0.1]:{host.ssh_port}" in recorded
    assert host.host_key().split()[1] in recorded
    again = provision("facts", str(inventory))
    assert again.returncode == 0, again.output
    assert known_hosts.read_text() == recorded


def test_changed_host_key_is_always_refused(lab, host, tmp_path):
    (other,) = lab.new_hosts(1, prefix="keys")
    wrong = f"[127.0.0.1]:{host.ssh_port} {other.host_key()}\n"
    inventory, known_hosts = inventory_for(lab, host, tmp_path, wrong)
    run = provision("facts", str(inventory), "--trust-new-host-keys")
    assert run.returncode == 1
    assert "CHANGED" in run.output and "never accepted" in run.output
    assert known_hosts.read_text() == wrong


def test_unreachable_host_is_reported_not_crashed(lab, host, tmp_path):
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "all:\n  hosts:\n    gone:\n      ansible_host: 127.0.0.1\n      ansible_port: 1\n"
        f"      ansible_user: root\n      ansible_ssh_private_key_file: {lab.key_file}\n"
    )
    run = provision("up", str(inventory), "--tags", "docker", json_path=tmp_path / "out.json", timeout=300)
    assert run.returncode == 1
    assert run.host("gone")["unreachable"] == 1
    assert "Traceback" not in run.output


def test_non_root_user_becomes_root_with_sudo(lab, host, tmp_path):
    inventory_for(lab, host, tmp_path, f"[127.0.0.1]:{host.ssh_port} {host.host_key()}\n")
    inventory = lab.write_inventory(tmp_path / "deploy.yaml", [host], user="deploy",
                                    known_hosts=str(tmp_path / "known_hosts"))
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "roles/rootfile").mkdir(parents=True)
    (tmp_path / "playbooks/site.yaml").write_text("- hosts: all\n  roles: [rootfile]\n")
    (tmp_path / "roles/rootfile/tasks.yaml").write_text(
        "- name: a file only root may write\n"
        '  file: {dest: /root/written-by-provision, content: "ok\\n", mode: "0600"}\n')
    run = provision("up", str(inventory), "--playbook", str(tmp_path / "playbooks/site.yaml"),
                    json_path=tmp_path / "out.json")
    assert run.returncode == 0, run.output
    written = host.exec("stat -c '%U %a' /root/written-by-provision && cat /root/written-by-provision")[1]
    assert written == "root 600\nok\n"
    assert host.exec("id -un", user="deploy")[1].strip() == "deploy"


def test_a_proxyjump_hop_is_held_to_the_same_host_key_rules(lab, host, tmp_path):
    """Through a real sshd as a ProxyJump hop (to its own sshd, port 22 behind it): an unknown hop key
    is refused, nothing recorded, before anything goes through it (fabric's gateway took any key);
    with the hop's key on file the host is reached."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh/config").write_text(f"Host 127.0.0.1\n    ProxyJump root@localhost:{host.ssh_port}\n"
                                      f"Host localhost\n    IdentityFile {lab.key_file}\n")
    target_known = f"127.0.0.1 {host.host_key()}\n"  # the host itself, as seen from the hop: port 22
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(target_known)
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(render_inventory([(host.name, 22)], {
        "ansible_user": "root", "ansible_ssh_private_key_file": str(lab.key_file), "known_hosts": str(known_hosts)}))
    refused = provision("facts", str(inventory), env={"HOME": str(home)})
    assert refused.returncode == 1
    # (the name is `[localhost]:PORT`; the table's markup may eat `[localhost]` until rich is told not to read it)
    assert f":{host.ssh_port} is not known" in refused.output, refused.output
    assert "Traceback" not in refused.output and known_hosts.read_text() == target_known
    known_hosts.write_text(target_known + f"[localhost]:{host.ssh_port} {host.host_key()}\n")
    reached = provision("facts", str(inventory), "--json", env={"HOME": str(home)})
    assert reached.returncode == 0, reached.output


def test_a_play_var_reaches_the_host_as_vars_shows_it(lab, host, tmp_path):
    """`provision vars` and `up` layer a play's `vars:` the same way (settings/variables.py): the value
    `vars` shows, from the playbook line, is what `up` writes on the host (before, `vars` showed the
    role default)."""
    inventory, _ = inventory_for(lab, host, tmp_path, f"[127.0.0.1]:{host.ssh_port} {host.host_key()}\n")
    playbook = tmp_path / "playbooks/site.yaml"
    playbook.parent.mkdir()
    playbook.write_text("- name: greet\n  hosts: all\n  vars:\n    greeting: from the play\n  roles: [greet]\n")
    role = tmp_path / "roles/greet"
    (role / "meta").mkdir(parents=True)
    (role / "defaults.yaml").write_text("greeting: from the role default\n")
    (role / "meta/argument_specs.yaml").write_text(
        "options:\n  greeting: {type: str, description: What the greeting file says.}\n")
    (role / "tasks.yaml").write_text(
        '- name: greeting file\n  file: {dest: /root/greeting, content: "{{ greeting }}", mode: "0600"}\n')
    shown = provision("vars", str(inventory), "--playbook", str(playbook), "--json")
    assert shown.returncode == 0, shown.output
    row = json.loads(shown.stdout)[host.name]["greeting"]
    assert row == {"value": "from the play", "from": f"{playbook}:4", "layer": "play vars (greet)"}
    run = provision("up", str(inventory), "--playbook", str(playbook), json_path=tmp_path / "out.json")
    assert run.returncode == 0, run.output
    assert host.exec("cat /root/greeting") == (0, row["value"])
