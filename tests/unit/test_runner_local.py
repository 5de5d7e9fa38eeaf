"""The runner end to end on this machine through the local connection, on files in a temp folder.

No SSH here (the lab tests cover that): this pins the engine's semantics — check mode changes
nothing and predicts the real run, reruns change nothing, handlers run once, tags select roles,
failures name host, task and command.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.inventory.loader import load_inventory
from provision.playbook.loader import load_playbook
from provision.runner.events import SilentReporter
from provision.runner.host_run import RunOptions
from provision.runner.results import Status
from provision.runner.runner import RunConfig, Runner
from tests.unit.project_support import write


@pytest.fixture
def project(tmp_path: Path) -> Path:
    target = tmp_path / "target"
    write(tmp_path / "inventory.yaml", f"""
        name: here
        connection: local
        vars:
          target: {target}
    """)
    write(tmp_path / "playbooks/site.yaml", """
        - name: demo
          hosts: all
          roles: [files, extra]
    """)
    write(tmp_path / "roles/files/defaults.yaml", """
        greeting: hello
    """)
    write(tmp_path / "roles/files/tasks.yaml", """
        - name: folder
          directory: {path: "{{ target }}", mode: "0755"}
        - name: config file
          template: {src: app.conf.j2, dest: "{{ target }}/app.conf", mode: "0644"}
          notify: reload app
        - name: second file also notifies
          file: {dest: "{{ target }}/other", content: "x\\n"}
          notify: reload app
    """)
    write(tmp_path / "roles/files/templates/app.conf.j2", """
        greeting={{ greeting }}
        host={{ inventory_hostname }}
    """)
    write(tmp_path / "roles/files/handlers.yaml", """
        - name: reload app
          command: {cmd: "echo reloaded >> {{ target }}/reloads"}
    """)
    write(tmp_path / "roles/extra/tasks.yaml", """
        - name: marker
          command: {cmd: "touch {{ target }}/marker", creates: "{{ target }}/marker"}
    """)
    return tmp_path


def run(project: Path, **options) -> dict:
    extra_vars = options.pop("extra_vars", {})
    inventory = load_inventory(project / "inventory.yaml")
    plays = load_playbook(project / "playbooks/site.yaml")
    options.setdefault("handlers_dir", str(project / "host-state/handlers"))
    config = RunConfig(options=RunOptions(**options), extra_vars=extra_vars, lock=False)
    result = Runner(inventory, config, SilentReporter()).run(plays)
    return result.document()["hosts"]["here"] | {"_result": result}


def changed_tasks(host: dict) -> list[str]:
    return [t["name"] for t in host["tasks"] if t["changed"]]


def test_check_predicts_the_run_and_changes_nothing(project: Path):
    target = project / "target"
    predicted = run(project, check=True)
    assert not target.exists()
    applied = run(project)
    assert changed_tasks(predicted) == changed_tasks(applied)
    assert changed_tasks(applied) == ["folder", "config file", "second file also notifies", "marker", "reload app"]
    assert (target / "app.conf").read_text() == "greeting=hello\nhost=here\n"
    assert (target / "app.conf").stat().st_mode & 0o777 == 0o644
    # notified twice, run once
    assert (target / "reloads").read_text() == "reloaded\n"


def test_rerun_changes_nothing_in_one_round_trip(project: Path):
    run(project)
    again = run(project)
    assert again["changed"] == 0 and again["failed"] == 0
    assert again["ok"] == 4
    # the facts and every task's state in one script
    assert again["round_trips"] == 1


def test_a_task_that_reads_facts_is_probed_at_its_turn_with_the_real_facts(project: Path):
    write(project / "roles/extra/tasks.yaml", """
        - name: marker
          command: {cmd: "touch {{ target }}/marker", creates: "{{ target }}/marker"}
        - name: named by the facts
          file: {dest: "{{ target }}/os-{{ facts.os.id }}", content: "x\\n"}
    """)
    run(project)
    # the local connection's facts are this machine's
    os_id = next(line.split("=", 1)[1].strip().strip('"') for line in Path("/etc/os-release").read_text().splitlines()
                 if line.startswith("ID="))
    assert [p.name for p in (project / "target").glob("os-*")] == [f"os-{os_id}"]
    again = run(project)
    assert again["changed"] == 0
    # one for the facts and the tasks that need none, one for the task that reads facts
    assert again["round_trips"] == 2


def test_changed_variable_changes_only_its_file_and_notifies(project: Path):
    run(project)
    host = run(project, extra_vars={"greeting": "bonjour"}, diff=True)
    assert changed_tasks(host) == ["config file", "reload app"]
    diff = next(t["diff"] for t in host["tasks"] if t["name"] == "config file")
    assert "-greeting=hello" in diff and "+greeting=bonjour" in diff


def test_tags_select_one_role(project: Path):
    host = run(project, tags=frozenset({"extra"}))
    assert [t["name"] for t in host["tasks"]] == ["marker"]
    assert not (project / "target/app.conf").exists()


def test_failure_names_task_and_command_and_stops_the_host(project: Path):
    write(project / "roles/extra/tasks.yaml", """
        - name: broken step
          command: {cmd: "echo some output; echo the reason >&2; exit 7"}
        - name: never reached
          command: {cmd: "true"}
    """)
    host = run(project)
    assert not host["_result"].ok
    failed = [t for t in host["tasks"] if t["status"] == Status.FAILED]
    assert [t["name"] for t in failed] == ["broken step"]
    assert "exit code 7" in failed[0]["error"] and "the reason" in failed[0]["error"]
    assert "never reached" not in [t["name"] for t in host["tasks"]]


def test_a_handler_that_did_not_run_is_run_by_the_next_run(project: Path):
    """A change notified a handler that did not run (here it failed; a killed run is the same):
    the next run finds the change made and notifies nothing, yet runs the handler (kept on the host
    as pending), once; then it is forgotten. Before: the handler was lost."""
    write(project / "roles/files/handlers.yaml", """
        - name: reload app
          command: {cmd: "test -e {{ target }}/can-reload && echo reloaded >> {{ target }}/reloads"}
    """)
    first = run(project)
    assert first["failed"] == 1 and not (project / "target/reloads").exists()
    assert list((project / "host-state/handlers").iterdir()), "the pending handler is kept on the host"
    (project / "target/can-reload").touch()
    second = run(project)
    assert changed_tasks(second) == ["reload app"] and second["failed"] == 0
    assert (project / "target/reloads").read_text() == "reloaded\n"
    assert not list((project / "host-state/handlers").iterdir())
    third = run(project)
    assert third["changed"] == 0 and third["round_trips"] == 1


def test_a_check_that_waits_for_the_run_applies_without_a_change_and_reports_what_apply_found(project: Path):
    """A plan with steps and `changed: false` is applied and not counted; the task's summary is the one
    apply returned, while check mode showed the plan's own (nothing edits a plan after planning)."""
    write(project / "roles/extra/tasks.yaml", """
        - name: marker
          command: {cmd: "echo 580.95.05 > {{ target }}/marker", creates: "{{ target }}/marker"}
        - name: the marker says
          verify: {cmd: "cat {{ target }}/marker"}
    """)

    def check_task(host: dict) -> dict:
        return next(t for t in host["tasks"] if t["name"] == "the marker says")

    predicted = run(project, check=True)
    # before: "ok", for a check that was not run (a container sees the GPU: ok, on a host with no docker)
    assert check_task(predicted)["status"] == "not checked" and predicted["not_checked"] == 1
    assert check_task(predicted)["summary"].startswith("checked again in the run; not true yet")
    applied = run(project)
    assert changed_tasks(predicted) == changed_tasks(applied)
    assert check_task(applied)["status"] == "ok" and check_task(applied)["summary"] == "580.95.05"
    again = run(project)
    assert again["changed"] == 0 and check_task(again)["summary"] == "580.95.05" and again["round_trips"] == 1


