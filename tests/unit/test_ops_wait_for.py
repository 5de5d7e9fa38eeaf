"""`wait_for`: up already -> nothing; else a non-change that polls with progress until up or timeout."""

from __future__ import annotations

import socket

import pytest

from provision.connection.base import CommandResult
from provision.errors import TaskFailed
from provision.ops import REGISTRY
from provision.ops.wait_for import PollUntilUp
from tests.unit.ops_support import (
    ScriptedConnection,
    assert_bash_parses,
    assert_commands_parse,
    context,
    make_args,
    plan,
    probe_local,
    with_fake_clock,
)

DOWN = CommandResult("up=0\n", "", 0)
UP = CommandResult("up=1\n", "", 0)


@pytest.fixture
def op(monkeypatch):
    return with_fake_clock(monkeypatch, "wait_for")


def test_already_up_is_ok_with_nothing_to_do() -> None:
    result = plan("wait_for", "up=1\n", port=8000)
    assert not result.changed and not result.steps and result.commands == []


def test_down_is_not_a_change_but_must_be_applied() -> None:
    result = plan("wait_for", "up=0\n", port=8000, timeout=60)
    assert not result.changed
    [poll] = result.steps
    assert isinstance(poll, PollUntilUp) and result.scripts == [poll.check]
    assert result.summary == "wait up to 60s for 127.0.0.1:8000"
    assert_commands_parse(result)


def test_apply_polls_with_progress_until_up(op) -> None:
    conn = ScriptedConnection([DOWN, DOWN, UP])
    progress: list = []
    applied = op.apply(context(conn, progress=progress), plan("wait_for", "up=0\n", port=8000, interval=5))
    assert not applied.changed
    assert conn.round_trips == 3
    assert [call[1:] for call in progress] == [(0.0, 300), (5.0, 300)]
    assert applied.result == {"elapsed": 10.0}


def test_apply_times_out_with_what_it_last_saw(op) -> None:
    conn = ScriptedConnection([CommandResult("status=503\nup=0\n", "", 0)] * 10)
    result = plan("wait_for", "up=0\n", url="http://127.0.0.1:8000/health", timeout=6, interval=2)
    with pytest.raises(TaskFailed, match=r"http://127.0.0.1:8000/health not up after 6s: HTTP 503"):
        op.apply(context(conn), result)
    assert conn.round_trips == 4


def test_missing_curl_fails_fast(op) -> None:
    conn = ScriptedConnection([CommandResult("curl=missing\nup=0\n", "", 0)])
    with pytest.raises(TaskFailed, match="curl is not installed"):
        op.apply(context(conn), plan("wait_for", "up=0\n", url="http://127.0.0.1:8000/health"))


def test_url_check_script_tests_status_and_body() -> None:
    args = make_args("wait_for", url="http://127.0.0.1:8000/v1/models", status=200, contains="gemma")
    probe = REGISTRY["wait_for"].probe(args).snippet
    assert_bash_parses(probe)
    assert "'%{http_code}'" in probe and "grep -qF -- 'gemma'" in probe and '[ "$code" = 200 ]' in probe


def test_arguments_need_exactly_one_target() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        make_args("wait_for", port=80, url="http://x/")
    with pytest.raises(ValueError, match="exactly one"):
        make_args("wait_for")


def test_port_probe_sees_a_real_listener_on_loopback() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert "up=1" in probe_local("wait_for", port=port)
    assert "up=0" in probe_local("wait_for", port=port)
