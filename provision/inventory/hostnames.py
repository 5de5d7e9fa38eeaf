"""Host names as inventory files write them: `web[01:20].example.com`, `db-[a:f]`, `host:2222`.

The same rules as ansible-core (`plugins/inventory/__init__.py` `expand_hostname_range`,
`parsing/utils/addresses.py` `parse_address`): a `[begin:end(:step)]` range expands to every name,
numbers zero-padded to the width of `begin` when it starts with 0, letters by their place in
a-zA-Z; several ranges expand one after the other. A trailing `:NN` on a host name or IPv4
address (or `[ipv6]:NN`) is the host's port; a bare IPv6 address has none.

Two bounds Ansible does not have (it expands `web[0:99999999]` until memory runs out, and takes
any non-empty string as a host name: ansible-core 2.19 `inventory/data.py` `add_host`, "TODO: add
to_safe_host_name"): one pattern stands for at most `MAX_HOSTS_PER_PATTERN` hosts, counted before
anything is expanded; a name holding a character that does not show as itself is refused
(`unprintable_in`): a newline forges a line of output or of the lock record, a bidi override
(U+202E, "Trojan Source", CVE-2021-42574) shows `lab1` for a name that is not.
"""

from __future__ import annotations

import itertools
import re
import string
import unicodedata

RANGE = r"\[(?:[0-9]+:[0-9]+|[a-z]:[a-z])(?::[0-9]+)?\]"
HEX_RANGE = r"\[[0-9a-f]+:[0-9a-f]+(?::[0-9]+)?\]"
LABEL = rf"(?:\w|{RANGE})(?:[\w-]|{RANGE})*(?<![_-])"
IPV4_PART = r"(?:[01]?[0-9]{1,2}|2[0-4][0-9]|25[0-5]|\[[0-9]+:[0-9]+(?::[0-9]+)?\])"
HOSTNAME = re.compile(rf"^{LABEL}(?:\.{LABEL})*$", re.IGNORECASE)
IPV4 = re.compile(rf"^(?:{IPV4_PART}\.){{3}}{IPV4_PART}$")
IPV6_PART = rf"(?:[0-9a-f]{{1,4}}|{HEX_RANGE})"
IPV6 = re.compile(rf"^(?:{IPV6_PART}:){{2,7}}{IPV6_PART}$|^(?:{IPV6_PART}:)*:(?::?{IPV6_PART})*$", re.IGNORECASE)
BRACKETED_PORT = re.compile(r"^\[(.+)\]:([0-9]+)$")
HOST_PORT = re.compile(r"^((?:[^:\[\]]|\[[^\]]*\])*):([0-9]+)$")
MAX_HOSTS_PER_PATTERN = 10_000
# controls (newline, tab, ESC), format characters (bidi overrides and isolates, zero-width ones),
# line and paragraph separators, and lone surrogates (bytes of a command line that are not UTF-8)
UNPRINTABLE_CATEGORIES = ("Cc", "Cf", "Zl", "Zp", "Cs")


class HostPatternError(ValueError):
    """A host name or range that cannot be expanded (the message says why)."""


def split_port(text: str) -> tuple[str, int | None]:
    """(host, port) of `host:port`, `[ipv6]:port` or a bare name/address (port None)."""
    address, port = text, None
    for pattern in (BRACKETED_PORT, HOST_PORT):
        match = pattern.match(address)
        if match:
            address, port = match.group(1), int(match.group(2))
    if IPV4.match(address) or IPV6.match(address) or HOSTNAME.match(address):
        return address, port
    raise HostPatternError(f"not a valid network host name: {address}")


def host_and_port(token: str) -> tuple[str, int | None]:
    """Like Ansible: a token that is not a valid address keeps its whole text as the name."""
    try:
        return split_port(token)
    except HostPatternError:
        return token, None


def unprintable_in(name: str) -> str | None:
    """The first character of `name` that does not show as itself (as U+XXXX), or None."""
    return next((f"U+{ord(c):04X}" for c in name if unicodedata.category(c) in UNPRINTABLE_CATEGORIES), None)


def expand_hosts(pattern: str) -> list[str]:
    """Every host name a pattern with `[a:b(:step)]` ranges stands for (itself when it has none), in
    Ansible's order (the first range varies slowest)."""
    pieces: list[list[str] | range] = []
    widths: list[int] = []
    count, rest = 1, pattern
    while "[" in rest:
        head, _, after = rest.partition("[")
        body, closed, rest = after.partition("]")
        if not closed:
            raise HostPatternError(f"unclosed range in {pattern!r}")
        items, width = _range_items(body)
        count *= len(items)
        if count > MAX_HOSTS_PER_PATTERN:
            raise HostPatternError(f"{pattern!r} stands for more than {MAX_HOSTS_PER_PATTERN:,} hosts, the limit"
                                   " for one pattern: is a bound mistyped? (split a larger fleet into patterns)")
        pieces += [[head], items]
        widths += [0, width]
    pieces.append([rest])
    widths.append(0)
    return ["".join(str(part).zfill(width) for part, width in zip(parts, widths, strict=True))
            for parts in itertools.product(*pieces)]


def _range_items(body: str) -> tuple[list[str] | range, int]:
    """The items of one `[begin:end(:step)]` (a range of numbers is not built: it may be huge) and the
    width numbers are zero-padded to."""
    bounds = body.split(":")
    if len(bounds) not in (2, 3):
        raise HostPatternError(f"host range must be begin:end or begin:end:step, got [{body}]")
    begin, end = bounds[0] or "0", bounds[1]
    if not end:
        raise HostPatternError(f"host range must specify an end value: [{body}]")
    width = len(begin) if begin[0] == "0" and len(begin) > 1 else 0
    if width and width != len(end):
        raise HostPatternError(f"host range must use equal-length begin and end: [{body}]")
    letters = string.ascii_letters
    try:
        step = int(bounds[2]) if len(bounds) == 3 else 1
        if not (begin in letters and end in letters and len(begin) == len(end) == 1):
            return range(int(begin), int(end) + 1, step), width
        items = letters[letters.index(begin):letters.index(end) + 1:step]
    except ValueError:
        raise HostPatternError(f"host range must be numbers or single letters: [{body}]") from None
    if letters.index(begin) > letters.index(end):
        raise HostPatternError(f"host range must have begin <= end: [{body}]")
    return list(items), 0
