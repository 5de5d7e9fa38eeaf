"""Releases: what a host serves, recorded on the host, deployed as a transaction, rolled back.

A release is the unit file and env file of a service plus what they were made from: the image (as
given and pinned by digest), the weights commit, the vLLM arguments. Its id is a hash of those, so
the same inputs give the same release. On the host (STATE = e.g. /var/lib/provision/vllm):
    STATE/release.json            {"current", "previous", "last_failed"}: ids, image, digest,
                                  weights, arguments, file hashes; no secrets
    STATE/releases/<id>/unit|env|key  each kept release's files (mode 0700 folder, env and key 0600)
`current` is the last release that passed readiness and the smoke checks; the record is written only
after that, so a run killed mid-deploy leaves a host whose next run deploys (and checks) again.
Only `current`, `previous` and `last_failed` keep their files.

Planning (pure) compares the desired release with the record and the live files and unit state:
nothing differs -> nothing to do (no restart); otherwise deploy. Deploying stops the service, swaps
the files in atomically, starts it, waits for readiness and runs the smoke checks; on failure of an
upgrade the previous release's files go back, it is started and checked again, and the failure is
reported with its reason.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from provision.errors import CommandFailed, TaskFailed
from provision.shell import parse_fields, quote
from provision.vllm.argv import fingerprint
from provision.vllm.readiness import StartMark

if TYPE_CHECKING:
    from provision.vllm.guard import UpgradeGuard

RECORD_VERSION = 1


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Layout:
    """Where a service's files live on the host."""

    name: str
    env_file: str
    state_dir: str
    key_file: str
    unit_dir: str = "/etc/systemd/system"  # where systemd reads administrator units (systemd.unit(5))

    @property
    def unit(self) -> str:
        return f"{self.name}.service"

    @property
    def unit_path(self) -> str:
        return posixpath.join(self.unit_dir, self.unit)

    @property
    def record_path(self) -> str:
        return posixpath.join(self.state_dir, "release.json")

    @property
    def bench_dir(self) -> str:
        """The office bench results kept per release (vllm/office_bench.py)."""
        return posixpath.join(self.state_dir, "bench")

    def release_dir(self, release_id: str) -> str:
        return posixpath.join(self.state_dir, "releases", release_id)


@dataclass(frozen=True)
class Release:
    """A deployable release. `key_text` is the API key (a root-only file the container mounts read-only):
    it makes part of the id, and is never recorded or shown."""

    image: str
    pinned_image: str
    weights: dict[str, str]
    arguments: list[str]
    unit_text: str
    env_text: str
    key_text: str = field(default="", repr=False)

    @property
    def id(self) -> str:
        material = "\0".join([self.unit_text, self.env_text, self.weights.get("commit", "")])
        if self.key_text:
            material += "\0" + self.key_text
        return hashlib.sha256(material.encode()).hexdigest()[:12]

    def entry(self) -> dict[str, Any]:
        """What the record keeps about this release (no secrets)."""
        return {"id": self.id, "image": self.image, "pinned_image": self.pinned_image,
                "weights": dict(self.weights), "arguments": list(self.arguments),
                "flags_fingerprint": fingerprint(self.arguments),
                "unit_sha256": sha256_text(self.unit_text), "env_sha256": sha256_text(self.env_text)}


@dataclass(frozen=True)
class Record:
    """release.json: the verified release, the one before it, and the last one that failed."""

    current: dict[str, Any] | None = None
    previous: dict[str, Any] | None = None
    last_failed: dict[str, Any] | None = None
    note: str | None = None  # what the host's upgrade guard did when a run was cut off (vllm/guard.py)

    @classmethod
    def parse(cls, text: str) -> Record:
        if not text.strip():
            return cls()
        try:
            data = json.loads(text)
        except ValueError as error:
            raise TaskFailed(f"the release record is not JSON ({error}); move it away to start over") from error
        if not isinstance(data, dict):
            raise TaskFailed("the release record is not a JSON object; move it away to start over")
        return cls(current=data.get("current"), previous=data.get("previous"), last_failed=data.get("last_failed"),
                   note=data.get("note"))

    def text(self) -> str:
        return json.dumps({"version": RECORD_VERSION, "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "current": self.current, "previous": self.previous, "last_failed": self.last_failed,
                           **({"note": self.note} if self.note else {})}, indent=2) + "\n"

    def kept_ids(self) -> list[str]:
        return [entry["id"] for entry in (self.current, self.previous, self.last_failed) if entry]


