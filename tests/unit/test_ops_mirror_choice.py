"""`mirror_choice`: the office cache when the host reaches it, the upstream (said loudly) when not."""

from __future__ import annotations

import socket

from tests.unit.ops_support import plan, probe_local


def test_no_mirror_chooses_the_upstream_without_a_probe() -> None:
    result = plan("mirror_choice", "", component="hub", upstream="https://huggingface.co/")
    assert result.result["url"] == "https://huggingface.co"
    assert result.summary == "hub: https://huggingface.co (no office cache)"
    assert not result.changed and not result.steps


def test_mirror_that_answers_is_chosen() -> None:
    result = plan("mirror_choice", "up=1\n", component="hub", mirror="http://cache:8080",
                  upstream="https://huggingface.co")
    assert result.result == {"url": "http://cache:8080", "mirror_up": True, "via": "office cache"}
    assert "office cache http://cache:8080" in result.summary


def test_mirror_that_is_down_falls_back_and_says_so() -> None:
    result = plan("mirror_choice", "up=0\n", component="hub", mirror="http://cache:8080",
                  upstream="https://huggingface.co")
    assert result.result["url"] == "https://huggingface.co" and not result.result["mirror_up"]
    assert "DOWN, falling back to https://huggingface.co" in result.summary
    assert not result.changed


def test_probe_connects_to_the_mirror_port_from_the_host() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        assert "up=1" in probe_local("mirror_choice", component="hub", mirror=f"http://127.0.0.1:{port}",
                                     upstream="https://huggingface.co")
    finally:
        listener.close()
    assert "up=0" in probe_local("mirror_choice", component="hub", mirror=f"http://127.0.0.1:{port}",
                                 upstream="https://huggingface.co")
