"""The operation contract (provision/ops/base.py): a plan's steps are what apply does, a change always
has steps, work done in Python is said as an `Action` that the default apply refuses to skip."""

from __future__ import annotations

import pytest

from provision.ops import REGISTRY
from provision.ops.base import Action, Plan
from provision.shell import Command
from tests.unit.ops_support import ScriptedConnection, context


def test_a_change_without_steps_is_refused() -> None:
    with pytest.raises(ValueError, match="names its steps: 'deploy'"):
        Plan(changed=True, summary="deploy")
    assert Plan(changed=False).steps == [] and Plan.ok("fine").steps == []


def test_commands_are_the_shell_steps_in_order() -> None:
    first, second = Command(script="true"), Command(script="false")
    plan = Plan(changed=True, steps=[first, Action("copy over SFTP"), second])
    assert plan.commands == [first, second]


def test_the_default_apply_runs_the_commands_and_refuses_an_action_it_cannot_do() -> None:
    conn = ScriptedConnection([])
    with pytest.raises(TypeError, match=r"directory planned \['copy over SFTP'\] but has no apply"):
        REGISTRY["directory"].apply(context(conn), Plan(changed=True, steps=[Action("copy over SFTP")]))
    assert conn.scripts == [], "nothing ran: a plan is done whole or not at all by the default apply"
