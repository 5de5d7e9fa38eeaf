"""`reboot`: always a change; apply proves a new boot (boot id changed OR /run marker gone)."""

from __future__ import annotations

import pytest

from provision.connection.base import CommandResult
from provision.errors import HostKeyRefused, HostUnreachable
from provision.ops import REGISTRY
from tests.unit.ops_support import (
    ScriptedConnection,
    assert_commands_parse,
    context,
    plan,
    run_local,
    with_fake_clock,
)

BEFORE = CommandResult("boot_id=aaaa\ntoken=t-1\n", "", 0)


@pytest.fixture
def op(monkeypatch):
    return with_fake_clock(monkeypatch, "reboot")


def reconnects(*replies: CommandResult | Exception):
    """A reconnect function: each call yields a new connection answering one check (or raises)."""
    pending = list(replies)

    def reconnect() -> ScriptedConnection:
        reply = pending.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return ScriptedConnection([reply])

    return reconnect


def test_plan_is_always_a_change_with_the_exact_script() -> None:
    result = plan("reboot", "", reason="new NVIDIA driver")
    assert result.changed and result.summary == "reboot (new NVIDIA driver)"
    script = result.commands[0].script
    assert "cat /proc/sys/kernel/random/boot_id" in script
    assert "mv -f -- '/run/provision/boot-marker'.tmp '/run/provision/boot-marker'" in script
    assert "nohup setsid sh -c 'sleep 2; systemctl reboot' >/dev/null 2>&1 </dev/null &" in script
    assert_commands_parse(result)
    assert REGISTRY["reboot"].refreshes_facts


def test_lab_reboot_is_detected_by_the_marker_although_boot_id_stays(op) -> None:
    first = ScriptedConnection([BEFORE])
    reconnect = reconnects(
        ConnectionRefusedError("refused"),
        CommandResult("boot_id=aaaa\nmarker=t-1\n", "", 0),  # ssh answered, but still the old boot
        CommandResult("boot_id=aaaa\nmarker=\n", "", 0),
    )
    progress: list = []
    applied = op.apply(context(first, reconnect, progress), plan("reboot", "", reason="driver"))
    assert applied.changed
    assert applied.result["boot_id_after"] == "aaaa" and applied.result["elapsed"] > 0
    assert len(progress) == 3


def test_new_boot_id_counts_even_if_marker_survived(op) -> None:
    reconnect = reconnects(CommandResult("boot_id=bbbb\nmarker=t-1\n", "", 0))
    applied = op.apply(context(ScriptedConnection([BEFORE]), reconnect), plan("reboot", ""))
    assert applied.result["boot_id_before"] == "aaaa" and applied.result["boot_id_after"] == "bbbb"


def test_host_that_never_comes_back_is_unreachable_with_time_waited(op) -> None:
    reconnect = reconnects(*[ConnectionRefusedError("refused")] * 200)
    with pytest.raises(HostUnreachable, match=r"did not come back .* within 6\ds after reboot \(x\)") as raised:
        op.apply(context(ScriptedConnection([BEFORE]), reconnect), plan("reboot", "", reason="x", timeout=60))
    assert "disk passphrase" in str(raised.value) and "run `provision up` again" in str(raised.value)


def test_the_reboot_wait_never_shows_past_100_percent(op) -> None:
    """Before: the last try starts after a back-off past the timeout, shown as 106% (seen), here 146%."""
    progress: list[tuple] = []
    reconnect = reconnects(*[ConnectionRefusedError("refused")] * 200)
    with pytest.raises(HostUnreachable):
        op.apply(context(ScriptedConnection([BEFORE]), reconnect, progress), plan("reboot", "", timeout=30))
    assert progress and all(completed <= total for _, completed, total in progress), progress
    assert progress[-1][1] == 30


def test_changed_host_key_is_not_retried(op) -> None:
    reconnect = reconnects(HostKeyRefused("changed key"))
    with pytest.raises(HostKeyRefused):
        op.apply(context(ScriptedConnection([BEFORE]), reconnect), plan("reboot", ""))


def test_marker_script_really_writes_a_token(tmp_path) -> None:
    marker = tmp_path / "run" / "marker"
    script = plan("reboot", "", marker_path=str(marker)).commands[0].script
    record_only = script.rsplit("\n", 1)[0]  # everything but the reboot itself
    output = run_local(record_only)
    assert output.rc == 0
    token = output.stdout.split("token=")[1].strip()
    assert marker.read_text().strip() == token and len(token) == 36
