"""Rolling a release through the office gateway, without hosts: the capacity guard's decisions, the
order drain -> swap -> undrain one backend at a time when every host's thread swaps at once, a failed
swap left drained and put back by the next run, the scripts' marker. The gateway here is an in-memory
`GatewayAdmin` (its states are HAProxy's `show stat` words); the real runtime API is driven in
tests/e2e/test_office_rolling.py."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from provision.errors import TaskFailed
from provision.office_gateway.admin import ServerView
from provision.office_gateway.rotation import (
    MARKER_DIR,
    RotationSettings,
    drain_script,
    guard,
    marked_script,
    undrain_script,
)
from provision.runner.rotation import Gateway, Rotation


def view(name: str, status: str = "UP", in_flight: int = 0) -> ServerView:
    return ServerView(name, status, in_flight, 0, 0, "L7OK")


def test_the_guard_leaves_min_available_serving() -> None:
    up3 = [view("a"), view("b"), view("c")]
    assert guard(up3, "a", 1).go and guard(up3, "a", 2).go
    one_down = [view("a"), view("b", "DOWN"), view("c", "DRAIN")]
    verdict = guard(one_down, "a", 1)
    assert not verdict.go and not verdict.final
    assert "only 0 other backend(s) serving, office_min_available is 1 (b DOWN, c DRAIN)" in verdict.reason
    # a backend that serves nothing now may always be taken: its drain removes no capacity
    assert guard(one_down, "b", 1).go and guard(one_down, "c", 5).go


def test_the_guard_refuses_at_once_what_waiting_cannot_change() -> None:
    verdict = guard([view("a"), view("b")], "a", 2)
    assert not verdict.go and verdict.final and "fewer than office_min_available 2" in verdict.reason
    single = guard([view("a")], "a", 1)
    assert single.final and "office_min_available: 0" in single.reason
    assert guard([view("a")], "a", 0).go
    assert guard([view("a")], "zz", 0).final


class FakeGateway:
    """The gateway's runtime API in memory: states, markers, and the order of what was done."""

    def __init__(self, names: list[str], rise_polls: int = 1) -> None:
        self.status = dict.fromkeys(names, "UP")
        self.markers: set[str] = set()
        self.events: list[str] = []
        self.rise_polls = rise_polls  # show calls after an undrain before the checks see it UP
        self.rising: dict[str, int] = {}
        self.lock = threading.Lock()

    def show(self) -> list[ServerView]:
        with self.lock:
            for name in list(self.rising):
                self.rising[name] -= 1
                if self.rising[name] <= 0:
                    self.status[name] = "UP"
                    del self.rising[name]
            return [view(name, status) for name, status in self.status.items()]

    def drain(self, server: str, wait_s: int) -> int:
        with self.lock:
            self.markers.add(server)
            self.status[server] = "DRAIN"
            self.events.append(f"drain {server}")
        return 0

    def undrain(self, server: str) -> None:
        with self.lock:
            self.status[server] = "DOWN"  # its checks must pass again first
            self.rising[server] = self.rise_polls
            self.markers.discard(server)
            self.events.append(f"undrain {server}")

    def marked(self, server: str) -> bool:
        return server in self.markers

    def out_of_rotation(self) -> list[str]:
        with self.lock:
            return [name for name, status in self.status.items() if status != "UP"]


def rotation_over(gateway: FakeGateway) -> Rotation:
    return Rotation([Gateway("gw", gateway, frozenset(gateway.status))], sleep=lambda _: None)


def test_every_host_swapping_at_once_is_drained_swapped_and_undrained_one_at_a_time() -> None:
    gateway = FakeGateway(["a", "b", "c"], rise_polls=3)
    rotation = rotation_over(gateway)
    seen_out: list[list[str]] = []

    def swap(host: str) -> str:
        def apply() -> str:
            seen_out.append(gateway.out_of_rotation())
            gateway.events.append(f"swap {host}")
            time.sleep(0.02)
            return f"released {host}"
        result, before, after = rotation.swap(host, RotationSettings(), apply)
        assert result == f"released {host}"
        assert before.startswith("drained at gw, no request in flight") and after.startswith("back in rotation at gw")
        return host

    with ThreadPoolExecutor(3) as pool:
        assert sorted(pool.map(swap, ["a", "b", "c"])) == ["a", "b", "c"]
    assert seen_out in ([["a"], ["b"], ["c"]], *[[[h] for h in order] for order in
                                                  (["a", "c", "b"], ["b", "a", "c"], ["b", "c", "a"],
                                                   ["c", "a", "b"], ["c", "b", "a"])])
    # per host: drain, swap, undrain, and the next host's drain only after it is back UP
    hosts = [event.split()[1] for event in gateway.events[::3]]
    assert gateway.events == [f"{step} {host}" for host in hosts for step in ("drain", "swap", "undrain")]
    assert gateway.markers == set() and gateway.out_of_rotation() == []


