"""`lineinfile`: make sure one line is in a text file (or is not), leaving the rest of the file alone.

present, with `regexp`: the last line matching it (re.search) becomes `line`; when none matches and
`line` is not already there, `line` is appended. present, without `regexp`: `line` is appended unless
already there. absent: every line matching `regexp` (or, without one, equal to `line`) is removed.
A missing file is created when `create` (the default) and a line is to be added.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import field_validator, model_validator

from provision.ops.base import OpArgs, Plan, register
from provision.ops.fields import AbsolutePath, FileMode
from provision.ops.filestate import FileEditOperation, FileState
from provision.ops.textedit import plan_line_edit
from provision.secrets import Secret


class LineInFileArgs(OpArgs):
    path: AbsolutePath
    line: str | Secret | None = None
    regexp: str | None = None
    state: Literal["present", "absent"] = "present"
    create: bool = True
    owner: str | None = None
    group: str | None = None
    mode: FileMode = None

    @field_validator("regexp")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as error:
                raise ValueError(f"regexp {value!r} does not compile: {error}") from error
        return value

    @model_validator(mode="after")
    def _needs_line(self) -> LineInFileArgs:
        if self.state == "present" and self.line is None:
            raise ValueError("state: present needs `line`")
        if self.state == "absent" and self.line is None and self.regexp is None:
            raise ValueError("state: absent needs `regexp` or `line`")
        if self.line is not None and "\n" in str(self.line_text):
            raise ValueError("`line` must be a single line")
        return self

    @property
    def line_text(self) -> str | None:
        return self.line.reveal() if isinstance(self.line, Secret) else self.line


def edit_lines(lines: list[str], args: LineInFileArgs) -> list[str]:
    """The lines after the edit the arguments ask for."""
    pattern = re.compile(args.regexp) if args.regexp is not None else None
    line = args.line_text
    if args.state == "absent":
        if pattern is not None:
            return [text for text in lines if not pattern.search(text)]
        return [text for text in lines if text != line]
    assert line is not None
    matches = [index for index, text in enumerate(lines) if pattern is not None and pattern.search(text)]
    if matches:
        edited = list(lines)
        edited[matches[-1]] = line
        return edited
    return lines if line in lines else [*lines, line]


@register
class LineInFileOperation(FileEditOperation):
    name = "lineinfile"
    Args = LineInFileArgs

    def plan(self, args: LineInFileArgs, facts: Any, current: FileState) -> Plan:
        what = "remove line" if args.state == "absent" else "set line"
        return plan_line_edit(current, args, lambda lines: edit_lines(lines, args), what)
