"""The plan shared by operations that edit a text file in place (lineinfile, ini, apt_components).

They read the whole file in the probe, compute the new text in Python, and rewrite the file
atomically only when the text (or an attribute) differs; the diff is of the text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from provision.errors import TaskFailed
from provision.ops.base import Plan
from provision.ops.filestate import FileState, attributes_plan, read_text_for_edit, write_file_command
from provision.ops.scripting import text_diff


def split_lines(text: str) -> list[str]:
    """Lines without their newlines; a final newline does not make an empty last line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def join_lines(lines: list[str]) -> str:
    return "".join(f"{line}\n" for line in lines)


def plan_text_edit(
    current: FileState, old_text: str, new_text: str, *, owner: str | None, group: str | None,
    mode: str | None, create: bool, what: str,
) -> Plan:
    """Plan for replacing a file's text `old_text` by `new_text` (described by `what`)."""
    if not current.exists and not create:
        raise TaskFailed(f"{current.path} does not exist (and create is false)")
    if current.exists and new_text == old_text:
        return attributes_plan(current, owner, group, mode, ok=f"{current.path} is up to date")
    return Plan(
        changed=True,
        steps=[write_file_command(current, new_text.encode(), owner=owner, group=group, mode=mode,
                                     description=f"edit {current.path}")],
        summary=f"{current.path}: {what}",
        diff=text_diff(current.path, old_text if current.exists else None, new_text),
    )


def plan_line_edit(current: FileState, args: Any, edit: Callable[[list[str]], list[str]], what: str) -> Plan:
    """Plan for editing `args.path` line by line (ini, lineinfile): `edit` turns its lines into the
    wanted ones; removing from an absent file is nothing to do. `args` has the edit operations' path,
    state, owner, group, mode and create."""
    old_text = read_text_for_edit(current)
    if args.state == "absent" and not current.exists:
        return Plan.ok(f"{args.path} is absent")
    lines = split_lines(old_text)
    edited = edit(lines)
    new_text = old_text if edited == lines else join_lines(edited)
    return plan_text_edit(current, old_text, new_text, owner=args.owner, group=args.group, mode=args.mode,
                          create=args.create, what=what)
