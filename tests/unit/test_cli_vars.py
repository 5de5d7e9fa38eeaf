"""`provision vars`: each effective variable, its value and where it was set; secrets as ***."""

from __future__ import annotations

import json
from pathlib import Path

from provision.cli.main import main
from provision.inventory.loader import load_inventory
from provision.playbook.loader import load_playbook
from provision.settings.variables import host_variables

FLEET = """\
all:
  vars:
    max_num_seqs: 3
  hosts:
    desk-1:
      ansible_host: 192.0.2.10
      max_model_len: 65536
      hf_token: !secret hf_abcdef123456
    desk-2: {ansible_host: 192.0.2.11}
"""


def vars_of(capsys, tmp_path, *args: str) -> dict:
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(FLEET)
    assert main(["vars", str(inventory), "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_every_layer_names_its_origin(capsys, tmp_path):
    rows = vars_of(capsys, tmp_path, "--host", "desk-1", "-e", "gpu_memory_utilization=0.9")["desk-1"]
    inventory = tmp_path / "fleet.yaml"
    assert rows["max_num_seqs"] == {"value": 3, "from": f"{inventory}:3", "layer": "inventory"}
    assert rows["max_model_len"]["from"] == f"{inventory}:7"
    assert rows["gpu_memory_utilization"] == {"value": 0.9, "from": "-e", "layer": "-e"}
    defaults = Path(__file__).parents[2] / "roles/plan/defaults.yaml"
    line = next(n for n, text in enumerate(defaults.read_text().splitlines(), 1) if text.startswith("kv_overhead_gib:"))
    assert rows["kv_overhead_gib"]["from"].endswith(f"roles/plan/defaults.yaml:{line}")
    assert rows["kv_overhead_gib"]["layer"] == "role default (plan)"


def test_secrets_print_as_stars(capsys, tmp_path):
    rows = vars_of(capsys, tmp_path, "--host", "desk-1", "-e", "vllm_api_key=plain-text-key")["desk-1"]
    assert rows["hf_token"]["value"] == "***" and rows["vllm_api_key"]["value"] == "***"


def test_without_host_every_selected_host(capsys, tmp_path):
    assert sorted(vars_of(capsys, tmp_path)) == ["desk-1", "desk-2"]
    assert list(vars_of(capsys, tmp_path, "-l", "desk-2")) == ["desk-2"]


def test_the_shipped_local_inventory_runs_here_without_ssh(capsys):
    """inventory/local.yaml: the laptop provisions itself (local connection, `sudo -n` for root)."""
    local = Path(__file__).resolve().parents[2] / "inventory" / "local.yaml"
    assert main(["facts", str(local), "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)["localhost"]
    assert facts["os"]["id"] and facts["kernel"]


OFFICE = """\
all:
  hosts:
    desk-1: {ansible_host: 192.0.2.10}
  children:
    office_cache:
      hosts:
        cache-1: {ansible_host: 192.0.2.50}
"""


def test_a_template_shows_what_it_evaluates_to_and_a_facts_one_says_so(capsys, tmp_path, monkeypatch):
    """Before: 28 of 143 values printed as raw templates (`{{ hostvars[office_cache_host].address ...`)."""
    inventory = tmp_path / "office.yaml"
    inventory.write_text(OFFICE)
    assert main(["vars", str(inventory), "--json", "--host", "desk-1", "-e", "hf_endpoint=https://hub.example"]) == 0
    rows = json.loads(capsys.readouterr().out)["desk-1"]
    assert rows["office_cache_address"]["value"] == "192.0.2.50"
    assert rows["office_cache_hf_upstream"]["value"] == "https://hub.example"
    assert rows["office_cache_address"]["template"].startswith("{{ hostvars[office_cache_host].address")
    assert rows["bundle_weights_here"]["value"] is False, "a single expression keeps its type, as in a run"
    # through another variable too: container_gpu_request reads container_toolkit_uses_cdi, which reads facts
    assert rows["docker_repo_url"]["needs_facts"] == ["os"] and rows["docker_repo_url"]["value"] is None
    # docker's path: the docker running, or the one the role would install (its packages, the OS)
    assert rows["container_gpu_request"]["needs_facts"] == ["docker_packages", "docker_version", "os"]
    assert not [name for name, row in rows.items() if "{{" in json.dumps(row["value"])], "a raw template shown"
    monkeypatch.setenv("COLUMNS", "300")
    assert main(["vars", str(inventory), "--host", "desk-1"]) == 0
    table = capsys.readouterr().out
    assert "(set from facts.os when a run reads the host)" in table and "192.0.2.50" in table



PLAYBOOK = """\
- name: office cache
  hosts: office_cache
  vars:
    gpu_memory_utilization: 0.5
  roles: [office_cache]
- name: model server
  hosts: all
  vars:
    gpu_memory_utilization: 0.85
    max_model_len: 4096
  roles: [vllm]
"""


def test_a_play_var_shows_as_up_uses_it(capsys, tmp_path):
    """Before: `vars` layered role defaults < inventory < -e and showed the role default where `up`
    used the play's `vars:` value; a play the host is not in counts for nothing; the inventory still wins."""
    roles = Path(__file__).parents[2] / "roles"
    playbook = tmp_path / "playbooks/site.yaml"
    playbook.parent.mkdir()
    playbook.write_text(PLAYBOOK)
    rows = vars_of(capsys, tmp_path, "--playbook", str(playbook), "--roles-path", str(roles))
    desk1, desk2 = rows["desk-1"], rows["desk-2"]
    assert desk2["gpu_memory_utilization"] == {"value": 0.85, "from": f"{playbook}:9",
                                               "layer": "play vars (model server)"}
    assert desk2["max_model_len"]["value"] == 4096 and desk2["max_model_len"]["from"] == f"{playbook}:10"
    assert desk1["max_model_len"]["value"] == 65536 and desk1["max_model_len"]["layer"] == "inventory"
    inventory = load_inventory(tmp_path / "fleet.yaml")
    play = load_playbook(playbook, roles)[1]
    for name, shown in rows.items():
        up_uses = host_variables(play, inventory.host(name), {})
        assert {key: up_uses[key] for key in ("gpu_memory_utilization", "max_model_len", "max_num_seqs")} \
            == {key: shown[key]["value"] for key in ("gpu_memory_utilization", "max_model_len", "max_num_seqs")}
