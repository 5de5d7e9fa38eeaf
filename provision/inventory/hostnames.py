"""Host names as inventory files write them: `web[01:20].example.com`, `db-[a:f]`, `host:2222`.

The same rules as ansible-core (`plugins/inventory/__init__.py` `expand_hostname_range`,
`parsing/utils/addresses.py` `parse_address`): a `[begin:end(:step)]` range expands to every name,
numbers zero-padded to the width of `begin` when it starts with 0, letters by their place in
a-zA-Z; several ranges expand one after the other. A trailing `:NN` on a host name or IPv4
address (or `[ipv6]:NN`) is the host's port; a bare IPv6 address has none.
"""

from __future__ import annotations

import re
import string

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


def expand_hosts(pattern: str) -> list[str]:
    """Every host name a pattern with `[a:b(:step)]` ranges stands for (itself when it has none)."""
    if "[" not in pattern:
        return [pattern]
    head, _, rest = pattern.partition("[")
    body, closed, tail = rest.partition("]")
    if not closed:
        raise HostPatternError(f"unclosed range in {pattern!r}")
    bounds = body.split(":")
    if len(bounds) not in (2, 3):
        raise HostPatternError(f"host range must be begin:end or begin:end:step, got [{body}]")
    begin, end = bounds[0] or "0", bounds[1]
    if not end:
        raise HostPatternError(f"host range must specify an end value: [{body}]")
    step = int(bounds[2]) if len(bounds) == 3 else 1
    width = len(begin) if begin[0] == "0" and len(begin) > 1 else 0
    if width and width != len(end):
        raise HostPatternError(f"host range must use equal-length begin and end: [{body}]")
    letters = string.ascii_letters
    if begin in letters and end in letters and len(begin) == len(end) == 1:
        if letters.index(begin) > letters.index(end):
            raise HostPatternError(f"host range must have begin <= end: [{body}]")
        items = list(letters[letters.index(begin):letters.index(end) + 1:step])
    else:
        try:
            items = [str(n).zfill(width) for n in range(int(begin), int(end) + 1, step)]
        except ValueError:
            raise HostPatternError(f"host range must be numbers or single letters: [{body}]") from None
    return [name for item in items for name in expand_hosts(f"{head}{item}{tail}")]
