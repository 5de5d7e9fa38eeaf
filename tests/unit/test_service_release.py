"""Releases: what differs decides whether anything happens; a deploy is checked and an upgrade that
fails goes back to the previous release; the record only ever names verified releases; the host
scripts stage, swap and prune files as they say (run here with stand-in systemctl/journalctl)."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from provision.errors import CommandFailed, TaskFailed
from provision.vllm.readiness import ServiceNotReady, StartMark
from provision.vllm.release import (
    Deployer,
    Layout,
    LiveState,
    Record,
    Release,
    activate_script,
    argument_changes,
    differences,
    parse_live_state,
    record_script,
    sha256_text,
    stage_payload,
    state_probe,
)
from provision.vllm.smoke import SmokeFailed
from tests.unit.ops_support import assert_bash_parses, run_local

LAYOUT = Layout(name="vllm", env_file="/etc/provision/vllm/vllm.env", state_dir="/var/lib/provision/vllm",
                key_file="/etc/provision/vllm/api-key")


def release(flag: str = "4", image: str = "img:1", commit: str = "c" * 40, key: str = "k1") -> Release:
    arguments = ["m", "--max-num-seqs", flag]
    return Release(image=image, pinned_image=f"img@sha256:{image[-1] * 4}", weights={"commit": commit},
                   arguments=arguments, unit_text=f"[Service]\nExecStart=run {image} {' '.join(arguments)}\n",
                   env_text="HF_HUB_OFFLINE=1\n", key_text=key)


def live(record: Record, desired: Release | None = None, active: str = "active", enabled: str = "enabled",
         reload: bool = False) -> LiveState:
    return LiveState(record=record, unit_sha256=sha256_text(desired.unit_text) if desired else "",
                     unit_text=desired.unit_text if desired else None,
                     env_sha256=sha256_text(desired.env_text) if desired else "", active_state=active,
                     unit_file_state=enabled, need_daemon_reload=reload,
                     key_sha256=sha256_text(desired.key_text) if desired else "")


def test_same_release_running_and_untouched_means_nothing_to_do() -> None:
    current = release()
    assert differences(current, live(Record(current=current.entry()), current)) == []


@pytest.mark.parametrize(("desired", "reason"), [
    (release(flag="3"), "arguments --max-num-seqs 4 -> 3"),
    (release(image="img:2"), "image img:1 -> img:2 (img@sha256:2222)"),
    (release(commit="d" * 40), "weights cccccccccccc -> dddddddddddd"),
    (release(key="k2"), "API key changed"),
])
def test_each_change_is_named(desired: Release, reason: str) -> None:
    current = release()
    reasons = differences(desired, live(Record(current=current.entry()), current))
    assert reasons == [reason]
    assert "k1" not in " ".join(reasons) and "k2" not in " ".join(reasons)


def test_edited_files_a_stopped_service_and_a_first_release_are_differences() -> None:
    current = release()
    edited = LiveState(Record(current=current.entry()), "0" * 64, "x", sha256_text(current.env_text), "active",
                       "enabled", False, sha256_text(current.key_text))
    assert differences(current, edited) == ["unit file edited on the host"]
    key_gone = LiveState(Record(current=current.entry()), sha256_text(current.unit_text), "x",
                         sha256_text(current.env_text), "active", "enabled", False, "")
    assert differences(current, key_gone) == ["API key file missing"]
    assert differences(current, live(Record(current=current.entry()), current, active="failed")) == [
        "service is failed"]
    assert differences(current, live(Record(current=current.entry()), current, enabled="disabled")) == [
        "service not enabled at boot"]
    assert differences(current, live(Record())) == ["first release"]


def test_argument_changes_read_as_options() -> None:
    assert argument_changes(["m", "--a", "1", "--b", "--c", "x"], ["m", "--a", "2", "--c", "x", "--d"]) == \
        "arguments --a 1 -> 2, add --d, drop --b"


def test_the_record_never_holds_secrets_and_round_trips() -> None:
    entry = release(key="super-secret-key").entry()
    record = Record(current=entry, previous=None, last_failed=None)
    assert "super-secret-key" not in record.text()
    assert Record.parse(record.text()).current == entry
    assert Record.parse("") == Record()
    with pytest.raises(TaskFailed, match="not JSON"):
        Record.parse("{broken")


def test_state_probe_output_is_parsed() -> None:
    record = Record(current=release().entry())
    output = ("probed=1\n" f"record={base64.b64encode(record.text().encode()).decode()}\nunit_sha256=ab\n"
              f"unit_text={base64.b64encode(b'[Unit]').decode()}\nenv_sha256=cd\nActiveState=active\n"
              "UnitFileState=enabled\nNeedDaemonReload=no\n")
    state = parse_live_state(output)
    assert state.record.current == record.current and state.unit_text == "[Unit]" and state.running
    assert_bash_parses(state_probe(LAYOUT))
    with pytest.raises(TaskFailed):
        parse_live_state("")


class FakeHost:
    """Records what the deployer runs; `verify` answers from a list (a dict, or an exception)."""

    def __init__(self, verdicts: list[Any]) -> None:
        self.verdicts = verdicts
        self.activated: list[str] = []
        self.records: list[dict[str, Any]] = []
        self.stopped = False

    def run(self, script: str, payload: bytes | None) -> str:
        if "systemctl start" in script:
            self.activated.append(script.split("releases/", 1)[1].split("'", 1)[0].split("/", 1)[0])
            return "cursor=s=1\nsince=1\nrestarts=0\n"
        if "release.json" in script and payload is not None:
            self.records.append(json.loads(payload))
        elif "systemctl stop" in script:
            self.stopped = True
        return ""

    def verify(self, mark: StartMark) -> dict[str, Any]:
        verdict = self.verdicts.pop(0)
        if isinstance(verdict, Exception):
            raise verdict
        return verdict


def deployer(host: FakeHost) -> Deployer:
    return Deployer(host.run, LAYOUT, host.verify)


def test_a_good_upgrade_becomes_current_and_keeps_the_old_as_previous() -> None:
    old, new = release(), release(flag="3")
    host = FakeHost([{"summary": "ok"}])
    assert deployer(host).deploy(new, live(Record(current=old.entry()), old)) == {"summary": "ok"}
    assert host.activated == [new.id]
    assert host.records[-1]["current"]["id"] == new.id and host.records[-1]["previous"]["id"] == old.id


def test_a_failing_upgrade_is_rolled_back_checked_and_reported() -> None:
    old, new = release(), release(image="img:2")
    host = FakeHost([ServiceNotReady("vllm failed to start: out of GPU memory: 'CUDA out of memory'"),
                     {"summary": "ok"}])
    with pytest.raises(TaskFailed) as failure:
        deployer(host).deploy(new, live(Record(current=old.entry(), previous=None), old))
    message = str(failure.value)
    assert "out of GPU memory" in message and f"rolled back to release {old.id}" in message
    assert "passed the smoke checks" in message
    assert host.activated == [new.id, old.id]
    record = host.records[-1]
    assert record["current"]["id"] == old.id and record["last_failed"]["id"] == new.id
    assert "CUDA out of memory" in record["last_failed"]["reason"]


def test_a_release_that_systemd_cannot_start_is_rolled_back_too() -> None:
    old, new = release(), release(image="img:2")
    host = FakeHost([{"summary": "ok"}])
    run = host.run

    def refuse_new(script: str, payload: bytes | None) -> str:
        if "systemctl start" in script and new.id in script:
            raise CommandFailed(command="deploy vllm", exit_code=1, stderr="Job for vllm.service failed")
        return run(script, payload)

    with pytest.raises(TaskFailed, match=r"(?s)Job for vllm\.service failed.*rolled back to release"):
        Deployer(refuse_new, LAYOUT, host.verify).deploy(new, live(Record(current=old.entry()), old))
    assert host.activated == [old.id] and host.records[-1]["current"]["id"] == old.id


def test_when_the_rollback_fails_too_both_reasons_are_reported() -> None:
    old, new = release(), release(image="img:2")
    host = FakeHost([SmokeFailed("vision: wrong"), ServiceNotReady("not ready after 1200s")])
    with pytest.raises(TaskFailed, match=r"(?s)vision: wrong.*failed too: not ready after 1200s"):
        deployer(host).deploy(new, live(Record(current=old.entry()), old))


def test_a_failing_first_release_stops_the_service() -> None:
    host = FakeHost([SmokeFailed("text: HTTP 500")])
    with pytest.raises(TaskFailed, match=r"no earlier release to roll back to: stopped vllm\.service"):
        deployer(host).deploy(release(), live(Record()))
    assert host.stopped and host.records[-1]["current"] is None and host.records[-1]["last_failed"]


def test_restarting_the_current_release_is_not_rolled_back() -> None:
    current = release()
    host = FakeHost([ServiceNotReady("exited")])
    with pytest.raises(TaskFailed, match=r"^exited$"):
        deployer(host).deploy(current, live(Record(current=current.entry()), current, active="failed"))
    assert host.activated == [current.id] and host.records == []


def test_rollback_swaps_current_and_previous() -> None:
    old, new = release(), release(flag="3")
    host = FakeHost([{"summary": "ok"}])
    deployer(host).rollback(Record(current=new.entry(), previous=old.entry()))
    assert host.activated == [old.id]
    assert host.records[-1]["current"]["id"] == old.id and host.records[-1]["previous"]["id"] == new.id
    with pytest.raises(TaskFailed, match="no previous release"):
        deployer(FakeHost([])).rollback(Record(current=new.entry()))


def test_a_failed_rollback_starts_the_current_release_again() -> None:
    old, new = release(), release(flag="3")
    host = FakeHost([ServiceNotReady("old image gone"), {"summary": "ok"}])
    with pytest.raises(TaskFailed, match=f"(?s)old image gone.*release {new.id}.*serves again"):
        deployer(host).rollback(Record(current=new.entry(), previous=old.entry()))
    assert host.activated == [old.id, new.id] and host.records == []


@pytest.fixture
def shims(tmp_path: Path) -> Path:
    """systemctl and journalctl that only log their arguments (this machine runs no systemd)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("systemctl", "journalctl"):
        path = folder / tool
        path.write_text(f'#!/bin/sh\necho "{tool} $*" >> {tmp_path}/calls\n')
        path.chmod(0o755)
    return folder


