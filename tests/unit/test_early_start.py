"""Tasks that start early (runner/early.py): where a group starts, what the loader refuses, and the
runner's order end to end through the local connection.

The host's systemd cannot run here: `UnitStandIn` (a stand-in for systemd, named so) answers the two
scripts the runner sends about a unit — the start (it runs the unit's script, as the unit would, once
started) and the follow (the script's output and status). The lab test (tests/e2e/test_gpu_up.py) runs
the same scripts against the lab host's real systemd.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from provision.connection.base import CommandResult
from provision.errors import InputError
from provision.inventory.loader import load_inventory
from provision.playbook.loader import load_playbook
from provision.runner import early
from provision.runner import runner as runner_module
from provision.runner.events import SilentReporter
from provision.runner.host_run import RunOptions
from provision.runner.runner import RunConfig, Runner
from provision.shell import PERMANENT_FAILURE, Command
from tests.unit.project_support import write

UNIT = re.compile(r"provision-early-[0-9a-f]{12}")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    target = tmp_path / "target"
    target.mkdir()
    write(tmp_path / "inventory.yaml", f"""
        name: here
        connection: local
        vars:
          target: {target}
    """)
    write(tmp_path / "playbooks/site.yaml", """
        - name: host
          hosts: all
          roles: [prep, slow]
        - name: server
          hosts: all
          roles: [fetch]
    """)
    write(tmp_path / "roles/prep/tasks.yaml", """
        - name: prepared
          command: {cmd: "echo prep >> {{ target }}/order", creates: "{{ target }}/prepared"}
        - name: prepared marker
          command: {cmd: "touch {{ target }}/prepared", creates: "{{ target }}/prepared"}
    """)
    write(tmp_path / "roles/slow/tasks.yaml", """
        - name: slow work
          command: {cmd: "echo slow >> {{ target }}/order; touch {{ target }}/slow", creates: "{{ target }}/slow"}
    """)
    write(tmp_path / "roles/fetch/tasks.yaml", """
        - name: tool installed
          command: {cmd: "echo tool >> {{ target }}/order; touch {{ target }}/tool", creates: "{{ target }}/tool"}
          register: tool
        - name: unrelated
          command: {cmd: "touch {{ target }}/unrelated", creates: "{{ target }}/unrelated"}
        - name: weights downloaded
          starts_early: prep
          needs: [tool installed]
          command:
            cmd: "echo weights >> {{ target }}/order; echo file=w; echo 42 > {{ target }}/weights"
            creates: "{{ target }}/weights"
          register: weights
        - name: served
          command: {cmd: "echo served >> {{ target }}/order; touch {{ target }}/served", creates: "{{ target }}/served"}
    """)
    return tmp_path


class UnitStandIn:
    """Stand-in for the host's systemd (none runs in a unit test): the start script's unit runs at
    once (its output kept), the follow script gives that output back with its exit status."""

    def __init__(self, conn: Any, log: list[str]) -> None:
        self._conn = conn
        self.log = log
        self.units: dict[str, tuple[str, int]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def run(self, script: str, **kwargs: Any) -> CommandResult:
        if "systemctl enable --now" in script:
            unit = UNIT.search(script).group(0)  # type: ignore[union-attr]
            command = kwargs["data"].decode().split(f"\ndate +%s.%N > '{early.STATE_DIR}", 1)[0]
            done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False)
            self.units[unit] = (done.stdout, done.returncode)
            self.log.append(f"start {unit}")
            return CommandResult("", "", 0)
        if early.ENDED in script:
            unit = UNIT.search(script).group(0)  # type: ignore[union-attr]
            stdout, rc = self.units.pop(unit)
            self.log.append(f"follow {unit}")
            for line in stdout.splitlines():
                kwargs["on_output"](line)
            kwargs["on_output"](f"{early.ENDED}1700000000.5")
            return CommandResult(stdout + f"{early.ENDED}1700000000.5\n", "" if rc == 0 else "failed", rc)
        return self._conn.run(script, **kwargs)


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    events: list[str] = []
    real = runner_module.connect
    monkeypatch.setattr(runner_module, "connect", lambda *a, **k: UnitStandIn(real(*a, **k), events))
    return events


def run(project: Path, **options: Any) -> dict:
    inventory = load_inventory(project / "inventory.yaml")
    plays = load_playbook(project / "playbooks/site.yaml")
    options.setdefault("handlers_dir", str(project / "host-state/handlers"))
    result = Runner(inventory, RunConfig(options=RunOptions(**options), lock=False), SilentReporter()).run(plays)
    return result.document()["hosts"]["here"]


def statuses(host: dict) -> list[tuple[str, str]]:
    return [(task["name"], task["status"]) for task in host["tasks"]]


def test_the_task_starts_after_its_role_with_what_it_needs_and_is_awaited_at_its_turn(project: Path,
                                                                                     log: list[str]):
    target = project / "target"
    (target / "tool").touch()  # the needed task changes nothing: it runs early for its result
    host = run(project)
    assert host["error"] is None, host
    # the needed task and the start ran right after `prep`, before `slow`; the rest at their turn
    assert (target / "order").read_text().split() == ["prep", "weights", "slow", "served"]
    assert (target / "weights").read_text() == "42\n"
    assert [event.split()[0] for event in log] == ["start", "follow"]
    # the results list every task once, in the play's order
    assert statuses(host) == [("prepared", "changed"), ("prepared marker", "changed"), ("slow work", "changed"),
                              ("tool installed", "ok"), ("unrelated", "changed"),
                              ("weights downloaded", "changed"), ("served", "changed")]
    weights = host["tasks"][5]
    assert "started early after role prep" in weights["summary"]
    assert weights["early"]["after"] == "prep" and weights["early"]["ended"] == 1700000000.5
    assert host["tasks"][3]["started"] < host["tasks"][2]["started"]  # `tool installed` ran before `slow work`


def test_a_needed_task_that_would_change_the_host_keeps_its_turn_and_so_does_the_task(project: Path,
                                                                                     log: list[str]):
    """Only the task's own change moves ahead: a need that installs something (an apt task that would
    first repair an interrupted dpkg, before the driver role's DKMS check) runs in order, and the task
    after it, as without early starts."""
    host = run(project)
    assert host["error"] is None, host
    assert (project / "target/order").read_text().split() == ["prep", "slow", "tool", "weights", "served"]
    assert log == []
    assert all(status == "changed" for _, status in statuses(host))


def test_early_starts_false_runs_every_task_at_its_turn(project: Path, log: list[str]):
    (project / "target/tool").touch()
    inventory = load_inventory(project / "inventory.yaml")
    plays = load_playbook(project / "playbooks/site.yaml")
    options = RunOptions(handlers_dir=str(project / "host-state/handlers"))
    config = RunConfig(options=options, lock=False, extra_vars={"early_starts": False})
    host = Runner(inventory, config, SilentReporter()).run(plays).document()["hosts"]["here"]
    assert host["error"] is None, host
    assert (project / "target/order").read_text().split() == ["prep", "slow", "weights", "served"]
    assert log == []


def test_check_mode_starts_nothing_and_predicts_the_run(project: Path, log: list[str]):
    predicted = run(project, check=True)
    assert log == [] and not (project / "target/order").exists()
    applied = run(project)
    changed = [name for name, status in statuses(applied) if status == "changed"]
    assert [name for name, status in statuses(predicted) if status == "changed"] == changed, statuses(predicted)


def test_a_rerun_starts_nothing_and_changes_nothing(project: Path, log: list[str]):
    run(project)
    log.clear()
    again = run(project)
    assert log == []
    assert all(status == "ok" for _, status in statuses(again))


def test_a_failed_unit_fails_the_task_at_its_turn_naming_it(project: Path, log: list[str]):
    tasks = project / "roles/fetch/tasks.yaml"
    tasks.write_text(tasks.read_text().replace("echo 42 >", "exit 7; echo 42 >"))
    host = run(project)
    assert statuses(host)[-1] == ("weights downloaded", "failed")
    assert "weights downloaded" in host["tasks"][-1]["error"]
    assert (project / "target/slow").exists()  # the work between went on


def test_triggers_place_a_group_after_its_roles_selected_tasks(project: Path):
    plays = load_playbook(project / "playbooks/site.yaml")
    host_play = plays[0]
    assert early.triggers(host_play, host_play.tasks, {"prep"}) == {2: ["prep"]}
    # none of prep's tasks selected (`--tags slow`): the group starts where they would have run
    assert early.triggers(host_play, host_play.tasks[2:], {"prep"}) == {0: ["prep"]}
    assert early.triggers(plays[1], plays[1].tasks, {"prep"}) == {}
    groups = early.early_groups(plays)
    assert [(item.play.name, item.task.name) for item in groups["prep"]] == [("server", "weights downloaded")]


def needs_the_restart(project: Path) -> None:
    """`prep` gets a handler that restarts what the early task uses, notified by its first task; the
    early task declares it needs it (as roles/model's image pull needs `restart docker`)."""
    write(project / "roles/prep/handlers.yaml", """
        - name: restart prep
          command: {cmd: "echo restart >> {{ target }}/order"}
    """)
    prep = project / "roles/prep/tasks.yaml"
    prep.write_text(prep.read_text().replace('creates: "{{ target }}/prepared"}\n',
                                             'creates: "{{ target }}/prepared"}\n  notify: restart prep\n', 1))
    fetch = project / "roles/fetch/tasks.yaml"
    fetch.write_text(fetch.read_text().replace("needs: [tool installed]", "needs: [tool installed, restart prep]"))


def test_a_task_that_needs_a_handler_starts_after_the_plays_handlers(project: Path, log: list[str]):
    """A restart of what the early work uses would cut it (dockerd restarted under a pull fetches its
    unfinished layers again): the task starts once the handlers of its role's play have run, before
    the next play's tasks, and is awaited at its turn as any early task."""
    needs_the_restart(project)
    (project / "target/tool").touch()
    host = run(project)
    assert host["error"] is None, host
    assert (project / "target/order").read_text().split() == ["prep", "slow", "restart", "weights", "served"]
    assert [event.split()[0] for event in log] == ["start", "follow"]
    weights = next(task for task in host["tasks"] if task["name"] == "weights downloaded")
    restart = next(task for task in host["tasks"] if task["name"] == "restart prep")
    assert weights["early"]["after"] == "prep" and weights["early"]["started"] > restart["started"]


def test_after_handlers_splits_a_group_by_what_its_tasks_need(project: Path):
    needs_the_restart(project)
    plays = load_playbook(project / "playbooks/site.yaml")
    group = early.early_groups(plays)["prep"]
    assert early.after_handlers(group, plays[0]) == ([], group)
    assert early.after_handlers(group, plays[1]) == (group, [])  # not a handler of that play: no wait


@pytest.mark.parametrize(("change", "message"), [
    ("needs: [tool installed]", "needs: [tool installd]"),
    ("starts_early: prep", "starts_early: fetch"),
    ("  register: weights", "  notify: x"),
    ("needs: [tool installed]", "needs: [tool installed, restart nothing]"),
])
def test_the_loader_refuses_a_wrong_declaration_naming_file_and_line(project: Path, change: str, message: str):
    tasks = project / "roles/fetch/tasks.yaml"
    tasks.write_text(tasks.read_text().replace(change, message))
    with pytest.raises(InputError) as error:
        load_playbook(project / "playbooks/site.yaml")
    assert "tasks.yaml:6" in str(error.value)


def test_the_unit_script_removes_the_token_file_only_after_success():
    from provision.shell import Command

    script = early.unit_script("provision-early-x", Command(script="download", data=b"m"))
    body, tail = script.split(f"\ndate +%s.%N > '{early.STATE_DIR}/provision-early-x'/ended", 1)
    assert body.rstrip().endswith("} </dev/null") and "set -euo pipefail" in body  # a failure exits first
    assert "run.sh" in tail and "systemctl disable" in tail and "/status" in tail
    unit = early.unit_file("provision-early-x", "weights 100% \\ done")
    assert "Restart=on-failure" in unit and "WantedBy=multi-user.target" in unit
    assert "Description=provision (started early): weights 100%% / done" in unit


def systemd_complaints(folder: Path, unit: str) -> list[str]:
    """What systemd's own parser (`systemd-analyze verify`, at debug level: a value it cannot parse is
    otherwise ignored silently) says of the unit file in `folder` and the unit its OnFailure= names."""
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", f"{unit}.service"], cwd=folder, check=False,
                          capture_output=True, text=True, env={"SYSTEMD_LOG_LEVEL": "debug", "PATH": "/usr/bin:/bin"},
                          timeout=60)
    return [line for line in (done.stdout + done.stderr).splitlines()
            if "Failed" in line and (str(folder) in line or line.startswith(early.GIVE_UP))]


