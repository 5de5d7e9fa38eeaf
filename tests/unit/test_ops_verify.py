"""`verify` and `debug`: checks that never change anything, deferred or at once; plain reports."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from provision.errors import TaskFailed
from provision.ops import REGISTRY
from tests.unit.ops_support import LocalTestConnection, assert_commands_parse, context, make_args, plan, probe_local


def test_a_passing_check_is_ok_and_reports_what_it_printed() -> None:
    state = probe_local("verify", cmd="echo 'NVIDIA GeForce RTX 5090 Laptop GPU, 580.95.05'")
    result = plan("verify", state, cmd="echo unused")
    assert not result.changed and not result.steps
    assert result.summary == "NVIDIA GeForce RTX 5090 Laptop GPU, 580.95.05"


def test_a_silent_passing_check_says_what_it_verified() -> None:
    result = plan("verify", probe_local("verify", cmd="true"), cmd="test -x /usr/bin/nvidia-smi")
    assert result.summary == "verified: test -x /usr/bin/nvidia-smi"


def test_a_failing_deferred_check_waits_for_the_run() -> None:
    state = probe_local("verify", cmd="echo 'not yet' >&2; exit 3")
    result = plan("verify", state, cmd="nvcc --version | grep -q 'release 12.9'", msg="nvcc is not CUDA 12.9")
    assert not result.changed and result.steps
    assert result.summary == "checked again in the run; not true yet: nvcc is not CUDA 12.9"
    assert_commands_parse(result)


def test_a_failing_immediate_check_fails_with_the_message_and_the_output() -> None:
    state = probe_local("verify", cmd="echo '12 GiB free, 50 GiB needed'; exit 1")
    with pytest.raises(TaskFailed, match=r"(?s)Not enough free disk.*12 GiB free, 50 GiB needed"):
        plan("verify", state, cmd="exit 1", msg="Not enough free disk", defer=False)


def test_apply_checks_again_and_reports_the_result(tmp_path) -> None:
    marker = tmp_path / "driver-loaded"
    args = {"cmd": f"cat {marker}", "msg": "the driver is not loaded"}
    result = plan("verify", probe_local("verify", **args), **args)
    assert result.steps
    marker.write_text("580.95.05\n")  # an earlier task of the run loaded it
    applied = REGISTRY["verify"].apply(context(LocalTestConnection()), result)
    assert not applied.changed and applied.stdout == "580.95.05"
    assert applied.summary == "580.95.05"
    assert result.summary == "checked again in the run; not true yet: the driver is not loaded"


def test_apply_fails_when_the_check_still_fails(tmp_path) -> None:
    args = {"cmd": f"echo 'nvidia-smi: no devices' ; test -e {tmp_path}/never", "msg": "no GPU visible"}
    result = plan("verify", probe_local("verify", **args), **args)
    with pytest.raises(TaskFailed, match=r"(?s)no GPU visible.*nvidia-smi: no devices"):
        REGISTRY["verify"].apply(context(LocalTestConnection()), result)


def test_the_check_runs_with_pipefail_and_is_bounded() -> None:
    assert plan("verify", probe_local("verify", cmd="false | true"), cmd="x").steps
    state = probe_local("verify", cmd="sleep 5", timeout=0.2)
    with pytest.raises(TaskFailed, match=r"timed out after 0\.2s"):
        plan("verify", state, cmd="sleep 5", timeout=0.2, defer=False)


def test_a_check_bash_cannot_parse_is_refused_before_any_host() -> None:
    with pytest.raises(ValidationError, match="not valid bash"):
        make_args("verify", cmd="if then")


def test_debug_reports_its_message_and_changes_nothing() -> None:
    result = plan("debug", "", msg="NVIDIA GPU found: 0000:01:00.0 [10de:2c58]\n")
    assert not result.changed and not result.steps and result.commands == []
    assert result.summary == "NVIDIA GPU found: 0000:01:00.0 [10de:2c58]"
    assert REGISTRY["debug"].probe(make_args("debug", msg="x")) is None