def test_activation_stages_and_swaps_the_files_in_with_their_modes(tmp_path: Path, shims: Path) -> None:
    layout = Layout(name="vllm", env_file=str(tmp_path / "etc/vllm.env"), state_dir=str(tmp_path / "state"),
                    key_file="/etc/provision/vllm/api-key", unit_dir=str(tmp_path / "units"))
    new = release(key="k-secret")
    script = activate_script(layout, new.id, staged=True)
    assert "k-secret" not in script
    env = {"PATH": f"{shims}:{os.environ['PATH']}"}
    done = run_local(script, stage_payload(new), env)
    assert done.rc == 0, done.stderr
    assert (tmp_path / "units/vllm.service").read_text() == new.unit_text
    assert (tmp_path / "etc/vllm.env").read_text() == new.env_text
    assert stat.S_IMODE((tmp_path / "etc/vllm.env").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "state/releases" / new.id / "env").stat().st_mode) == 0o600
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c.split(" --", 1)[0] for c in calls if c.startswith("systemctl")] == [
        "systemctl stop", "systemctl daemon-reload", "systemctl enable", "systemctl reset-failed",
        "systemctl start", "systemctl show -p NRestarts"]
    # activating a kept release again needs no payload
    assert run_local(activate_script(layout, new.id, staged=False), None, env).rc == 0
    missing = run_local(activate_script(layout, "000000000000", staged=False), None, env)
    assert missing.rc == 1 and "the files of release 000000000000 are missing" in missing.stderr


def test_record_script_writes_the_record_and_prunes_unnamed_releases(tmp_path: Path) -> None:
    layout = Layout(name="vllm", env_file="/x", state_dir=str(tmp_path), key_file="/etc/provision/vllm/api-key")
    for release_id in ("aaa", "bbb", "ccc"):
        (tmp_path / "releases" / release_id).mkdir(parents=True)
    record = Record(current={"id": "aaa"}, previous={"id": "ccc"})
    done = run_local(record_script(layout, record.kept_ids()), record.text().encode())
    assert done.rc == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "releases").iterdir()) == ["aaa", "ccc"]
    assert json.loads((tmp_path / "release.json").read_text())["current"] == {"id": "aaa"}
