"""`-e` extra vars and the merge of variable layers."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from provision.errors import InputError
from provision.inventory import parse_extra_vars
from provision.secrets import Secret
from provision.settings.variables import merge_vars


def test_key_value_is_a_yaml_scalar() -> None:
    assert parse_extra_vars(["max_model_len=65536", "flag=true", "ratio=0.9", "tag=v0.21.0-cu129",
                             "quoted='1.10'", "empty=", "day=2024-01-02", "args=--foo --bar"]) == {
        "max_model_len": 65536, "flag": True, "ratio": 0.9, "tag": "v0.21.0-cu129", "quoted": "1.10",
        "empty": "", "day": datetime.date(2024, 1, 2), "args": "--foo --bar"}


def test_several_assignments_in_one_item_and_later_items_win() -> None:
    assert parse_extra_vars(["a=1 b=2", "b=3"]) == {"a": 1, "b": 3}
    assert parse_extra_vars(["msg=hello world"]) == {"msg": "hello world"}


def test_json_and_yaml_mappings() -> None:
    assert parse_extra_vars(['{"limit_mm": {"image": 1}, "n": 2}']) == {"limit_mm": {"image": 1}, "n": 2}
    assert parse_extra_vars(["{a: [1, 2]}"]) == {"a": [1, 2]}


def test_file_item(tmp_path: Path) -> None:
    path = tmp_path / "extra.yaml"
    path.write_text("max_model_len: 32768\nserved_model_name: gemma\n")
    assert parse_extra_vars([f"@{path}"]) == {"max_model_len": 32768, "served_model_name": "gemma"}


def test_file_item_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "extra.yaml"
    path.write_text("a: 1\na: 2\n")
    with pytest.raises(InputError) as caught:
        parse_extra_vars([f"@{path}"])
    assert (caught.value.file, caught.value.line, caught.value.key) == (path, 2, "a")
    path.write_text("- a\n")
    with pytest.raises(InputError, match="expected a mapping of variables, got list"):
        parse_extra_vars([f"@{path}"])
    with pytest.raises(InputError, match="file not found"):
        parse_extra_vars([f"@{tmp_path / 'nope.yaml'}"])


@pytest.mark.parametrize(("item", "fragment"), [
    ("justaword", "expected key=value, @file.yaml or a {...} mapping, got 'justaword'"),
    ("1bad=2", "'1bad' is not a variable name"),
    ("my-var=2", "'my-var' is not a variable name"),
    ('{"a": 1', "cannot read '{\"a\": 1'"),
    ("[1, 2]", "expected key=value"),
    ("ports=[1, 2]", "ports: a key=value item takes a single value"),
])
def test_bad_items_are_named(item: str, fragment: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_extra_vars([item])
    assert fragment in str(caught.value)
    assert caught.value.key == "-e"


def test_secret_names_become_secrets_and_stay_out_of_errors() -> None:
    variables = parse_extra_vars(["hf_token=hf_extravalue789"])
    assert isinstance(variables["hf_token"], Secret)
    assert "hf_extravalue789" not in f"{variables}"
    with pytest.raises(InputError) as caught:
        parse_extra_vars(['{"hf_token": "hf_brokenvalue000"'])
    assert "hf_brokenvalue000" not in str(caught.value)


def test_env_tag_in_key_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISION_TEST_KEY", "sk-fromenv")
    assert parse_extra_vars(["vllm_key=!env PROVISION_TEST_KEY"])["vllm_key"] == Secret("sk-fromenv")
    monkeypatch.delenv("PROVISION_TEST_KEY")
    with pytest.raises(InputError, match="vllm_key: environment variable PROVISION_TEST_KEY is not set"):
        parse_extra_vars(["vllm_key=!env PROVISION_TEST_KEY"])


def test_merge_vars_later_layers_win_and_dicts_are_replaced_whole() -> None:
    role_defaults = {"max_model_len": 131072, "limit_mm": {"image": 1, "video": 0}, "only_default": 1}
    play_vars = {"max_model_len": 65536}
    host_vars = {"limit_mm": {"image": 2}}
    extra = {"max_model_len": 32768}
    merged = merge_vars(role_defaults, play_vars, host_vars, extra)
    assert merged == {"max_model_len": 32768, "limit_mm": {"image": 2}, "only_default": 1}
    assert role_defaults["limit_mm"] == {"image": 1, "video": 0}  # inputs are not modified
