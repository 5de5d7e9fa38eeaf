"""What one host needs from a bundle, read from the tasks `up` would run for it.

The apt packages are the `name` of every selected `apt` task that installs (state present/latest),
rendered with the host's variables and facts, as the run renders them; a task that cannot be rendered
before the run (it reads a result registered earlier in the run) is reported, not guessed. The image
is `vllm_image` and the weights `hf_model`@`hf_revision` (and a drafter `hf_draft_model`), when the
selected tasks pull and download them.

The apt repositories the selected `apt_repository` tasks configure (NVIDIA's CUDA repository by its
keyring package, the container toolkit's by its key), the apt preferences the selected `template`
tasks write under /etc/apt/preferences.d (the driver's version pin) and the components `apt_components`
adds to the release's own entries (Debian's contrib) are what the packages are resolved with; the
URLs those repositories take their keys from are files the bundle carries (`urls`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from provision.inventory.model import Host, Inventory
from provision.playbook.model import Play, Task
from provision.playbook.templating import Renderer, TemplateError, make_environment
from provision.playbook.unsafe import mark_unsafe
from provision.runner.host_run import RunOptions
from provision.settings.variables import host_variables, inventory_variables


@dataclass(frozen=True)
class Weights:
    repo: str
    revision: str

    def __str__(self) -> str:
        return f"{self.repo}@{self.revision}"


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


def _names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, dict):
        return [f"{name}={version}" if version else str(name) for name, version in value.items()]
    return [str(item) for item in value or []]


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


#: the arguments a bundle reads, per operation (the others, an endpoint from a registered result, are
#: the run's business)
RENDERED = {"apt": ("name", "state", "install_recommends"), "docker_image": ("image",),
            "hf_snapshot": ("repo", "revision"), "template": ("src", "dest"), "apt_components": ("path", "components"),
            "apt_repository": ("name", "uris", "suites", "components", "architectures", "key_url", "key_file",
                               "keyring_package_url", "keyring_package", "keyring_package_version", "sha256",
                               "state")}
#: where apt reads its preferences (apt_preferences(5)): a template written there pins what apt resolves
PREFERENCES_DIR = "/etc/apt/preferences.d/"
#: the apt_repository arguments that name a download
URL_ARGUMENTS = ("key_url", "keyring_package_url")


def _add_task(needs: HostNeeds, renderer: Renderer, task: Task) -> None:
    if task.op not in RENDERED:
        return
    try:
        if task.when is not None and not renderer.condition(task.when):
            return
        wanted = RENDERED[task.op]
        args = {key: renderer.render(value) for key, value in task.args.items() if key in wanted}
    except TemplateError as error:
        if task.op in ("apt", "apt_repository"):
            needs.unresolved.append(f"{task.role}: {task.name} ({error})")
        return
    if task.op == "apt" and args.get("state", "present") in ("present", "latest"):
        names = _names(args.get("name"))
        target = needs.with_recommends if args.get("install_recommends", True) else needs.without_recommends
        target.extend(name for name in names if name not in target)
    elif task.op == "apt_repository" and args.get("state", "present") == "present":
        if all(repo.get("name") != args.get("name") for repo in needs.repositories):
            needs.repositories.append(args)
        needs.urls.extend(str(args[key]) for key in URL_ARGUMENTS if args.get(key) and args[key] not in needs.urls)
    elif task.op == "apt_components" and args.get("path"):
        components = needs.components.setdefault(str(args["path"]), [])
        components.extend(str(c) for c in args.get("components") or [] if c not in components)
    elif task.op == "template" and str(args.get("dest", "")).startswith(PREFERENCES_DIR):
        try:
            needs.preferences[str(args["dest"])] = renderer.render_file(str(args["src"]))
        except TemplateError as error:
            needs.unresolved.append(f"{task.role}: {task.name} ({error})")
    elif task.op == "docker_image" and args.get("image") and args["image"] not in needs.images:
        needs.images.append(str(args["image"]))
    elif task.op == "hf_snapshot" and args.get("repo"):
        weights = Weights(str(args["repo"]), str(args.get("revision") or "main"))
        if weights not in needs.weights:
            needs.weights.append(weights)
