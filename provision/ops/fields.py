"""Argument types shared by operations: validated and normalised when a task's arguments are read."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from provision.escape import control_character
from provision.ops.scripting import normalize_mode, require_absolute


def as_list(value: object) -> object:
    """Accept a single string where a list of strings is expected (`name: curl` or `name: [curl]`)."""
    return [value] if isinstance(value, str) else value


AbsolutePath = Annotated[str, AfterValidator(require_absolute)]
FileMode = Annotated[str | None, BeforeValidator(normalize_mode)]
StrList = Annotated[list[str], BeforeValidator(as_list)]


# a URL as curl and apt take it: a scheme (so never a leading `-`, which curl would read as an option),
# then no whitespace or control character (a line break in a sources file starts a new field)
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[^\s\x00-\x1f\x7f-\x9f]+")
# one word of an apt source's field (a suite, a component): no whitespace, no control character
DEB_WORD = re.compile(r"[^\s\x00-\x1f\x7f-\x9f-][^\s\x00-\x1f\x7f-\x9f]*")


def require_url(value: str) -> str:
    if not URL.fullmatch(value):
        raise ValueError(f"{value!r} is not a URL (scheme:..., no spaces or control characters)")
    return value


def require_deb_word(value: str) -> str:
    if not DEB_WORD.fullmatch(value):
        raise ValueError(f"{value!r} is not one word (no spaces or control characters, no leading '-')")
    return value


Url = Annotated[str, AfterValidator(require_url)]
UrlList = Annotated[list[Url], BeforeValidator(as_list)]
DebWordList = Annotated[list[Annotated[str, AfterValidator(require_deb_word)]], BeforeValidator(as_list)]


SHA256 = re.compile(r"[0-9a-f]{64}")


def relative_path_problem(path: str) -> str | None:
    """Why `path` cannot name a file inside a folder (a snapshot, a bundle), or None when it can."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(part in ("", ".", "..") for part in parts):
        return "not a relative path inside the folder"
    bad = control_character(path)
    return f"holds the control character {bad}" if bad else None