def test_a_reporting_tasks_nested_result_reaches_the_document():
    from provision.runner.host_run import _plain_data
    from provision.secrets import Secret

    Secret("k3y-value-9")
    data = _plain_data({"ready_seconds": 0.0, "smoke": {"text": {"ok": True, "answer": "uses k3y-value-9"},
                                                        "vision": None}, "raw": object(), "items": [1, object()]})
    assert data == {"ready_seconds": 0.0, "smoke": {"text": {"ok": True, "answer": "uses ***"}, "vision": None},
                    "items": [1]}


def test_check_mode_says_not_checked_on_the_line_and_in_the_recap(project: Path):
    import io

    from rich.console import Console

    from provision.cli.output import ConsoleReporter, recap_table

    write(project / "roles/extra/tasks.yaml", """
        - name: a container sees the GPU
          verify: {cmd: "docker run --rm nvidia-smi-nowhere-{{ target | length }} >/dev/null 2>&1"}
    """)
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    inventory = load_inventory(project / "inventory.yaml")
    config = RunConfig(options=RunOptions(check=True, handlers_dir=str(project / "handlers")), lock=False)
    with ConsoleReporter(console, check=True) as reporter:
        result = Runner(inventory, config, reporter).run(load_playbook(project / "playbooks/site.yaml"))
    console.print(recap_table(result))
    text = out.getvalue()
    assert "here | not checked (check mode) | extra: a container sees the GPU" in text, text
    assert "here | ok | extra: a container sees the GPU" not in text
    header = next(line for line in text.splitlines() if "not checked" in line and "host" in line)
    row = next(line for line in text.splitlines() if line.startswith("│ here"))
    cells = dict(zip([c.strip() for c in header.split("┃")], [c.strip() for c in row.split("│")], strict=False))
    assert cells["not checked"] == "1" and cells["ok"] != ""


def test_the_live_view_says_running_through_the_second_play(project: Path):
    """Before: the state column kept the first play's `done` for the whole second play."""
    import io

    from rich.console import Console

    from provision.cli.output import ConsoleReporter

    write(project / "playbooks/site.yaml", """
        - name: first
          hosts: all
          roles: [files]
        - name: second
          hosts: all
          roles: [extra]
    """)
    states: dict[str, str] = {}

    class Watching(ConsoleReporter):
        def task_started(self, host: str, task: str) -> None:
            super().task_started(host, task)
            states[task] = self.lines[host].state

    console = Console(file=io.StringIO(), width=200, color_system=None)
    inventory = load_inventory(project / "inventory.yaml")
    config = RunConfig(options=RunOptions(handlers_dir=str(project / "handlers")), lock=False)
    with Watching(console) as reporter:
        result = Runner(inventory, config, reporter).run(load_playbook(project / "playbooks/site.yaml"))
    assert result.ok
    assert states["folder"] == "running" and states["marker"] == "running", states
    assert reporter.lines["here"].state == "done"
