"""What one host needs from a bundle, read from the tasks `up` would run for it.

Each operation declares what a task of it needs (`Operation.offline_arguments`, `offline_needs`: apt
packages, repositories with their key URLs, components and preferences, images, weights; the types
are in provision/ops/needs.py); this module renders those arguments with the host's variables and
facts, as the run renders them, and gathers the needs per host, naming no operation. A task that
cannot be rendered before the run (it reads a result registered earlier in the run) is reported when
its operation says so (`offline_reports_unrendered`: the packages and repositories), not guessed.

The repositories, components and preferences are what the packages are resolved with; the URLs those
repositories take their keys from are files the bundle carries (`urls`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from provision.inventory.model import Host, Inventory
from provision.ops import REGISTRY
from provision.ops.needs import (
    AptPreferences,
    AptRepository,
    Components,
    Download,
    Image,
    Need,
    Packages,
    Weights,
)
from provision.playbook.model import Play, Task
from provision.playbook.templating import Renderer, TemplateError, make_environment
from provision.playbook.unsafe import mark_unsafe
from provision.runner.host_run import RunOptions
from provision.settings.variables import host_variables, inventory_variables


@dataclass
class HostNeeds:
    """One host's part of a bundle. `release` is `<os id>-<codename>` (debian-bookworm)."""

    host: str
    release: str
    with_recommends: list[str] = field(default_factory=list)
    without_recommends: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    weights: list[Weights] = field(default_factory=list)
    #: tasks whose packages could not be known before the run ("role: task (why)")
    unresolved: list[str] = field(default_factory=list)
    #: the rendered arguments of each apt_repository task that adds a repository
    repositories: list[dict[str, Any]] = field(default_factory=list)
    #: apt preferences files the run writes: path -> text
    preferences: dict[str, str] = field(default_factory=dict)
    #: the URLs the run downloads a repository's key or keyring package from
    urls: list[str] = field(default_factory=list)
    #: components the run adds to the release's own apt entries: sources file -> components (contrib)
    components: dict[str, list[str]] = field(default_factory=dict)
    #: the host's architecture as `uname -m` says it (x86_64)
    arch: str = ""

    @property
    def packages(self) -> list[str]:
        return sorted({*self.with_recommends, *self.without_recommends})


def release_of(facts: dict[str, Any]) -> str:
    os = facts.get("os") or {}
    return f"{os.get('id', '')}-{os.get('codename', '')}"


def package_name(spec: str) -> str:
    """`docker.io=20.10*` -> `docker.io` (a pin's version is the archive's business)."""
    return spec.split("=", 1)[0]


def host_needs(plays: list[Play], inventory: Inventory, host: Host, facts: dict[str, Any],
               extra_vars: dict[str, Any], options: RunOptions) -> HostNeeds:
    """What `host` needs when `up` runs `plays` with these tags on a host with these facts."""
    needs = HostNeeds(host.name, release_of(facts), arch=str(facts.get("arch") or ""))
    matched = {play.name: {h.name for h in inventory.play_hosts(play.hosts)} for play in plays}
    for play in plays:
        if host.name not in matched[play.name]:
            continue
        variables = {**inventory_variables(inventory), **host_variables(play, host, extra_vars),
                     "facts": mark_unsafe(facts), "inventory_hostname": host.name}  # the host's: data
        renderer = Renderer(make_environment(play.template_dirs), variables)
        for task in play.tasks:
            if options.selects(task):
                _add_task(needs, renderer, task)
    return needs


def _add_task(needs: HostNeeds, renderer: Renderer, task: Task) -> None:
    op = REGISTRY[task.op]
    if not op.offline_arguments:
        return
    try:
        if task.when is not None and not renderer.condition(task.when):
            return
        args = {key: renderer.render(value) for key, value in task.args.items() if key in op.offline_arguments}
    except TemplateError as error:
        if op.offline_reports_unrendered:
            needs.unresolved.append(f"{task.role}: {task.name} ({error})")
        return
    try:
        found = op.offline_needs(args, renderer.render_file)
    except TemplateError as error:  # a template it reads (an apt preferences file)
        needs.unresolved.append(f"{task.role}: {task.name} ({error})")
        return
    for need in found:
        _add(needs, need)


def _add(needs: HostNeeds, need: Need) -> None:
    """One need into the host's, each thing once."""
    if isinstance(need, Packages):
        target = needs.with_recommends if need.recommends else needs.without_recommends
        target.extend(name for name in need.names if name not in target)
    elif isinstance(need, AptRepository):
        if all(repo.get("name") != need.args.get("name") for repo in needs.repositories):
            needs.repositories.append(need.args)
    elif isinstance(need, Download):
        if need.url not in needs.urls:
            needs.urls.append(need.url)
    elif isinstance(need, Components):
        components = needs.components.setdefault(need.path, [])
        components.extend(c for c in need.components if c not in components)
    elif isinstance(need, AptPreferences):
        needs.preferences[need.path] = need.text
    elif isinstance(need, Image):
        if need.reference not in needs.images:
            needs.images.append(need.reference)
    elif need not in needs.weights:
        needs.weights.append(need)
