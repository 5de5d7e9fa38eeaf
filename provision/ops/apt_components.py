"""`apt_components`: add components (such as `contrib`) to a distribution's own apt entries.

The entries changed are those that carry `main` (the distribution's archive, its updates and
security suites); third-party repositories (NVIDIA's `/` suite, Docker's `stable`) are left alone.
Both formats are read: deb822 `.sources` files (the `Components:` field of each `deb` stanza) and
one-line `sources.list` files (`deb [options] URI SUITE COMPONENT...`); comments, disabled stanzas and
`deb-src` entries stay as they are. A missing file is nothing to change. The file is rewritten
atomically, only when a component was missing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import Field

from provision.ops.base import OpArgs, Plan, register
from provision.ops.fields import AbsolutePath
from provision.ops.filestate import FileEditOperation, FileState, read_text_for_edit
from provision.ops.needs import Components, Need
from provision.ops.textedit import plan_text_edit

ONE_LINE = re.compile(r"^(?P<head>\s*deb\s+(?:\[[^\]]*\]\s+)?\S+\s+\S+)"  # deb [options] URI SUITE
                      r"(?P<components>(?:\s+\S+)*?)(?P<tail>\s*(?:#.*)?)$")


class AptComponentsArgs(OpArgs):
    path: AbsolutePath
    components: list[str] = Field(min_length=1)


def add_to_one_line(text: str, components: list[str]) -> str:
    """A `sources.list` text with `components` added to every `deb` line that has `main`."""
    lines = []
    for line in text.split("\n"):
        match = ONE_LINE.match(line)
        present = match.group("components").split() if match else []
        if match and "main" in present:
            missing = [c for c in components if c not in present]
            line = match.group("head") + match.group("components") + "".join(f" {c}" for c in missing) \
                + match.group("tail")
        lines.append(line)
    return "\n".join(lines)


def add_to_deb822(text: str, components: list[str]) -> str:
    """A `.sources` text with `components` added to every enabled `deb` stanza that has `main`."""
    stanzas = re.split(r"(\n\s*\n)", text)
    for index in range(0, len(stanzas), 2):
        lines = stanzas[index].split("\n")
        fields = {line.split(":", 1)[0].strip().lower(): line.split(":", 1)[1].split()
                  for line in lines if ":" in line and not line.lstrip().startswith("#") and not line[:1].isspace()}
        if "deb" not in fields.get("types", []) or fields.get("enabled", ["yes"]) == ["no"]:
            continue
        present = fields.get("components", [])
        missing = [c for c in components if c not in present]
        if "main" not in present or not missing:
            continue
        stanzas[index] = "\n".join(
            line.rstrip() + "".join(f" {c}" for c in missing)
            if line.split(":", 1)[0].strip().lower() == "components" and not line.lstrip().startswith("#") else line
            for line in lines)
    return "".join(stanzas)


def add_components(path: str, text: str, components: list[str]) -> str:
    """The file's text with the components added, read as deb822 when its name ends in `.sources`."""
    if path.endswith(".sources"):
        return add_to_deb822(text, components)
    return add_to_one_line(text, components)


@register
class AptComponentsOperation(FileEditOperation):
    name = "apt_components"
    Args = AptComponentsArgs
    offline_arguments = ("path", "components")  # the bundle's packages are resolved with them

    def offline_needs(self, args: dict[str, Any], render_file: Callable[[str], str]) -> list[Need]:
        if not args.get("path"):
            return []
        return [Components(str(args["path"]), tuple(str(c) for c in args.get("components") or []))]

    def plan(self, args: AptComponentsArgs, facts: Any, current: FileState) -> Plan:
        if not current.exists:
            return Plan.ok(f"{args.path} is absent: nothing to add to")
        old_text = read_text_for_edit(current)
        new_text = add_components(args.path, old_text, args.components)
        return plan_text_edit(current, old_text, new_text, owner=None, group=None, mode=None, create=False,
                              what=f"add {', '.join(args.components)}")
