"""The upgrade guard's arming script and records (provision/vllm/guard.py); its behaviour on a real
host is tested in tests/e2e/faults/test_upgrade_guard.py (controller killed mid-swap)."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path

import pytest

from provision.shell import quote
from provision.vllm.endpoint import Endpoint
from provision.vllm.guard import UpgradeGuard, guard_script
from provision.vllm.release import Layout, Record, Release, sha256_text
from provision.vllm.smoke import judge_smoke, judge_source, smoke_payload, smoke_requests, smoke_script

LAYOUT = Layout(name="vllm", env_file="/etc/provision/vllm/vllm.env", state_dir="/var/lib/provision/vllm",
                key_file="/etc/provision/vllm/api-key")
GUARD = UpgradeGuard(LAYOUT, Endpoint("vllm", 8000, "/etc/provision/vllm/api-key", "w"), 600, 300)


def release(flag: str) -> Release:
    return Release(image="img:1", pinned_image="img@sha256:1111", weights={"commit": "c" * 40},
                   arguments=["m", "--max-num-seqs", flag], unit_text=f"[Service]\nExecStart=run {flag}\n",
                   env_text="HF_HUB_OFFLINE=1\n", key_text="sk-secret-guard-key")


def test_the_guard_carries_both_outcomes_and_no_secret():
    old, new = release("4"), release("3")
    record = Record(current=old.entry())
    script, payload = GUARD.arm(new, record, old.entry())
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    subprocess.run(["bash", "-n"], input=guard_script(), text=True, check=True)
    guard, kept, restored, smoke, requests, judge = (base64.b64decode(line).decode()
                                                      for line in payload.splitlines())
    assert guard == guard_script()
    # the run's own checks, written once: the same script, requests and judging code
    names, bodies = smoke_requests(GUARD.endpoint, vision=True)
    assert smoke == smoke_script(GUARD.endpoint, names, 300) and requests.encode() == smoke_payload(bodies)
    assert judge == judge_source() and "image_url" in requests
    kept_record, restored_record = Record.parse(kept), Record.parse(restored)
    assert kept_record.current["id"] == new.id and kept_record.previous["id"] == old.id
    assert "kept it (@GUARD_HOW@)" in kept_record.note
    assert restored_record.current["id"] == old.id and restored_record.last_failed["id"] == new.id
    assert "upgrade guard @GUARD_DID@ release" in restored_record.last_failed["reason"]
    assert "sk-secret-guard-key" not in script + kept + restored
    assert "systemd-run" in script and "provision-guard-vllm" in script
    assert f"PREVIOUS_DIR=/var/lib/provision/vllm/releases/{old.id}" in script
    assert script.startswith("if [ ! -e '/var/lib/provision/run.lock' ] || flock -n"), "no run lock held: no guard"
    assert json.loads(kept)["note"] and "note" not in json.loads(Record(current=old.entry()).text())


def completion_fields(name: str, content: str) -> str:
    body = json.dumps({"choices": [{"message": {"content": content}, "finish_reason": "stop"}],
                       "usage": {"completion_tokens": 2}})
    return f"{name}_status=200\n{name}_time=0.1\n{name}_body={base64.b64encode(body.encode()).decode()}\n"


@pytest.mark.parametrize("vision_answer, passes", [("Red.", True), ("Blue.", False)])
def test_the_judge_the_guard_runs_on_the_host_judges_as_the_controller_does(tmp_path, vision_answer, passes):
    """guard.sh runs smoke_judge.py as a file with python3 (no provision package there)."""
    judge = tmp_path / "smoke_judge.py"
    judge.write_text(judge_source())
    fields = completion_fields("text", "GPUs render and compute.") + completion_fields("vision", vision_answer)
    done = subprocess.run(["python3", "-I", str(judge), "--vision"], input=fields, capture_output=True, text=True,
                          cwd=tmp_path)
    assert (done.returncode == 0) == passes == judge_smoke(fields, vision=True).ok, done.stderr
    if not passes:
        assert done.stdout.strip() == judge_smoke(fields, vision=True).failure()
        assert "does not contain 'red'" in done.stdout


def test_the_guard_fills_in_how_it_judged_without_breaking_the_record(tmp_path):
    """guard.sh's fill(): quotes, backslashes and newlines of a failure text cannot break the JSON."""
    record = tmp_path / "record.json"
    record.write_text(json.dumps({"note": "restored (@GUARD_WHY@)"}))
    fill = guard_script().split("fill() {", 1)[1].split("\n}\n", 1)[0]
    script = f"fill() {{{fill}\n}}\nfill {record} @GUARD_WHY@ \"$1\""
    subprocess.run(["bash", "-c", script, "guard", 'vision: the answer "Blue\\" & | \nno'], check=True)
    assert json.loads(record.read_text())["note"] == "restored (vision: the answer Blue no)"


