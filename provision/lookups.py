"""Ansible's `lookup()` and `query()` in templates, for the two read-only lookups that make sense on
the controller here: `env` (a variable of this process's environment) and `file` (a file's text).
Real inventories compute connection variables with them (`ansible_host: "{{ lookup('env', 'GPU_IP') }}"`).
Any other lookup (a vault, a password store, `pipe`, which runs a command) is refused by name:
`refused_lookup` finds it in a template without rendering it, so `up` refuses a selected host that
needs one before contacting any host, and listing an inventory never runs one.

Semantics as ansible-core's plugins/lookup/env.py and file.py: an unset variable is "" (or `default=`);
a file's text loses its trailing whitespace (`rstrip=True`, `lstrip=False`), a relative path is
looked for in `files/` then in the working directory (Ansible's search path outside a role is the
playbook's folder, the working directory for an inventory); `lookup` joins several results with
",", `query` returns the list.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import nodes

#: the lookups provision runs (read-only, on the controller)
SUPPORTED = ("env", "file")
#: the largest file a `file` lookup reads (a lookup of /dev/zero is an error, not a hang)
MAX_FILE_BYTES = 1024 * 1024
_CALLS = ("lookup", "query", "q")
_PARSER = jinja2.Environment()  # parses only: the syntax is every environment's (default delimiters)


class LookupRefused(jinja2.TemplateRuntimeError):
    """A lookup provision does not run, or one that failed (a missing file): the message says which."""


def _env(term: str, default: Any = "") -> str:
    return os.environ.get(str(term).strip(), default)


def _file(term: str, rstrip: bool = True, lstrip: bool = False) -> str:
    given = Path(str(term)).expanduser()
    candidates = [given] if given.is_absolute() else [Path("files") / given, given]
    found = next((path for path in candidates if path.exists()), None)
    if found is None:
        raise LookupRefused(f"lookup('file', {term!r}): no such file (looked in {', '.join(map(str, candidates))})")
    if not found.is_file():
        raise LookupRefused(f"lookup('file', {term!r}): {found} is not a regular file")
    if found.stat().st_size > MAX_FILE_BYTES:
        raise LookupRefused(f"lookup('file', {term!r}): the file is over {MAX_FILE_BYTES:,} bytes")
    try:
        text = found.read_text(errors="replace")
    except OSError as error:
        raise LookupRefused(f"lookup('file', {term!r}): {error.strerror or error}") from None
    text = text.lstrip() if lstrip else text
    return text.rstrip() if rstrip else text


def query(name: str, *terms: Any, **options: Any) -> list[str]:
    """`query('env', 'A', 'B')`: one result per term."""
    if name == "env":
        return [_env(term, options.get("default", "")) for term in terms]
    if name == "file":
        return [_file(term, options.get("rstrip", True), options.get("lstrip", False)) for term in terms]
    raise LookupRefused(_refusal(name))


def lookup(name: str, *terms: Any, **options: Any) -> Any:
    """`lookup('env', 'A')`: the results joined with "," (`wantlist=True`: the list)."""
    results = query(name, *terms, **{k: v for k, v in options.items() if k != "wantlist"})
    return results if options.get("wantlist") else ",".join(results)


def _refusal(name: Any) -> str:
    return (f"lookup {name!r} is not supported: provision runs only the read-only lookups "
            f"{' and '.join(SUPPORTED)} (give the value itself, or with !env / !secret)")


def refused_lookup(text: str) -> str | None:
    """Why `text` cannot be rendered here (a lookup other than env/file, or one named by an
    expression), found in its syntax tree without rendering it; None when it can (or does not parse:
    rendering reports that)."""
    if "lookup" not in text and "query" not in text and "q(" not in text:
        return None
    try:
        tree = _PARSER.parse(text)
    except jinja2.TemplateSyntaxError:
        return None
    for call in tree.find_all(nodes.Call):
        if not (isinstance(call.node, nodes.Name) and call.node.name in _CALLS and call.args):
            continue
        name = call.args[0]
        if not isinstance(name, nodes.Const):
            return f"a lookup named by an expression cannot be checked: name it ({' or '.join(SUPPORTED)})"
        if name.value not in SUPPORTED:
            return _refusal(name.value)
    return None
