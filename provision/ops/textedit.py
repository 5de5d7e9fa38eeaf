"""The plan shared by operations that edit a text file in place (lineinfile, ini).

They read the whole file in the probe, compute the new text in Python, and rewrite the file
atomically only when the text (or an attribute) differs; the diff is of the text.
"""

from __future__ import annotations

from provision.errors import TaskFailed
from provision.ops.base import Plan
from provision.ops.filestate import FileState, attribute_changes, set_attributes_command, write_file_command
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
        changes = attribute_changes(current, owner, group, mode)
        if not changes:
            return Plan.ok(f"{current.path} is up to date")
        return Plan(
            changed=True,
            steps=[set_attributes_command(current.path, owner, group, mode)],
            summary=f"{current.path}: " + ", ".join(changes),
        )
    return Plan(
        changed=True,
        steps=[write_file_command(current, new_text.encode(), owner=owner, group=group, mode=mode,
                                     description=f"edit {current.path}")],
        summary=f"{current.path}: {what}",
        diff=text_diff(current.path, old_text if current.exists else None, new_text),
    )
