"""The facts probe: its script, assembled from the registered sections, and its output read back.

The output is a series of sections: a header line `@@<kind> <name>` and the raw text under it up
to the next header. The probe writes `@@section NAME`; the runner appends its own `@@task N`
sections to the same script, so `split_sections` keys them "task N" and `parse_probe` ignores
every section it does not know. Each section's parser gives its facts' "unknown" values for a
missing or garbled section, never an exception, so one odd host cannot hide all the others' facts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import cache
from typing import Any

from provision.facts.model import HostFacts
from provision.facts.sections import ALL_SECTIONS, fields_from, registry, sections_for
from provision.shell import quote

SECTION_HEADER = re.compile(r"^@@([A-Za-z0-9][A-Za-z0-9_-]*)[ \t]+(\S.*?)[ \t]*$")


@cache
def probe_script() -> str:
    """The probe's shell text: the owners' shell functions, then one `if want NAME` block a section.

    A subshell with stdin from /dev/null, so it never fails, never eats the rest of a script that the
    runner appends (its `@@task N` sections), and leaves the caller's shell options alone.
    """
    sections = registry()
    blocks = [f"if want {s.name}; then\n  section {s.name}\n  {s.script}\nfi\n" for s in sections.sections]
    return "".join(["(\n", *sections.probe_shell, 'section probe\necho "${PROBE_SECTIONS:-all}"\n', *blocks,
                    "true\n) </dev/null\n"])


def probe_for(fields: Iterable[str] | None) -> str:
    """The facts probe for these fields only (None: every fact)."""
    if fields is None:
        return probe_script()
    sections = " ".join(sections_for(fields)) or "none"
    return f"PROBE_SECTIONS={quote(sections)}\n{probe_script()}"


def split_sections(output: str) -> dict[str, str]:
    """Sections by key: `@@section NAME` -> "NAME", any other `@@KIND NAME` -> "KIND NAME".

    A body is the lines between its header and the next one, joined with "\\n" (no trailing
    newline); text before the first header (a login banner) is dropped; a repeated key keeps the
    last body.
    """
    sections: dict[str, str] = {}
    key: str | None = None
    body: list[str] = []
    for line in output.replace("\r\n", "\n").split("\n"):
        header = SECTION_HEADER.match(line)
        if header:
            if key is not None:
                sections[key] = "\n".join(body).rstrip("\n")
            kind, name = header.groups()
            key = name if kind == "section" else f"{kind} {name}"
            body = []
        elif key is not None:
            body.append(line)
    if key is not None:
        sections[key] = "\n".join(body).rstrip("\n")
    return sections


def parse_probe(output: str) -> HostFacts:
    """HostFacts from the probe's whole output; ValueError when it is not probe output at all."""
    if not output.strip():
        raise ValueError("the facts probe printed nothing")
    sections = split_sections(output)
    if "probe" not in sections and "os-release" not in sections and "kernel" not in sections:
        raise ValueError(f"not facts probe output (no @@section headers): {output.strip()[:200]!r}")

    def get(name: str) -> str:
        return sections.get(name, "")

    values: dict[str, Any] = {}
    for section in registry().sections:
        values.update(section.parse(get))
    return HostFacts(**values, gathered=fields_from(sections.get("probe", ALL_SECTIONS)))
