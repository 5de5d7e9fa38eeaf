"""The upgrade guard's arming script and records (provision/vllm/guard.py); its behaviour on a real
host is tested in tests/e2e/faults/test_upgrade_guard.py (controller killed mid-swap)."""

from __future__ import annotations

import base64
import json
import subprocess

import pytest

from provision.vllm.endpoint import Endpoint
from provision.vllm.guard import UpgradeGuard, guard_script
from provision.vllm.release import Layout, Record, Release
from provision.vllm.smoke import judge_smoke, judge_source, smoke_payload, smoke_requests, smoke_script

LAYOUT = Layout(name="vllm", env_file="/etc/provision/vllm/vllm.env", state_dir="/var/lib/provision/vllm")
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
    assert "upgrade guard restored release" in restored_record.last_failed["reason"]
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
