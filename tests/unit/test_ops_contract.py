"""The operation contract (provision/ops/base.py): a plan's steps are what apply does, a change always
has steps, work done in Python is said as an `Action` that the default apply refuses to skip."""

from __future__ import annotations

import pytest

from provision.errors import TaskFailed
from provision.ops import REGISTRY
from provision.ops.base import Action, Plan, Probe
from provision.shell import Command
from tests.unit.ops_support import ScriptedConnection, context, make_args
from tests.unit.test_ops_registry import SAMPLES


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


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_probe_is_its_snippet_and_its_parser(name: str) -> None:
    probe = REGISTRY[name].probe(make_args(name, **SAMPLES[name]))
    assert probe is None or (isinstance(probe, Probe) and probe.snippet.strip() and callable(probe.parse))


@pytest.mark.parametrize("name", ["apt", "bundle_copy", "docker_image", "docker_load", "file", "generated_secret",
                                  "hf_snapshot", "vllm_release"])
def test_a_parser_refuses_output_it_cannot_read(name: str) -> None:
    """An empty answer (a probe cut short) is never read as a state, e.g. "absent"."""
    probe = REGISTRY[name].probe(make_args(name, **SAMPLES[name]))
    with pytest.raises(TaskFailed, match="printed nothing usable"):
        probe.parse("")
