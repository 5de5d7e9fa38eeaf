"""Ctrl-C (provision/interrupt.py) through the real runner and local connection: the first press lets
the task in flight finish, starts no other, ends waits at once and leaves a recap-able result; a
second press exits at once. Before: Ctrl-C carried on to the end of the play (no recap, no JSON)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from provision import interrupt
from provision.inventory.loader import load_inventory
from provision.playbook.loader import load_playbook
from provision.runner.events import SilentReporter
from provision.runner.runner import RunConfig, Runner
from tests.unit.test_runner_local import write


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write(tmp_path / "inventory.yaml", f"""
        name: here
        connection: local
        vars:
          target: {tmp_path / "target"}
    """)
    write(tmp_path / "playbooks/site.yaml", """
        - name: demo
          hosts: all
          roles: [steps]
    """)
    write(tmp_path / "roles/steps/tasks.yaml", """
        - name: slow change in flight
          command: {cmd: "mkdir -p {{ target }}; sleep 2; touch {{ target }}/first"}
        - name: a wait
          wait_for: {port: 9, host: 127.0.0.1, timeout: 120}
        - name: never started
          command: {cmd: "touch {{ target }}/second"}
    """)
    return tmp_path


def test_first_ctrl_c_finishes_the_change_in_flight_and_starts_nothing_else(project: Path):
    inventory = load_inventory(project / "inventory.yaml")
    plays = load_playbook(project / "playbooks/site.yaml")
    interrupt.STOP.clear()
    threading.Timer(0.7, interrupt.STOP.set).start()
    started = time.monotonic()
    try:
        result = Runner(inventory, RunConfig(lock=False), SilentReporter()).run(plays)
    finally:
        interrupt.STOP.clear()
    assert (project / "target/first").exists(), "the change in flight was cut short"
    assert not (project / "target/second").exists(), "a task started after Ctrl-C"
    assert time.monotonic() - started < 10
    host = result.hosts["here"]
    assert [t.task for t in host.tasks] == ["slow change in flight"]
    assert "interrupted (Ctrl-C) before task 'steps: a wait'" in (host.error or "")
    assert result.aborted and "interrupted (Ctrl-C)" in result.aborted


def test_ctrl_c_ends_a_wait_at_once(project: Path):
    inventory = load_inventory(project / "inventory.yaml")
    plays = load_playbook(project / "playbooks/site.yaml")
    (project / "roles/steps/tasks.yaml").write_text(
        "- name: a wait\n  wait_for: {port: 9, host: 127.0.0.1, timeout: 120}\n")
    plays = load_playbook(project / "playbooks/site.yaml")
    interrupt.STOP.clear()
    threading.Timer(1.5, interrupt.STOP.set).start()
    started = time.monotonic()
    try:
        result = Runner(inventory, RunConfig(lock=False), SilentReporter()).run(plays)
    finally:
        interrupt.STOP.clear()
    assert time.monotonic() - started < 8, "the wait went on after Ctrl-C"
    (task,) = result.hosts["here"].tasks
    assert "interrupted (Ctrl-C)" in (task.error or "")


SECOND_PRESS = """
import os, signal, sys, time
from provision import interrupt
with interrupt.gentle_ctrl_c(lambda text: print(text, flush=True)):
    os.kill(os.getpid(), signal.SIGINT)
    assert interrupt.STOP.is_set()
    print("first press: still running", flush=True)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(60)
print("not reached")
"""


def test_a_second_ctrl_c_exits_at_once():
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", SECOND_PRESS], capture_output=True, text=True, timeout=90,
                          cwd=Path(__file__).resolve().parents[2], env={**os.environ})
    assert done.returncode == 130, done.stderr
    assert "first press: still running" in done.stdout and "Ctrl-C again exits at once" in done.stdout
    # well under the 60 s it would sleep (a loaded CI machine takes seconds to start Python)
    assert "not reached" not in done.stdout and time.monotonic() - started < 30
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_after_ctrl_c_the_host_line_and_the_recap_say_the_same(project: Path):
    """Before: the host line said `failed` while the recap counted 0 failed (the host stopped before a
    task, it did not fail one); now both say `interrupted`, and so does the --json document."""
    import io

    from rich.console import Console

    from provision.cli.output import ConsoleReporter, recap_table

    inventory = load_inventory(project / "inventory.yaml")
    plays = load_playbook(project / "playbooks/site.yaml")
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    interrupt.STOP.clear()
    threading.Timer(0.7, interrupt.STOP.set).start()
    try:
        with ConsoleReporter(console) as reporter:
            result = Runner(inventory, RunConfig(lock=False), reporter).run(plays)
    finally:
        interrupt.STOP.clear()
    console.print(recap_table(result))
    text = out.getvalue()
    assert "here | interrupted | interrupted (Ctrl-C) before task 'steps: a wait'" in text, text
    recap = next(line for line in text.splitlines() if "here (interrupted)" in line)
    assert recap.split("│")[4].strip() == "0", "the recap counts no failed task"
    assert result.document()["hosts"]["here"]["interrupted"] is True
