"""What an owner registers to add host facts: a probe `Section` (its shell, its parser, the fields it
sets) and `Derived` fields computed from others. The registry (`sections.py`) assembles the probe
script and the field -> section map from every owner's sections, so a new fact is one edit in the
package that reads it (the generic ones in `host.py`, the NVIDIA ones in `provision/gpu/`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from provision.shell import parse_fields

#: a section's raw text by name ("" when the probe did not print it)
Raw = Callable[[str], str]


@dataclass(frozen=True)
class Fact:
    """A HostFacts field a section sets: its "unknown" value (a tuple default makes given lists tuples,
    so facts stay frozen), and the other sections it is read from besides its own."""

    default: Any
    needs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Section:
    """`@@section NAME` of the probe: `script` prints its body (a function of the owner's probe shell,
    run when PROBE_SECTIONS asks for NAME); `parse` turns the raw sections into `fields`' values."""

    name: str
    script: str
    fields: Mapping[str, Fact]
    parse: Callable[[Raw], Mapping[str, Any]]

    @classmethod
    def own(cls, name: str, script: str, fields: Mapping[str, Fact], parse: Callable[[str], Any]) -> Section:
        """A section whose facts come from its own text alone: `parse(text)` is the one field's value, or
        a tuple of the fields' values in their order."""
        names = tuple(fields)

        def parse_own(raw: Raw) -> dict[str, Any]:
            value = parse(raw(name))
            return dict(zip(names, value, strict=True)) if len(names) > 1 else {names[0]: value}

        return cls(name, script, fields, parse_own)


@dataclass(frozen=True)
class Derived:
    """A field computed from other fields (not probed): set when all of `inputs` were gathered."""

    name: str
    inputs: tuple[str, ...]
    compute: Callable[..., Any]
    default: Any = ()


def key_values(text: str) -> dict[str, str]:
    """`key=value` lines; a repeated key's values are joined with newlines (mokutil's lines)."""
    return parse_fields(text, join_repeated=True)