def test_the_unit_is_not_restarted_on_a_failure_no_retry_mends_and_what_ends_it_is_a_unit_systemd_loads(
        tmp_path: Path):
    """systemd.service(5) RestartPreventExitStatus=: the download's PERMANENT_FAILURE is not restarted;
    systemd.unit(5) OnFailure=: the unit systemd gave up on (that status, or its start limit) starts the
    give-up template's instance of it. Read by systemd-analyze, which knows each key and value."""
    unit = "provision-early-0123456789ab"
    text = early.unit_file(unit, "weights")
    assert f"RestartPreventExitStatus={PERMANENT_FAILURE}\n" in text and "Restart=on-failure\n" in text
    assert f"OnFailure={early.GIVE_UP}@{unit}.service\n" in text
    assert f"StartLimitIntervalSec={early.START_LIMIT_S}\nStartLimitBurst={early.START_LIMIT_BURST}\n" in text
    assert f"ExecStart=/bin/bash {early.GIVE_UP_SCRIPT} %i {PERMANENT_FAILURE}\n" in early.give_up_unit()
    assert "shellcheck shell=bash" in early.give_up_script()
    if not Path("/usr/bin/systemd-analyze").exists():
        pytest.skip("systemd-analyze is not installed here")
    (tmp_path / f"{unit}.service").write_text(text)
    (tmp_path / f"{early.GIVE_UP}@.service").write_text(early.give_up_unit())
    assert systemd_complaints(tmp_path, unit) == []
    # the check sees a wrong value and a missing OnFailure= unit
    (tmp_path / f"{unit}.service").write_text(text.replace(f"={PERMANENT_FAILURE}\n", "=for-good\n"))
    (tmp_path / f"{early.GIVE_UP}@.service").unlink()
    assert len(systemd_complaints(tmp_path, unit)) == 2, systemd_complaints(tmp_path, unit)


