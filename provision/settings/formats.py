"""The formats a string setting may be declared with (`format: url` in argument_specs.yaml): each a
regular expression the whole value must match, and its description in words for the refusal.

A value reaches a root script, a unit, an apt file or a package manager's command line; the format
keeps it to what the target means by it (a version is never an option, a URL never a second line).
Every string setting, declared with a format or not, is also refused if it holds a control character
(check.py), before any host is contacted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Format:
    pattern: re.Pattern[str]
    words: str


def _format(pattern: str, words: str) -> Format:
    return Format(re.compile(pattern), words)


FORMATS: dict[str, Format] = {
    # curl, apt and nginx read these: a scheme first, so never a leading "-" (an option); no whitespace,
    # quotes, nor nginx's `;`, braces and `$` variables
    "url": _format(r"[a-z][a-z0-9+.-]*://[^\s\"'\\<>`;{}$]+", "a URL (scheme://..., no spaces, quotes, ; { } $)"),
    # Debian policy §5.6.12 (epoch:upstream-revision), plus apt's `*` glob of a pin
    "version": _format(r"[0-9][A-Za-z0-9.+~:*-]*", "a version (starts with a digit; letters, digits, . + ~ : - *)"),
    # Debian policy §5.6.7, plus `%(name)s` placeholders the roles fill in and apt's `*` glob
    "package": _format(r"([a-z0-9]|%\([a-z]+\)s)([a-z0-9+.*-]|%\([a-z]+\)s)*",
                       "a package name (lowercase letters, digits, + - . and the role's %(name)s)"),
    # docker reference: [registry[:port]/]name[:tag][@digest]
    "image": _format(r"[a-z0-9][a-z0-9._/:-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?(@sha256:[0-9a-f]{64})?",
                     "an image reference (registry/name:tag or @sha256:digest)"),
    # a Hugging Face repository id
    "repo_id": _format(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*", "a repository id (org/name)"),
    # a commit sha or a git ref name (git check-ref-format(1), the characters of it this tool needs)
    "revision": _format(r"[0-9a-f]{40}|[A-Za-z0-9_][A-Za-z0-9_./-]*", "a branch, tag or commit sha"),
    # a systemd unit, container or profile name
    "name": _format(r"[A-Za-z0-9][A-Za-z0-9_.@-]*", "a name (letters, digits, _ . @ -)"),
    # a host name or an IP address (never a leading "-": ssh, curl and socat would read an option)
    "host": _format(r"(?!-)[A-Za-z0-9.:-]*[A-Za-z0-9]|\[[0-9A-Fa-f:.]+\]", "a host name or IP address"),
    # nginx size (`200g`)
    "size": _format(r"[0-9]+[kKmMgG]?", "a size (digits, optionally k, m or g)"),
    # a path written into a file without quotes (nginx)
    "plain_path": _format(r"/[A-Za-z0-9._/@+-]*", "an absolute path of letters, digits and . _ / @ + -"),
    # an API key or hub token: what goes into an HTTP header (RFC 6750's b64token, and `:`)
    "token": _format(r"[A-Za-z0-9._~+/=:-]*", "a token (letters, digits, . _ ~ + / = : -)"),
    # an HTTP header name written into HAProxy's config (office_session_header): RFC 9110's token less
    # the characters HAProxy's config reads itself (# a comment, quotes, $ a variable, % a log format)
    "header": _format(r"[A-Za-z0-9][A-Za-z0-9_.-]*", "an HTTP header name (letters, digits, _ . -)"),
    # a string apt.conf can hold in quotes (apt.conf(5): no backslash, no quotation mark)
    "apt_conf_text": _format(r"[^\"\\]*", "text without quotation marks or backslashes (apt.conf)"),
}
