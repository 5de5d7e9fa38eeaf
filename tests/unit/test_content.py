"""Which playbook and roles a command uses: --roles-path, ./roles, beside the playbook, shipped."""

from __future__ import annotations

import tomllib
from pathlib import Path

from provision import content

REPO = Path(__file__).resolve().parents[2]


def test_from_a_directory_without_roles_the_shipped_ones_are_used(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert content.playbook_path(None) == REPO / "playbooks" / "site.yaml"
    assert content.roles_path(None, content.playbook_path(None)) == REPO / "roles"


def test_local_folders_override_the_shipped_ones(tmp_path, monkeypatch):
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "site.yaml").write_text("[]\n")
    (tmp_path / "roles").mkdir()
    monkeypatch.chdir(tmp_path)
    assert content.playbook_path(None) == Path("playbooks/site.yaml")
    assert content.roles_path(None, Path("playbooks/site.yaml")).resolve() == (tmp_path / "roles").resolve()
    assert content.roles_path(None, REPO / "playbooks" / "site.yaml") == Path("roles")  # shipped playbook
    assert content.roles_path(tmp_path / "mine", None) == tmp_path / "mine"
    assert f"roles    {tmp_path / 'roles'}" in content.describe()


def test_a_playbook_elsewhere_uses_the_roles_beside_it(tmp_path, monkeypatch):
    (tmp_path / "project" / "playbooks").mkdir(parents=True)
    (tmp_path / "project" / "roles").mkdir()
    monkeypatch.chdir(tmp_path)
    playbook = tmp_path / "project" / "playbooks" / "x.yaml"
    assert content.roles_path(None, playbook) == tmp_path / "project" / "roles"


def test_the_wheel_lists_every_package_of_the_tool():
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "provision").rglob("__init__.py")}
    assert packages <= listed, f"add to pyproject.toml [tool.setuptools] packages: {sorted(packages - listed)}"
    assert {"provision._shipped.playbooks", "provision._shipped.roles"} <= listed
