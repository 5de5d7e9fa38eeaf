"""Batch the state probes of many tasks into one remote script, and split its output again.

Each task's probe snippet runs behind a marker line: a snippet that may wait (a daemon, the network) in
a process of its own, all at once; the quick ones (QUICK_PROBE: local reads of files, units, packages)
one after another in one shared process. The output is cut at the markers. Outputs are cached by
snippet text, so a task whose arguments were rendered the same way reuses what the batch read. After
any change on the host the cache is dropped: state is stale.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterable

from provision.connection.base import Connection
from provision.errors import CommandFailed
from provision.facts.dpkg_rows import batch_prelude
from provision.facts.stat_rows import stat_prelude
from provision.secrets import SECRET_PROBE, hide_secret_sections
from provision.shell import QUICK_PROBE

PIPES_AT_ONCE = 200


def build_script(snippets: Iterable[str], token: str) -> str:
    """One script that runs every snippet with stdin closed and prints their outputs, each behind its
    marker line (labelled with its index, and `secret` for a snippet that prints one: traces and
    errors hide that section).

    The snippets run at once (they only read the host, so none depends on another), each group into a
    pipe of its own (a process substitution) that one `cat` reads: a converged host costs its slowest
    check (the smoke checks' answers, the facts' nvidia-smi), not their sum, and the outputs (some
    secret, e.g. the API key's probe) never touch a disk. A snippet that may wait has a process (a
    group) of its own; the quick ones (they start with QUICK_PROBE) share one, in turn: a fork in the
    batch's shell costs the host ~0.4 ms, more than most quick reads take (benchmarks/RESULTS.md, host
    CPU). With one snippet that may wait at most, nothing runs at once: the quick ones in the batch's
    own shell, then that one in a subshell, and no `cat`. A group whose output outgrows its pipe
    (64 KiB) waits for `cat` to reach it. No temp folder, no job control.
    """
    snippets = list(snippets)
    parts = ["set +e +u +o pipefail", *filter(None, [batch_prelude(snippets), stat_prelude(snippets)])]
    for index, snippet in enumerate(snippets):
        label = f"{index} secret" if snippet.startswith(SECRET_PROBE) else str(index)
        parts.append(f"_probe{index}() {{ echo '@@{token} {label}'\n{{ {snippet}\n}} </dev/null\n}}")
    quick = [index for index, snippet in enumerate(snippets) if snippet.startswith(QUICK_PROBE)]
    others = [index for index in range(len(snippets)) if index not in quick]
    groups = [" ".join(f"_probe{index};" for index in quick)] if len(quick) > 1 else []
    groups += [f"_probe{index}" for index, snippet in enumerate(snippets) if index not in quick or len(quick) < 2]
    if len(others) < 2:
        # nothing to wait for at once: the quick ones in this shell, in turn, then the other in a
        # process of its own; no pipe, no `cat` (a process less on the host: the converged rerun's shape)
        parts += [f"_probe{index}" for index in quick] + [f"( _probe{index} )" for index in others]
    else:
        # a pipe a group: a few hundred at a time stay far below the 1024 open files a session
        # usually may have; each further few hundred in a subshell, whose exit closes its pipes (bash
        # does not always close them between commands: `bash -c` keeps them open to its end)
        chunks = [groups[first:first + PIPES_AT_ONCE] for first in range(0, len(groups), PIPES_AT_ONCE)]
        for chunk in chunks:
            cat = "cat " + " ".join(f"<({group})" for group in chunk)
            parts.append(cat if len(chunks) == 1 else f"( {cat} )")
    parts.append(f"echo '@@{token} end'")
    return "\n".join(parts) + "\n"


def split_output(output: str, token: str, count: int) -> list[str]:
    """The stdout of each snippet, by its index (the sections come in the order their groups ran)."""
    marker = f"@@{token} "
    outputs: dict[int, list[str]] = {}
    current: list[str] | None = None
    ended = False
    for line in output.splitlines(keepends=True):
        if line.startswith(marker):
            label = line[len(marker):].split()
            if label == ["end"]:
                ended = True
                break
            current = outputs.setdefault(int(label[0]) if label and label[0].isdigit() else -1, [])
        elif current is not None:
            current.append(line)
    if not ended or sorted(outputs) != list(range(count)):
        raise ValueError(f"probe output is incomplete ({len(outputs)} of {count} sections)")
    return ["".join(outputs[index]) for index in range(count)]

class ProbeCache:
    """Probe outputs by snippet, filled one batch (one round trip) at a time."""

    def __init__(self) -> None:
        self._outputs: dict[str, str] = {}

    def __contains__(self, snippet: str) -> bool:
        return snippet in self._outputs

    def get(self, snippet: str) -> str:
        return self._outputs[snippet]

    def invalidate(self) -> None:
        self._outputs.clear()

    def fill(self, conn: Connection, snippets: list[str],
             first: Callable[[str, str], str | None] | None = None) -> None:
        """Run all not-yet-known snippets in one script on the host; through `first` (given the script
        and its token, it returns the whole output or None) when given, through `conn` when it gave
        nothing whole."""
        wanted = [s for s in dict.fromkeys(snippets) if s and s not in self._outputs]
        if not wanted:
            return
        token = secrets.token_hex(6)
        script = build_script(wanted, token)
        output = first(script, token) if first is not None else None
        if output is not None:
            with contextlib.suppress(ValueError):
                self._outputs.update(zip(wanted, split_output(output, token, len(wanted)), strict=True))
                return
        result = conn.run(script, sudo=True)
        try:
            outputs = split_output(result.stdout, token, len(wanted))
        except ValueError as error:
            raise CommandFailed(command="(state probe)", exit_code=result.rc,
                                stdout=hide_secret_sections(result.stdout),
                                stderr=f"{result.stderr}\n{error}", host=conn.host_name) from error
        self._outputs.update(zip(wanted, outputs, strict=True))
