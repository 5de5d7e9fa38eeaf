"""`directory`: a directory with its owner, group and mode, or its absence (with everything in it).

Removal first renames the directory aside in one step (so the path is gone atomically, even if the
run is killed while deleting), then deletes it. Paths directly under / are refused for removal;
a symlink given as the path is removed itself, never the directory it points to.
"""

from __future__ import annotations

import posixpath
from typing import Any, Literal

from pydantic import model_validator

from provision.errors import TaskFailed
from provision.ops.base import OpArgs, Operation, Plan, Probe, register
from provision.ops.fields import AbsolutePath, FileMode
from provision.ops.filestate import FileState, attributes_plan, file_state_probe
from provision.ops.scripting import chown_spec
from provision.shell import Command, quote


class DirectoryArgs(OpArgs):
    path: AbsolutePath
    owner: str | None = None
    group: str | None = None
    mode: FileMode = None
    state: Literal["present", "absent"] = "present"

    @model_validator(mode="after")
    def _refuse_removing_top_level(self) -> DirectoryArgs:
        if self.state == "absent" and self.path.count("/") < 2:
            raise ValueError(f"refusing to remove {self.path!r}: a top-level directory")
        return self


@register
class DirectoryOperation(Operation):
    name = "directory"
    Args = DirectoryArgs

    def probe(self, args: DirectoryArgs) -> Probe[FileState]:
        return file_state_probe(args.path, want_content=False)

    def plan(self, args: DirectoryArgs, facts: Any, current: FileState) -> Plan:
        if current.kind in ("file", "other"):
            raise TaskFailed(f"{current.path} exists and is not a directory ({current.kind})")
        if args.state == "absent":
            if not current.exists:
                return Plan.ok(f"{args.path} is absent")
            return Plan(changed=True, steps=[self._remove(args.path)], summary=f"remove {args.path}")
        if not current.exists:
            return Plan(changed=True, steps=[self._create(args)], summary=f"create {args.path}")
        return attributes_plan(current, args.owner, args.group, args.mode, ok=f"{current.path} is up to date")

    def _create(self, args: DirectoryArgs) -> Command:
        lines = [f"umask 022; mkdir -p -- {quote(args.path)}"]
        spec = chown_spec(args.owner, args.group)
        if spec:
            lines.append(f"chown -- {quote(spec)} {quote(args.path)}")
        if args.mode:
            lines.append(f"chmod -- {quote(args.mode)} {quote(args.path)}")
        return Command(script="\n".join(lines), description=f"create {args.path}")

    def _remove(self, path: str) -> Command:
        parent, base = posixpath.split(path)
        trash = quote(f"{parent}/.{base}.provision-removed-XXXXXX")
        script = f'trash=$(mktemp -d -- {trash})\nmv -- {quote(path)} "$trash/"\nrm -rf -- "$trash"'
        return Command(script=script, description=f"remove {path}")
