"""Shared by the GPU role tests: the site playbook's tasks rendered for recorded facts, as the runner
renders them (variables, `when`, templated arguments validated by each operation), without a host.

No tests here; the name only keeps it among the files of the GPU role tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from provision.facts import HostFacts, OsInfo, parse_probe
from provision.ops import REGISTRY
from provision.playbook.loader import load_playbook
from provision.playbook.model import Play, Task
from provision.playbook.templating import Renderer, make_environment

REPO = Path(__file__).resolve().parents[2]
SITE = REPO / "playbooks" / "site.yaml"
FIXTURES = Path(__file__).parent / "fixtures" / "facts"
UBUNTU_2004 = OsInfo(id="ubuntu", version_id="20.04", codename="focal", pretty="Ubuntu 20.04.6 LTS")
# what the runner registers for tasks that have not run (skipped) in the same play
NOT_RUN = {"changed": False, "skipped": True}
REGISTERED = {"nvidia_driver_load": NOT_RUN, "container_toolkit_installed": NOT_RUN,
              "container_toolkit_runtime": NOT_RUN, "host_tuning_persistenced_override": NOT_RUN}


GPU_PLAY = "GPU inference host"


@cache
def site_play() -> Play:
    """The play of site.yaml that holds the GPU stack (the model server has a play of its own)."""
    return next(play for play in load_playbook(SITE) if play.name == GPU_PLAY)


def facts(name: str, **overrides: Any) -> HostFacts:
    """A recorded (or hand-built) probe output from tests/unit/fixtures/facts, with fields replaced."""
    return parse_probe((FIXTURES / name).read_text()).replace(**overrides)


@dataclass
class Rendered:
    """A task as the runner would run it on that host: skipped, or with validated arguments."""

    task: Task
    skipped: bool
    args: Any = None

    @property
    def active(self) -> bool:
        return not self.skipped


def renderer(host_facts: HostFacts, registered: dict[str, Any] | None = None, **host_vars: Any) -> Renderer:
    play = site_play()
    variables = {**play.defaults, **play.vars, "notified_handlers": [], **host_vars, **REGISTERED,
                 **(registered or {}), "facts": host_facts.as_vars(), "inventory_hostname": "laptop"}
    return Renderer(make_environment(play.template_dirs), variables)


def render(task: Task, render_with: Renderer) -> Rendered:
    if task.when is not None and not render_with.condition(task.when):
        return Rendered(task, skipped=True)
    op = REGISTRY[task.op]
    arguments = op.prepare(render_with.render(task.args), render_with.render_file)
    return Rendered(task, skipped=False, args=op.Args.model_validate(arguments))


def render_tasks(host_facts: HostFacts, registered: dict[str, Any] | None = None, handlers: bool = False,
                 **host_vars: Any) -> dict[str, Rendered]:
    """Every task (or handler) of the site play by name, rendered for `host_facts` and `host_vars`."""
    render_with = renderer(host_facts, registered, **host_vars)
    tasks = site_play().handlers if handlers else site_play().tasks
    return {task.name: render(task, render_with) for task in tasks}


def apt_specs(rendered: dict[str, Rendered]) -> list[str]:
    """Every package spec ("name" or "name=version") the active apt tasks install."""
    return [spec for item in rendered.values() if item.active and item.task.op == "apt" for spec in item.args.name]
