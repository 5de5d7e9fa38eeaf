"""`command` and `fail`: skip conditions evaluated in the probe, the command script, refusals."""

from __future__ import annotations

import pytest

from provision.errors import CommandFailed, TaskFailed
from provision.ops import REGISTRY
from provision.secrets import Secret
from tests.unit.ops_support import (
    LocalTestConnection,
    assert_bash_parses,
    assert_commands_parse,
    context,
    make_args,
    plan,
    probe_local,
    run_local,
)


def test_runs_when_nothing_says_otherwise() -> None:
    result = plan("command", "", cmd="nvidia-ctk runtime configure --runtime=docker")
    assert result.changed
    assert result.commands[0].script == "nvidia-ctk runtime configure --runtime=docker"
    assert result.summary == "run: nvidia-ctk runtime configure --runtime=docker"
    assert REGISTRY["command"].probe(make_args("command", cmd="true")) is None


def test_creates_skips_when_the_path_exists() -> None:
    result = plan("command", "creates_exists=1\n", cmd="make install", creates="/usr/local/bin/tool")
    assert not result.changed and result.commands == []
    assert result.result == {"skipped": True}
    assert plan("command", "", cmd="make install", creates="/usr/local/bin/tool").changed


def test_removes_skips_when_the_path_is_missing() -> None:
    assert not plan("command", "removes_missing=1\n", cmd="rm -rf /x", removes="/x").changed


def test_unless_skips_when_the_condition_held() -> None:
    assert not plan("command", "unless_rc=0\n", cmd="systemctl restart x", unless="grep -q y /etc/x").changed
    assert plan("command", "unless_rc=1\n", cmd="systemctl restart x", unless="grep -q y /etc/x").changed


def test_chdir_and_env_travel_with_the_command() -> None:
    result = plan("command", "", cmd="./setup.sh", chdir="/opt/app", env={"HF_TOKEN": Secret("hf_abcdefgh")})
    command = result.commands[0]
    assert command.script == "cd -- '/opt/app'\n./setup.sh"
    assert command.env == {"HF_TOKEN": "hf_abcdefgh"}
    assert "hf_abcdefgh" not in command.script and "hf_abcdefgh" not in result.summary
    assert_commands_parse(result)


def test_probe_evaluates_conditions_on_the_host(tmp_path) -> None:
    marker = tmp_path / "done"
    args = {"cmd": "touch done", "chdir": str(tmp_path), "creates": "done", "unless": "test -e done"}
    assert plan("command", probe_local("command", **args), **args).changed
    marker.touch()
    state = probe_local("command", **args)
    assert "creates_exists=1" in state and "unless_rc=0" in state
    assert not plan("command", state, **args).changed


def test_unless_that_exits_cannot_break_the_shared_probe() -> None:
    snippet = REGISTRY["command"].probe(make_args("command", cmd="true", unless="exit 0")).snippet
    assert_bash_parses(snippet)
    output = run_local(f"set +e\n{snippet}\necho after")
    assert output.stdout.splitlines()[-2:] == ["unless_rc=0", "after"]


def test_syntax_errors_are_refused_before_any_host_is_touched() -> None:
    with pytest.raises(ValueError, match="not valid bash"):
        make_args("command", cmd='echo "unterminated')
    with pytest.raises(ValueError, match="not a valid shell name"):
        make_args("command", cmd="true", env={"A B": "x"})


def test_fail_fails_in_plan_so_check_mode_fails_too() -> None:
    with pytest.raises(TaskFailed, match="no NVIDIA GPU found"):
        plan("fail", "", msg="no NVIDIA GPU found")


def test_apply_result_carries_stdout_stderr_and_rc_for_register() -> None:
    result = plan("command", "", cmd="echo hello; echo oops >&2")
    applied = REGISTRY["command"].apply(context(LocalTestConnection()), result)
    assert (applied.changed, applied.stdout, applied.stderr, applied.rc) == (True, "hello\n", "oops\n", 0)


def test_a_failing_command_fails_the_task_with_its_output() -> None:
    result = plan("command", "", cmd="echo partial; exit 3")
    with pytest.raises(CommandFailed) as raised:
        REGISTRY["command"].apply(context(LocalTestConnection()), result)
    assert raised.value.exit_code == 3 and "partial" in raised.value.stdout
