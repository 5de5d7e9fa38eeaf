"""The upgrade guard: the release swap supervised on the host, so a lost controller still leaves a
serving endpoint.

Before an upgrade's swap the controller arms a guard (guard.sh as a transient systemd unit started
with systemd-run) with the two records it may have to write: the new release current (it became
healthy and passed the run's own smoke checks: smoke.py's script and requests, judged by
smoke_judge.py run with the host's python3) or the previous one back with the new one as
`last_failed`. The guard acts only when the run that armed it has released the run lock while
still armed, that is when the controller died or was cut off (see guard.sh); a run that finishes
writes its own record, which disarms it. A guard is armed only while a run lock is held (a run
without the lock cannot be told apart from a lost one). The record the guard writes carries a
`note`, which the next run reports.
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
from provision.vllm.smoke import judge_source, smoke_payload, smoke_requests, smoke_script

LOCK = "/var/lib/provision/run.lock"
GUARD_GRACE_S = 300  # beyond readiness and smoke: how long a silent controller is waited for
# filled in by guard.sh (sanitised): how the kept release was judged, why the new one was not kept
HOW_KEPT = "@GUARD_HOW@"
WHY_RESTORED = "@GUARD_WHY@"
DID = "@GUARD_DID@"  # restored, or left serving (the swap had not stopped the previous release)


def guard_script() -> str:
    return resources.files("provision.vllm").joinpath("guard.sh").read_text(encoding="utf-8")


@dataclass(frozen=True)
class UpgradeGuard:
    layout: Layout
    endpoint: Endpoint
    ready_timeout: float
    smoke_timeout: float
    vision: bool = True

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
                           f"the host's upgrade guard kept it ({HOW_KEPT})")
        reason = ("the run was cut off during the upgrade (controller killed or disconnected); the host's "
                  f"upgrade guard {DID} {describe_entry(current)} ({WHY_RESTORED})")
        restored = Record(current=current, previous=record.previous,
                          last_failed={**release.entry(), "reason": reason}, note=reason)
        return kept, restored

    def arm(self, release: Release, record: Record, current: dict[str, Any]) -> tuple[str, bytes]:
        """The script (and its payload) that arms the guard; it prints `guard=armed` or `guard=off`.
        The guard gets the run's own smoke checks: the same script, requests and judge."""
        kept, restored = self.records(release, record, current)
        names, bodies = smoke_requests(self.endpoint, self.vision)
        files = {"guard.sh": guard_script(), "record.pass.json": kept.text(), "record.fail.json": restored.text(),
                 "smoke.sh": smoke_script(self.endpoint, names, self.smoke_timeout),
                 "smoke.requests": smoke_payload(bodies).decode(), "smoke_judge.py": judge_source()}
        payload = b"".join(base64.b64encode(text.encode()) + b"\n" for text in files.values())
        folder, unit = quote(self.folder), quote(self.unit)
        env = {
            "GUARD_DIR": self.folder, "RECORD": self.layout.record_path, "LOCK": LOCK, "UNIT": self.layout.unit,
            "UNIT_PATH": self.layout.unit_path, "NEW_UNIT_SHA": sha256_text(release.unit_text),
            "HEALTH_URL": self.endpoint.url("/health"), "READY_TIMEOUT": str(int(self.ready_timeout)),
            "GIVE_UP_S": str(int(self.ready_timeout + self.smoke_timeout + GUARD_GRACE_S)),
            "NEW_DIR": self.layout.release_dir(release.id), "GUARD_UNIT": self.unit,
            "PREVIOUS_DIR": self.layout.release_dir(str(current["id"])), "ENV_PATH": self.layout.env_file,
            "KEY_PATH": self.layout.key_file, "SMOKE_VISION": "1" if self.vision else "",
        }
        setenv = " ".join(f"--setenv={quote(f'{key}={value}')}" for key, value in env.items())
        script = f"""if [ ! -e {quote(LOCK)} ] || flock -n {quote(LOCK)} true; then echo guard=off; exit 0; fi
umask 077
mkdir -p -- {folder}
for name in {" ".join(files)}; do
  IFS= read -r b64 <&3; printf '%s' "$b64" | base64 -d > {folder}/"$name"
done
chmod 0644 {folder}/record.pass.json {folder}/record.fail.json
touch {folder}/armed
systemctl stop -- {unit} 2>/dev/null || true
systemctl reset-failed -- {unit} 2>/dev/null || true
systemd-run --quiet --collect --unit={unit} --description='provision: upgrade guard of {self.layout.unit}' \\
  {setenv} /bin/bash {folder}/guard.sh
echo guard=armed
"""
        return script, payload
