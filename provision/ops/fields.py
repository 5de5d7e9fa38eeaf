"""Argument types shared by operations: validated and normalised when a task's arguments are read."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from provision.ops.scripting import normalize_mode, require_absolute


def as_list(value: object) -> object:
    """Accept a single string where a list of strings is expected (`name: curl` or `name: [curl]`)."""
    return [value] if isinstance(value, str) else value


AbsolutePath = Annotated[str, AfterValidator(require_absolute)]
FileMode = Annotated[str | None, BeforeValidator(normalize_mode)]
StrList = Annotated[list[str], BeforeValidator(as_list)]
