"""`systemd`: recorded `systemctl show` outputs -> the systemctl steps, in order, in one script."""

from __future__ import annotations

import pytest

from provision.errors import TaskFailed
from tests.unit.ops_support import assert_commands_parse, plan, script_of


def show(load: str = "loaded", active: str = "active", sub: str = "running", unit_file: str = "enabled",
         reload: str = "no") -> str:
    """What `systemctl show -p LoadState,ActiveState,SubState,UnitFileState,NeedDaemonReload` prints."""
    return (f"LoadState={load}\nActiveState={active}\nSubState={sub}\nUnitFileState={unit_file}\n"
            f"NeedDaemonReload={reload}\n")


NOT_FOUND = show(load="not-found", active="inactive", sub="dead", unit_file="")


def steps(result) -> list[str]:
    """The systemctl steps (the rate-limit reset before each start is not a step of its own)."""
    return [line.split(" -- ")[0].split(" || ")[0] for line in script_of(result).splitlines()
            if not line.startswith("systemctl reset-failed")]


def test_running_enabled_unit_is_converged() -> None:
    result = plan("systemd", show(), name="docker.service", enabled=True, state="started", daemon_reload=True)
    assert not result.changed and result.commands == []


def test_stopped_disabled_unit_is_enabled_then_started() -> None:
    result = plan("systemd", show(active="inactive", sub="dead", unit_file="disabled"), name="docker.service",
                  enabled=True, state="started")
    assert result.changed
    assert steps(result) == ["systemctl enable", "systemctl start"]
    assert result.summary == "enable, start docker.service"
    assert "journalctl --no-pager -n 20 -u 'docker.service'" in script_of(result)
    assert_commands_parse(result)


def test_daemon_reload_only_when_systemd_says_it_is_needed() -> None:
    result = plan("systemd", show(reload="yes"), name="vllm.service", state="started", daemon_reload=True)
    assert steps(result) == ["systemctl daemon-reload"]
    assert not plan("systemd", show(reload="yes"), name="vllm.service", state="started").changed


def test_restarted_is_always_a_change() -> None:
    result = plan("systemd", show(), name="docker.service", state="restarted")
    assert result.changed and steps(result) == ["systemctl restart"]
    # a unit restarted by reruns after kills must not hit its start rate limit (docker.service: 3 in 60 s)
    assert script_of(result).splitlines()[0] == "systemctl reset-failed -- 'docker.service' 2>/dev/null || true"


def test_reloaded_starts_a_stopped_unit() -> None:
    assert steps(plan("systemd", show(), name="x.service", state="reloaded")) == ["systemctl reload"]
    stopped = show(active="inactive", sub="dead")
    assert steps(plan("systemd", stopped, name="x.service", state="reloaded")) == ["systemctl start"]


def test_unit_not_found_yet_is_planned_anyway() -> None:
    result = plan("systemd", NOT_FOUND, name="vllm.service", enabled=True, state="started", daemon_reload=True)
    assert result.changed
    assert steps(result) == ["systemctl daemon-reload", "systemctl enable", "systemctl start"]


def test_missing_unit_asked_to_be_stopped_and_disabled_is_fine() -> None:
    assert not plan("systemd", NOT_FOUND, name="gone.service", enabled=False, state="stopped").changed
    assert not plan("systemd", "", name="gone.service", state="stopped").changed


def test_stop_and_mask_sleep_target() -> None:
    result = plan("systemd", show(active="inactive", sub="dead", unit_file="static"), name="sleep.target",
                  masked=True, state="stopped")
    assert steps(result) == ["systemctl mask"]
    masked = show(load="masked", active="inactive", sub="dead", unit_file="masked")
    assert not plan("systemd", masked, name="sleep.target", masked=True, state="stopped").changed


def test_unmask_comes_before_enable_and_start() -> None:
    masked = show(load="masked", active="inactive", sub="dead", unit_file="masked")
    result = plan("systemd", masked, name="x.service", masked=False, enabled=True, state="started",
                  daemon_reload=True)
    assert steps(result) == ["systemctl unmask", "systemctl daemon-reload", "systemctl enable", "systemctl start"]


def test_starting_a_masked_unit_is_refused_clearly() -> None:
    masked = show(load="masked", active="inactive", sub="dead", unit_file="masked")
    with pytest.raises(TaskFailed, match="masked: false"):
        plan("systemd", masked, name="x.service", state="started")


def test_disable_and_stop() -> None:
    result = plan("systemd", show(), name="x.service", enabled=False, state="stopped")
    assert steps(result) == ["systemctl disable", "systemctl stop"]


def test_static_unit_counts_as_enabled() -> None:
    assert not plan("systemd", show(unit_file="static"), name="x.service", enabled=True).changed
