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
def probe_script(sections: tuple[str, ...] | None = None) -> str:
    """The probe's shell text: the owners' shell functions, then one `if want NAME` block a section.
    For some `sections` only: their blocks and the section functions they call (the others' text would
    be read by the host's bash byte by byte, ~0.15 ms a KB, in every run), comment lines left out.

    A subshell with stdin from /dev/null, so it never fails, never eats the rest of a script that the
    runner appends (its `@@task N` sections), and leaves the caller's shell options alone. For some
    sections (`probe_for`: only the probe batch runs it, in a process of its own) a group instead: one
    fork less on the host.
    """
    registered = registry()
    chosen = [s for s in registered.sections if sections is None or s.name in sections]
    blocks = [f"if want {s.name}; then\n  section {s.name}\n  {s.script}\nfi\n" for s in chosen]
    shell = list(registered.probe_shell) if sections is None else _needed_shell(registered.probe_shell, blocks)
    opening, closing = ("(\n", ")") if sections is None else ("{\n", "}")
    return "".join([opening, *shell, 'section probe\necho "${PROBE_SECTIONS:-all}"\n', *blocks,
                    f"true\n{closing} </dev/null\n"])


SECTION_FUNCTION = re.compile(r"^(probe_[A-Za-z0-9_]+)\(\) \{")


def _needed_shell(files: tuple[str, ...], blocks: list[str]) -> list[str]:
    """The owners' shell without comment lines and without the section functions (`probe_NAME() {`
    at a line's start, up to its own line or the next `}` alone on a line) that neither the blocks
    nor a kept function call."""
    functions: dict[str, str] = {}
    rest: list[str] = []
    for text in files:
        lines = iter(text.splitlines(keepends=True))
        for line in lines:
            if line.lstrip().startswith("#") or not line.strip():
                continue
            found = SECTION_FUNCTION.match(line)
            if not found:
                rest.append(line)
                continue
            body = [line]
            if line.rstrip().endswith("}") and line.count("{") == line.count("}"):
                functions[found.group(1)] = line
                continue
            for more in lines:
                if not more.lstrip().startswith("#"):
                    body.append(more)
                if more.rstrip() == "}":
                    break
            functions[found.group(1)] = "".join(body)
    used: set[str] = set()
    reachable = "".join([*blocks, *rest])
    while True:
        called = {name for name in functions if re.search(rf"\b{name}\b", reachable)} - used
        if not called:
            break
        used |= called
        reachable += "".join(functions[name] for name in called)
    return [*rest, *(functions[name] for name in functions if name in used)]


def probe_for(fields: Iterable[str] | None) -> str:
    """The facts probe for these fields only (None: every fact)."""
    if fields is None:
        return probe_script()
    wanted = sections_for(fields)
    return f"PROBE_SECTIONS={quote(' '.join(wanted) or 'none')}\n{probe_script(tuple(wanted))}"


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
