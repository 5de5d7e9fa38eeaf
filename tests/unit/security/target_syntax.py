"""The target syntaxes' own readers, to prove a hostile value comes back out as the same data.

- bash: `bash -n` (parses) and running the script with a marker the value would create.
- systemd: `systemd-analyze verify` where installed (it warns on stderr, exit 0, for a line it cannot
  read), and `read_unit`/`split_command`, a reader of the rules systemd.syntax(7) ("Quoting", line
  continuation and comments) and systemd.service(5) ("Command lines": C escapes, `%%`, `$$`) state.
- apt.conf: `apt-config -c FILE dump`, apt's own parser.
- deb822: `apt-get indextargets --no-release-info` with the file as the only sources (apt's own
  parser: the repositories it reads), and
  `read_stanza`, deb822(5)'s rule (a field is one line; a continuation line starts with a space).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\",
             '"': '"', "'": "'", "s": " "}
SPECIFIER = re.compile(r"%(.)")


def read_unit(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of every setting, in order (systemd.syntax(7): a line ending in `\\` is
    joined with the next by a space; `#` and `;` lines are comments, also inside a continuation)."""
    settings: list[tuple[str, str, str]] = []
    section, pending = "", ""
    for raw in text.split("\n"):
        stripped = raw.strip()
        if stripped.startswith(("#", ";")):
            continue
        if pending:
            raw = pending + " " + raw.lstrip()
            pending = ""
        if raw.endswith("\\"):
            pending = raw[:-1]
            continue
        line = raw.strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        assert sep, f"systemd would ignore this line (missing '='): {line!r}"
        settings.append((section, key.strip(), value.lstrip()))
    return settings


def resolve_specifiers(value: str) -> str:
    """`%%` is `%`; any other specifier would be replaced by systemd (systemd.unit(5)), so a value
    meant as data has none."""
    def one(match: re.Match[str]) -> str:
        assert match.group(1) == "%", f"specifier %{match.group(1)} in {value!r}"
        return "%"
    return SPECIFIER.sub(one, value)


def split_command(value: str) -> list[str]:
    """ExecStart's words (systemd.service(5) "Command lines"): whitespace separates words, single or
    double quotes wrap one, C-style escapes (\\n, \\xNN, \\\\, \\', ...) are decoded, `$$` is `$`."""
    value = resolve_specifiers(value)
    words: list[str] = []
    index = 0
    while index < len(value):
        if value[index].isspace():
            index += 1
            continue
        word, quote = "", None
        while index < len(value) and (quote or not value[index].isspace()):
            char = value[index]
            if char in "'\"" and quote is None:
                quote = char
            elif char == quote:
                quote = None
            elif char == "\\":
                escape = value[index + 1]
                if escape == "x":
                    word += chr(int(value[index + 2:index + 4], 16))
                    index += 2
                else:
                    word += C_ESCAPES[escape]
                index += 1
            else:
                word += char
            index += 1
        assert quote is None, f"unterminated quote in {value!r}"
        words.append(word.replace("$$", "$"))
    return words


def systemd_verify(unit_file: Path) -> None:
    """`systemd-analyze verify`: no warning about any line of the file (skipped where not installed)."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (the systemd.syntax(7) reader above still ran)")
    done = subprocess.run([tool, "verify", "--man=no", str(unit_file)], capture_output=True, text=True,
                          check=False)
    complaints = [line for line in done.stderr.splitlines() if unit_file.name in line]
    assert not complaints, done.stderr


def apt_config_dump(conf: Path) -> list[str]:
    """apt's own reading of an apt.conf file: the `Key "value";` lines `apt-config dump` prints."""
    tool = shutil.which("apt-config")
    if tool is None:
        pytest.skip("apt-config is not installed")
    done = subprocess.run([tool, "-c", str(conf), "dump"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and not done.stderr, f"apt cannot read {conf}: {done.stderr}"
    return done.stdout.splitlines()


def apt_sources_uris(sources: Path, tmp_path: Path) -> list[str]:
    """The repository URIs apt reads from a deb822 .sources file alone (`apt-get indextargets`)."""
    tool = shutil.which("apt-get")
    if tool is None:
        pytest.skip("apt-get is not installed")
    parts = tmp_path / "sources.list.d"
    parts.mkdir(exist_ok=True)
    (parts / sources.name).write_text(sources.read_text())
    done = subprocess.run([tool, "-o", "Dir::Etc::sourcelist=/dev/null", "-o", f"Dir::Etc::sourceparts={parts}/",
                           "indextargets", "--no-release-info", "--format", "$(REPO_URI)"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0 and not done.stderr.strip(), f"apt cannot read {sources}: {done.stderr}"
    return sorted(set(done.stdout.split()))


def read_stanza(text: str) -> dict[str, str]:
    """deb822(5): `Field: value` lines (a line starting with a space continues the field above)."""
    fields: dict[str, str] = {}
    last = ""
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line[0].isspace():
            fields[last] += "\n" + line.strip()
            continue
        name, sep, value = line.partition(":")
        assert sep, f"not a deb822 field: {line!r}"
        assert name not in fields, f"field {name} twice"
        fields[name] = value.strip()
        last = name
    return fields
