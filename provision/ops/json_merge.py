"""`json_merge`: merge settings into a JSON file (such as /etc/docker/daemon.json) without losing others.

Merge rules: objects merge key by key, recursively; lists become the union of the existing items (in
their order) followed by the new ones not already there (so `insecure-registries` gains an entry and
keeps the user's); any other value is replaced. Keys the task does not mention are never touched.
A missing (or empty) file counts as `{}`. A file that is not a JSON object is refused, quoted, rather
than overwritten. The file is rewritten (pretty-printed) only when the merged value differs.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import AliasChoices, Field

from provision.errors import TaskFailed
from provision.ops.base import OpArgs, Plan, register
from provision.ops.fields import AbsolutePath, FileMode
from provision.ops.filestate import (
    FileEditOperation,
    FileState,
    attributes_plan,
    read_text_for_edit,
    write_file_command,
)
from provision.ops.scripting import text_diff
from provision.secrets import REDACTOR, reveal

QUOTE_LINES = 20


class JsonMergeArgs(OpArgs):
    path: AbsolutePath
    # `data`, or `merge` (an accepted alias)
    data: dict[str, Any] = Field(validation_alias=AliasChoices("data", "merge"))
    owner: str | None = None
    group: str | None = None
    mode: FileMode = None


def merge_json(existing: Any, wanted: Any) -> Any:
    """`wanted` merged into `existing` by the rules in the module docstring (inputs are not modified)."""
    if isinstance(existing, dict) and isinstance(wanted, dict):
        merged = dict(existing)
        for key, value in wanted.items():
            merged[key] = merge_json(existing[key], value) if key in existing else value
        return merged
    if isinstance(existing, list) and isinstance(wanted, list):
        union = list(existing)
        for item in wanted:
            if item not in union:
                union.append(item)
        return union
    return wanted


def render_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _canonical(value: Any) -> str:
    # json text, not Python equality: True == 1 in Python, but not in the file
    return json.dumps(value, sort_keys=True)


def parse_json_object(path: str, text: str) -> dict[str, Any]:
    """The file's object; empty text is {}; anything else that is not an object is a TaskFailed."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise TaskFailed(
            f"{path} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}); "
            f"fix or remove it, it is not overwritten. It reads:\n{_quote(text)}"
        ) from error
    if not isinstance(value, dict):
        raise TaskFailed(f"{path} holds a JSON {type(value).__name__}, not an object. It reads:\n{_quote(text)}")
    return value


def _quote(text: str) -> str:
    lines = text.splitlines()
    more = [f"    ... ({len(lines) - QUOTE_LINES} more lines)"] if len(lines) > QUOTE_LINES else []
    return REDACTOR("\n".join([f"    {line}" for line in lines[:QUOTE_LINES]] + more))


@register
class JsonMergeOperation(FileEditOperation):
    name = "json_merge"
    Args = JsonMergeArgs

    def plan(self, args: JsonMergeArgs, facts: Any, current: FileState) -> Plan:
        existing = parse_json_object(current.path, read_text_for_edit(current))
        merged = merge_json(existing, reveal(args.data))
        if current.exists and _canonical(merged) == _canonical(existing):
            return attributes_plan(current, args.owner, args.group, args.mode,
                                   ok=f"{current.path} already has these settings")
        command = write_file_command(current, render_json(merged).encode(), owner=args.owner,
                                     group=args.group, mode=args.mode, description=f"merge into {current.path}")
        keys = ", ".join(key for key in args.data if _canonical(existing.get(key)) != _canonical(merged[key]))
        before = render_json(existing) if current.exists else None
        return Plan(
            changed=True,
            steps=[command],
            summary=f"{'update' if current.exists else 'create'} {current.path}" + (f": {keys}" if keys else ""),
            diff=text_diff(current.path, before, render_json(merged)),
        )
