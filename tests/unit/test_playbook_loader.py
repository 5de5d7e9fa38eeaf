from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from provision.errors import InputError
from provision.playbook.loader import load_playbook

REPO = Path(__file__).resolve().parents[2]


def make(tmp_path: Path, tasks: str, play: str = "- hosts: all\n  roles: [demo]\n") -> Path:
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "roles/demo").mkdir(parents=True)
    (tmp_path / "roles/demo/tasks.yaml").write_text(textwrap.dedent(tasks).lstrip("\n"))
    site = tmp_path / "playbooks/site.yaml"
    site.write_text(play)
    return site


def test_site_playbook_of_this_repository_loads():
    plays = load_playbook(REPO / "playbooks/site.yaml")
    assert plays and all(task.role in task.tags for play in plays for task in play.tasks)


def test_unknown_operation_names_line_and_suggests(tmp_path: Path):
    site = make(tmp_path, """
        - name: ok
          directory: {path: /x}
        - name: typo
          sytemd: {name: docker}
    """)
    with pytest.raises(InputError) as caught:
        load_playbook(site)
    message = str(caught.value)
    assert "roles/demo/tasks.yaml:3" in message
    assert "sytemd" in message and "did you mean 'systemd'" in message


def test_duplicate_key_in_a_task_is_refused(tmp_path: Path):
    site = make(tmp_path, """
        - name: twice
          name: again
          directory: {path: /x}
    """)
    with pytest.raises(InputError, match=r"tasks.yaml:2.*name"):
        load_playbook(site)


def test_missing_role_suggests(tmp_path: Path):
    site = make(tmp_path, "- name: x\n  directory: {path: /x}\n", play="- hosts: all\n  roles: [dmeo]\n")
    with pytest.raises(InputError, match=r"no role .dmeo.*did you mean .demo."):
        load_playbook(site)


def test_unknown_play_keyword(tmp_path: Path):
    site = make(tmp_path, "", play="- hosts: all\n  rolse: [demo]\n")
    with pytest.raises(InputError, match=r"site.yaml:1.*rolse.*did you mean 'roles'"):
        load_playbook(site)


def test_role_name_is_a_tag_and_notify_is_a_list(tmp_path: Path):
    site = make(tmp_path, """
        - name: a
          directory: {path: /x}
          notify: restart it
          tags: [config]
    """)
    (task,) = load_playbook(site)[0].tasks
    assert task.tags == {"demo", "config"} and task.notify == ["restart it"]


def test_role_defaults_are_playbook_wide_and_a_plays_own_roles_win(tmp_path: Path):
    for role, defaults in (("early", "x: early\n"), ("late", "x: late\nprofile: gemma\n")):
        (tmp_path / "roles" / role).mkdir(parents=True)
        (tmp_path / "roles" / role / "defaults.yaml").write_text(defaults)
    (tmp_path / "playbooks").mkdir()
    site = tmp_path / "playbooks/site.yaml"
    site.write_text("- hosts: all\n  roles: [early]\n- hosts: all\n  roles: [late]\n")
    first, second = load_playbook(site)
    assert first.defaults == {"x": "early", "profile": "gemma"}
    assert second.defaults == {"x": "late", "profile": "gemma"}


def test_a_roles_when_is_added_to_each_of_its_tasks(tmp_path: Path):
    site = make(tmp_path, """
        - name: plain
          directory: {path: /x}
        - name: own condition
          directory: {path: /y}
          when: y | bool
    """, play="- hosts: all\n  roles:\n    - {role: demo, when: gpu | bool}\n")
    tasks = load_playbook(site)[0].tasks
    assert [task.when for task in tasks] == [["gpu | bool"], ["gpu | bool", "y | bool"]]


def test_an_unknown_role_keyword_is_refused_with_its_line(tmp_path: Path):
    site = make(tmp_path, "", play="- hosts: all\n  roles:\n    - {role: demo, wehn: x}\n")
    with pytest.raises(InputError, match=r"site.yaml:1.*wehn.*did you mean 'when'"):
        load_playbook(site)
