"""`directory`: recorded probe outputs -> plans, and a real converge in a temp directory."""

from __future__ import annotations

import os
import stat

import pytest

from provision.errors import TaskFailed
from tests.unit.ops_support import (
    apply_local,
    assert_commands_parse,
    converge_local,
    make_args,
    plan,
    probe_local,
    script_of,
)

EXISTING = "type=directory\nmode=755\nuid=0\ngid=0\nowner=root\ngroup=root\n"


def test_converged_directory_plans_nothing() -> None:
    result = plan("directory", EXISTING, path="/etc/vllm", mode="0755", owner="root")
    assert not result.changed and result.commands == []


def test_missing_directory_is_created_with_attributes() -> None:
    result = plan("directory", "type=absent\n", path="/etc/vllm", mode="0750", owner="root", group="adm")
    assert result.changed
    assert script_of(result) == (
        "umask 022; mkdir -p -- '/etc/vllm'\nchown -- 'root:adm' '/etc/vllm'\nchmod -- '0750' '/etc/vllm'"
    )
    assert_commands_parse(result)


def test_wrong_mode_is_fixed_in_place() -> None:
    result = plan("directory", EXISTING, path="/etc/vllm", mode="0700")
    assert result.changed and script_of(result) == "chmod -- '0700' '/etc/vllm'"


def test_a_file_in_the_way_is_refused() -> None:
    with pytest.raises(TaskFailed, match="not a directory"):
        plan("directory", "type=file\nmode=644\n", path="/etc/vllm")


def test_absent_renames_aside_before_deleting() -> None:
    result = plan("directory", EXISTING, path="/var/lib/old", state="absent")
    script = script_of(result)
    assert script.index("mv -- '/var/lib/old'") < script.index("rm -rf")
    assert not plan("directory", "type=absent\n", path="/var/lib/old", state="absent").changed
    assert_commands_parse(result)


def test_top_level_removal_is_refused() -> None:
    with pytest.raises(ValueError, match="top-level"):
        make_args("directory", path="/etc", state="absent")


def test_converges_for_real(tmp_path) -> None:
    path = tmp_path / "a" / "b"
    first, second = converge_local("directory", path=str(path), mode="0710")
    assert first.changed and not second.changed
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o710
    (path / "inner").write_text("x")
    removal = plan("directory", probe_local("directory", path=str(path), state="absent"), path=str(path),
                   state="absent")
    apply_local(removal)
    assert os.listdir(tmp_path / "a") == []
