"""The bottom layer every other one uses to talk to a host: a command to run, a quoted shell word,
and the `key=value` lines that probes and scripts print back.

Connections, operations, facts and the service layer all import from here, and this module imports
nothing of theirs, so a connection never pulls the operations (and their pydantic models) in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The exit status of a script whose failure no retry mends (the hub refused a file, a download that is
# never the file listed): a host unit does not restart on it (provision/runner/early.py). sysexits.h
# ends at 78, so no tool gives it another meaning.
PERMANENT_FAILURE = 79

# The first line of a probe snippet that only reads local state (files, units, packages) and never
# waits on a daemon or the network: the probe batch runs such snippets one after another in one
# process instead of a process each (provision/runner/probe.py).
QUICK_PROBE = ": provision-quick-probe\n"


@dataclass(frozen=True)
class Command:
    """One shell script to run on the host as one round trip.

    `script` runs under `bash -euo pipefail` fed on stdin (never on the command line, so `ps` on the
    host does not show its content); `data`, when given, is appended after the script as a
    here-document-free payload: the script reads it from file descriptor 3 (see connection.base).
    """

    script: str
    description: str = ""
    sudo: bool = True
    data: bytes | None = None
    timeout: float | None = None
    env: dict[str, str] = field(default_factory=dict)


def quote(value: object) -> str:
    """A value as one single-quoted POSIX shell word (embedded single quotes escaped)."""
    return "'" + str(value).replace("'", "'\"'\"'") + "'"


def parse_fields(text: str, join_repeated: bool = False) -> dict[str, str]:
    """`key=value` lines into a dict; lines without `=` or whose key holds a space are ignored.

    A repeated key's last value wins, or with `join_repeated` its values are joined with newlines
    (a tool that prints several lines under one key, as mokutil does).
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key or " " in key:
            continue
        fields[key] = f"{fields[key]}\n{value}" if join_repeated and key in fields else value
    return fields


def field_value(text: str, key: str) -> str:
    """The value of one `key=value` line ("" when there is none); the last one wins."""
    return parse_fields(text).get(key, "")


def parse_records(text: str, key: str) -> list[str]:
    """Every value of a repeated `key=value` line, in order."""
    prefix = f"{key}="
    return [line[len(prefix):] for line in text.splitlines() if line.startswith(prefix)]


def record_fields(line: str, key: str, count: int) -> list[str] | None:
    """A `key=A<TAB>B<TAB>...` line's `count` fields (the last keeps any further tabs, and missing ones
    are ""), or None for a line of another key: the progress lines shell helpers print."""
    name, sep, value = line.partition("=")
    if not sep or name != key:
        return None
    fields = value.rstrip("\n").split("\t", count - 1)
    return fields + [""] * (count - len(fields))
