"""The state probes a play used on a host last time, remembered on the controller, so the next run
sends them all in its first round trip.

A task whose arguments or `when` read facts or an earlier task's registered result cannot render
before those are known, so without a memory each such dependency costs one more round trip (the
whole site's converged rerun took 8). With it, the first script carries last run's snippets too;
their outputs are cached by snippet text like every other probe, so an output is only ever used by
a task that renders to exactly that text now (a remembered snippet that no task renders to costs
its run time and nothing else), and any change on the host drops them as it drops every probe.
This is a hint, like Ansible's fact cache (`fact_caching = jsonfile`) and unlike it never trusted
for a value: a missing, unreadable or foreign file costs round trips, never a wrong answer.

A secret's value is never written: where a snippet holds one of the host's secret variables (the
hub token in the weights' probe) the file names the variable, and the next run puts that run's
value back; a snippet holding any other secret (`REDACTOR` knows them all), even quoted, is not kept. The files
are the user's own (0600 in a 0700 folder): `probes/` of the controller's cache (controller_cache.py:
`~/.cache/provision/probes` unless `$PROVISION_CACHE_DIR` or `$XDG_CACHE_HOME` say otherwise), read
back only if their folder and HMAC say they are the user's own. Even then a snippet may name only a
secret that its task's own templates use (directly or through the variables they name): a stored
snippet cannot ask for the sudo password where the task asks for the hub token.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from jinja2 import meta

from provision import controller_cache
from provision.secrets import REDACTOR, Secret

if TYPE_CHECKING:
    from provision.playbook.model import Play, Task

MAX_BYTES = 512 * 1024  # a play's snippets are ~40 KiB (the whole site); more is not a memory worth keeping
VERSION = 3  # 3: kept with an HMAC (controller_cache.py)
MIN_SECRET = 4  # as REDACTOR: shorter values are not masked anywhere
PLACEHOLDER = re.compile("\0secret:([^\0]*)\0")


def task_key(task: Task) -> str:
    """A task as its remembered probes are filed: where it is written, and its name."""
    return f"{task.source} {task.name}"


def selected_tasks(play: Play, selects: Callable[[Task], bool]) -> dict[str, Task]:
    """The play's selected tasks, by key. Not its handlers: one runs only when notified, and its probe
    may be the costly kind (the GPU check after docker's restart checks for real every time)."""
    return {task_key(task): task for task in play.tasks if selects(task)}


def secrets_asked(task: Task, variables: Mapping[str, Any]) -> set[str]:
    """The secret variables `task` puts into its arguments or conditions: those its templates name,
    and those named by the templates of the variables they name, and so on (a role default
    `token: "{{ hf_token }}"`). Parsed, never rendered."""
    parser = jinja2.Environment()
    conditions = [task.when] if isinstance(task.when, str) else list(task.when or [])
    if isinstance(task.changed_when, str):
        conditions.append(task.changed_when)
    named: set[str] = set()
    pending: list[Any] = [task.args, *(f"{{{{ {condition} }}}}" for condition in conditions)]  # bare expressions
    while pending:
        value = pending.pop()
        if isinstance(value, Mapping):
            pending.extend(value.values())
        elif isinstance(value, list | tuple):
            pending.extend(value)
        elif isinstance(value, str) and "{" in value:
            try:
                found = meta.find_undeclared_variables(parser.parse(value))
            except jinja2.TemplateSyntaxError:
                continue
            for name in found - named:
                named.add(name)
                pending.append(variables.get(name))
    return {name for name in named if isinstance(variables.get(name), Secret)}


def secret_values(variables: Mapping[str, Any]) -> dict[str, str]:
    """The host's secret variables by name (what a remembered snippet names instead of the value)."""
    return {name: value.reveal() for name, value in variables.items() if isinstance(value, Secret)}


def default_folder() -> Path:
    return controller_cache.folder("probes")


class ProbeMemory:
    """Remembered probe snippets of one host (named by where and how it is reached), by play and
    task (a run of some tags sends only the selected tasks' snippets)."""

    def __init__(self, folder: Path, host_key: str) -> None:
        self.folder = folder
        self.host_key = host_key
        self._stored: dict[str, list[tuple[str, str]]] = {}  # per play: (task, snippet), secrets as names

    def path(self, play: str) -> Path:
        digest = hashlib.sha256(f"{VERSION}\0{self.host_key}\0{play}".encode()).hexdigest()[:32]
        return self.folder / f"{digest}.json"

    def recall(self, play: str, secrets: Mapping[str, str], tasks: Mapping[str, Task],
               variables: Mapping[str, Any]) -> list[str]:
        """Last run's snippets of these tasks (by key) of the play, each secret put back from
        `secrets` (variable name -> value); [] when there are none or the file is not ours. A snippet
        naming a secret that is not among this run's variables, or that its task's templates do not
        use (`secrets_asked` of `variables`), is left out."""
        stored_bytes = controller_cache.read(self.path(play))
        try:
            document = json.loads(stored_bytes) if stored_bytes is not None else None
        except ValueError:
            document = None
        stored = document.get("probes") if isinstance(document, dict) and document.get("host") == self.host_key \
            and document.get("play") == play else None
        self._stored[play] = [(p[0], p[1]) for p in stored if isinstance(p, list) and len(p) == 2
                              and isinstance(p[0], str) and isinstance(p[1], str)] if isinstance(stored, list) else []
        recalled = (_unmask(snippet, secrets, functools.partial(secrets_asked, tasks[task], variables))
                    for task, snippet in self._stored[play] if task in tasks)
        return [snippet for snippet in recalled if snippet is not None]

    def keep(self, play: str, used: list[tuple[str, str]], ran: set[str], secrets: Mapping[str, str],
             tasks: set[str]) -> None:
        """Remember the (task, snippet) pairs used in this run, and those stored for the tasks that
        did not run (another selection, or a run that stopped early), of the play's `tasks` only (no
        handler, no task gone from the play); a secret's value is kept as its variable's name, and a
        snippet holding any other secret is not kept. Best effort: a controller that cannot write
        its cache still runs."""
        masked = ((task, _mask(snippet, secrets)) for task, snippet in dict.fromkeys(used) if task in tasks)
        kept = [(task, snippet) for task, snippet in masked if snippet is not None]
        kept += [pair for pair in self._stored.get(play, [])
                 if pair[0] in tasks and pair[0] not in ran and pair not in kept]
        if kept == self._stored.get(play) or sum(len(snippet) for _, snippet in kept) > MAX_BYTES:
            return
        document = {"host": self.host_key, "play": play, "probes": [list(pair) for pair in kept]}
        if controller_cache.write(self.path(play), json.dumps(document).encode()):
            self._stored[play] = kept


def _placeholder(name: str) -> str:
    return f"\0secret:{name}\0"


def _mask(snippet: str, secrets: Mapping[str, str]) -> str | None:
    """The snippet with each named secret's value as its placeholder; None if a secret is left."""
    if "\0" in snippet:
        return None
    for name, value in sorted(secrets.items(), key=lambda item: len(item[1]), reverse=True):
        if len(value) >= MIN_SECRET:
            snippet = snippet.replace(value, _placeholder(name))
    return None if REDACTOR.touches(snippet) else snippet


def _unmask(snippet: str, secrets: Mapping[str, str], asked: Callable[[], set[str]]) -> str | None:
    """The snippet with its secrets' values put back; None if it names one that is not in `secrets`
    or not among those its task asks for (`asked`, worked out only for a snippet that names one)."""
    names = set(PLACEHOLDER.findall(snippet))
    if names and not names <= asked():
        return None
    for name in names:
        if name not in secrets:
            return None
        snippet = snippet.replace(_placeholder(name), secrets[name])
    return snippet
