"""One stat for a whole probe batch: the file probes' paths (provision/ops/filestate.py) read at once.

A process costs the host ~1 ms of CPU (benchmarks/RESULTS.md, host CPU); a converged docker role reads
two paths. A file probe finds its row in _stat_rows by its path (the last field: `%n` prints it as
given), else, or run alone, runs its own stat. Kept apart from the operations: the runner imports it
before it connects (no pydantic then).
"""

from __future__ import annotations

import re

STAT_FORMAT = "%a %u %g %U %G %s"
PATH_LINE = "p="  # a file probe's first line: PATH_LINE + the path as provision.shell.quote writes it
PATH_IN_PROBE = re.compile("^" + re.escape(PATH_LINE) + r"('(?:[^']|'\"'\"')*')\nif \[ -L \"\$p\" \]", re.M)


def stat_prelude(snippets: list[str]) -> str:
    """The lines a probe batch runs before its snippets: one stat of the file probes' paths that exist
    and are no symlinks (a symlink's probe stats its target), its rows in _stat_rows; "" when fewer
    than two paths are probed (one probe's own stat costs the same)."""
    paths = list(dict.fromkeys(path for snippet in snippets for path in PATH_IN_PROBE.findall(snippet)))
    if len(paths) < 2:
        return ""
    stat = f"stat -c '{STAT_FORMAT} %n' -- \"${{_stat_paths[@]}}\" 2>/dev/null"
    return (f"_stat_paths=()\nfor _p in {' '.join(paths)}; do "
            '[ -e "$_p" ] && [ ! -L "$_p" ] && _stat_paths+=("$_p"); done\n'
            f'[ "${{#_stat_paths[@]}}" -gt 1 ] && _stat_rows=$({stat})')
