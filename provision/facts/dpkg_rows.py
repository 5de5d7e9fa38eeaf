"""One dpkg-query for a whole probe batch: the facts' packages section and every apt probe ask for
their packages through `dpkg_rows` (dpkg_rows.sh); the batch reads all their patterns at once first.

dpkg-query parses the whole status database for each call (~4 ms of the host's CPU: the facts' and
the docker role's apt task were two of them in every converged rerun, benchmarks/RESULTS.md). The
calls are found in the snippets' text (`dpkg_rows FORMAT 'PATTERN'...`, the words quoted as
shell.quote writes them); a pattern naming an architecture (`libc6:i386`) is left to its own call,
whose match dpkg makes against `name:arch`, not the name bash's glob would see. The batch's read
keeps its rows on the host, one file per set of patterns, and reads them back while dpkg's database is
unchanged (dpkg_rows_read.sh says when): on a converged host the batch's dpkg-query does not run.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from functools import cache
from importlib import resources

CALL = re.compile(r"\bdpkg_rows (?:facts|apt) ([^\n;|&)$`]*)")
ROWS_KEPT = "/var/lib/provision/dpkg-rows"  # + "-" and a digest of the patterns; the tool's folder on the host


@cache
def shell_file(name: str) -> str:
    """A shell file of this package without its comment lines."""
    text = resources.files("provision.facts").joinpath(name).read_text(encoding="utf-8")
    return "".join(line for line in text.splitlines(keepends=True) if not line.lstrip().startswith("#"))


def dpkg_rows_shell() -> str:
    """dpkg_rows.sh: the shell function a snippet defines before its call."""
    return shell_file("dpkg_rows.sh")


def patterns_called(snippets: list[str]) -> list[str]:
    """Every pattern the snippets' `dpkg_rows` calls name, in order, once; without architectures."""
    found: dict[str, None] = {}
    for snippet in snippets:
        for words in CALL.findall(snippet.replace("\\\n", " ")):
            try:
                found.update(dict.fromkeys(w for w in shlex.split(words) if w and ":" not in w and " " not in w))
            except ValueError:  # not words the quoting makes: that call asks dpkg-query itself
                continue
    return list(found)


def batch_prelude(snippets: list[str]) -> str:
    """The line a probe batch runs before its snippets: one dpkg-query for every call's patterns,
    its rows in _dpkg_rows and the patterns it read in _dpkg_rows_for ("" when no snippet calls)."""
    patterns = patterns_called(snippets)
    if not patterns:
        return ""
    read = shlex.quote(f" {' '.join(patterns)} ")
    words = " ".join(shlex.quote(p) for p in patterns)
    kept = f"{ROWS_KEPT}-{hashlib.sha256(' '.join(patterns).encode()).hexdigest()[:16]}"
    return (f"if command -v dpkg-query >/dev/null 2>&1; then _dpkg_rows_for={read}\n"
            f"{shell_file('dpkg_rows_read.sh')}dpkg_rows_read {shlex.quote(kept)} {words}; fi")
