"""`json_merge`: the merge rules, recorded probe outputs -> plans, refusal of broken files, a real run."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest

from provision.errors import TaskFailed
from provision.ops.json_merge import merge_json
from provision.secrets import Secret
from tests.unit.ops_support import assert_commands_parse, converge_local, make_args, plan, script_of

DAEMON_JSON = {
    "log-driver": "json-file",
    "insecure-registries": ["10.0.2.2:5000"],
    "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}},
}


def recorded(text: str) -> str:
    data = text.encode()
    return (f"type=file\nmode=644\nuid=0\ngid=0\nowner=root\ngroup=root\nsize={len(data)}\n"
            f"sha256={hashlib.sha256(data).hexdigest()}\ncontent={base64.b64encode(data).decode()}\n")


def test_dicts_merge_deeply_and_unmentioned_keys_stay() -> None:
    merged = merge_json(DAEMON_JSON, {"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}},
                                      "default-runtime": "nvidia"})
    assert merged["log-driver"] == "json-file"
    assert merged["runtimes"]["nvidia"] == {"path": "/usr/bin/nvidia-container-runtime", "args": []}
    assert merged["default-runtime"] == "nvidia"
    assert list(merged) == ["log-driver", "insecure-registries", "runtimes", "default-runtime"]


def test_lists_become_a_union_keeping_existing_order() -> None:
    merged = merge_json({"insecure-registries": ["b:5000", "a:5000"]},
                        {"insecure-registries": ["a:5000", "c:5000"]})
    assert merged["insecure-registries"] == ["b:5000", "a:5000", "c:5000"]


def test_scalars_and_type_changes_are_replaced() -> None:
    assert merge_json({"a": 1, "b": [1]}, {"a": 2, "b": {"x": 1}}) == {"a": 2, "b": {"x": 1}}


def test_inputs_are_not_modified() -> None:
    existing = {"a": {"b": [1]}}
    merge_json(existing, {"a": {"b": [2], "c": 3}})
    assert existing == {"a": {"b": [1]}}


def test_converged_file_plans_nothing_even_if_formatted_differently() -> None:
    text = json.dumps(DAEMON_JSON, indent=4)
    result = plan("json_merge", recorded(text), path="/etc/docker/daemon.json",
                  data={"insecure-registries": ["10.0.2.2:5000"], "log-driver": "json-file"})
    assert not result.changed and result.commands == []


def test_boolean_and_number_are_not_confused() -> None:
    result = plan("json_merge", recorded('{"live-restore": 1}'), path="/etc/docker/daemon.json",
                  data={"live-restore": True})
    assert result.changed


def test_adding_a_registry_writes_merged_json_with_diff() -> None:
    result = plan("json_merge", recorded(json.dumps(DAEMON_JSON)), path="/etc/docker/daemon.json",
                  data={"insecure-registries": ["registry.lan:5000"]})
    assert result.changed
    written = json.loads(result.commands[0].data or b"")
    assert written["insecure-registries"] == ["10.0.2.2:5000", "registry.lan:5000"]
    assert written["runtimes"] == DAEMON_JSON["runtimes"]
    assert '+    "registry.lan:5000"' in result.diff
    assert "insecure-registries" in result.summary
    assert "registry.lan" not in script_of(result)
    assert_commands_parse(result)


def test_missing_or_empty_file_is_created() -> None:
    for state in ("type=absent\n", recorded("")):
        result = plan("json_merge", state, path="/etc/docker/daemon.json", data={"a": 1})
        assert result.changed
        assert json.loads(result.commands[0].data or b"") == {"a": 1}


def test_invalid_json_is_refused_and_quoted() -> None:
    with pytest.raises(TaskFailed) as raised:
        plan("json_merge", recorded('{"log-driver": "json-file",\n}'), path="/etc/docker/daemon.json",
             data={"a": 1})
    message = str(raised.value)
    assert "/etc/docker/daemon.json is not valid JSON (line 2" in message
    assert '"log-driver": "json-file",' in message


def test_non_object_json_is_refused() -> None:
    with pytest.raises(TaskFailed, match="JSON list, not an object"):
        plan("json_merge", recorded("[1, 2]"), path="/etc/x.json", data={"a": 1})


def test_secret_values_are_written_but_masked_in_the_diff() -> None:
    result = plan("json_merge", recorded("{}"), path="/etc/app.json", data={"token": Secret("s3cr3t-token")})
    assert b"s3cr3t-token" in (result.commands[0].data or b"")
    assert "s3cr3t-token" not in result.diff and "***" in result.diff


def test_converges_for_real(tmp_path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text(json.dumps({"keep": True, "insecure-registries": ["x:1"]}))
    first, second = converge_local("json_merge", path=str(path), data={"insecure-registries": ["y:2"]})
    assert first.changed and not second.changed
    assert json.loads(path.read_text()) == {"keep": True, "insecure-registries": ["x:1", "y:2"]}


def test_merge_is_accepted_as_another_name_for_data() -> None:
    assert make_args("json_merge", path="/etc/x.json", merge={"a": 1}).data == {"a": 1}


def test_a_probe_that_printed_nothing_never_counts_as_a_missing_file() -> None:
    # treating it as missing would replace the user's daemon.json by only our keys
    with pytest.raises(TaskFailed, match="printed nothing usable"):
        plan("json_merge", "", path="/etc/docker/daemon.json", data={"a": 1})
