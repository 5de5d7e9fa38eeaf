"""A program's command-line flags, read from a data file, to check a flag mapping before it is used.

The file (e.g. `roles/vllm/meta/vllm-serve-flags.txt`) says in its header where and for which
version it was extracted. One option a line: `SPELLINGS KIND [off=SPELLINGS] [...]`, spellings
comma-separated (`--tensor-parallel-size,-tp int`); KIND `bool` takes `--no-NAME` (the off
spellings), `flag` is a switch that takes no value, anything else takes a value. Lines starting with
`#` or `@` are comments or annotations; the header line `# program: NAME VERSION` names the program and
version the list was taken from (shown in errors).
"""

from __future__ import annotations

from dataclasses import dataclass
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
    return FlagList(kinds=kinds, off_names=frozenset(off), source=path, version=version or path.name)
