"""Probes remembered between runs (runner/probe_memory.py): a converged rerun sends last run's
snippets in its first round trip (run again, not their old answers), and no secret's value is ever
written to the controller's cache."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from provision import controller_cache
from provision.inventory.loader import load_inventory
from provision.playbook.loader import load_playbook
from provision.runner.events import SilentReporter
from provision.runner.host_run import RunOptions
from provision.runner.runner import RunConfig, Runner
from tests.unit.test_runner_local import write

TOKEN = "hf_s3cr3tTokenValue9"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A play whose later tasks can render only after earlier ones ran: one reads the facts, one an
    earlier task's registered result, one a secret variable."""
    target = tmp_path / "target"
    write(tmp_path / "inventory.yaml", f"""
        name: here
        connection: local
        vars:
          target: {target}
          hub_token: !secret {TOKEN}
    """)
    write(tmp_path / "playbooks/site.yaml", """
        - name: demo
          hosts: all
          roles: [chain]
    """)
    write(tmp_path / "roles/chain/tasks.yaml", """
        - name: folder
          directory: {path: "{{ target }}", mode: "0755"}
          register: folder
        - name: named by the facts
          file: {dest: "{{ target }}/os-{{ facts.os.id }}", content: "x\\n"}
          register: by_facts
        - name: after the facts task
          file: {dest: "{{ target }}/after-{{ by_facts.skipped }}", content: "y\\n"}
        - name: holds the token
          command:
            cmd: "true"
            unless: "test -n '{{ hub_token }}' && test -e {{ target }}/folder-{{ folder.skipped }}"
        - name: the token's marker
          file: {dest: "{{ target }}/folder-{{ folder.skipped }}", content: "z\\n"}
    """)
    return tmp_path


def run(project: Path, memory: Path | None, check: bool = False, tags: frozenset[str] = frozenset()) -> dict:
    inventory = load_inventory(project / "inventory.yaml")
    plays = load_playbook(project / "playbooks/site.yaml")
    options = RunOptions(check=check, tags=tags, handlers_dir=str(project / "host-state/handlers"))
    config = RunConfig(options=options, lock=False, probe_memory=memory)
    return Runner(inventory, config, SilentReporter()).run(plays).document()["hosts"]["here"]


def test_a_converged_rerun_sends_last_runs_probes_in_one_round_trip(project: Path, tmp_path: Path):
    memory = tmp_path / "memory"
    run(project, memory)
    without = run(project, None)
    assert without["changed"] == 0 and without["round_trips"] >= 3  # each dependency: one more trip
    remembered = run(project, memory)
    assert remembered["changed"] == 0 and remembered["failed"] == 0
    assert remembered["round_trips"] == 1
    assert [t["status"] for t in remembered["tasks"]] == [t["status"] for t in without["tasks"]]


def test_remembered_probes_are_asked_again_never_their_old_answers(project: Path, tmp_path: Path):
    memory = tmp_path / "memory"
    run(project, memory)
    (project / "target" / "after-False").unlink()  # what the remembered probe found last time
    again = run(project, memory)
    assert [t["name"] for t in again["tasks"] if t["changed"]] == ["after the facts task"]
    assert (project / "target" / "after-False").read_text() == "y\n"


def test_the_cache_names_the_secret_never_its_value(project: Path, tmp_path: Path):
    memory = tmp_path / "memory"
    run(project, memory)
    [kept] = list(memory.iterdir())
    text = kept.read_bytes().decode(errors="replace")
    assert TOKEN not in text and TOKEN[:8] not in text
    assert "\\u0000secret:hub_token\\u0000" in text
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and stat.S_IMODE(memory.stat().st_mode) == 0o700
    assert run(project, memory)["round_trips"] == 1  # the token put back: the snippet is the task's again


def test_a_quoted_secret_is_not_kept(tmp_path: Path):
    from provision.runner.probe_memory import ProbeMemory
    from provision.secrets import Secret

    Secret("pa'ss-word-1")
    memory = ProbeMemory(tmp_path, "host")
    memory.keep("play", [("a", "echo 'pa'\"'\"'ss-word-1'"), ("b", "echo fine")], ran={"a", "b"}, secrets={},
                tasks={"a", "b"})
    assert json.loads(controller_cache.read(next(tmp_path.iterdir())))["probes"] == [["b", "echo fine"]]


def test_a_broken_or_foreign_cache_costs_round_trips_not_answers(project: Path, tmp_path: Path):
    memory = tmp_path / "memory"
    run(project, memory)
    [kept] = list(memory.iterdir())
    document = json.loads(controller_cache.read(kept))
    controller_cache.write(kept, b"{not json")
    assert run(project, memory)["changed"] == 0
    controller_cache.write(kept, json.dumps({**document, "host": "another"}).encode())
    again = run(project, memory)
    assert again["changed"] == 0 and again["round_trips"] >= 3


def test_a_run_of_some_tags_sends_only_their_probes_and_forgets_none(project: Path, tmp_path: Path):
    write(project / "roles/other/tasks.yaml", """
        - name: counts its probes
          command: {cmd: "true", unless: "echo >> {{ target }}/../probed; test -e {{ target }}/folder-False"}
    """)
    write(project / "playbooks/site.yaml", """
        - name: demo
          hosts: all
          roles: [chain, other]
    """)
    memory = tmp_path / "memory"
    run(project, memory)
    run(project, memory)
    [kept] = list(memory.iterdir())
    everything = json.loads(controller_cache.read(kept))["probes"]
    assert any("probed" in snippet for _, snippet in everything)
    probed = (project / "probed").read_text()
    chain_only = run(project, memory, tags=frozenset({"chain"}))
    assert chain_only["changed"] == 0 and chain_only["round_trips"] == 1
    assert (project / "probed").read_text() == probed  # not sent: its task is not selected
    assert json.loads(controller_cache.read(kept))["probes"] == everything  # the other role's probe is still known


def test_a_handlers_probe_is_never_remembered(project: Path, tmp_path: Path):
    """A handler runs only when notified, and its probe may be the costly kind (the GPU check after
    docker's restart): it is not sent ahead on the next run."""
    write(project / "roles/chain/handlers.yaml", """
        - name: counted handler
          command: {cmd: "true", unless: "echo >> {{ target }}/../handler-probed; false"}
    """)
    tasks = (project / "roles/chain/tasks.yaml").read_text()
    notifying = tasks.replace("register: folder", "register: folder\n  notify: counted handler")
    write(project / "roles/chain/tasks.yaml", notifying)
    memory = tmp_path / "memory"
    run(project, memory)  # the folder is made: the handler runs, its probe with it
    assert (project / "handler-probed").read_text() == "\n"
    again = run(project, memory)
    assert again["changed"] == 0 and (project / "handler-probed").read_text() == "\n"
    [kept] = list(memory.iterdir())
    assert not any("handler-probed" in snippet for _, snippet in json.loads(controller_cache.read(kept))["probes"])
