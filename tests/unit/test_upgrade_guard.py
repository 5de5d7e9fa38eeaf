"""The upgrade guard's arming script and records (provision/vllm/guard.py); its behaviour on a real
host is tested in tests/e2e/faults/test_upgrade_guard.py (controller killed mid-swap)."""

from __future__ import annotations

import base64
import json
import subprocess

from provision.vllm.endpoint import Endpoint
from provision.vllm.guard import UpgradeGuard, guard_script
from provision.vllm.release import Layout, Record, Release

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
    guard, kept, restored = (base64.b64decode(line).decode() for line in payload.splitlines())
    assert guard == guard_script()
    kept_record, restored_record = Record.parse(kept), Record.parse(restored)
    assert kept_record.current["id"] == new.id and kept_record.previous["id"] == old.id
    assert "kept it" in kept_record.note
    assert restored_record.current["id"] == old.id and restored_record.last_failed["id"] == new.id
    assert "upgrade guard restored release" in restored_record.last_failed["reason"]
    assert "sk-secret-guard-key" not in script + kept + restored
    assert "systemd-run" in script and "provision-guard-vllm" in script
    assert f"PREVIOUS_DIR=/var/lib/provision/vllm/releases/{old.id}" in script
    assert script.startswith("if [ ! -e '/var/lib/provision/run.lock' ] || flock -n"), "no run lock held: no guard"
    assert json.loads(kept)["note"] and "note" not in json.loads(Record(current=old.entry()).text())