# guard.sh run here as root's bash would run it on a host, with stand-ins for what a host has and this
# machine has not: systemctl (its unit states in files) and curl (the endpoint answers once started);
# the same guard against real systemd, docker and the stand-in vLLM: tests/e2e/faults/test_upgrade_guard.py
SYSTEMCTL = """#!/bin/bash
echo "$*" >> "$HOST/calls"
verb=$1; [ "$verb" = --quiet ] && verb=$2
case "$verb" in
  is-active) cat "$HOST/state"; [ "$(cat "$HOST/state")" = active ];;
  is-failed) [ "$(cat "$HOST/state")" = failed ];;
  start) echo active > "$HOST/state"; cp "$HOST/unit" "$HOST/running";;
  stop) echo inactive > "$HOST/state"; rm -f "$HOST/running";;
  *) exit 0;;
esac
"""
CURL = """#!/bin/bash
# 200 once a unit runs that is the new release's (the stand-in serves only what was started)
if [ -e "$HOST/running" ] && grep -q 'run 3' "$HOST/running"; then printf 200; else printf 000; fi
"""


def guard_host(tmp_path, unit: str, state: str) -> tuple[dict[str, str], Release, Release]:
    """A host where an upgrade from release "4" to "3" was cut off: the live unit is `unit` ("old" or
    "new"), in systemd state `state`; both releases staged; the guard armed."""
    old, new = release("4"), release("3")
    kept, restored = GUARD.records(new, Record(current=old.entry()), old.entry())
    folders = {name: tmp_path / name for name in ("bin", "guard", "releases/old", "releases/new", "etc")}
    for folder in folders.values():
        folder.mkdir(parents=True)
    for folder, staged in ((folders["releases/old"], old), (folders["releases/new"], new)):
        (folder / "unit").write_text(staged.unit_text)
        (folder / "env").write_text(staged.env_text)
        (folder / "key").write_text(staged.key_text)
    (tmp_path / "unit").write_text((new if unit == "new" else old).unit_text)
    (tmp_path / "state").write_text(state + "\n")
    if state == "active":
        (tmp_path / "running").write_text((tmp_path / "unit").read_text())
    for name, text in (("systemctl", SYSTEMCTL), ("curl", CURL)):
        (folders["bin"] / name).write_text(text)
        (folders["bin"] / name).chmod(0o755)
    guard = folders["guard"]
    (guard / "armed").touch()
    (guard / "record.pass.json").write_text(kept.text())
    (guard / "record.fail.json").write_text(restored.text())
    (guard / "smoke.sh").write_text(f"printf %s {quote(completion_fields('text', 'GPUs render and compute.'))}\n")
    (guard / "smoke.requests").write_text("")
    (guard / "smoke_judge.py").write_text(judge_source())
    env = {"PATH": f"{folders['bin']}:/usr/bin:/bin", "HOST": str(tmp_path), "GUARD_DIR": str(guard),
           "GUARD_UNIT": GUARD.unit, "RECORD": str(tmp_path / "release.json"), "LOCK": str(tmp_path / "run.lock"),
           "UNIT": "vllm.service", "UNIT_PATH": str(tmp_path / "unit"), "NEW_UNIT_SHA": sha256_text(new.unit_text),
           "HEALTH_URL": "http://127.0.0.1:8000/health", "READY_TIMEOUT": "6", "GIVE_UP_S": "60",
           "NEW_DIR": str(folders["releases/new"]), "PREVIOUS_DIR": str(folders["releases/old"]),
           "ENV_PATH": str(folders["etc"] / "vllm.env"), "KEY_PATH": str(folders["etc"] / "api-key"),
           "SMOKE_VISION": ""}
    return env, old, new


def run_guard(env: dict[str, str]) -> tuple[float, Record, list[str]]:
    started = time.monotonic()
    subprocess.run(["bash", "-c", guard_script()], env=env, check=True, capture_output=True, timeout=60)
    calls = (Path(env["HOST"]) / "calls").read_text().splitlines()
    return time.monotonic() - started, Record.parse(Path(env["RECORD"]).read_text()), calls


def test_the_guard_starts_a_new_release_the_swap_left_stopped(tmp_path):
    """Before: the guard only waited for /health, which a release never started cannot answer: the
    model was down for the whole ready timeout (302 s in the lab, 1200 s by default), then the old
    release came back with "did not answer /health within 300s"."""
    env, _, new = guard_host(tmp_path, unit="new", state="inactive")
    took, record, calls = run_guard(env)
    assert "start --no-block -- vllm.service" in calls
    assert record.current["id"] == new.id and record.last_failed is None
    assert "cut off before the new release started; the guard started it" in record.note
    assert took < 5, f"{took:.1f} s: the guard waited instead of starting the release"
    assert (tmp_path / "etc/vllm.env").read_text() == new.env_text, "the swap finished from the staged files"


def test_cut_off_before_the_stop_the_previous_release_is_left_serving(tmp_path):
    env, old, new = guard_host(tmp_path, unit="old", state="active")
    took, record, calls = run_guard(env)
    assert not [call for call in calls if call.startswith(("stop", "start"))], calls
    assert record.current["id"] == old.id and record.last_failed["id"] == new.id
    reason = record.last_failed["reason"]
    assert "the new release never started" in reason and f"guard left serving release {old.id}" in reason
    assert took < 5


def test_cut_off_after_the_stop_before_the_new_unit_the_previous_comes_back_at_once(tmp_path):
    env, old, _ = guard_host(tmp_path, unit="old", state="inactive")
    took, record, calls = run_guard(env)
    assert "start -- vllm.service" in calls and record.current["id"] == old.id
    reason = record.last_failed["reason"]
    assert f"guard restored release {old.id}" in reason and "the new release never started" in reason
    assert took < 5, f"{took:.1f} s: the guard waited for a release that was never started"
