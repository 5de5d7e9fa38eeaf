"""The YAML layer: duplicate keys, syntax errors and tags are reported at file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.errors import InputError
from provision.secrets import Secret
from provision.yaml_loader import load_yaml_file, load_yaml_text


def load(tmp_path: Path, text: str):
    path = tmp_path / "in.yaml"
    path.write_text(text)
    return path, load_yaml_file(path)


def test_duplicate_key_names_the_second_occurrence(tmp_path: Path) -> None:
    path = tmp_path / "in.yaml"
    path.write_text("all:\n  hosts:\n    lab1:\n      port: 22\n      port: 2222\n")
    with pytest.raises(InputError) as caught:
        load_yaml_file(path)
    assert (caught.value.file, caught.value.line, caught.value.key) == (path, 5, "port")
    assert f"{path}:5: port: duplicate key" in str(caught.value)


def test_duplicate_top_level_key(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        load(tmp_path, "address: 10.0.0.1\nuser: a\naddress: 10.0.0.2\n")
    assert (caught.value.line, caught.value.key) == (3, "address")


def test_merge_keys_are_not_duplicates_and_explicit_keys_win(tmp_path: Path) -> None:
    _, doc = load(tmp_path, "base: &b {x: 1, y: 1}\nhost:\n  <<: *b\n  x: 2\n")
    assert doc.data["host"] == {"x": 2, "y": 1}
    assert doc.line(("host", "x")) == 4


def test_lines_of_keys_and_values_by_path(tmp_path: Path) -> None:
    _, doc = load(tmp_path, "all:\n  hosts:\n    lab1:\n      ansible_port: 2222\n    lab2:\n")
    assert doc.data == {"all": {"hosts": {"lab1": {"ansible_port": 2222}, "lab2": None}}}
    assert type(doc.data["all"]) is dict
    assert doc.line(("all", "hosts", "lab1", "ansible_port")) == 4
    assert doc.line(("all", "hosts", "lab2")) == 5
    assert doc.value_line(("all", "hosts")) == 3  # the block under `hosts:` starts on the next line
    assert doc.line(("all", "hosts", "lab1", "missing")) == 3  # falls back to the enclosing key


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ("a: 1\nb: 2\n  c: 3\n", 3, "mapping values are not allowed here"),
    ("a: 1\nb: [1, 2\nc: 3\n", 3, "flow sequence started at line 2"),
    ("a: 1\n\tb: 2\n", 2, "'\\t'"),
    ("x: 1\n---\ny: 2\n", 2, "single document"),
])
def test_syntax_error_names_file_and_line(tmp_path: Path, text: str, line: int, fragment: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        load_yaml_file(path)
    assert caught.value.line == line
    assert str(caught.value).startswith(f"{path}:{line}: ")
    assert fragment in str(caught.value)


def test_unknown_tag_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"in.yaml:2: unknown tag '!vaults'"):
        load(tmp_path, "a: 1\nb: !vaults xyz\n")


def test_vault_values_are_refused_with_the_way_out(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"in.yaml:2: b: !vault value: Ansible Vault is not supported.*!env"):
        load(tmp_path, "a: 1\nb: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\n")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        load_yaml_file(tmp_path / "nope.yaml")


def test_secret_tag(tmp_path: Path) -> None:
    _, doc = load(tmp_path, "api_key: !secret sk-abcdef123\n")
    assert isinstance(doc.data["api_key"], Secret)
    assert doc.data["api_key"].reveal() == "sk-abcdef123"


def test_env_tag_reads_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISION_TEST_TOKEN", "hf_from_environment")
    _, doc = load(tmp_path, "vars:\n  hf_token: !env PROVISION_TEST_TOKEN\n")
    token = doc.data["vars"]["hf_token"]
    assert isinstance(token, Secret)
    assert token.reveal() == "hf_from_environment"
    assert "hf_from_environment" not in f"{doc.data} {doc.data!r} {token}"


def test_env_tag_unset_variable_names_file_line_and_key(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROVISION_TEST_UNSET", raising=False)
    path = tmp_path / "in.yaml"
    path.write_text("vars:\n  a: 1\n  hf_token: !env PROVISION_TEST_UNSET\n")
    with pytest.raises(InputError) as caught:
        load_yaml_file(path)
    assert str(caught.value).startswith(f"{path}:3: hf_token: environment variable PROVISION_TEST_UNSET")


def test_env_tag_empty_variable_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISION_TEST_EMPTY", "")
    with pytest.raises(InputError, match="PROVISION_TEST_EMPTY is empty"):
        load(tmp_path, "hf_token: !env PROVISION_TEST_EMPTY\n")


def test_text_source_label_is_used() -> None:
    with pytest.raises(InputError, match=r"^-e:1: "):
        load_yaml_text("{a: 1", "-e")
