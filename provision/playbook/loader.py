"""Load playbooks/*.yaml and roles/<name>/{tasks,handlers,defaults}.yaml into Plays.

Everything is checked here, before any host is touched: unknown operations and task keywords,
missing roles, malformed YAML — each error names the file and line.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.ops import REGISTRY
from provision.playbook.model import TASK_KEYWORDS, Play, Role, Source, Task
from provision.settings.spec import load_specs
from provision.suggest import did_you_mean
from provision.yaml_loader import YamlDocument, load_yaml_file

PLAY_KEYS = frozenset({"name", "hosts", "roles", "vars", "serial", "max_fail_percentage"})


def _items_with_lines(doc: YamlDocument, what: str) -> list[tuple[Any, int | None]]:
    """The list a file holds, each item with its line (an empty file is an empty list)."""
    if doc.data is None:
        return []
    if not isinstance(doc.data, list):
        raise InputError(f"expected a list of {what}", file=doc.source, line=doc.value_line(()))
    return [(item, doc.value_line((index,))) for index, item in enumerate(doc.data)]


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
        raise InputError(f"unknown operation '{op}'{did_you_mean(op, set(REGISTRY) | TASK_KEYWORDS)}",
                         file=source.file, line=source.line, key=op)
    args = raw[op] if raw[op] is not None else {}
    if not isinstance(args, dict):
        raise InputError(f"arguments of '{op}' must be a mapping", file=source.file, line=source.line, key=op)
    notify = raw.get("notify") or []
    tags = raw.get("tags") or []
    starts_early, needs = raw.get("starts_early"), raw.get("needs") or []
    if starts_early is not None and not isinstance(starts_early, str):
        raise InputError("starts_early names one role (the task may start once it has run)", file=source.file,
                         line=source.line, key="starts_early")
    if not isinstance(needs, list) or not all(isinstance(name, str) for name in needs):
        raise InputError("needs is a list of task names", file=source.file, line=source.line, key="needs")
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
        starts_early=starts_early,
        needs=list(needs),
    )


def load_task_file(path: Path, role: str | None) -> list[Task]:
    if not path.exists():
        return []
    doc = load_yaml_file(path, cached=True)
    return [parse_task(raw, Source(path, line), role) for raw, line in _items_with_lines(doc, "tasks")]


def load_role(name: str, roles_dir: Path, where: Source) -> Role:
    path = roles_dir / name
    if not path.is_dir():
        known = [p.name for p in roles_dir.iterdir() if p.is_dir()] if roles_dir.is_dir() else []
        raise InputError(f"no role '{name}' in {roles_dir}{did_you_mean(name, known)}", file=where.file,
                         line=where.line, key="roles")
    defaults = load_yaml_file(path / "defaults.yaml", cached=True).data if (path / "defaults.yaml").exists() else {}
    if not isinstance(defaults or {}, dict):
        raise InputError("defaults must be a mapping", file=path / "defaults.yaml")
    return Role(
        name=name,
        path=path,
        tasks=load_task_file(path / "tasks.yaml", name),
        handlers=load_task_file(path / "handlers.yaml", name),
        defaults=dict(defaults or {}),
    )


ROLE_KEYS = frozenset({"role", "when"})


def load_role_entry(entry: Any, roles_dir: Path, where: Source) -> Role:
    """A play's `roles:` item: a role's name, or Ansible's mapping `{role: NAME, when: CONDITION}`,
    whose condition is added to every task of the role (Ansible: "When you add a conditional to a
    role, Ansible applies the conditional to all tasks within it",
    https://docs.ansible.com/ansible/latest/playbook_guide/playbooks_conditionals.html#conditionals-with-roles)."""
    if not isinstance(entry, dict):
        return load_role(str(entry), roles_dir, where)
    for key in entry:
        if key not in ROLE_KEYS:
            raise InputError(f"unknown role keyword{did_you_mean(str(key), ROLE_KEYS)}", file=where.file,
                             line=where.line, key=str(key))
    if not entry.get("role"):
        raise InputError("a role entry needs `role: NAME`", file=where.file, line=where.line, key="roles")
    role = load_role(str(entry["role"]), roles_dir, where)
    condition = entry.get("when")
    if condition is None:
        return role
    extra = [str(item) for item in condition] if isinstance(condition, list) else [str(condition)]

    def joined(task: Task) -> Task:
        own = [] if task.when is None else task.when if isinstance(task.when, list) else [task.when]
        return replace(task, when=[*extra, *own])
    return replace(role, tasks=[joined(task) for task in role.tasks])


def load_playbook(path: Path, roles_dir: Path | None = None) -> list[Play]:
    """playbooks/site.yaml -> plays; roles are looked up in `roles_dir` (default: ../roles)."""
    roles_dir = roles_dir or path.resolve().parent.parent / "roles"
    plays = []
    doc = load_yaml_file(path, cached=True)
    for index, (raw, line) in enumerate(_items_with_lines(doc, "plays")):
        where = Source(path, line)
        if not isinstance(raw, dict):
            raise InputError("a play must be a mapping", file=path, line=line)
        for key in raw:
            if key not in PLAY_KEYS:
                raise InputError(f"unknown play keyword{did_you_mean(str(key), PLAY_KEYS)}", file=path, line=line,
                                 key=str(key))
        serial = raw.get("serial")
        plays.append(Play(
            name=str(raw.get("name") or raw.get("hosts", "all")),
            hosts=str(raw.get("hosts", "all")),
            roles=[load_role_entry(entry, roles_dir, where) for entry in raw.get("roles") or []],
            vars=dict(raw.get("vars") or {}),
            source=where,
            serial=None if serial is None else (serial if isinstance(serial, list) else [serial]),
            max_fail_percentage=raw.get("max_fail_percentage"),
            var_lines={str(key): doc.line((index, "vars", key)) for key in raw.get("vars") or {}},
        ))
    shared: dict[str, Any] = {}
    for play in plays:
        for role in play.roles:
            shared.update(role.defaults)
    specs = load_specs([roles_dir])
    for play in plays:
        play.playbook_defaults = shared
        play.specs = specs
    check_early_starts(plays)
    return plays


def check_early_starts(plays: list[Play]) -> None:
    """`starts_early` names a role that runs before the task (a role not in this playbook: the task
    runs at its turn); `needs` names tasks of its play before it, none of them notifying a handler or
    starting early itself (runner/early.py runs them at the early point), or handlers of the play where
    that role runs (the task then starts after that play's handlers)."""
    for index, play in enumerate(plays):
        earlier_roles = {role.name for p in plays[:index] for role in p.roles}
        for position, task in enumerate(play.tasks):
            if task.starts_early is None:
                if task.needs:
                    raise InputError("needs is only read with starts_early", file=task.source.file,
                                     line=task.source.line, key="needs")
                continue
            if task.notify or task.changed_when is not None:
                raise InputError("a task that starts early neither notifies handlers nor sets changed_when (its "
                                 "change is counted when its unit ends)", file=task.source.file,
                                 line=task.source.line, key="starts_early")
            roles_here = [role.name for role in play.roles]
            before_here = roles_here[:roles_here.index(task.role)] if task.role in roles_here else []
            everywhere = {role.name for p in plays for role in p.roles}
            if task.starts_early in everywhere and task.starts_early not in earlier_roles | set(before_here):
                raise InputError(f"role '{task.starts_early}' runs after this task, not before it",
                                 file=task.source.file, line=task.source.line, key="starts_early")
            earlier = {t.name: t for t in play.tasks[:position]}
            anchor_play = next((p for p in plays[:index + 1] if task.starts_early in {r.name for r in p.roles}), None)
            handlers = {h.name for h in anchor_play.handlers} if anchor_play is not None else set()
            for name in task.needs:
                needed = earlier.get(name)
                if needed is None and name in handlers:
                    continue  # the task starts after that play's handlers (runner/early.py: after_handlers)
                if needed is None:
                    raise InputError(f"no task named '{name}' before this one in its play, nor a handler of the "
                                     f"play of role '{task.starts_early}'{did_you_mean(name, set(earlier) | handlers)}",
                                     file=task.source.file, line=task.source.line, key="needs")
                if needed.notify or needed.starts_early:
                    raise InputError(f"task '{name}' notifies handlers or starts early itself; it cannot "
                                     "run early", file=task.source.file, line=task.source.line, key="needs")
