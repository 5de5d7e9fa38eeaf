"""`ini`: set (or remove) one `option=value` in a section of an INI-style file, e.g. systemd's
logind.conf `[Login] HandleLidSwitch=ignore`.

The first active assignment of the option in the section is replaced and later ones there are
removed (for systemd the last assignment wins, so a leftover duplicate would undo ours). A new
option goes right after the commented default (`#HandleLidSwitch=suspend`) when there is one, else
at the end of the section; a missing section is appended. `section: null` means the lines before
the first section header. Commented lines are never changed.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, model_validator

from provision.ops.base import OpArgs, Plan, register
from provision.ops.fields import AbsolutePath, FileMode
from provision.ops.filestate import FileEditOperation, FileState
from provision.ops.textedit import plan_line_edit

SECTION_HEADER = re.compile(r"^\s*\[([^\]]*)\]\s*$")


def _value_text(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("write the value as a quoted string (systemd wants yes/no, not a YAML boolean)")
    if isinstance(value, int | float):
        return str(value)
    return value


class IniArgs(OpArgs):
    path: AbsolutePath
    section: str | None
    option: str
    value: Annotated[str | None, BeforeValidator(_value_text)] = None
    state: Literal["present", "absent"] = "present"
    spaces_around_equals: bool = False
    create: bool = True
    owner: str | None = None
    group: str | None = None
    mode: FileMode = None

    @model_validator(mode="after")
    def _needs_value(self) -> IniArgs:
        if self.state == "present" and self.value is None:
            raise ValueError("state: present needs a value")
        return self


def section_bounds(lines: list[str], section: str | None) -> tuple[int, int] | None:
    """[start, end) of the section's body (after its header), or None when the section is missing."""
    start = 0 if section is None else None
    for index, line in enumerate(lines):
        header = SECTION_HEADER.match(line)
        if not header:
            continue
        if start is not None:
            return start, index
        if header.group(1).strip() == section:
            start = index + 1
    return (start, len(lines)) if start is not None else None


def edit_ini(lines: list[str], args: IniArgs) -> list[str]:
    """The lines after setting or removing the option."""
    option = re.escape(args.option)
    active = re.compile(rf"^\s*{option}\s*=")
    commented = re.compile(rf"^\s*[#;]\s*{option}\s*=")
    separator = " = " if args.spaces_around_equals else "="
    wanted = f"{args.option}{separator}{args.value}"
    bounds = section_bounds(lines, args.section)
    if bounds is None:
        if args.state == "absent":
            return lines
        spacer = [""] if lines and lines[-1].strip() else []
        return [*lines, *spacer, f"[{args.section}]", wanted]
    start, end = bounds
    body = lines[start:end]
    hits = [index for index, line in enumerate(body) if active.match(line)]
    if args.state == "absent":
        body = [line for index, line in enumerate(body) if index not in hits]
    elif hits:
        body = [wanted if index == hits[0] else line for index, line in enumerate(body) if index not in hits[1:]]
    else:
        defaults = [index for index, line in enumerate(body) if commented.match(line)]
        filled = [index for index, line in enumerate(body) if line.strip()]
        at = defaults[-1] + 1 if defaults else (filled[-1] + 1 if filled else 0)
        body = [*body[:at], wanted, *body[at:]]
    return [*lines[:start], *body, *lines[end:]]


@register
class IniOperation(FileEditOperation):
    name = "ini"
    Args = IniArgs

    def plan(self, args: IniArgs, facts: Any, current: FileState) -> Plan:
        where = f"[{args.section}] " if args.section else ""
        what = f"{where}{args.option}={args.value}" if args.state == "present" else f"remove {where}{args.option}"
        return plan_line_edit(current, args, lambda lines: edit_ini(lines, args), what)
