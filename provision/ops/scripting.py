"""Shell building blocks shared by operations: probe blocks, probe parsing, atomic writes, diffs.

Probe snippets run as root inside one larger script (`set +e`) with stdin from /dev/null, each in a
process of its own (runner/probe.py), so it can neither exit that script, nor leak variables, nor read
its input; a quick one (`quick_block`) shares one process with the other quick ones, in turn.
Probe output is `key=value` lines; values that may hold newlines or binary are base64 (`base64 -w0`).
"""

from __future__ import annotations

import difflib
import posixpath
import re

from provision.ops.base import Probe
from provision.secrets import REDACTOR
from provision.shell import QUICK_PROBE, parse_fields, quote

MODE_PATTERN = re.compile(r"^0?[0-7]{3,4}$")


def probe_block(body: str) -> str:
    """A probe body as a snippet: errors off, no stdin, no stderr. A group, not a subshell: the probe
    script already runs every snippet in a process of its own (runner/probe.py), and a fork costs the
    host ~0.5 ms, in every snippet of every run."""
    return f"{{\nset +eu\n{body.strip()}\n}} </dev/null 2>/dev/null\n"


def quick_block(body: str) -> str:
    """`probe_block` for a body that only reads local state (stat, dpkg-query, systemctl show: no daemon
    that may hang, no network): the batch runs it in one process with the other quick snippets, in turn,
    not in a fork of its own. Such a body sets every variable it reads and never exits: the snippet
    before it in that process ran in the same shell."""
    return QUICK_PROBE + probe_block(body)


def fields_probe(body: str) -> Probe[dict[str, str]]:
    """A probe whose body prints `key=value` lines, read as a dict (shell.parse_fields)."""
    return Probe(probe_block(body), parse_fields)


def port_open_script(host: str, port: int, timeout_s: float) -> str:
    """Bash that prints `up=1` when a TCP connection to `host:port` opens within `timeout_s`, else
    `up=0` (bash's /dev/tcp: no nc or curl needed on the host)."""
    return (f"if timeout {timeout_s} bash -c 'exec 3<>\"/dev/tcp/$0/$1\"' {quote(host)} {port} "
            "2>/dev/null; then echo up=1; else echo up=0; fi")


def normalize_mode(value: object) -> str | None:
    """A file mode as a 4-digit octal string ("0644"); refuses YAML's octal-looking integers."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(
            f'mode must be a quoted octal string like "0644", not {value!r} '
            "(YAML reads an unquoted 0644 as the number 420)"
        )
    if not MODE_PATTERN.match(value):
        raise ValueError(f'mode must be an octal string like "0644", not {value!r}')
    return f"{int(value, 8):04o}"


def require_absolute(path: str) -> str:
    """Operations work on absolute, normalised paths only (a relative path has no meaning on a host)."""
    if not path.startswith("/"):
        raise ValueError(f"path must be absolute, not {path!r}")
    return posixpath.normpath(path)


def chown_spec(owner: str | None, group: str | None) -> str | None:
    """The argument to chown for an owner and/or group, or None when neither is given."""
    if owner and group:
        return f"{owner}:{group}"
    if owner:
        return owner
    if group:
        return f":{group}"
    return None


def atomic_write_script(dest: str, *, mode: str, owner_group: str | None, create_parent: bool,
                        validate: list[str] | None = None) -> str:
    """Bash that writes the payload on fd 3 to `dest` atomically: temp file beside it, attrs, rename;
    with `validate`, that program must accept the temp file first (else exit 1, `dest` untouched).

    Runs in a subshell so that its cleanup trap does not replace the caller's (the payload's) trap.
    """
    parent = posixpath.dirname(dest) or "/"
    base = posixpath.basename(dest)
    lines = ["("]
    if create_parent:
        lines.append(f"umask 022; mkdir -p -- {quote(parent)}")
    lines += [
        f"tmp=$(mktemp -- {quote(f'{parent}/.{base}.provision-XXXXXX')})",
        "trap 'rm -f -- \"$tmp\"' EXIT",
        'cat <&3 > "$tmp"',
    ]
    if owner_group:
        lines.append(f'chown -- {quote(owner_group)} "$tmp"')
    lines.append(f'chmod -- {quote(mode)} "$tmp"')
    if validate:
        checker = " ".join(quote(word) for word in validate)
        refused = quote(f"{dest}: the new content was refused by {checker}; left as it was")
        lines.append(f'{checker} "$tmp" >&2 || {{ echo {refused} >&2; exit 1; }}')
    lines += [
        f'mv -f -- "$tmp" {quote(dest)}',
        ")",
    ]
    return "\n".join(lines)


def text_diff(path: str, old: str | None, new: str | None) -> str:
    """A unified diff of a file's text (None: the file does not exist), with secrets masked."""
    before = old.splitlines(keepends=True) if old else []
    after = new.splitlines(keepends=True) if new else []
    for lines in (before, after):
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n\\ No newline at end of file\n"
    diff = difflib.unified_diff(
        before, after,
        fromfile=path if old is not None else "/dev/null",
        tofile=path if new is not None else "/dev/null",
    )
    return REDACTOR("".join(diff))
