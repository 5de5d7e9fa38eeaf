"""Load playbooks/*.yaml and roles/<name>/{tasks,handlers,defaults}.yaml into Plays.

Everything is checked here, before any host is touched: unknown operations and task keywords,
missing roles, malformed YAML — each error names the file and line.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml

from provision.errors import InputError
from provision.ops import REGISTRY
from provision.playbook.model import TASK_KEYWORDS, Play, Role, Source, Task

PLAY_KEYS = frozenset({"name", "hosts", "roles", "vars", "serial", "max_fail_percentage"})


def load_yaml_nodes(path: Path) -> tuple[Any, yaml.Node | None]:
    """The document and its node tree (for line numbers); syntax errors name file and line."""
    try:
        text = path.read_text()
    except OSError as error:
        raise InputError(f"cannot read: {error.strerror}", file=path) from error
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        raise InputError(f"YAML syntax error: {error.problem or error}", file=path,
                         line=mark.line + 1 if mark else None) from error
    finally:
        loader.dispose()
    return data, node


def _line(node: yaml.Node | None) -> int | None:
    return node.start_mark.line + 1 if node is not None else None


def _items_with_lines(data: Any, node: yaml.Node | None, path: Path, what: str) -> list[tuple[Any, int | None]]:
    if data is None:
        return []
    if not isinstance(data, list) or not isinstance(node, yaml.SequenceNode):
        raise InputError(f"expected a list of {what}", file=path, line=_line(node))
    return [(item, _line(child)) for item, child in zip(data, node.value, strict=True)]


def suggest(word: str, choices: list[str] | set[str] | frozenset[str]) -> str:
    """' (did you mean 'x'?)' when a close match exists, else ''."""
    close = difflib.get_close_matches(word, sorted(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def parse_task(raw: Any, source: Source, role: str | None) -> Task:
    """One task mapping -> Task; exactly one key names a registered operation."""
    if not isinstance(raw, dict):
        raise InputError("a task must be a mapping", file=source.file, line=source.line)
    op_keys = [key for key in raw if key not in TASK_KEYWORDS]
    if len(op_keys) != 1:
        if not op_keys:
            message = "task names no operation"
        else:
            message = f"task names several operations or unknown keys: {', '.join(map(str, op_keys))}"
        raise InputError(message, file=source.file, line=source.line, key=str(raw.get("name", "")) or None)
    op = str(op_keys[0])
    if op not in REGISTRY:
        raise InputError(f"unknown operation '{op}'{suggest(op, set(REGISTRY) | TASK_KEYWORDS)}",
                         file=source.file, line=source.line, key=op)
    args = raw[op] if raw[op] is not None else {}
    if not isinstance(args, dict):
        raise InputError(f"arguments of '{op}' must be a mapping", file=source.file, line=source.line, key=op)
    notify = raw.get("notify") or []
    tags = raw.get("tags") or []
    return Task(
        name=str(raw.get("name") or op),
        op=op,
        args=args,
        source=source,
        role=role,
        when=raw.get("when"),
        notify=[notify] if isinstance(notify, str) else list(notify),
        tags=frozenset([tags] if isinstance(tags, str) else tags) | ({role} if role else set()),
        register=raw.get("register"),
        ignore_errors=bool(raw.get("ignore_errors", False)),
        changed_when=raw.get("changed_when"),
    )


def load_task_file(path: Path, role: str | None) -> list[Task]:
    if not path.exists():
        return []
    data, node = load_yaml_nodes(path)
    return [parse_task(raw, Source(path, line), role) for raw, line in _items_with_lines(data, node, path, "tasks")]


def load_role(name: str, roles_dir: Path, where: Source) -> Role:
    path = roles_dir / name
    if not path.is_dir():
        known = [p.name for p in roles_dir.iterdir() if p.is_dir()] if roles_dir.is_dir() else []
        raise InputError(f"no role '{name}' in {roles_dir}{suggest(name, known)}", file=where.file,
                         line=where.line, key="roles")
    defaults, _ = load_yaml_nodes(path / "defaults.yaml") if (path / "defaults.yaml").exists() else ({}, None)
    if not isinstance(defaults or {}, dict):
        raise InputError("defaults must be a mapping", file=path / "defaults.yaml")
    return Role(
        name=name,
        path=path,
        tasks=load_task_file(path / "tasks.yaml", name),
        handlers=load_task_file(path / "handlers.yaml", name),
        defaults=dict(defaults or {}),
    )


def load_playbook(path: Path, roles_dir: Path | None = None) -> list[Play]:
    """playbooks/site.yaml -> plays; roles are looked up in `roles_dir` (default: ../roles)."""
    roles_dir = roles_dir or path.resolve().parent.parent / "roles"
    data, node = load_yaml_nodes(path)
    plays = []
    for raw, line in _items_with_lines(data, node, path, "plays"):
        where = Source(path, line)
        if not isinstance(raw, dict):
            raise InputError("a play must be a mapping", file=path, line=line)
        for key in raw:
            if key not in PLAY_KEYS:
                raise InputError(f"unknown play keyword{suggest(str(key), PLAY_KEYS)}", file=path, line=line,
                                 key=str(key))
        serial = raw.get("serial")
        plays.append(Play(
            name=str(raw.get("name") or raw.get("hosts", "all")),
            hosts=str(raw.get("hosts", "all")),
            roles=[load_role(str(name), roles_dir, where) for name in raw.get("roles") or []],
            vars=dict(raw.get("vars") or {}),
            source=where,
            serial=None if serial is None else (serial if isinstance(serial, list) else [serial]),
            max_fail_percentage=raw.get("max_fail_percentage"),
        ))
    return plays
