"""Named profiles: a variable whose value picks one file of variables, applied above the role defaults.

`model: qwen2.5-vl-7b-awq` (declared with `profiles: models` in roles/vllm/meta/argument_specs.yaml)
applies `roles/vllm/models/qwen2.5-vl-7b-awq.yaml`: role defaults < the profile < play vars < inventory
< `-e` (settings/variables.py), so every field of a profile can be overridden per host. A profile's
values are checked like any other (declared, typed); a name that has no file is refused where it was
set, with "did you mean".
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.settings.spec import Option
from provision.suggest import did_you_mean
from provision.yaml_loader import load_yaml_file

SUFFIX = ".yaml"
#: a profile's own keys that are not variables: a one-line summary for `provision models`
METADATA = frozenset({"description"})


@dataclass(frozen=True)
class ProfileValue:
    value: Any
    file: Path
    line: int | None


def names(option: Option) -> list[str]:
    """The profiles of `option`'s folder, by name, sorted."""
    folder = option.profiles
    return list(_names(folder, folder.stat().st_mtime_ns)) if folder and folder.is_dir() else []


@functools.lru_cache(maxsize=64)
def _names(folder: Path, _mtime_ns: int) -> tuple[str, ...]:
    return tuple(sorted(p.name.removesuffix(SUFFIX) for p in folder.glob(f"*{SUFFIX}")))


def read(option: Option, name: str) -> dict[str, ProfileValue]:
    """The variables of profile `name` with the line of each (InputError for a broken file). Read once
    per process and file version: every host of a fleet selects its profile again, per play."""
    assert option.profiles is not None
    path = option.profiles / f"{name}{SUFFIX}"
    try:
        version = path.stat().st_mtime_ns
    except OSError:
        version = 0  # load_yaml_file names the missing file
    return dict(_read(path, version))


@functools.lru_cache(maxsize=256)
def _read(path: Path, _mtime_ns: int) -> dict[str, ProfileValue]:
    doc = load_yaml_file(path, cached=True)
    if not isinstance(doc.data, Mapping):
        raise InputError("a profile is a mapping of variable names to values", path, doc.value_line(()))
    return {str(key): ProfileValue(value, path, doc.line((key,))) for key, value in doc.data.items()
            if key not in METADATA}


def summary(option: Option, name: str) -> str:
    """The profile's `description:` line ("" when it has none)."""
    assert option.profiles is not None
    data = load_yaml_file(option.profiles / f"{name}{SUFFIX}", cached=True).data
    return str(data.get("description") or "") if isinstance(data, Mapping) else ""


def selected(option: Option, value: Any, where: tuple[Path | str | None, int | None]) -> dict[str, ProfileValue]:
    """The profile `value` names, or InputError at `where` (the place the name was set)."""
    known = names(option)
    if not isinstance(value, str) or value not in known:
        raise InputError(f"no {option.name} profile {value!r} in {option.profiles}{did_you_mean(str(value), known)};"
                         f" known: {', '.join(known)}", where[0] or "-e", where[1], option.name)
    return read(option, value)

