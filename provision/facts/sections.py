"""The registry of probe sections: which owners add facts, and what follows from their sections.

Each module in `SECTION_MODULES` defines `SECTIONS` (and optionally `DERIVED`) and `PROBE_SHELL`, the
shell files of its package that define the sections' functions. From them come the probe script
(`parse.probe_script`), the fields of HostFacts with their "unknown" values, and which sections each
field is read from, so that a run asks the host only for the facts its tasks read:
`parse.probe_for(fields)` is the probe for those fields, the sections asked for travel in the output
(`@@section probe`), and `parse.parse_probe` marks the facts it could read as gathered (reading any
other one fails loudly, `FactNotGathered`, never yields an empty default).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from typing import Any

from provision.facts.section import Derived, Section

#: the modules that register sections, in probe order (a section may use what an earlier one set)
SECTION_MODULES = ("provision.facts.host", "provision.gpu.facts")
ALL_SECTIONS = "all"


@dataclass(frozen=True)
class Registry:
    """The registered sections and what follows from them."""

    sections: tuple[Section, ...]
    derived: tuple[Derived, ...]
    probe_shell: tuple[str, ...]  # the owners' shell files' text, in SECTION_MODULES order
    defaults: dict[str, Any]  # every field a probe sets -> its "unknown" value, in registration order
    field_sections: dict[str, tuple[str, ...]]  # every field -> the sections it is read from
    field_order: tuple[str, ...]  # the fact fields of HostFacts, in order (probed, then derived)

    @cached_property
    def fact_fields(self) -> frozenset[str]:
        return frozenset(self.field_order)

    @cached_property
    def init_fields(self) -> frozenset[str]:
        """The fields a probe sets (the others are derived from them)."""
        return frozenset(self.defaults)


@cache
def registry() -> Registry:
    """The registry, loaded on first use (the owners' modules import the facts package)."""
    sections: list[Section] = []
    derived: list[Derived] = []
    shell: list[str] = []
    for name in SECTION_MODULES:
        module = importlib.import_module(name)
        sections.extend(module.SECTIONS)
        derived.extend(getattr(module, "DERIVED", ()))
        package = resources.files(name.rpartition(".")[0])
        shell.extend(package.joinpath(file).read_text(encoding="utf-8") for file in module.PROBE_SHELL)
    defaults = {name: fact.default for section in sections for name, fact in section.fields.items()}
    field_sections = {name: (section.name, *fact.needs)
                      for section in sections for name, fact in section.fields.items()}
    for one in derived:
        field_sections[one.name] = tuple(dict.fromkeys(s for i in one.inputs for s in field_sections[i]))
    return Registry(tuple(sections), tuple(derived), tuple(shell), defaults, field_sections,
                    (*defaults, *(one.name for one in derived)))


def sections_for(fields: Iterable[str]) -> list[str]:
    """The probe sections that the given HostFacts fields are parsed from (KeyError: not a fact)."""
    field_sections = registry().field_sections
    return sorted({section for name in fields for section in field_sections[name]})


def fields_from(asked: str) -> frozenset[str] | None:
    """The fields a probe that was asked for `asked` (its `@@section probe` line) gathered; None: all."""
    sections = set(asked.split())
    if ALL_SECTIONS in sections:
        return None
    return frozenset(name for name, needs in registry().field_sections.items() if sections.issuperset(needs))
