"""`--limit` patterns: names, groups, globs, exclusion, intersection; typos are errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.errors import InputError
from provision.inventory import Inventory, load_inventory

FLEET = """\
all:
  hosts:
    solo:
  children:
    reception:
      hosts:
        desk-1:
        desk-2:
    engineering:
      hosts:
        eng-1:
      children:
        eng_vision:
          hosts:
            eng-3:
            desk-2:
    empty_group:
"""


@pytest.fixture
def fleet(tmp_path: Path) -> Inventory:
    path = tmp_path / "office.yaml"
    path.write_text(FLEET)
    return load_inventory(path)


def names(fleet: Inventory, limit: str | None) -> list[str]:
    return [host.name for host in fleet.select(limit)]


@pytest.mark.parametrize(("limit", "expected"), [
    (None, ["solo", "desk-1", "desk-2", "eng-1", "eng-3"]),
    ("", ["solo", "desk-1", "desk-2", "eng-1", "eng-3"]),
    ("all", ["solo", "desk-1", "desk-2", "eng-1", "eng-3"]),
    ("eng-1", ["eng-1"]),
    ("eng-1,desk-1", ["desk-1", "eng-1"]),  # inventory order, not limit order
    ("engineering", ["desk-2", "eng-1", "eng-3"]),  # children's hosts belong to the parent
    ("desk-*", ["desk-1", "desk-2"]),
    ("eng*", ["desk-2", "eng-1", "eng-3"]),  # the glob matches the groups too
    ("all,!reception", ["solo", "eng-1", "eng-3"]),
    ("!reception", ["solo", "eng-1", "eng-3"]),  # exclusions alone start from all
    ("engineering,&reception", ["desk-2"]),
    ("engineering, !desk-2", ["eng-1", "eng-3"]),
    ("ungrouped", ["solo"]),
])
def test_limit_patterns(fleet: Inventory, limit: str | None, expected: list[str]) -> None:
    assert names(fleet, limit) == expected


@pytest.mark.parametrize(("limit", "fragment"), [
    ("engineerin", "no host or group matches 'engineerin' (did you mean 'engineering'?)"),
    ("all,!desk3", "no host or group matches 'desk3' (did you mean 'desk-"),
    ("lab*", "no host or group matches 'lab*'"),
    ("empty_group", "group 'empty_group' has no hosts"),
    ("reception,!reception", "leaves no hosts"),
])
def test_limit_errors(fleet: Inventory, limit: str, fragment: str) -> None:
    with pytest.raises(InputError) as caught:
        fleet.select(limit)
    assert fragment in str(caught.value)
    assert caught.value.key == "--limit" and caught.value.file == fleet.path


def test_a_play_pattern_that_matches_nothing_is_skipped_but_a_malformed_one_is_refused(tmp_path):
    """Ansible skips a play whose `hosts:` matches no host ("Could not match supplied host pattern,
    ignoring"); any other fault of the pattern (a subscript past the end) is an error, never a skip."""
    path = tmp_path / "hosts.yaml"
    path.write_text("all:\n  hosts:\n    w1:\n")
    inventory = load_inventory(path)
    assert inventory.play_hosts("office_cache") == []
    assert [host.name for host in inventory.play_hosts("all")] == ["w1"]
    with pytest.raises(InputError, match="has only 1 hosts"):
        inventory.play_hosts("all[5]")