def test_the_record_of_a_unit_systemd_gave_up_on_is_one_sentence_naming_it_when_and_why():
    unit = "provision-early-0123456789ab"
    url = "http://10.0.2.2:8000/org/model/resolve/" + "1" * 40 + "/config.json"
    output = (f"{early.EARLIER}=1764835200 exit-code {PERMANENT_FAILURE}\n"
              f"{early.EARLIER}_log=downloading config.json failed for good: HTTP 404 from {url} (curl exit 22): x\n")
    assert early.earlier_failure(unit, output) == (
        f"the host unit {unit} an earlier run left ended by itself at 2025-12-04 08:00:00 UTC: its command failed "
        f"for good (exit-code, exit status {PERMANENT_FAILURE}): downloading config.json failed for good: HTTP 404 "
        f"from {url} (curl exit 22): x")
    limit = early.earlier_failure(unit, f"{early.EARLIER}=1764835200 start-limit-hit 1\n")
    assert limit is not None and "it failed 5 times within 60 minutes (start-limit-hit, exit status 1)" in limit
    assert early.earlier_failure(unit, "") is None


def test_the_timeline_shows_the_background_phase_and_what_waited_for_it(project: Path, log: list[str]):
    from provision.runner.results import HostResult, RunResult, Status, TaskResult
    from provision.runner.timeline import lines, phases

    host = HostResult("here", tasks=[
        TaskResult("apt", "driver", Status.CHANGED, elapsed=50.0, started=1000.0),
        TaskResult("curl", "model", Status.OK, elapsed=1.0, started=999.0),  # ran early, before the driver
        TaskResult("weights", "model", Status.CHANGED, elapsed=5.0, started=1060.0,
                   early={"unit": "provision-early-x", "after": "prep", "started": 1000.5, "ended": 1064.5,
                          "waited": 5.0, "bytes": 64 * 1024 * 1024}),
    ])
    found = phases(host)
    assert [(p.name, p.background) for p in found] == [
        ("model", False), ("driver", False), ("weights (host unit provision-early-x, after role prep)", True),
        ("model", False)]
    assert found[2].rate == 1024 * 1024 and found[3].waited == [("weights", 5.0)]
    text = lines(RunResult({"here": host}))
    assert text[0].startswith("timeline of here")
    assert text[3] == ("       1.5     65.5     64.0 s  background: weights (host unit provision-early-x, after role "
                       "prep) (64.0 MiB; 1.0 MiB/s)")
    assert text[4].endswith("(1 of 1 changed; waited 5.0 s for 'weights')")