@dataclass(frozen=True)
class LiveState:
    """What the probe saw: the record, the live files' hashes (and the unit's text), the unit's state."""

    record: Record
    unit_sha256: str
    unit_text: str | None
    env_sha256: str
    active_state: str
    unit_file_state: str
    need_daemon_reload: bool
    key_sha256: str = ""

    @property
    def running(self) -> bool:
        return self.active_state in ("active", "activating", "reloading")


def state_probe(layout: Layout) -> str:
    """Bash printing what parse_live_state reads (the env file only by its hash: it holds secrets)."""
    return f"""rec={quote(layout.record_path)}; unit={quote(layout.unit_path)}; env={quote(layout.env_file)}
echo probed=1
[ -f "$rec" ] && echo "record=$(base64 -w0 < "$rec")"
[ -f "$unit" ] && echo "unit_sha256=$(sha256sum < "$unit" | cut -d' ' -f1)" && echo "unit_text=$(base64 -w0 < "$unit")"
[ -f "$env" ] && echo "env_sha256=$(sha256sum < "$env" | cut -d' ' -f1)"
[ -f {quote(layout.key_file)} ] && echo "key_sha256=$(sha256sum < {quote(layout.key_file)} | cut -d' ' -f1)"
systemctl show -p ActiveState -p UnitFileState -p NeedDaemonReload -- {quote(layout.unit)}
"""


def _decode(value: str) -> str | None:
    try:
        return base64.b64decode(value, validate=True).decode()
    except (binascii.Error, ValueError):
        return None


def parse_live_state(output: str) -> LiveState:
    fields = parse_fields(output)
    if "probed" not in fields:
        raise TaskFailed(f"the service state probe printed nothing usable: {output.strip()[:200]!r}")
    return LiveState(
        record=Record.parse(_decode(fields.get("record", "")) or ""),
        unit_sha256=fields.get("unit_sha256", ""),
        unit_text=_decode(fields["unit_text"]) if "unit_text" in fields else None,
        env_sha256=fields.get("env_sha256", ""),
        active_state=fields.get("ActiveState", "unknown (no systemd answer)"),
        unit_file_state=fields.get("UnitFileState", ""),
        need_daemon_reload=fields.get("NeedDaemonReload") == "yes",
        key_sha256=fields.get("key_sha256", ""),
    )


def describe_entry(entry: dict[str, Any]) -> str:
    """`release ab12cd34ef56 (image X, weights 1a2b3c4d5e6f)`."""
    commit = str((entry.get("weights") or {}).get("commit", ""))[:12] or "?"
    return f"release {entry.get('id')} (image {entry.get('image')}, weights {commit})"


def option_values(arguments: list[str]) -> dict[str, str]:
    """`[model, --a, 1, --b]` -> {"": "model", "--a": "1", "--b": ""} (for describing changes)."""
    options: dict[str, str] = {}
    key = ""
    for word in arguments:
        if word.startswith("--"):
            key = word
            options[key] = ""
        else:
            options[key] = f"{options.get(key, '')} {word}".strip()
    return options


def argument_changes(old: list[str], new: list[str]) -> str:
    """`--max-num-seqs 4 -> 3, add --enforce-eager, drop --enable-prefix-caching`: what a new argv changes."""
    before, after = option_values(old), option_values(new)
    changes = []
    for key, value in after.items():
        name = key or "model"
        if key not in before:
            changes.append(f"add {key} {value}".rstrip() if key else f"model {value}")
        elif before[key] != value:
            changes.append(f"{name} {before[key]} -> {value}")
    changes += [f"drop {key}" for key in before if key not in after]
    return "arguments " + ", ".join(changes)


