"""`lineinfile`: the line rules on recorded file contents, and a real converge in a temp directory."""

from __future__ import annotations

import base64
import hashlib

import pytest

from provision.errors import TaskFailed
from tests.unit.ops_support import assert_commands_parse, converge_local, make_args, plan

SYSCTL = "# defaults\nvm.swappiness=60\nnet.core.somaxconn=128\n"


def recorded(text: str) -> str:
    data = text.encode()
    return (f"type=file\nmode=644\nuid=0\ngid=0\nowner=root\ngroup=root\nsize={len(data)}\n"
            f"sha256={hashlib.sha256(data).hexdigest()}\ncontent={base64.b64encode(data).decode()}\n")


def written(result) -> str:
    return (result.commands[0].data or b"").decode()


def test_line_already_present_is_converged() -> None:
    result = plan("lineinfile", recorded(SYSCTL), path="/etc/sysctl.conf", line="vm.swappiness=60",
                  regexp=r"^vm\.swappiness=")
    assert not result.changed and result.commands == []


def test_regexp_match_is_replaced_in_place() -> None:
    result = plan("lineinfile", recorded(SYSCTL), path="/etc/sysctl.conf", line="vm.swappiness=10",
                  regexp=r"^vm\.swappiness=")
    assert written(result) == "# defaults\nvm.swappiness=10\nnet.core.somaxconn=128\n"
    assert "-vm.swappiness=60\n+vm.swappiness=10" in result.diff
    assert_commands_parse(result)


def test_last_match_wins_when_several_lines_match() -> None:
    text = "a=1\nb=2\na=3\n"
    result = plan("lineinfile", recorded(text), path="/etc/x", line="a=9", regexp="^a=")
    assert written(result) == "a=1\nb=2\na=9\n"


def test_no_match_appends_even_without_final_newline() -> None:
    result = plan("lineinfile", recorded("x=1"), path="/etc/x", line="y=2", regexp="^y=")
    assert written(result) == "x=1\ny=2\n"


def test_missing_file_is_created_unless_create_is_false() -> None:
    result = plan("lineinfile", "type=absent\n", path="/etc/x", line="y=2")
    assert written(result) == "y=2\n"
    with pytest.raises(TaskFailed, match="does not exist"):
        plan("lineinfile", "type=absent\n", path="/etc/x", line="y=2", create=False)


def test_absent_removes_every_matching_line() -> None:
    result = plan("lineinfile", recorded("a=1\nb=2\na=3\n"), path="/etc/x", regexp="^a=", state="absent")
    assert written(result) == "b=2\n"
    assert not plan("lineinfile", recorded("b=2\n"), path="/etc/x", regexp="^a=", state="absent").changed
    assert not plan("lineinfile", "type=absent\n", path="/etc/x", regexp="^a=", state="absent").changed


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="does not compile"):
        make_args("lineinfile", path="/etc/x", line="a", regexp="(")
    with pytest.raises(ValueError, match="needs `line`"):
        make_args("lineinfile", path="/etc/x", regexp="a")
    with pytest.raises(ValueError, match="single line"):
        make_args("lineinfile", path="/etc/x", line="a\nb")


def test_converges_for_real(tmp_path) -> None:
    path = tmp_path / "sysctl.conf"
    path.write_text(SYSCTL)
    first, second = converge_local("lineinfile", path=str(path), line="vm.swappiness=10", regexp=r"^vm\.swappiness=")
    assert first.changed and not second.changed
    assert path.read_text() == "# defaults\nvm.swappiness=10\nnet.core.somaxconn=128\n"
