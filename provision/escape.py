"""One escaping function per target syntax a value is written into (besides the shell, whose quoting
is `provision.shell.quote`, and JSON, `json.dumps` and the templates' `to_json`): a systemd unit,
apt.conf, a deb822 field (apt sources and preferences), curl's config. The templates use them as
filters (`{{ value | apt_conf_string }}`), the operations call them; a value the target cannot hold
as data is refused with ValueError, never written half-escaped.

Why each rule (the target's own documentation):
- systemd (systemd.syntax(7) "Quoting", systemd.service(5) "Command lines", systemd.unit(5)
  "Specifiers"): a word is quoted with C-style escapes, which systemd removes when it splits a
  command line; `%` starts a specifier and `$` a variable in command lines, so both are doubled; a
  line ending in `\\` continues on the next line and a raw line break ends the setting, so a
  free-text value with a control character is refused.
- apt.conf (apt.conf(5) "Syntax"): "Values must not include backslashes or extra quotation marks";
  a quoted string has no escape, so `"`, `\\` and line breaks are refused.
- curl's config (curl(1) `--config`): within double quotes `\\\\` and `\\"` are escapes, and a line
  break would start another option line.
- nginx (nginx's `resolver` directive, https://nginx.org/en/docs/http/ngx_http_core_module.html#resolver):
  an address, IPv6 in brackets; `;` would end the directive and start another, so anything but an
  address is refused.
- deb822 (deb822(5), sources.list(5)): a field is one line unless continued by a line that starts
  with a space; a line break in a value would start a new field (`Trusted: yes`). A word of a
  multi-word field (URIs, Suites) holds no whitespace.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
SYSTEMD_NEEDS_QUOTES = re.compile(r"""[\s"'\\;]|^#""")
SYSTEMD_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def control_character(text: str) -> str | None:
    """The first control character of `text` as it would be typed (`'\\n'`), or None."""
    found = CONTROL.search(text)
    return repr(found.group()) if found else None


def _refuse_control(text: str, target: str, shown: bool = True) -> str:
    bad = control_character(text)
    if bad:
        raise ValueError(f"{repr(text) if shown else 'a value'} holds the control character {bad}, which "
                         f"{target} cannot hold as data")
    return text


def systemd_word(word: object) -> str:
    """One word of a systemd command line (ExecStart=), escaped so systemd's own splitting gives back
    exactly `word`: `%` and `$` doubled, and a word with spaces, quotes, backslashes, `;`, a leading
    `#` (a comment line inside a continuation) or control characters single-quoted with C escapes."""
    escaped = str(word).replace("%", "%%").replace("$", "$$")
    if escaped and not SYSTEMD_NEEDS_QUOTES.search(escaped) and not CONTROL.search(escaped):
        return escaped
    inner = "".join(SYSTEMD_ESCAPES.get(c) or (f"\\x{ord(c):02x}" if CONTROL.match(c) else c) for c in escaped)
    return f"'{inner}'"


def systemd_value(value: object) -> str:
    """A free-text unit setting (Description=, Environment=, a path): `%` doubled (specifiers); a
    control character or a trailing backslash (a line continuation) refused."""
    text = _refuse_control(str(value), "a systemd unit setting")
    if text.endswith("\\"):
        raise ValueError(f"{text!r} ends with a backslash, which continues a systemd unit line")
    return text.replace("%", "%%")


def apt_conf_string(value: object) -> str:
    """A quoted apt.conf string, quotes included."""
    text = _refuse_control(str(value), "an apt.conf string")
    if '"' in text or "\\" in text:
        raise ValueError(f"{text!r} holds a quotation mark or a backslash, which an apt.conf string cannot hold")
    return f'"{text}"'


def deb822_value(value: object) -> str:
    """A one-line deb822 field value (apt sources, apt preferences)."""
    return _refuse_control(str(value), "a deb822 field").strip()


def deb822_words(values: list[Any] | tuple[Any, ...]) -> str:
    """A deb822 field of several words (URIs, Suites, Package): each a word without whitespace."""
    words = [deb822_value(value) for value in values]
    for word in words:
        if not word or any(c.isspace() for c in word):
            raise ValueError(f"{word!r} is not one word of a deb822 field (empty, or holds whitespace)")
    return " ".join(words)


def curl_config_string(value: object) -> str:
    """A double-quoted value of curl's config file (`header = "..."`), quotes included: `\\` and
    `"` escaped; a control character (which no HTTP header holds) refused."""
    text = _refuse_control(str(value), "a curl config", shown=False)  # a header carries a token
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def nginx_address(value: object) -> str:
    """An IP address as nginx's `resolver` takes it (IPv6 in brackets); what the office cache host's
    /etc/resolv.conf names is host data, so anything else is refused."""
    text = str(value).strip()
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        raise ValueError(f"{text[:80]!r} is not an IP address, which nginx's resolver needs") from None
    return f"[{address}]" if address.version == 6 else str(address)
