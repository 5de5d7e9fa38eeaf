"""The upgrade guard: the release swap supervised on the host, so a lost controller still leaves a
serving endpoint.

Before an upgrade's swap the controller arms a guard (guard.sh as a transient systemd unit started
with systemd-run) with the two records it may have to write: the new release current (it became
healthy) or the previous one back with the new one as `last_failed`. The guard acts only when the
run that armed it has released the run lock while still armed, that is when the controller died or
was cut off (see guard.sh); a run that finishes writes its own record, which disarms it. A guard is
armed only while a run lock is held (a run without the lock cannot be told apart from a lost one).
The record the guard writes carries a `note`, which the next run reports.
"""

from __future__ import annotations

import base64
import posixpath
from dataclasses import dataclass
from importlib import resources
from typing import Any

from provision.shell import quote
from provision.vllm.endpoint import Endpoint
from provision.vllm.release import Layout, Record, Release, describe_entry, sha256_text

LOCK = "/var/lib/provision/run.lock"
GUARD_GRACE_S = 300  # beyond readiness and smoke: how long a silent controller is waited for


def guard_script() -> str:
    return resources.files("provision.vllm").joinpath("guard.sh").read_text(encoding="utf-8")


@dataclass(frozen=True)
class UpgradeGuard:
    layout: Layout
    endpoint: Endpoint
    ready_timeout: float
    smoke_timeout: float

    @property
    def unit(self) -> str:
        return f"provision-guard-{self.layout.name}"

    @property
    def folder(self) -> str:
        return posixpath.join(self.layout.state_dir, "guard")

    def records(self, release: Release, record: Record, current: dict[str, Any]) -> tuple[Record, Record]:
        """(kept: the new release is current; restored: the previous one is, the new one failed)."""
        kept = Record(current=release.entry(), previous=current, last_failed=None,
                      note=f"the last run was cut off during the upgrade to {describe_entry(release.entry())}; "
                           "the host's upgrade guard kept it (it became healthy; the smoke checks did not run)")
        reason = ("the run was cut off during the upgrade (controller killed or disconnected); the host's "
                  f"upgrade guard restored {describe_entry(current)}")
        restored = Record(current=current, previous=record.previous,
                          last_failed={**release.entry(), "reason": reason}, note=reason)
        return kept, restored

    def arm(self, release: Release, record: Record, current: dict[str, Any]) -> tuple[str, bytes]:
        """The script (and its payload) that arms the guard; it prints `guard=armed` or `guard=off`."""
        kept, restored = self.records(release, record, current)
        payload = b"".join(base64.b64encode(text.encode()) + b"\n"
                           for text in (guard_script(), kept.text(), restored.text()))
        folder, unit = quote(self.folder), quote(self.unit)
        env = {
            "GUARD_DIR": self.folder, "RECORD": self.layout.record_path, "LOCK": LOCK, "UNIT": self.layout.unit,
            "UNIT_PATH": self.layout.unit_path, "NEW_UNIT_SHA": sha256_text(release.unit_text),
            "HEALTH_URL": self.endpoint.url("/health"), "READY_TIMEOUT": str(int(self.ready_timeout)),
            "GIVE_UP_S": str(int(self.ready_timeout + self.smoke_timeout + GUARD_GRACE_S)),
            "PREVIOUS_DIR": self.layout.release_dir(str(current["id"])), "ENV_PATH": self.layout.env_file,
            "KEY_PATH": self.layout.key_file,
        }
        setenv = " ".join(f"--setenv={quote(f'{key}={value}')}" for key, value in env.items())
        script = f"""if [ ! -e {quote(LOCK)} ] || flock -n {quote(LOCK)} true; then echo guard=off; exit 0; fi
umask 077
mkdir -p -- {folder}
{{ IFS= read -r script_b64; IFS= read -r kept_b64; IFS= read -r restored_b64; }} <&3
printf '%s' "$script_b64" | base64 -d > {folder}/guard.sh
printf '%s' "$kept_b64" | base64 -d > {folder}/record.pass.json
printf '%s' "$restored_b64" | base64 -d > {folder}/record.fail.json
chmod 0644 {folder}/record.pass.json {folder}/record.fail.json
touch {folder}/armed
systemctl stop -- {unit} 2>/dev/null || true
systemctl reset-failed -- {unit} 2>/dev/null || true
systemd-run --quiet --collect --unit={unit} --description='provision: upgrade guard of {self.layout.unit}' \\
  {setenv} /bin/bash {folder}/guard.sh
echo guard=armed
"""
        return script, payload