def test_a_unit_starts_the_first_script_of_a_typed_step_the_weights_and_the_image():
    """The weights' and the image's plans begin with typed steps (`Download`, `PullImage`) that carry
    their script: that script is what the unit runs early, not nothing."""
    from provision.ops.base import Action, Plan
    from provision.ops.docker_image import PullImage
    from provision.ops.hf_snapshot import Download, RepoFile

    download = Command(script="fetch the weights", description="download")
    weights = RepoFile("model.safetensors", 42, "e" * 64, "sha256")
    plan = Plan(changed=True, steps=[Download("download", repo="org/model", endpoint="https://hub",
                                              files=(weights,), missing=(weights,), download=download)])
    assert early.first_script(plan) is download
    pull = Command(script="pull the image", description="pull")
    inspect = Command(script="inspect", description="inspect")
    assert early.first_script(Plan(changed=True, steps=[PullImage("pull", image="vllm", pull=pull), inspect])) is pull
    assert early.first_script(Plan(changed=True, steps=[inspect])) is inspect
    # nothing to start: converged, a step that runs no script, a script that does not run as root
    assert early.first_script(Plan(changed=False)) is None
    assert early.first_script(Plan(changed=True, steps=[Action("copy in Python")])) is None
    assert early.first_script(Plan(changed=True, steps=[Command(script="x", sudo=False)])) is None


def test_the_sites_image_pull_starts_after_the_host_stacks_docker_restart():
    """The site's pull is not cut by the handler that restarts dockerd at the end of the host stack's
    play (notified by the docker role's daemon.json and the container toolkit's runtime on every first
    apply); the weights, which no restart touches, start right after office_cache_client."""
    plays = load_playbook(Path(__file__).resolve().parents[2] / "playbooks/site.yaml")
    host_stack = next(play for play in plays if any(role.name == "docker" for role in play.roles))
    assert "restart docker" in {handler.name for handler in host_stack.handlers}
    groups = early.early_groups(plays)
    now, later = early.after_handlers(groups["docker"], host_stack)
    assert [item.task.name for item in later] == ["vLLM image pulled"] and now == []
    now, later = early.after_handlers(groups["office_cache_client"], host_stack)
    assert "model weights downloaded and verified" in [item.task.name for item in now] and later == []
