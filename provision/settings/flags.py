"""A program's command-line flags, read from a data file, to check a flag mapping before it is used.

The file (e.g. `roles/vllm/meta/vllm-serve-flags.txt`) says in its header where and for which
version it was extracted. One option a line: `SPELLINGS KIND [off=SPELLINGS] [...]`, spellings
comma-separated (`--tensor-parallel-size,-tp int`); KIND `bool` takes `--no-NAME` (the off
spellings), `flag` is a switch that takes no value, anything else takes a value: `int`, `human_int`
(also `8k`, `2G`), `float`, or text. `choices=A,B` lists the only values the program's parser takes
(`--kv-cache-dtype str choices=auto,fp8`). Lines starting with
`#` or `@` are comments or annotations; the header line `# program: NAME VERSION` names the program and
version the list was taken from (shown in errors).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from provision.errors import InputError
from provision.input_files import read_input_text

PROGRAM = "# program:"


@dataclass(frozen=True)
class FlagList:
    """Flag name (without the leading dashes) -> its kind; `version` is the header's first line."""

    kinds: dict[str, str]
    off_names: frozenset[str]
    source: Path
    version: str
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def kind(self, name: str) -> str | None:
        if name in self.off_names:
            return "off"
        return self.kinds.get(name)

    @property
    def names(self) -> list[str]:
        return [*self.kinds, *self.off_names]


def load_flag_list(path: Path) -> FlagList:
    """Read a flag list file (format in this module's docstring)."""
    if not path.is_file():
        raise InputError("flag list file not found", path)
    kinds: dict[str, str] = {}
    off: set[str] = set()
    choices: dict[str, tuple[str, ...]] = {}
    version = ""
    for line in read_input_text(path).splitlines():
        if line.startswith("#"):
            if line.startswith(PROGRAM):
                version = line.removeprefix(PROGRAM).strip()
            continue
        if not line.strip() or line.startswith("@") or line.startswith("positional"):
            continue
        words = line.split()
        kind = words[1] if len(words) > 1 else "str"
        for spelling in words[0].split(","):
            if spelling.startswith("--"):
                kinds[spelling[2:]] = kind
        for word in words[2:]:
            if word.startswith("off="):
                off.update(s[2:] for s in word[4:].split(",") if s.startswith("--"))
        choices.update(_choices_of(words))
    return FlagList(kinds=kinds, off_names=frozenset(off), source=path, version=version or path.name,
                    choices=choices)


def _choices_of(words: list[str]) -> dict[str, tuple[str, ...]]:
    """Flag name -> its `choices=` values, for each long spelling of one line's option."""
    listed = next((word.removeprefix("choices=") for word in words[2:] if word.startswith("choices=")), None)
    if listed is None:
        return {}
    return {spelling[2:]: tuple(listed.split(",")) for spelling in words[0].split(",") if spelling.startswith("--")}
