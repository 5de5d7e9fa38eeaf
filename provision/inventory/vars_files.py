"""`group_vars/` and `host_vars/` folders, found and read as Ansible's `host_group_vars` plugin does.

For a group or host NAME in a folder DIR/group_vars (or host_vars), the first of these that exists
is used (ansible-core `DataLoader.find_vars_files`): `NAME` (a file, or a folder of files),
`NAME.yml`, `NAME.yaml`, `NAME.json`. A folder's files are read in sorted order, recursively,
skipping hidden files and `~` backups; only files with no extension or .yml/.yaml/.json count.
Each file is a YAML (or JSON) mapping; later files override earlier ones, key by key.

Unlike Ansible, which skips them without a word (`os.path.exists` is false for a dangling link;
ansible-core 2.19 `ansible-inventory --list` with one in group_vars/ prints nothing about it), an
entry that is a dangling symbolic link, a loop of links, a folder linked inside itself or not a
file (a FIFO, a socket) is an error naming it: the variables it was meant to hold, a sudo password
or a pinned version, would be missing from the run without a trace.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.input_files import folder_inside, read_input_bytes
from provision.inventory.model import Origin
from provision.yaml_loader import load_yaml_file

EXTENSIONS = (".yml", ".yaml", ".json")


@dataclass
class VarsLayer:
    """Variables with their origins, as one `group_vars`/`host_vars` entry gives them."""

    vars: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, Origin] = field(default_factory=dict)


def vars_files(folder: Path, name: str) -> list[Path]:
    """The files `folder/name{,.yml,.yaml,.json}` stands for, in the order Ansible reads them."""
    if name.startswith("/"):
        return []  # Ansible skips chroot-style names
    for candidate in (folder / name, *(folder / f"{name}{ext}" for ext in EXTENSIONS)):
        if candidate.is_dir():
            return _folder_files(candidate, [])
        if os.path.lexists(candidate):
            return [_checked_file(candidate)]
    return []


def _folder_files(folder: Path, above: list[Path]) -> list[Path]:
    inside = folder_inside(folder, above)
    found: list[Path] = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or entry.name.endswith("~"):
            continue
        if entry.is_dir():
            if not entry.suffix:
                found.extend(_folder_files(entry, inside))
        elif not entry.suffix or entry.suffix in EXTENSIONS:
            found.append(_checked_file(entry))
    return found


def _checked_file(path: Path) -> Path:
    """`path`, when it is a file that can be read (else `read_input_bytes`'s error naming it)."""
    if not path.is_file():
        read_input_bytes(path)  # a dangling or looping link, a FIFO: says which, never blocks
    return path


def read_vars_files(base: Path, kind: str, name: str) -> VarsLayer:
    """The variables of `base/kind/name*` (kind: group_vars or host_vars), merged in file order."""
    layer = VarsLayer()
    folder = base / kind
    if not folder.is_dir():
        return layer
    for path in vars_files(folder, name):
        doc = load_yaml_file(path)
        if doc.data is None:
            continue
        if not isinstance(doc.data, dict):
            raise InputError(f"expected a mapping of variable names to values, got {type(doc.data).__name__}",
                             path, doc.value_line(()))
        for key, value in doc.data.items():
            if not isinstance(key, str):
                raise InputError(f"a variable name must be a string, not {key!r}", path, doc.line((key,)), str(key))
            layer.vars[key] = value
            layer.origins[key] = Origin(path, doc.line((key,)), key)
    return layer