def test_without_capacity_it_waits_then_refuses_and_changes_nothing() -> None:
    gateway = FakeGateway(["a", "b"])
    gateway.status["b"] = "DOWN"
    clock = iter(range(0, 1000, 10))
    said: list[str] = []
    rotation = Rotation([Gateway("gw", gateway, frozenset({"a", "b"}))], say=lambda host, text: said.append(text),
                        sleep=lambda _: None, clock=lambda: float(next(clock)))
    applied = []
    with pytest.raises(TaskFailed) as error:
        rotation.swap("a", RotationSettings(min_available_wait_s=120), lambda: applied.append(1))
    assert applied == [] and gateway.events == []
    assert "a not drained, so not swapped: only 0 other backend(s) serving, office_min_available is 1 (b DOWN) " \
           "after waiting 120 s (office_min_available_wait_s); nothing was changed on a" in str(error.value)
    assert said == ["waiting up to 120 s before draining at gw: only 0 other backend(s) serving, "
                    "office_min_available is 1 (b DOWN)"]


def test_a_failed_swap_stays_drained_and_the_next_run_puts_it_back() -> None:
    gateway = FakeGateway(["a", "b"])
    rotation = rotation_over(gateway)

    def fails() -> None:
        raise TaskFailed("the new release failed its smoke check; the previous release is back")
    with pytest.raises(TaskFailed, match="is left drained at the office gateway gw: a rerun puts it back"):
        rotation.swap("a", RotationSettings(), fails)
    assert gateway.status["a"] == "DRAIN" and gateway.marked("a")
    # the next run: the release is in place (nothing to swap): the marker says up drained it
    assert rotation.settle("a").startswith("back in rotation at gw (left drained by an earlier run)")
    assert gateway.status["a"] == "UP" and not gateway.marked("a")
    assert rotation.settle("b") == ""  # never drained by up: nothing done


def test_a_drain_by_hand_is_not_undone_and_drain_off_swaps_directly() -> None:
    gateway = FakeGateway(["a", "b"])
    gateway.status["a"] = "DRAIN"  # `provision drain`: no marker
    rotation = rotation_over(gateway)
    assert rotation.settle("a") == "" and gateway.status["a"] == "DRAIN"
    _, before, after = rotation.swap("a", RotationSettings(), lambda: "done")
    assert "was out of rotation at the office gateway gw already (DRAIN, by hand): it stays so" in before
    assert after == "" and gateway.status["a"] == "DRAIN" and gateway.events == []
    assert rotation.swap("b", RotationSettings(drain=False), lambda: "done") == ("done", "", "")
    assert gateway.events == []
    assert rotation.swap("elsewhere", RotationSettings(), lambda: "done") == ("done", "", "")


class NoHAProxyYet(FakeGateway):
    def show(self) -> list[ServerView] | None:  # type: ignore[override]
        return None


def test_before_the_gateway_serves_or_lists_the_host_it_swaps_without_a_drain() -> None:
    """The office's first `up`: the backends are released before the gateway play installs HAProxy;
    a new backend is released before the gateway's config names it. Neither gets requests from it."""
    first = NoHAProxyYet(["a"])
    _, before, after = rotation_over(first).swap("a", RotationSettings(), lambda: "released")
    assert before == "not drained: the office gateway gw serves no request yet (no HAProxy there)" and after == ""
    assert first.events == []
    newcomer = FakeGateway(["a", "b"])
    rotation = Rotation([Gateway("gw", newcomer, frozenset({"a", "b", "new"}))], sleep=lambda _: None)
    _, before, _ = rotation.swap("new", RotationSettings(), lambda: "released")
    assert before == "not drained: new is not yet a backend of the office gateway gw's running config"

    def fails() -> None:
        raise TaskFailed("smoke failed")
    with pytest.raises(TaskFailed) as error:  # nothing drained: the error is the swap's own
        rotation.swap("new", RotationSettings(), fails)
    assert str(error.value) == "smoke failed" and newcomer.events == []


def test_settings_come_from_the_variables_and_bad_ones_are_named() -> None:
    assert RotationSettings.from_vars({}) == RotationSettings(True, 300, 1, 120)
    assert RotationSettings.from_vars({"office_rolling_drain": "false", "office_min_available": "2"}) == \
        RotationSettings(False, 300, 2, 120)
    with pytest.raises(ValueError, match="office_drain_timeout_s must be a whole number"):
        RotationSettings.from_vars({"office_drain_timeout_s": -1})


def test_the_gateway_scripts_mark_before_the_drain_and_unmark_after_the_undrain() -> None:
    drain = drain_script("/run/haproxy/admin.sock", "desk-1", 300)
    assert drain.index(f": > '{MARKER_DIR}/desk-1'") < drain.index("set -- '/run/haproxy/admin.sock' 'drain' 'desk-1'")
    undrain = undrain_script("/run/haproxy/admin.sock", "desk-1")
    assert undrain.index("set -- '/run/haproxy/admin.sock' 'ready'") < undrain.index(f"rm -f '{MARKER_DIR}/desk-1'")
    assert marked_script("desk-1") == f"if [ -e '{MARKER_DIR}/desk-1' ]; then echo marked; else echo clear; fi"
    with pytest.raises(ValueError):
        drain_script("/run/haproxy/admin.sock", "../etc", 1)
