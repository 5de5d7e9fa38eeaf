"""Secret values: they print as *** everywhere, and a redactor masks them in any text or document.

A Secret is created by the inventory loader for values tagged `!secret` / `!env`, or for keys whose
name says they are secret (token, password, api_key). Its str() is `***`; only `reveal()` gives the
value, and only code that writes it to the host (a template into a 0600 file) calls that.

The redactor knows every secret value and masks it in each form it takes on the way to a host or a
screen: as is, JSON-escaped, shell-quoted (inside single or double quotes), Python's repr,
percent-encoded, and base64 (standard and URL-safe, at each of the three byte alignments it can
have inside a longer encoded text, as a probe's `base64 -w0` of a whole file gives). A document
(the --json results, `vars`, `render`) is walked and masked BEFORE it is encoded, so no encoding
can hide a value from it.

Short secrets (under MIN_ANYWHERE characters) are masked too, but only as a whole token (not next
to a letter, digit or `_`) or a whole value in a document: masking a 2-character password inside
every word that holds those two letters would shred every message and give the secret away by
where the holes are; a lone token (`password=ab`, `"ab"`, its base64 `YWI=`) is where a secret
actually stands. The price: a 1-character secret masks that lone letter everywhere (`a host`).
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote as url_quote
from urllib.parse import quote_plus

MASK = "***"
SECRET_KEY_PATTERN = re.compile(r"(token|password|passwd|secret|api_key|apikey)$", re.IGNORECASE)
MIN_ANYWHERE = 4  # a secret this long is masked wherever it appears; a shorter one as a whole token
# A probe snippet that starts with this line prints a secret (runner/probe.py labels its output
# section so): a -vv trace or an error shows that section as hidden, before the value is even known
SECRET_PROBE = ": provision-secret-output\n"
SECRET_SECTION = re.compile(r"^@@\S+ \d+ secret$")
ANY_SECTION = re.compile(r"^@@\S+ ")


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


def base64_pieces(value: str) -> set[str]:
    """The base64 text that `value`'s bytes alone decide, at each of the 3 offsets (mod 3) it can sit
    at in a longer encoded stream, standard and URL-safe; and the whole value's own encoding."""
    data = value.encode()
    pieces = {base64.b64encode(data).decode()}
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + data).decode().rstrip("=")
        start, end = -(-8 * offset // 6), 8 * (offset + len(data)) // 6  # characters of value's bits only
        pieces.add(encoded[start:end])
    pieces |= {piece.replace("+", "-").replace("/", "_") for piece in pieces}
    return {piece for piece in pieces if piece}


def wire_forms(value: str) -> set[str]:
    """Every form of `value` the redactor masks: the value, its escapes and its encodings."""
    forms = {
        value,
        json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1],
        value.replace("'", "'\"'\"'"), value.replace("'", "'\\''"),  # inside '...' (provision.shell.quote)
        re.sub(r'([\\"$`])', r"\\\1", value),  # inside "..."
        repr(value)[1:-1],
        url_quote(value, safe=""), quote_plus(value),
    }
    return {form for form in forms | base64_pieces(value) if form}


class Redactor:
    """Masks every registered secret value in a text or a document: the last line of defence for all
    output."""

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._lock = threading.Lock()
        self._pattern: re.Pattern[str] | None = None

    def add(self, value: str) -> None:
        if not value:
            return
        with self._lock:
            if value not in self._values:
                self._values.add(value)
                self._pattern = None

    def add_all(self, values: Iterable[str]) -> None:
        for value in values:
            self.add(value)

    def _compiled(self) -> re.Pattern[str] | None:
        with self._lock:
            if self._pattern is None and self._values:
                anywhere: set[str] = set()
                tokens: set[str] = set()
                for value in self._values:
                    if len(value) >= MIN_ANYWHERE:
                        anywhere |= {form for form in wire_forms(value) if len(form) >= MIN_ANYWHERE}
                    else:
                        tokens |= {value, base64.b64encode(value.encode()).decode(), json.dumps(value)[1:-1]}
                alternatives = [re.escape(form) for form in sorted(anywhere, key=len, reverse=True)]
                if tokens:
                    words = "|".join(re.escape(form) for form in sorted(tokens, key=len, reverse=True))
                    alternatives.append(rf"(?<!\w)(?:{words})(?!\w)")
                self._pattern = re.compile("|".join(alternatives))
            return self._pattern

    def __call__(self, text: str) -> str:
        if not text or not self._values:
            return text
        pattern = self._compiled()
        return pattern.sub(MASK, text) if pattern else text

    def document(self, value: Any) -> Any:
        """A copy of a document (dicts, lists, strings) with every secret masked, before it is encoded
        (JSON, YAML, a table): a string that is a secret becomes `***`, any other is masked as text;
        an object JSON cannot hold is masked as its str()."""
        if isinstance(value, Secret):
            return MASK
        if isinstance(value, str):
            return MASK if value in self._values else self(value)
        if isinstance(value, dict):
            return {self.document(key) if isinstance(key, str) else key: self.document(item)
                    for key, item in value.items()}
        if isinstance(value, (list, tuple, set)):
            return [self.document(item) for item in value]
        if value is None or isinstance(value, (bool, int, float)):
            return value
        return self.document(str(value))

    def json(self, document: Any, **options: Any) -> str:
        """The document as JSON, its secrets masked before encoding (json.dumps `options`)."""
        return json.dumps(self.document(document), **options)

    def touches(self, text: str) -> bool:
        """True when the text holds a secret, or a piece of one (4+ characters between the characters
        that shell or JSON quoting rewrites), or a short secret as a whole token: for text about to
        be stored, where a quoted secret must not slip through as the plain masking would let it."""
        with self._lock:
            values = list(self._values)
        return any(piece in text for value in values for piece in QUOTED_APART.split(value)
                   if len(piece) >= MIN_ANYWHERE) \
            or any(re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text) for value in values
                   if len(value) < MIN_ANYWHERE)


def hide_secret_sections(output: str) -> str:
    """A probe script's output with each section of a secret-reading probe (SECRET_PROBE) replaced
    by one line saying so: what a -vv trace or an error may show of it."""
    if "secret" not in output:
        return output
    shown: list[str] = []
    hiding = False
    for line in output.splitlines(keepends=True):
        if ANY_SECTION.match(line):
            hiding = bool(SECRET_SECTION.match(line.rstrip("\n")))
            shown.append(line)
            if hiding:
                shown.append("(this probe's output is secret: not shown)\n")
        elif not hiding:
            shown.append(line)
    return "".join(shown)


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
