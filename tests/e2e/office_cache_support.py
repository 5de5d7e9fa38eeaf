"""The office cache in the lab: what the upstreams served (the stand-in hub's request log, the lab
registry's access log), apt-cacher-ng's transfer log, and the inventory's `office_cache` group.
Shared by tests/e2e/test_office_cache.py and benchmarks/office_cache.py."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import docker
import yaml

from tests.lab import Lab, LabHost
from tests.lab.net import MACHINE_FROM_HOSTS
from tests.standins.hub.server import read_request_log
from tests.standins.vllm.build import build_images

CACHE_PORTS = {"apt": 3142, "registry": 5000, "hf": 8080}  # the guest ports roles/office_cache listens on
# distribution's access log (combined format), e.g. "GET /v2/vllm/vllm-openai/blobs/sha256:... HTTP/1.1" 200
BLOB_GET = re.compile(r'"GET /v2/\S+/blobs/(sha256:[0-9a-f]{64}) HTTP/[0-9.]+" (200|206) ')


class Upstreams:
    """What the hub and the registry served so far, per file and per layer."""

    def __init__(self, hub_log: Path, registry_log: Path) -> None:
        self.hub_log = hub_log
        self.registry_log = registry_log

    def hub_files(self) -> Counter[str]:
        return Counter(entry["path"] for entry in read_request_log(self.hub_log)
                       if entry["method"] == "GET" and "/resolve/" in entry["path"] and entry["status"] in (200, 206))

    def registry_blobs(self) -> Counter[str]:
        text = self.registry_log.read_text(errors="replace") if self.registry_log.exists() else ""
        return Counter(match.group(1) for match in BLOB_GET.finditer(text))

    def snapshot(self) -> tuple[Counter[str], Counter[str]]:
        return self.hub_files(), self.registry_blobs()

    def since(self, mark: tuple[Counter[str], Counter[str]]) -> tuple[Counter[str], Counter[str]]:
        hub, blobs = self.snapshot()
        return hub - mark[0], blobs - mark[1]


def apt_cacher_bytes(cache: LabHost) -> tuple[int, int]:
    """(bytes fetched from upstream, bytes served to clients) from apt-cacher-ng's transfer log
    (lines `time|I|size|client|path` for incoming, `|O|` for outgoing)."""
    _, text = cache.exec("cat /var/log/apt-cacher-ng/apt-cacher.log 2>/dev/null")
    incoming = outgoing = 0
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) >= 3 and fields[2].isdigit():
            if fields[1] == "I":
                incoming += int(fields[2])
            elif fields[1] == "O":
                outgoing += int(fields[2])
    return incoming, outgoing


def add_group(inventory: Path, group: str, host: str) -> None:
    document = yaml.safe_load(inventory.read_text())
    document["all"]["children"] = {group: {"hosts": {host: None}}}
    inventory.write_text(yaml.safe_dump(document, sort_keys=False))


def docker_hub_image(lab: Lab, tag_here: bool = False) -> str:
    """The stand-in vLLM image in the lab registry, named as a Docker Hub image (the lab registry stands
    for Docker Hub behind the pull-through cache, so dockerd pulls it through registry-mirrors); with
    `tag_here`, also tagged by that name on this machine."""
    registry = lab.registry.address_for_hosts
    image = build_images(f"127.0.0.1:{lab.registry.port}", pull_registry=registry, behaviours=("ok",),
                         log=lambda _: None)["ok"]
    hub_name = image.replace(f"{registry}/", "")
    if tag_here:
        repository, tag = hub_name.rsplit(":", 1)
        docker.from_env().images.get(image.replace(registry, f"127.0.0.1:{lab.registry.port}")).tag(repository, tag)
    return hub_name


def cache_urls(cache: LabHost, ports: dict[str, int]) -> dict[str, str]:
    """`office_cache_<name>_url` for each guest port, as the other lab hosts reach the cache host."""
    return {f"office_cache_{name}_url": f"http://{MACHINE_FROM_HOSTS}:{cache.port(port)}"
            for name, port in ports.items()}
