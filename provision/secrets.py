"""Secret values: they print as *** everywhere, and a redactor masks them in any text.

A Secret is created by the inventory loader for values tagged `!secret` / `!env`, or for keys whose
name says they are secret (token, password, api_key). Its str() is `***`; only `reveal()` gives the
value, and only code that writes it to the host (a template into a 0600 file) calls that.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

MASK = "***"
SECRET_KEY_PATTERN = re.compile(r"(token|password|passwd|secret|api_key|apikey)$", re.IGNORECASE)


class Secret:
    """A string value that never shows itself by accident."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = str(value)
        REDACTOR.add(self._value)

    def reveal(self) -> str:
        return self._value

    def __str__(self) -> str:
        return MASK

    def __repr__(self) -> str:
        return "Secret('***')"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __bool__(self) -> bool:
        return bool(self._value)

    def __len__(self) -> int:
        return len(self._value)


def is_secret_key(key: str) -> bool:
    """True for variable names that hold secrets by convention (hf_token, api_key, ...)."""
    return bool(SECRET_KEY_PATTERN.search(key))


class Redactor:
    """Masks every registered secret value in a text: the last line of defence for all output."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()

    def add(self, value: str) -> None:
        if len(value) >= 4:  # masking "a" or "" would shred every message
            with self._lock:
                self._values.add(value)

    def add_all(self, values: Iterable[str]) -> None:
        for value in values:
            self.add(value)

    def __call__(self, text: str) -> str:
        if not self._values or not text:
            return text
        for value in sorted(self._values, key=len, reverse=True):
            if value in text:
                text = text.replace(value, MASK)
        return text

    def touches(self, text: str) -> bool:
        """True when the text holds a secret, or a piece of one (4+ characters between the characters
        that shell or JSON quoting rewrites): for text about to be stored, where a quoted secret
        must not slip through as the plain masking would let it."""
        with self._lock:
            values = list(self._values)
        return any(piece in text for value in values for piece in QUOTED_APART.split(value) if len(piece) >= 4)


QUOTED_APART = re.compile(r"""['"\\$`!\s]+""")
REDACTOR = Redactor()


def reveal(value: object) -> object:
    """The plain value behind a Secret (recursively through lists and dicts); others unchanged."""
    if isinstance(value, Secret):
        return value.reveal()
    if isinstance(value, dict):
        return {k: reveal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [reveal(v) for v in value]
    return value
