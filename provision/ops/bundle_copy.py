"""`bundle_copy`: files of an offline bundle on this machine copied to the host, resumable, verified.

Converged is every file at its final name with its size (a file is renamed there only after its
sha256 matched on the host), one `stat` per file. Otherwise each missing file is appended to its
`.part` from where the `.part` ends (SFTP, as the login user, into a folder that user owns), with
bytes and rate in the live view, then hashed on the host and renamed, owned by root. A copy cut off
at any moment resumes on the next run; a `.part` whose hash is wrong is removed and copied again.
"""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, field_validator

from provision.errors import TaskFailed
from provision.ops.base import Action, ApplyContext, ApplyResult, OpArgs, Operation, Plan, Probe, only_step, register
from provision.ops.fields import SHA256, AbsolutePath, relative_path_problem
from provision.ops.scripting import probe_block
from provision.ops.streaming import ProgressThrottle
from provision.ops.transfer_rate import TransferRate
from provision.shell import parse_records, quote

MIB = 1024 * 1024


class BundleFile(BaseModel):
    path: str
    size: int
    sha256: str

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        problem = relative_path_problem(value)
        if problem:
            raise ValueError(f"{value!r} is not a path inside the bundle: {problem}")
        return value

    @field_validator("sha256")
    @classmethod
    def _sha256(cls, value: str) -> str:
        if not SHA256.fullmatch(value):
            raise ValueError(f"sha256 {value!r} is not 64 lowercase hex digits")
        return value


class BundleCopyArgs(OpArgs):
    source: str  # the bundle folder on this machine
    dest: AbsolutePath
    files: list[BundleFile]


@dataclass(frozen=True)
class CopyFiles(Action):
    """Copy the missing files of the bundle folder `source` to `dest` on the host, each resumed after
    the bytes its `.part` already holds."""

    source: str
    dest: str
    missing: tuple[tuple[BundleFile, int], ...]  # (file, bytes already on the host)


def probe_script(args: BundleCopyArgs) -> str:
    lines = [f"d={quote(args.dest)}"]
    lines += [f'printf "have=%s\\t%s\\t%s\\n" {quote(f.path)} "$(stat -c %s -- "$d"/{quote(f.path)} '
              f'2>/dev/null)" "$(stat -c %s -- "$d"/{quote(f.path)}.part 2>/dev/null)"' for f in args.files]
    return "\n".join(lines)


def parse_sizes(expected: bool, output: str) -> dict[str, tuple[str, str]]:
    """path -> (size of the file, size of its `.part`), "" where absent; TaskFailed when files were
    asked about (`expected`) and none was answered."""
    have: dict[str, tuple[str, str]] = {}
    for record in parse_records(output, "have"):
        path, _, sizes = record.partition("\t")
        final, _, part = sizes.partition("\t")
        have[path] = (final, part)
    if expected and not have:
        raise TaskFailed(f"the bundle probe printed nothing usable: {output.strip()[:200]!r}")
    return have


def finish_script(dest: str, bundle_file: BundleFile) -> str:
    """Hash the copied `.part` on the host; rename it into place only when it is the bundle's."""
    final = quote(posixpath.join(dest, bundle_file.path))
    part = quote(posixpath.join(dest, bundle_file.path + ".part"))
    return f"""sum=$(sha256sum < {part} | cut -d' ' -f1)
if [ "$sum" != {quote(bundle_file.sha256)} ]; then
  rm -f -- {part}; echo "sha256 $sum, the bundle lists "{quote(bundle_file.sha256)} >&2; exit 1
fi
chown root:root -- {part} 2>/dev/null || true
mv -f -- {part} {final}"""


@register
class BundleCopyOperation(Operation):
    name = "bundle_copy"
    Args = BundleCopyArgs

    def probe(self, args: BundleCopyArgs) -> Probe[dict[str, tuple[str, str]]]:
        return Probe(probe_block(probe_script(args)), partial(parse_sizes, bool(args.files)))

    def plan(self, args: BundleCopyArgs, facts: Any, have: dict[str, tuple[str, str]]) -> Plan:
        missing = []
        for bundle_file in args.files:
            final, part = have.get(bundle_file.path, ("", ""))
            if final != str(bundle_file.size):
                started = int(part) if part.isdigit() and int(part) <= bundle_file.size else 0
                missing.append((bundle_file, started))
        total = sum(f.size for f in args.files)
        if not missing:
            return Plan.ok(f"{len(args.files)} files of the bundle on the host ({total / MIB:.1f} MiB)")
        needed = sum(f.size - started for f, started in missing)
        resumed = sum(started for _, started in missing)
        summary = (f"copy {len(missing)} of {len(args.files)} bundle files to {args.dest} ({needed / MIB:.1f} MiB"
                   + (f", resuming after {resumed / MIB:.1f} MiB" if resumed else "") + ")")
        return Plan(changed=True, summary=summary,
                    steps=[CopyFiles(f"{summary}: over SFTP into each .part, sha256-checked on the host, renamed",
                                     source=args.source, dest=args.dest, missing=tuple(missing))])

    def apply(self, ctx: ApplyContext, plan: Plan) -> ApplyResult:
        args = only_step(plan, CopyFiles)
        folders = sorted({posixpath.dirname(posixpath.join(args.dest, f.path)) for f, _ in args.missing})
        # the login user writes (SFTP); root owns the folders' files once verified
        made = ctx.conn.run("owner=${SUDO_USER:-root}\n" + "\n".join(
            f'install -d -m 0755 -o "$owner" -- {quote(folder)}' for folder in folders), sudo=True)
        if made.rc != 0:
            raise TaskFailed(f"cannot make the bundle folders under {args.dest}: {made.stderr.strip()[-300:]}")
        total = sum(f.size - started for f, started in args.missing)
        moved = {"bytes": 0}
        throttle = ProgressThrottle(ctx.progress, every=1.0)
        rate = TransferRate(time.monotonic)

        def advance(count: int) -> None:
            moved["bytes"] += count
            done = moved["bytes"]
            throttle(f"copying the bundle to {args.dest}: {done / MIB:.0f} of {total / MIB:.0f} MiB"
                     f"{rate.text(done)}", done, total)

        for bundle_file, started in args.missing:
            local = Path(args.source) / bundle_file.path
            if not local.is_file() or local.stat().st_size != bundle_file.size:
                raise TaskFailed(f"{local}: missing or not the size the bundle's manifest lists "
                                 f"({bundle_file.size} bytes)")
            ctx.conn.upload(local, posixpath.join(args.dest, bundle_file.path + ".part"), started, advance)
            done = ctx.conn.run(finish_script(args.dest, bundle_file), sudo=True)
            if done.rc != 0:
                raise TaskFailed(f"{bundle_file.path} copied to the host is not the bundle's "
                                 f"({done.stderr.strip()[-200:]}); removed, run again")
        return ApplyResult(changed=True)
