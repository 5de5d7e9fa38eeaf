"""Ansible's host patterns, for `--limit` and a play's `hosts:` (ansible-core `InventoryManager`).

A limit is a list of patterns separated by `,` (or `:`, when that cannot be a host:port or
range): `web,db`, `web:db`, `web:&prod` (in both), `all:!lab` (all but lab), `web*` and `~web\\d+`
(glob / regex over group and host names: a matching group brings all its hosts), `web[0]`,
`web[1:3]`, `web[-1]` (subscripts over a group's hosts, in Ansible's order), `@retry_file` (one
pattern per line). Regular patterns are unioned first, then `&` ones intersect, then `!` ones
remove. Unlike Ansible, which warns and ignores it, a pattern that matches nothing is an error
naming it and the groups that exist: a misspelt `!lab2` would otherwise provision the very host
the user meant to leave out.
"""

from __future__ import annotations

import fnmatch
import re
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from provision.errors import InputError
from provision.input_files import read_input_text
from provision.inventory.hostnames import HostPatternError, split_port
from provision.suggest import did_you_mean

if TYPE_CHECKING:
    from provision.inventory.model import Host, Inventory

SUBSCRIPT = re.compile(r"^(.+)\[(?:(-?[0-9]+)|([0-9]+)([:-])([0-9]*))\]$")
COLON_SEPARATED = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")
GLOB_MARKS = (".", "?", "*", "[")
REGEX_SECONDS = 2.0


def split_patterns(limit: str) -> list[str]:
    """`a,b` / `a:b:&c` -> the single patterns (a lone `host:22` or `web[1:3]` stays whole)."""
    if "," in limit:
        parts = limit.split(",")
    else:
        try:
            split_port(limit)
            parts = [limit]
        except HostPatternError:
            parts = COLON_SEPARATED.findall(limit)
    return [part.strip() for part in parts if part.strip()]


class NoHostsMatched(InputError):
    """A pattern that is well formed but selects no host: refused for `--limit`, while a play whose
    `hosts:` matches nothing is skipped, as Ansible does."""


def select_hosts(inventory: Inventory, limit: str | None) -> list[Host]:
    """The hosts `limit` selects, in inventory order; all hosts when `limit` is None or blank."""
    patterns = _expand_files(split_patterns(limit or ""), inventory.path)
    if not patterns:
        return list(inventory.hosts)
    names = set(evaluate(inventory, patterns))
    selected = [host for host in inventory.hosts if host.name in names]
    if not selected:
        raise NoHostsMatched(f"the pattern {limit!r} leaves no hosts to run on{_groups_hint(inventory)}",
                         inventory.path, key="--limit")
    return selected


def evaluate(inventory: Inventory, patterns: list[str]) -> list[str]:
    """Host names the patterns select, in Ansible's order (regular, then &, then !)."""
    regular = [p for p in patterns if p[0] not in "!&"] or ["all"]
    ordered = regular + [p for p in patterns if p[0] == "&"] + [p for p in patterns if p[0] == "!"]
    hosts: list[str] = []
    for pattern in ordered:
        matched = _match(inventory, pattern)
        if pattern[0] == "!":
            hosts = [h for h in hosts if h not in set(matched)]
        elif pattern[0] == "&":
            hosts = [h for h in hosts if h in set(matched)]
        else:
            hosts.extend(h for h in matched if h not in hosts)
    return list(dict.fromkeys(hosts))


def _match(inventory: Inventory, pattern: str) -> list[str]:
    host_names = [host.name for host in inventory.hosts]
    if pattern in host_names:
        return [pattern]
    pattern = pattern[1:] if pattern[0] in "!&" else pattern
    if not pattern:
        raise InputError("a lone ! or & names nothing: write !GROUP or &GROUP (or a host)", inventory.path,
                         key="--limit")
    expression, subscript = _split_subscript(pattern)
    matched = _enumerate(inventory, expression, host_names)
    if not matched:
        if expression in inventory.groups:
            raise NoHostsMatched(f"group {expression!r} has no hosts", inventory.path, key="--limit")
        hint = did_you_mean(expression, [*host_names, *inventory.groups])
        raise NoHostsMatched(f"no host or group matches {pattern!r}{hint}{_groups_hint(inventory)}",
                         inventory.path, key="--limit")
    if subscript is None:
        return matched
    start, end = subscript
    try:
        if not end:
            return [matched[start]]
        return matched[start:(len(matched) - 1 if end == -1 else end) + 1]
    except IndexError:
        raise InputError(f"the pattern {pattern!r}: {expression} has only {len(matched)} hosts",
                         inventory.path, key="--limit") from None


def _split_subscript(pattern: str) -> tuple[str, tuple[int, int | None] | None]:
    if pattern[0] == "~":
        return pattern, None
    match = SUBSCRIPT.match(pattern)
    if not match:
        return pattern, None
    expression, index, start, _, end = match.groups()
    if index:
        return expression, (int(index), None)
    return expression, (int(start), int(end) if end else -1)


def _enumerate(inventory: Inventory, pattern: str, host_names: list[str]) -> list[str]:
    """Hosts of the groups the pattern names, plus hosts it names (when no group matched, or it is
    a glob or regex)."""
    try:
        regex = re.compile(pattern[1:] if pattern[0] == "~" else fnmatch.translate(pattern))
    except re.error as error:
        raise InputError(f"invalid host pattern {pattern!r}: {error}", inventory.path, key="--limit") from None
    with _time_limit(REGEX_SECONDS, pattern, inventory.path):
        groups = [name for name in inventory.groups if regex.match(name)]
        results = [host for group in groups for host in inventory.groups[group].all_hosts]
        if not groups or pattern[0] == "~" or any(mark in pattern for mark in GLOB_MARKS):
            results += [name for name in host_names if regex.match(name)]
    return results


class _TooSlow(Exception):
    pass


@contextmanager
def _time_limit(seconds: float, pattern: str, source: Path) -> Iterator[None]:
    """An InputError when the block runs longer than `seconds`: a `~regex` such as `~(a|a)*b` backtracks
    for ages on a long name (Python's `re` has no timeout, but checks signals while it matches, so
    SIGALRM stops it). Only the main thread can take signals; elsewhere the block is not bounded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(*_: object) -> None:
        raise _TooSlow

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _TooSlow:
        raise InputError(f"the pattern {pattern!r} took more than {seconds:g} s to match the inventory's names"
                         " (the limit; a regular expression that backtracks?)", source, key="--limit") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _expand_files(patterns: list[str], source: Path) -> list[str]:
    """`@file` entries replaced by the patterns in the file, one per line (a retry file)."""
    expanded: list[str] = []
    for pattern in patterns:
        if not pattern.startswith("@"):
            expanded.append(pattern)
            continue
        path = Path(pattern[1:]).expanduser()
        try:
            lines = read_input_text(path).split("\n")
        except InputError as error:
            raise InputError(f"cannot read the limit file: {error.message}", path, error.line, "--limit") from None
        expanded.extend(line.strip() for line in lines if line.strip())
    return expanded


def _groups_hint(inventory: Inventory) -> str:
    names = [name for name in inventory.groups if name != "all"]
    return f" (groups: {', '.join(names)})" if names else ""
