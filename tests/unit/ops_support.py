"""Helpers for the operation tests: plan from recorded probe output, check scripts parse, run locally.

`run_local` runs a script exactly as a connection would send it (wrap_script: payload on fd 3) with
bash on this machine; tests use it only on paths under pytest's tmp_path.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from provision.connection.base import CommandResult, checked, wrap_script
from provision.ops import REGISTRY
from provision.ops.base import ApplyContext, Plan
from provision.shell import Command


def facts(**overrides: Any) -> Any:
    """Empty HostFacts (with overrides) when the model exists, else a stand-in with the same fields."""
    try:
        from provision.facts.model import HostFacts
    except ImportError:  # the facts model is written in parallel
        return SimpleNamespace(arch="", **overrides)
    return HostFacts.empty().replace(**overrides)


def make_args(op_name: str, **args: Any) -> Any:
    return REGISTRY[op_name].Args.model_validate(args)


def plan(op_name: str, probe_output: str, host_facts: Any = None, /, **args: Any) -> Plan:
    """The plan of `op_name` with `args` on a host whose probe printed `probe_output`."""
    op = REGISTRY[op_name]
    op_args = make_args(op_name, **args)
    probe = op.probe(op_args)
    state = probe.parse(probe_output) if probe is not None else None
    return op.plan(op_args, host_facts if host_facts is not None else facts(), state)


def assert_bash_parses(script: str) -> None:
    done = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"bash -n failed: {done.stderr}\n---\n{script}"


def assert_commands_parse(result: Plan) -> None:
    """Every script the plan runs, as wrapped for the host, is valid bash; payloads never in the script text."""
    for command in result.scripts:
        assert_bash_parses(wrap_script(command.script, command.data, command.env))
        if command.data:
            assert command.data.decode(errors="replace") not in command.script


def run_local(script: str, data: bytes | None = None, env: dict[str, str] | None = None) -> CommandResult:
    done = subprocess.run(["bash", "-s"], input=wrap_script(script, data, env).encode(), capture_output=True,
                          check=False, timeout=30)
    return CommandResult(done.stdout.decode(), done.stderr.decode(), done.returncode)


def probe_local(op_name: str, **args: Any) -> str:
    """Run the operation's probe here, inside a `set +e` script as the runner does."""
    probe = REGISTRY[op_name].probe(make_args(op_name, **args))
    snippet = probe.snippet if probe is not None else ""
    done = subprocess.run(["bash", "-c", f"set +e +u +o pipefail\n{snippet}"], capture_output=True, text=True,
                          check=False, timeout=30, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return done.stdout


def apply_local(result: Plan) -> list[CommandResult]:
    """Run a plan's scripts here, in order, stopping at (and asserting on) the first failure."""
    outputs = []
    for command in result.scripts:
        output = run_local(command.script, command.data, command.env)
        assert output.rc == 0, f"{command.description} failed: {output.stderr}"
        outputs.append(output)
    return outputs


def converge_local(op_name: str, **args: Any) -> tuple[Plan, Plan]:
    """Plan, apply, then plan again on this machine: (first plan, second plan)."""
    first = plan(op_name, probe_local(op_name, **args), **args)
    assert_commands_parse(first)
    apply_local(first)
    second = plan(op_name, probe_local(op_name, **args), **args)
    return first, second


def script_of(result: Plan) -> str:
    return "\n".join(command.script for command in result.scripts)



class ScriptedConnection:
    """A connection that answers each `run` with the next scripted reply (a CommandResult or an exception)."""

    def __init__(self, replies: list[CommandResult | Exception], host_name: str = "lab1") -> None:
        self.host_name = host_name
        self.round_trips = 0
        self.replies = list(replies)
        self.scripts: list[str] = []

    def run(self, script: str, *, sudo: bool = True, data: bytes | None = None,
            env: dict[str, str] | None = None, timeout: float | None = None,
            on_output: Callable[[str], None] | None = None) -> CommandResult:
        self.round_trips += 1
        self.scripts.append(script)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return _replay(reply, on_output)

    def run_command(self, command: Command, check: bool = True) -> CommandResult:
        return checked(self, command, check)

    def close(self) -> None:
        pass


class LocalTestConnection(ScriptedConnection):
    """Runs scripts with bash on this machine (tests use it on tmp_path only)."""

    def __init__(self) -> None:
        super().__init__([], host_name="local")

    def run(self, script: str, *, sudo: bool = True, data: bytes | None = None,
            env: dict[str, str] | None = None, timeout: float | None = None,
            on_output: Callable[[str], None] | None = None) -> CommandResult:
        self.round_trips += 1
        self.scripts.append(script)
        return _replay(run_local(script, data, env), on_output)


def _replay(result: CommandResult, on_output: Callable[[str], None] | None) -> CommandResult:
    """Feed a finished command's stdout lines to `on_output`, as the local connection does."""
    if on_output:
        for line in result.stdout.splitlines():
            on_output(line)
    return result


def context(conn: Any, reconnect: Any = None, progress: list[tuple[Any, ...]] | None = None) -> ApplyContext:
    """An ApplyContext around `conn`, recording progress calls in `progress`."""
    calls = progress if progress is not None else []
    return ApplyContext(
        conn=conn, facts=facts(), host_name=conn.host_name,
        progress=lambda description, completed=None, total=None: calls.append((description, completed, total)),
        reconnect=reconnect or (lambda: conn),
    )


class FakeClock:
    """Time that passes only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def with_fake_clock(monkeypatch: Any, name: str) -> Any:
    """The registered operation `name`, its `clock` and `sleep` replaced by a FakeClock."""
    operation = REGISTRY[name]
    clock = FakeClock()
    monkeypatch.setattr(operation, "clock", clock)
    monkeypatch.setattr(operation, "sleep", clock.sleep)
    return operation
