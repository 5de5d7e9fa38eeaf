"""The controller's cache is used only if it is the user's own (controller_cache.py): what is read
back from it is executed (compiled template code) or sent to hosts as root (remembered probes), so a
tampered entry, a folder others can write, a foreign file or a loose key is ignored with one
warning, never executed or sent, and the run goes on without the cache (issue 19, item 4)."""

from __future__ import annotations

import json
import marshal
import os
from pathlib import Path

import pytest

from provision import controller_cache
from provision.inventory.extra_vars import parse_extra_vars
from provision.inventory.loader import load_inventory
from provision.playbook.loader import load_playbook
from provision.playbook.templating import Renderer, make_environment
from provision.runner.events import SilentReporter
from provision.runner.host_run import RunOptions
from provision.runner.runner import RunConfig, Runner
from tests.unit.test_runner_local import write

TEMPLATE = "port {{ port + 1 }}"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache folder and key file, as on a controller's first run."""
    monkeypatch.setenv("PROVISION_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "cache"


def render() -> str:
    return Renderer(make_environment(), {"port": 8000}).render(TEMPLATE)


def hostile_code(marker: Path) -> bytes:
    """What someone who can write in the cache puts there: code that runs when it is loaded."""
    return marshal.dumps(compile(f"open({str(marker)!r}, 'w').write('owned')", "<cached>", "exec"))


def test_a_tampered_template_entry_is_never_executed(cache: Path, tmp_path: Path, capsys):
    assert render() == "port 8001"
    [entry] = (cache / "templates").iterdir()
    marker = tmp_path / "marker"
    entry.write_bytes(hostile_code(marker))
    assert render() == "port 8001"  # compiled again: the cache costs time, never a result
    assert not marker.exists()
    warning = capsys.readouterr().err
    assert str(cache / "templates") in warning and "HMAC" in warning


def test_an_entry_moved_to_another_name_is_not_used(cache: Path, tmp_path: Path, capsys):
    """A genuine entry is valid only under the name it was written as (its HMAC covers the name)."""
    Renderer(make_environment(), {}).render("{{ 'other' }}")
    assert render() == "port 8001"
    first, second = sorted((cache / "templates").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    second.write_bytes(first.read_bytes())
    assert render() == "port 8001"
    assert "HMAC" in capsys.readouterr().err


def test_a_group_writable_cache_folder_is_neither_read_nor_written(cache: Path, tmp_path: Path, capsys):
    folder = cache / "templates"
    folder.mkdir(parents=True)
    folder.chmod(0o770)
    marker = tmp_path / "marker"
    render()  # where it would be kept
    for entry in folder.iterdir():  # (none on a fixed controller; a group member's code on an old one)
        entry.write_bytes(hostile_code(marker))
    assert render() == "port 8001"
    assert not marker.exists() and not list(folder.iterdir())
    warning = capsys.readouterr().err
    assert warning.count("warning:") == 1 and str(folder) in warning and "written by other users" in warning


def test_a_folder_above_that_others_can_write_makes_the_cache_unsafe(tmp_path: Path, monkeypatch, capsys):
    """OpenSSH's StrictModes walk: a parent others may write in could swap the cache folder."""
    loose = tmp_path / "shared"
    loose.mkdir()
    loose.chmod(0o777)  # not sticky: anyone can rename `cache` away and put theirs in its place
    monkeypatch.setenv("PROVISION_CACHE_DIR", str(loose / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert render() == "port 8001"
    assert not list((loose / "cache" / "templates").iterdir())
    assert f"folder {loose} (mode 0777) can be written by other users" in capsys.readouterr().err


def test_a_symlinked_entry_is_not_followed(cache: Path, tmp_path: Path, capsys):
    render()
    [entry] = (cache / "templates").iterdir()
    elsewhere = tmp_path / "elsewhere.code"
    elsewhere.write_bytes(entry.read_bytes())
    entry.unlink()
    entry.symlink_to(elsewhere)
    assert render() == "port 8001"
    assert str(entry) in capsys.readouterr().err


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_an_entry_owned_by_another_user_is_not_used(cache: Path, capsys):
    render()
    [entry] = (cache / "templates").iterdir()
    os.chown(entry, 4321, -1)
    assert render() == "port 8001"
    assert f"{entry}: not used: it is owned by uid 4321" in capsys.readouterr().err


def test_the_key_is_made_once_0600_outside_the_cache(cache: Path, tmp_path: Path):
    render()
    key = tmp_path / "config" / "provision" / "cache.key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32
    assert (tmp_path / "config" / "provision").stat().st_mode & 0o777 == 0o700
    made = key.read_bytes()
    controller_cache._keys.clear()  # a new run
    render()
    assert key.read_bytes() == made
    assert not any(path.name == "cache.key" for path in cache.rglob("*"))


def test_a_key_others_can_read_turns_the_cache_off(cache: Path, tmp_path: Path, capsys):
    key = tmp_path / "config" / "provision" / "cache.key"
    key.parent.mkdir(parents=True, mode=0o700)
    key.write_bytes(os.urandom(32))
    key.chmod(0o644)  # anyone could forge entries with it
    assert render() == "port 8001"
    assert not (cache / "templates").exists()
    assert f"{key}: this key is not used, nor the cache: its mode 0644 lets others read or write it" \
        in capsys.readouterr().err


@pytest.mark.parametrize("planted", ["short", "link"])
def test_a_key_that_is_not_ours_turns_the_cache_off(cache: Path, tmp_path: Path, capsys, planted: str):
    key = tmp_path / "config" / "provision" / "cache.key"
    key.parent.mkdir(parents=True, mode=0o700)
    if planted == "short":
        key.write_bytes(b"guessable")
        key.chmod(0o600)
    else:  # a link to a key someone else chose
        (tmp_path / "theirs").write_bytes(os.urandom(32))
        key.symlink_to(tmp_path / "theirs")
    assert render() == "port 8001"
    assert not (cache / "templates").exists()
    assert f"{key}: this key is not used, nor the cache" in capsys.readouterr().err


def test_a_tampered_role_yaml_entry_is_parsed_again(cache: Path, tmp_path: Path, capsys):
    from provision.yaml_loader import load_yaml_file

    path = tmp_path / "tasks.yaml"
    path.write_text("- name: safe\n  command: {cmd: 'true'}\n")
    load_yaml_file(path, cached=True)
    [entry] = (cache / "yaml").iterdir()
    entry.write_bytes(marshal.dumps(([{"name": "evil", "command": {"cmd": "touch /tmp/owned"}}], {}, {})))
    assert load_yaml_file(path, cached=True).data == [{"name": "safe", "command": {"cmd": "true"}}]
    assert "HMAC" in capsys.readouterr().err


BECOME_PASSWORD = "sudo-pa55word-7x"
REGISTRY_PASSWORD = "registry-pa55word-8y"
TOKEN = "hf_s3cr3tTokenValue9"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """One play whose one task puts the hub token into its probe; the registry's password is a
    variable of the host too (and the sudo password an `-e` one, see `run`), but no task puts either
    into a script."""
    write(tmp_path / "inventory.yaml", f"""
        name: here
        connection: local
        vars:
          target: {tmp_path / "target"}
          hub_token: !secret {TOKEN}
          registry_password: !secret {REGISTRY_PASSWORD}
    """)
    write(tmp_path / "playbooks/site.yaml", """
        - name: demo
          hosts: all
          roles: [chain]
    """)
    write(tmp_path / "roles/chain/tasks.yaml", """
        - name: holds the token
          command: {cmd: "true", unless: "test -n '{{ hub_token }}'"}
        - name: no secret
          command: {cmd: "true", unless: "test -d {{ target }}"}
    """)
    return tmp_path


def run(project: Path, memory: Path) -> dict:
    inventory = load_inventory(project / "inventory.yaml")
    plays = load_playbook(project / "playbooks/site.yaml")
    options = RunOptions(handlers_dir=str(project / "host-state/handlers"))
    extra_vars = parse_extra_vars([f"ansible_become_password={BECOME_PASSWORD}"])  # as `-e` gives it
    config = RunConfig(options=options, lock=False, probe_memory=memory, extra_vars=extra_vars)
    return Runner(inventory, config, SilentReporter()).run(plays).document()["hosts"]["here"]


def asking_for(secret: str, leak: Path) -> str:
    return f"echo \0secret:{secret}\0 > {leak}"


def test_a_tampered_probe_memory_entry_is_not_sent(project: Path, cache: Path, tmp_path: Path, capsys):
    memory = tmp_path / "memory"
    run(project, memory)
    [entry] = memory.iterdir()
    document = json.loads(controller_cache.read(entry))
    leak = tmp_path / "leak"
    document["probes"] = [[task, asking_for("ansible_become_password", leak)] for task, _ in document["probes"]]
    entry.write_text(json.dumps(document))  # written by someone without the user's key
    assert run(project, memory)["failed"] == 0
    assert not leak.exists()
    assert str(memory) in capsys.readouterr().err


def test_a_remembered_probe_asks_only_for_a_secret_its_task_uses(project: Path, cache: Path, tmp_path: Path):
    """Even an authentic entry (written by an older play, or by anything with the user's key) cannot
    have the sudo password put into a script where its task asks for the hub token, or for none."""
    memory = tmp_path / "memory"
    run(project, memory)
    [entry] = memory.iterdir()
    document = json.loads(controller_cache.read(entry))
    leaks = {(task, secret): tmp_path / f"leak-{n}-{secret}" for n, (task, _) in enumerate(document["probes"])
             for secret in ("ansible_become_password", "registry_password")}
    token_leak = tmp_path / "token"
    token_task = next(task for task, _ in leaks if "holds the token" in task)
    document["probes"] = [[task, asking_for(secret, leak)] for (task, secret), leak in leaks.items()]
    document["probes"].append([token_task, asking_for("hub_token", token_leak)])
    controller_cache.write(entry, json.dumps(document).encode())
    run(project, memory)
    assert not any(leak.exists() for leak in leaks.values())
    assert token_leak.read_text() == f"{TOKEN}\n"  # the secret this task does use is still put back
