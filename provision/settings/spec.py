"""Read the variable declarations of every role: `roles/<role>/meta/argument_specs.yaml`.

The format is Ansible's argument_specs in spirit (see README.md beside this file): one `options:`
mapping of variable name -> type, optional min/max (numbers), choices, format (settings/formats.py),
secret, description, and for a
mapping of command-line flags `flag_list` (a data file of the program's flags). A variable is declared
by exactly one role; a second declaration is an error, so each concept is written once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.settings.flags import FlagList, load_flag_list
from provision.settings.formats import FORMATS
from provision.suggest import did_you_mean
from provision.yaml_loader import YamlDocument, load_yaml_file

SPEC_FILE = Path("meta") / "argument_specs.yaml"
TYPES = ("str", "int", "float", "bool", "list", "dict", "path")
OPTION_KEYS = frozenset({"type", "min", "max", "choices", "secret", "description", "flag_list", "managed_flags",
                         "profiles", "options", "required", "format"})


@dataclass(frozen=True)
class Option:
    """One declared variable: what values it takes, and where it was declared."""

    name: str
    types: tuple[str, ...]
    description: str
    role: str
    file: Path
    line: int | None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] = ()
    secret: bool = False
    flags: FlagList | None = None
    #: flag -> the variable that sets it (a flag with a variable of its own is refused in a flag mapping)
    managed_flags: dict[str, str] = field(default_factory=dict)
    #: a folder of named profiles (one YAML file of variables each); the value names the one to apply
    profiles: Path | None = None
    #: the keys a mapping takes (Ansible's suboptions), each declared like a variable
    suboptions: dict[str, Option] = field(default_factory=dict)
    required: bool = False
    #: a format of settings/formats.py a string (or each string of a list) must match; `choices` are
    #: accepted besides (`choices: [""]` for "empty, or a version")
    format: str | None = None


@dataclass
class Specs:
    """Every declared variable of a roles folder, by name."""

    options: dict[str, Option]

    def __contains__(self, name: str) -> bool:
        return name in self.options

    def get(self, name: str) -> Option | None:
        return self.options.get(name)

    @property
    def profile_options(self) -> list[Option]:
        """The variables whose value selects a profile (`model: gemma-4-26b-a4b-awq`)."""
        return [option for option in self.options.values() if option.profiles is not None]


def load_specs(roles_dirs: list[Path]) -> Specs:
    """The declarations of every role folder under each of `roles_dirs` (a role without one declares none)."""
    options: dict[str, Option] = {}
    for roles_dir in roles_dirs:
        for role_dir in sorted(p for p in roles_dir.iterdir() if p.is_dir()) if roles_dir.is_dir() else []:
            spec_file = role_dir / SPEC_FILE
            if spec_file.is_file():
                for option in _read_spec_file(spec_file, role_dir.name):
                    earlier = options.get(option.name)
                    if earlier is not None and earlier.file != option.file:
                        raise InputError(f"declared twice: also in {earlier.file}:{earlier.line}",
                                         option.file, option.line, option.name)
                    options[option.name] = option
    return Specs(options)


def _read_spec_file(path: Path, role: str) -> tuple[Option, ...]:
    """The file's declarations, read once per process while the file is unchanged (a command reads the
    specs for its settings check and again with the playbook)."""
    stat = path.stat()
    return _parse_spec_file(path, role, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _parse_spec_file(path: Path, role: str, mtime_ns: int, size: int) -> tuple[Option, ...]:
    doc = load_yaml_file(path, cached=True)
    data = doc.data or {}
    if not isinstance(data, dict) or not isinstance(data.get("options") or {}, dict):
        raise InputError("expected `options:` mapping variable names to their declarations", path,
                         doc.value_line(()))
    return tuple(_read_options(doc, ("options",), data.get("options") or {}, path, role))


def _read_options(doc: YamlDocument, at: tuple[str, ...], options: dict[Any, Any], path: Path,
                  role: str) -> list[Option]:
    result = []
    for name, raw in options.items():
        line = doc.line((*at, name))

        def refuse(message: str, name: str = name, line: int | None = line) -> InputError:
            return InputError(message, path, line, str(name))

        if not isinstance(raw, dict):
            raise refuse("a declaration is a mapping (type:, description:, ...)")
        for key in raw:
            if key not in OPTION_KEYS:
                raise refuse(f"unknown declaration key {key!r}{did_you_mean(str(key), OPTION_KEYS)}")
        types = raw.get("type")
        types = tuple(types) if isinstance(types, list) else (types,)
        for kind in types:
            if kind not in TYPES:
                raise refuse(f"unknown type {kind!r}; one of {', '.join(TYPES)}{did_you_mean(str(kind), TYPES)}")
        if not str(raw.get("description") or "").strip() and len(at) == 1:
            raise refuse("every variable needs a one-line description:")
        flag_list = raw.get("flag_list")
        if raw.get("format") is not None and raw["format"] not in FORMATS:
            raise refuse(f"unknown format {raw['format']!r}; one of {', '.join(FORMATS)}"
                         f"{did_you_mean(str(raw['format']), FORMATS)}")
        result.append(Option(
            name=str(name), types=types, description=str(raw.get("description") or "").strip(), role=role, file=path,
            line=line, minimum=raw.get("min"), maximum=raw.get("max"), choices=tuple(raw.get("choices") or ()),
            secret=bool(raw.get("secret", False)),
            flags=load_flag_list(path.parent / flag_list) if flag_list else None,
            managed_flags=dict(raw.get("managed_flags") or {}),
            profiles=path.parent.parent / raw["profiles"] if raw.get("profiles") else None,
            suboptions={o.name: o for o in _read_options(doc, (*at, name, "options"), raw.get("options") or {},
                                                         path, role)},
            required=bool(raw.get("required", False)), format=raw.get("format"),
        ))
    return result
