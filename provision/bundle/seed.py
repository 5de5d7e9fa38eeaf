"""A bundle that seeds the office cache (`provision up INV --bundle DIR` where the inventory has an
office cache): the cache host gets the whole bundle, the other hosts nothing, and they take what the
bundle carries from the cache over the LAN.

The cache host is the one roles/office_cache names (`office_cache_host`, from the `office_cache`
group), rendered here as the run renders it. Its part of `offline_bundle` lists every bundle file
(copied to it) and `seed_images`: the bundle's Docker Hub images as the cache's seed registry stores
them (repository path and tag), since `registry-mirrors` serve Docker Hub images only (Docker's
registry-mirror docs). An image named by digest is left to the pull-through cache: `docker save`
keeps the image's config (its id) but not the registry's compressed layers, so a manifest pushed from
the archive has another digest than the one pinned.
"""

from __future__ import annotations

from typing import Any

from provision.bundle.manifest import Manifest
from provision.inventory.model import Inventory
from provision.playbook.model import Play
from provision.playbook.templating import Renderer, TemplateError, make_environment
from provision.settings.variables import host_variables, inventory_variables

DOCKER_HUB_NAMES = ("docker.io", "index.docker.io", "registry-1.docker.io")


def cache_host(inventory: Inventory, plays: list[Play], extra_vars: dict[str, Any]) -> str:
    """The office cache's inventory name ("" when the inventory has none)."""
    if not plays or not inventory.hosts:
        return ""
    variables = {**inventory_variables(inventory), **host_variables(plays[0], inventory.hosts[0], extra_vars)}
    renderer = Renderer(make_environment(plays[0].template_dirs), variables)
    try:
        return str(renderer.render("{{ office_cache_host | default('') }}"))
    except TemplateError:
        return ""


def docker_hub_path(reference: str) -> tuple[str, str] | None:
    """`vllm/vllm-openai:v0.11.0` -> ("vllm/vllm-openai", "v0.11.0"); `ubuntu:24.04` ->
    ("library/ubuntu", "24.04"), as Docker Hub names official images; None for another registry's
    image or one named by digest."""
    if "@" in reference:
        return None
    name, tag = reference, "latest"
    if ":" in reference.rsplit("/", 1)[-1]:
        name, tag = reference.rsplit(":", 1)
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        if first not in DOCKER_HUB_NAMES:
            return None
        name = rest
    if "/" not in name:
        name = f"library/{name}"
    return name, tag


def seed_images(manifest: Manifest) -> list[dict[str, str]]:
    """The bundle's images the seed registry serves: archive file, image id, repository path, tag."""
    seeded = []
    for reference, entry in sorted(manifest.images.items()):
        path = docker_hub_path(reference)
        if path is not None:
            seeded.append({"reference": reference, "file": entry["file"], "id": entry["id"],
                           "path": path[0], "tag": path[1]})
    return seeded
