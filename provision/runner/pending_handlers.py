"""Handlers notified but not run yet, kept on the host until they have run.

A run killed between a notifying change and its handler (docker's daemon.json given the nvidia
runtime, docker not restarted yet) left the handler to nobody: the next run finds the change made,
notifies nothing, and docker never loads the runtime. Found by the whole-site kill chain
(tests/e2e/faults/test_kill_the_whole_site.py: killed after "docker knows the nvidia runtime", the
next run's "a container sees the GPU" failed). Ansible loses them the same way (ansible/ansible#4766:
"The next time you start the play, there is no change, so the service will not restarted again");
its `--force-handlers` runs them after a failed task, not after a killed controller.

So before a change that notifies is applied, the handlers it notifies are written on the host
(one file per play, a name a line); the next run reads them in its first round trip and runs them
with its own; the file goes once all of the play's handlers ran. Written before the change, never
after: a kill in between costs at most one handler run too many (handlers are idempotent), never
one too few.
"""

from __future__ import annotations

import hashlib

from provision.shell import QUICK_PROBE
from provision.shell import quote as shell_quote

FOLDER = "/var/lib/provision/handlers"


def play_key(play_name: str) -> str:
    """The file name for a play (play names are free text)."""
    return hashlib.sha256(play_name.encode()).hexdigest()[:16]


def read_snippet(folder: str = FOLDER) -> str:
    """Probe snippet: `KEY<TAB>HANDLER` for each pending handler of every play."""
    return (f'{QUICK_PROBE}for f in {shell_quote(folder)}/*; do [ -f "$f" ] || continue; '
            'while IFS= read -r name; do printf \'%s\\t%s\\n\' "${f##*/}" "$name"; done < "$f"; done; true')


def parse(output: str) -> dict[str, list[str]]:
    """The probe's lines -> {play key: [handler names, in the order they were notified]}."""
    pending: dict[str, list[str]] = {}
    for line in output.splitlines():
        key, tab, name = line.partition("\t")
        if tab and name and name not in pending.setdefault(key, []):
            pending[key].append(name)
    return pending


def record_script(key: str, names: list[str], folder: str = FOLDER) -> str:
    """Append `names` to the play's file (O_APPEND: lines are never torn by a kill)."""
    path = shell_quote(f"{folder}/{key}")
    return f"mkdir -p -- {shell_quote(folder)} && printf '%s\\n' {' '.join(map(shell_quote, names))} >> {path}"


def clear_script(key: str, folder: str = FOLDER) -> str:
    return f"rm -f -- {shell_quote(f'{folder}/{key}')}"
