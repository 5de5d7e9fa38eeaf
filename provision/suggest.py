"""The "did you mean 'X'?" hint for a misspelt key, group or host name (difflib's closest match)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice most like `word`, or None when nothing is close enough to be a likely typo."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean 'X'?)` for the closest choice, or "" when there is none."""
    match = closest(word, choices)
    return f" (did you mean '{match}'?)" if match else ""
