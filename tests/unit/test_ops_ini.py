"""`ini`: option edits in sections on recorded contents (logind.conf), and a real converge."""

from __future__ import annotations

import base64
import hashlib

import pytest

from tests.unit.ops_support import assert_commands_parse, converge_local, make_args, plan

LOGIND = """#  This file is part of systemd.
[Login]
#NAutoVTs=6
#HandleLidSwitch=suspend
#HandleLidSwitchExternalPower=suspend
#IdleAction=ignore
"""


def recorded(text: str) -> str:
    data = text.encode()
    return (f"type=file\nmode=644\nuid=0\ngid=0\nowner=root\ngroup=root\nsize={len(data)}\n"
            f"sha256={hashlib.sha256(data).hexdigest()}\ncontent={base64.b64encode(data).decode()}\n")


def written(result) -> str:
    return (result.commands[0].data or b"").decode()


LID = {"path": "/etc/systemd/logind.conf", "section": "Login", "option": "HandleLidSwitch", "value": "ignore"}


def test_new_option_goes_after_its_commented_default() -> None:
    result = plan("ini", recorded(LOGIND), **LID)
    assert result.changed
    assert "#HandleLidSwitch=suspend\nHandleLidSwitch=ignore\n#HandleLidSwitchExternalPower" in written(result)
    assert "+HandleLidSwitch=ignore" in result.diff
    assert_commands_parse(result)


def test_set_option_is_converged() -> None:
    text = LOGIND.replace("#HandleLidSwitch=suspend\n", "#HandleLidSwitch=suspend\nHandleLidSwitch=ignore\n")
    result = plan("ini", recorded(text), **LID)
    assert not result.changed and result.commands == []


def test_existing_value_is_replaced_and_duplicates_removed() -> None:
    text = "[Login]\nHandleLidSwitch=suspend\nNAutoVTs=6\nHandleLidSwitch=lock\n[Other]\nHandleLidSwitch=x\n"
    result = plan("ini", recorded(text), **LID)
    assert written(result) == "[Login]\nHandleLidSwitch=ignore\nNAutoVTs=6\n[Other]\nHandleLidSwitch=x\n"


def test_missing_section_is_appended() -> None:
    result = plan("ini", recorded("[Other]\na=1\n"), **LID)
    assert written(result) == "[Other]\na=1\n\n[Login]\nHandleLidSwitch=ignore\n"


def test_option_lands_at_end_of_section_before_blank_lines() -> None:
    result = plan("ini", recorded("[Login]\nKillUserProcesses=no\n\n[Other]\n"), **LID)
    assert written(result) == "[Login]\nKillUserProcesses=no\nHandleLidSwitch=ignore\n\n[Other]\n"


def test_spaces_around_equals_for_classic_ini() -> None:
    result = plan("ini", "type=absent\n", path="/etc/x.ini", section="main", option="a", value="1",
                  spaces_around_equals=True)
    assert written(result) == "[main]\na = 1\n"


def test_absent_removes_the_option_only_in_its_section() -> None:
    text = "[Login]\nHandleLidSwitch=ignore\n[Other]\nHandleLidSwitch=x\n"
    result = plan("ini", recorded(text), **{**LID, "state": "absent", "value": None})
    assert written(result) == "[Login]\n[Other]\nHandleLidSwitch=x\n"


def test_yaml_boolean_value_is_refused() -> None:
    with pytest.raises(ValueError, match="quoted string"):
        make_args("ini", **{**LID, "value": True})
    assert make_args("ini", **{**LID, "value": 5}).value == "5"


def test_converges_for_real(tmp_path) -> None:
    path = tmp_path / "logind.conf"
    path.write_text(LOGIND)
    first, second = converge_local("ini", **{**LID, "path": str(path)})
    assert first.changed and not second.changed
    assert "\nHandleLidSwitch=ignore\n" in path.read_text()
