"""The playbook's data: plays, roles and tasks, as loaded from YAML (untemplated)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.settings.spec import Specs
from provision.settings.variables import with_profiles

TASK_KEYWORDS = frozenset(
    {"name", "when", "notify", "tags", "register", "ignore_errors", "changed_when", "listen", "timeout",
     "starts_early", "needs"}
)


@dataclass(frozen=True)
class Source:
    """Where a thing was written: for errors that send the user to the right line."""

    file: Path
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}" if self.line else str(self.file)


@dataclass
class Task:
    """One step: an operation and its (still templated) arguments, with Ansible's task keywords."""

    name: str
    op: str
    args: dict[str, Any]
    source: Source
    role: str | None = None
    when: str | list[str] | None = None
    notify: list[str] = field(default_factory=list)
    tags: frozenset[str] = frozenset()
    register: str | None = None
    ignore_errors: bool = False
    changed_when: str | bool | None = None
    #: a role of the playbook after which this task's change may start, in a unit on the host, while
    #: the tasks between run (runner/early.py); at its own turn the task waits for that unit
    starts_early: str | None = None
    #: the earlier tasks of its play (by name) whose results it needs: they run early with it
    needs: list[str] = field(default_factory=list)


@dataclass
class Role:
    """roles/<name>/: tasks, handlers, defaults and templates."""

    name: str
    path: Path
    tasks: list[Task]
    handlers: list[Task]
    defaults: dict[str, Any]

    @property
    def templates_dir(self) -> Path:
        return self.path / "templates"


@dataclass
class Play:
    """A hosts pattern and the roles (then tasks) to apply to those hosts."""

    name: str
    hosts: str
    roles: list[Role]
    vars: dict[str, Any]
    source: Source
    serial: list[int | str] | None = None
    max_fail_percentage: float | None = None
    #: every role default of the whole playbook (filled by the loader); this play's roles win
    playbook_defaults: dict[str, Any] = field(default_factory=dict)
    #: the roles' variable declarations (filled by the loader): which variables select a profile
    specs: Specs = field(default_factory=lambda: Specs({}))
    #: the playbook line of each of `vars` (filled by the loader), for `provision vars`
    var_lines: dict[str, int | None] = field(default_factory=dict)

    @property
    def tasks(self) -> list[Task]:
        return [task for role in self.roles for task in role.tasks]

    @property
    def handlers(self) -> list[Task]:
        return [handler for role in self.roles for handler in role.handlers]

    @property
    def role_defaults(self) -> dict[str, Any]:
        """Role defaults, playbook-wide: one site shares one set of settings (unlike Ansible, where a
        role's defaults exist only in its play), so a check in an early play can read the model
        profile that a later play's role selects."""
        merged: dict[str, Any] = dict(self.playbook_defaults)
        for role in self.roles:
            merged.update(role.defaults)
        return merged

    @property
    def defaults(self) -> dict[str, Any]:
        """Role defaults with the profiles they select by default applied (the default model's
        settings); a host that selects another profile gets it through `variables.host_variables`."""
        return with_profiles(self.role_defaults, self.specs)

    @property
    def template_dirs(self) -> list[Path]:
        return [role.templates_dir for role in self.roles]
