"""Ansible-style host patterns for `--limit`: which hosts of an inventory a run touches.

A limit is a comma-separated list of patterns, each a host name, a group name, `all` (or `*`),
`ungrouped`, or a glob (`lab*`, `desk-?`) matched against host and group names. `!pattern`
excludes, `&pattern` intersects. A pattern that matches nothing is an error, not a silent no-op:
a misspelt `!lab2` would otherwise provision the very host the user meant to leave out.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING

from provision.errors import InputError
from provision.inventory.suggest import did_you_mean

if TYPE_CHECKING:
    from provision.inventory.model import Host

GLOB_CHARACTERS = set("*?[")


def select_hosts(hosts: list[Host], group_names: list[str], limit: str | None, source: Path) -> list[Host]:
    """The hosts `limit` selects, in inventory order; all hosts when `limit` is None or blank."""
    patterns = [part.strip() for part in (limit or "").split(",") if part.strip()]
    if not patterns:
        return list(hosts)
    included: set[str] = set()
    intersections: list[set[str]] = []
    excluded: set[str] = set()
    for pattern in patterns:
        if pattern[0] == "!":
            excluded |= _matching(pattern[1:].strip(), hosts, group_names, source)
        elif pattern[0] == "&":
            intersections.append(_matching(pattern[1:].strip(), hosts, group_names, source))
        else:
            included |= _matching(pattern, hosts, group_names, source)
    if not any(pattern[0] not in "!&" for pattern in patterns):
        included = {host.name for host in hosts}
    for names in intersections:
        included &= names
    selected = [host for host in hosts if host.name in included - excluded]
    if not selected:
        raise InputError(f"the limit {limit!r} leaves no hosts to run on", source, key="--limit")
    return selected


def _matching(pattern: str, hosts: list[Host], group_names: list[str], source: Path) -> set[str]:
    """Names of the hosts one pattern matches; InputError when it matches none."""
    if pattern in ("all", "*"):
        return {host.name for host in hosts}
    if pattern == "ungrouped" and pattern not in group_names:
        return {host.name for host in hosts if not host.groups}
    host_names = [host.name for host in hosts]
    if GLOB_CHARACTERS & set(pattern):
        groups = {group for group in group_names if fnmatch.fnmatchcase(group, pattern)}
        names = {name for name in host_names if fnmatch.fnmatchcase(name, pattern)}
    else:
        groups = {pattern} if pattern in group_names else set()
        names = {pattern} if pattern in host_names else set()
    names |= {host.name for host in hosts if groups & set(host.groups)}
    if names:
        return names
    if groups:
        raise InputError(f"group {pattern!r} has no hosts", source, key="--limit")
    hint = did_you_mean(pattern, [*host_names, *group_names])
    raise InputError(f"no host or group matches {pattern!r}{hint}", source, key="--limit")