def differences(desired: Release, live: LiveState) -> list[str]:
    """Why the host does not serve `desired` as it should; empty when it does (pure)."""
    current = live.record.current
    reasons = []
    if current is None:
        reasons.append("first release" if not live.record.last_failed else "no verified release yet")
    elif current.get("id") != desired.id:
        wanted = desired.entry()
        if current.get("pinned_image") != wanted["pinned_image"]:
            reasons.append(f"image {current.get('image')} -> {desired.image} ({desired.pinned_image})")
        if (current.get("weights") or {}).get("commit") != desired.weights.get("commit"):
            reasons.append(f"weights {(current.get('weights') or {}).get('commit', '?')[:12]} -> "
                           f"{desired.weights.get('commit', '?')[:12]}")
        if current.get("arguments") != wanted["arguments"]:
            reasons.append(argument_changes(list(current.get("arguments") or []), wanted["arguments"]))
        if current.get("env_sha256") != wanted["env_sha256"]:
            reasons.append("env file changed")
        if current.get("unit_sha256") != wanted["unit_sha256"] and len(reasons) == 0:
            reasons.append("unit settings changed")
        if not reasons:
            reasons.append("API key changed")
    else:
        if live.unit_sha256 != sha256_text(desired.unit_text):
            reasons.append("unit file edited on the host" if live.unit_sha256 else "unit file missing")
        if live.env_sha256 != sha256_text(desired.env_text):
            reasons.append("env file edited on the host" if live.env_sha256 else "env file missing")
        if desired.key_text and live.key_sha256 != sha256_text(desired.key_text):
            reasons.append("API key file edited on the host" if live.key_sha256 else "API key file missing")
    if not reasons:
        if live.need_daemon_reload:
            reasons.append("systemd has not loaded the unit file")
        if not live.running:
            reasons.append(f"service is {live.active_state or 'unknown'}")
        if live.unit_file_state not in ("enabled", "enabled-runtime"):
            reasons.append("service not enabled at boot")
    return reasons


Run = Callable[[str, bytes | None], str]


class Deployer:
    """Stages, activates, verifies and records releases on one host, through `run(script, payload)`.

    `verify(mark)` waits for readiness and runs the smoke checks (raising TaskFailed subclasses);
    it returns what the checks reported."""

    def __init__(self, run: Run, layout: Layout, verify: Callable[[StartMark], dict[str, Any]],
                 guard: UpgradeGuard | None = None) -> None:
        self.run = run
        self.layout = layout
        self.verify = verify
        self.guard = guard

    def stage_and_activate(self, release: Release | None, release_id: str) -> StartMark:
        """Write `release`'s files (when given) into its folder, then make release `release_id` live:
        stop, swap the files in, daemon-reload, enable, start. Returns the journal mark of the start."""
        output = self.run(activate_script(self.layout, release_id, staged=release is not None),
                          stage_payload(release) if release is not None else None)
        fields = parse_fields(output)
        restarts = fields.get("restarts", "")
        return StartMark(cursor=fields.get("cursor", ""), since=int(fields.get("since") or 0),
                         restarts=int(restarts) if restarts.isdigit() else 0)

    def write_record(self, record: Record) -> None:
        self.run(record_script(self.layout, record.kept_ids()), record.text().encode())

    def stop(self) -> None:
        self.run(f"systemctl stop -- {quote(self.layout.unit)} || true", None)

    def deploy(self, release: Release, live: LiveState) -> dict[str, Any]:
        """Make `release` serve, checked; roll back to the current release if it fails."""
        record = live.record
        current = record.current
        upgrade = current is not None and current.get("id") != release.id
        if upgrade and self.guard is not None and current is not None:
            self.run(*self.guard.arm(release, record, current))
        try:
            checks = self.verify(self.stage_and_activate(release, release.id))
        except (TaskFailed, CommandFailed) as failure:
            raise self._after_failure(release, record, str(failure), upgrade) from failure
        previous = current if upgrade else record.previous
        self.write_record(Record(current=release.entry(), previous=previous, last_failed=None))
        return checks

    def _after_failure(self, release: Release, record: Record, reason: str, upgrade: bool) -> TaskFailed:
        """Roll back what can be rolled back; the error to report (it says what was done)."""
        failed = {**release.entry(), "reason": reason}
        current = record.current
        if current is None:
            self.stop()
            self.write_record(Record(current=None, previous=record.previous, last_failed=failed))
            return TaskFailed(f"{reason}\nno earlier release to roll back to: stopped {self.layout.unit}")
        if not upgrade:
            return TaskFailed(reason)
        try:
            self.verify(self.stage_and_activate(None, current["id"]))
        except (TaskFailed, CommandFailed) as second:
            self.write_record(Record(current=current, previous=record.previous, last_failed=failed))
            return TaskFailed(f"upgrade to {describe_entry(failed)} failed: {reason}\n"
                              f"rolling back to {describe_entry(current)} failed too: {second}")
        self.write_record(Record(current=current, previous=record.previous, last_failed=failed))
        return TaskFailed(f"upgrade to {describe_entry(failed)} failed: {reason}\n"
                          f"rolled back to {describe_entry(current)}: it serves again and passed the smoke checks")

    def rollback(self, record: Record) -> dict[str, Any]:
        """Make the previous release current again (checked); on failure go back to the current one."""
        if record.previous is None:
            raise TaskFailed("there is no previous release to roll back to")
        current, previous = record.current, record.previous
        try:
            checks = self.verify(self.stage_and_activate(None, previous["id"]))
        except (TaskFailed, CommandFailed) as failure:
            message = f"rolling back to {describe_entry(previous)} failed: {failure}"
            if current is None:
                raise TaskFailed(message) from failure
            try:
                self.verify(self.stage_and_activate(None, current["id"]))
            except (TaskFailed, CommandFailed) as second:
                raise TaskFailed(f"{message}\nand {describe_entry(current)} failed too: {second}") from second
            raise TaskFailed(f"{message}\n{describe_entry(current)} serves again") from failure
        self.write_record(Record(current=previous, previous=current, last_failed=record.last_failed))
        return checks


def stage_payload(release: Release) -> bytes:
    """The unit, env and key texts, base64, one a line (what activate_script reads from fd 3)."""
    return b"".join(base64.b64encode(text.encode()) + b"\n"
                    for text in (release.unit_text, release.env_text, release.key_text))


def activate_script(layout: Layout, release_id: str, staged: bool) -> str:
    """Bash: (stage the payload as release `release_id`), stop, swap files in, reload, enable, start.
    Prints `cursor=` (the journal before the start), `since=` and `restarts=`."""
    rel = quote(layout.release_dir(release_id))
    unit_dir, unit_path, unit = quote(layout.unit_dir), quote(layout.unit_path), quote(layout.unit)
    env_path, env_dir = quote(layout.env_file), quote(posixpath.dirname(layout.env_file))
    key_path, key_dir = quote(layout.key_file), quote(posixpath.dirname(layout.key_file))
    stage = f"""umask 077
mkdir -p -- {rel}
{{ IFS= read -r unit_b64; IFS= read -r env_b64; IFS= read -r key_b64 || true; }} <&3
printf '%s' "$unit_b64" | base64 -d > {rel}/unit.tmp && mv -f -- {rel}/unit.tmp {rel}/unit
printf '%s' "$env_b64" | base64 -d > {rel}/env.tmp && mv -f -- {rel}/env.tmp {rel}/env
printf '%s' "${{key_b64:-}}" | base64 -d > {rel}/key.tmp && mv -f -- {rel}/key.tmp {rel}/key
unset env_b64 key_b64
umask 022
""" if staged else ""
    missing = f"the files of release {release_id} are missing in {layout.release_dir(release_id)}"
    return f"""{stage}[ -f {rel}/unit ] && [ -f {rel}/env ] || {{ echo {quote(missing)} >&2; exit 1; }}
systemctl stop -- {unit} 2>/dev/null || true
mkdir -p -- {unit_dir} {env_dir}
tmp=$(mktemp -- {unit_dir}/.{layout.unit}.XXXXXX)
cat {rel}/unit > "$tmp"; chmod 0644 "$tmp"; mv -f -- "$tmp" {unit_path}
tmp=$(mktemp -- {env_dir}/.env.XXXXXX)
chmod 0600 "$tmp"; cat {rel}/env > "$tmp"; mv -f -- "$tmp" {env_path}
if [ -s {rel}/key ]; then
  mkdir -p -- {key_dir}
  tmp=$(mktemp -- {key_dir}/.key.XXXXXX)
  chmod 0600 "$tmp"; cat {rel}/key > "$tmp"; mv -f -- "$tmp" {key_path}
fi
systemctl daemon-reload
systemctl enable --quiet -- {unit}
systemctl reset-failed -- {unit} 2>/dev/null || true
echo "cursor=$(journalctl -u {unit} -n 1 --show-cursor -o cat --no-pager 2>/dev/null | sed -n 's/^-- cursor: //p')"
echo "since=$(date +%s)"
systemctl start -- {unit}
echo "restarts=$(systemctl show -p NRestarts --value -- {unit})"
"""


def record_script(layout: Layout, keep: list[str]) -> str:
    """Bash: write the record (payload on fd 3) atomically, which disarms the upgrade guard; delete
    release folders no entry names."""
    state, record = quote(layout.state_dir), quote(layout.record_path)
    kept = " ".join(quote(release_id) for release_id in keep)
    return f"""mkdir -p -- {state}/releases
tmp=$(mktemp -- {state}/.release.json.XXXXXX); cat <&3 > "$tmp"; chmod 0644 "$tmp"; mv -f -- "$tmp" {record}
rm -f -- {state}/guard/armed
for dir in {state}/releases/*/; do
  [ -d "$dir" ] || continue
  id=$(basename "$dir"); keep=''
  for k in {kept or "''"}; do [ "$id" = "$k" ] && keep=1; done
  [ -n "$keep" ] || rm -rf -- "$dir"
done
"""
