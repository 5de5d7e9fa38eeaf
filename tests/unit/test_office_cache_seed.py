"""A bundle seeds the office cache (`up --bundle DIR` with an `office_cache` group): the cache host
gets every bundle file and pushes its images into the seed registry; nginx serves the bundle's hub copy
before it asks the hub; the other hosts copy nothing and read the bundle's apt repository from the
cache, not through its apt proxy."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from provision.bundle import offline
from provision.bundle.manifest import Manifest
from provision.bundle.needs import HostNeeds
from provision.bundle.seed import docker_hub_path, seed_images
from provision.inventory.loader import load_inventory
from provision.playbook.loader import load_playbook
from provision.playbook.templating import Renderer, make_environment
from provision.runner import runner
from provision.runner.events import SilentReporter
from provision.runner.host_run import RunOptions
from provision.runner.runner import RunConfig, Runner
from provision.settings.variables import host_variables, inventory_variables
from tests.unit.test_roles_gpu_support import REPO, SITE, facts, render

FLEET = """all:
  hosts:
    desk-1: {ansible_host: 192.168.1.61}
  children:
    office_cache:
      hosts:
        nas: {ansible_host: 192.168.1.10}
"""
IMAGE_ID = "sha256:" + "a" * 64
KEY_URL = "https://nvidia.github.io/libnvidia-container/gpgkey"
MANIFEST = Manifest(
    releases={"debian-bookworm": {"repo": "apt/debian-bookworm", "packages": ["docker.io", "curl"]}},
    images={"vllm/vllm-openai:v0.11.0": {"file": "images/vllm.tar", "id": IMAGE_ID},
            "nvcr.io/nvidia/cuda:12.9.0-base": {"file": "images/cuda.tar", "id": "sha256:" + "b" * 64}},
    urls={KEY_URL: {"file": "files/abc/gpgkey"}},
    files={"apt/debian-bookworm/Packages": {"size": 10, "sha256": "0" * 64},
           "images/vllm.tar": {"size": 20, "sha256": "1" * 64}, "files/abc/gpgkey": {"size": 3, "sha256": "3" * 64},
           "key.asc": {"size": 3, "sha256": "4" * 64},
           "hub/org/model/resolve/" + "c" * 40 + "/config.json": {"size": 2, "sha256": "2" * 64}})


def test_docker_hub_images_are_named_as_the_hub_stores_them() -> None:
    assert docker_hub_path("vllm/vllm-openai:v0.11.0") == ("vllm/vllm-openai", "v0.11.0")
    assert docker_hub_path("ubuntu:24.04") == ("library/ubuntu", "24.04")
    assert docker_hub_path("docker.io/vllm/vllm-openai") == ("vllm/vllm-openai", "latest")
    assert docker_hub_path("nvcr.io/nvidia/cuda:12.9.0-base") is None  # registry-mirrors serve Docker Hub only
    assert docker_hub_path("vllm/vllm-openai@sha256:" + "d" * 64) is None  # a pushed manifest has another digest
    assert [i["reference"] for i in seed_images(MANIFEST)] == ["vllm/vllm-openai:v0.11.0"]


@pytest.fixture
def seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`offline_bundle` as `up --bundle DIR` makes it for the fleet, the hosts' facts read as recorded."""
    (tmp_path / "inventory.yaml").write_text(FLEET)
    inventory = load_inventory(tmp_path / "inventory.yaml")
    plays = load_playbook(SITE)

    def read_host(source, local, conn, plays, inventory, host, extra_vars, options) -> offline.HostView:
        needs = HostNeeds(host.name, "debian-bookworm", with_recommends=["docker.io"],
                          images=["vllm/vllm-openai:v0.11.0"], urls=[KEY_URL])
        return offline.HostView(needs, MANIFEST, "KEY")

    class NoConnection:
        round_trips = 0

        def close(self) -> None:
            pass

    monkeypatch.setattr(offline, "read_host", read_host)
    monkeypatch.setattr(runner, "connect", lambda *args: NoConnection())
    monkeypatch.setattr(offline.manifests, "load", lambda path: MANIFEST)
    read_each = Runner(inventory, RunConfig(forks=2), SilentReporter()).read_each
    variable = offline.offline_bundle_variable(str(tmp_path / "bundle"), read_each, inventory, inventory.hosts, plays,
                                               {}, RunOptions())
    return {"inventory": inventory, "plays": plays, "offline_bundle": variable, "read_each": read_each}


def test_the_cache_host_gets_every_file_and_the_others_none(seeded) -> None:
    hosts = seeded["offline_bundle"]["hosts"]
    assert [f["path"] for f in hosts["nas"]["files"]] == sorted(MANIFEST.files)
    assert hosts["nas"]["seed_images"] == [{"reference": "vllm/vllm-openai:v0.11.0", "file": "images/vllm.tar",
                                            "id": IMAGE_ID, "path": "vllm/vllm-openai", "tag": "v0.11.0"}]
    client = hosts["desk-1"]
    assert client["via_cache"] and client["files"] == [] and client["images"] == [] and client["packages"]


def test_a_bundle_on_the_hosts_cannot_seed_the_cache(seeded, tmp_path: Path) -> None:
    with pytest.raises(offline.InputError, match="the office cache nas is seeded from a bundle on this machine"):
        offline.offline_bundle_variable("host:/media/usb/bundle", seeded["read_each"], seeded["inventory"],
                                        seeded["inventory"].hosts, seeded["plays"], {}, RunOptions())


def rendered(seeded: dict[str, Any], play_name: str, host: str, roles: tuple[str, ...] = ("offline_bundle",),
             **registered: Any) -> dict[str, Any]:
    play = next(play for play in seeded["plays"] if play.name == play_name)
    variables = {**inventory_variables(seeded["inventory"]),
                 **host_variables(play, seeded["inventory"].host(host), {"offline_bundle": seeded["offline_bundle"]}),
                 "facts": facts("debian12-rtx5090-standin-fresh.txt").as_vars(), "inventory_hostname": host,
                 **registered}
    render_with = Renderer(make_environment(play.template_dirs), variables)
    return {"tasks": {task.name: render(task, render_with) for task in play.tasks if task.role in roles},
            "renderer": render_with}


def test_the_cache_host_pushes_the_images_and_serves_the_hub_copy_first(seeded) -> None:
    cache = rendered(seeded, "office cache", "nas", ("offline_bundle", "office_cache"),
                     office_cache_dns={"output": "10.0.2.3"}, office_cache_seed_unit={"changed": False})["tasks"]
    assert cache["the offline bundle copied to the host and verified"].args.files[0].path == sorted(MANIFEST.files)[0]
    push = cache["the bundle's images in the seed registry"].args
    words = f"'/var/lib/provision/bundle' 127.0.0.1:5001 'images/vllm.tar' '{IMAGE_ID}' 'vllm/vllm-openai' 'v0.11.0'"
    assert push.cmd == f"'/usr/local/sbin/provision-seed-registry' push {words}"
    assert push.unless == f"'/usr/local/sbin/provision-seed-registry' check {words}"
    nginx = cache["nginx caches the hub's files by commit"].args.content
    assert "location ^~ /bundle/ {\n        alias /var/lib/provision/bundle/;" in nginx
    assert "root /var/lib/provision/bundle/hub;\n        try_files $uri @hub_file;" in nginx
    assert "error_page 502 504 = @seeded_list;" in nginx
    assert "addr: :5001" in cache["the seed registry takes a bundle's images"].args.content


def test_a_client_reads_the_bundle_from_the_cache_not_through_its_apt_proxy(seeded) -> None:
    result = rendered(seeded, "GPU inference host", "desk-1")
    tasks = result["tasks"]
    assert tasks["the offline bundle copied to the host and verified"].skipped
    sources = tasks["the bundle's apt repository for this release"].args.content
    assert "URIs: http://192.168.1.10:8080/bundle/apt/debian-bookworm\n" in sources
    apt_conf = tasks["apt reads only the bundle"].args.content
    assert apt_conf.endswith('"/etc/provision/bundle/sources.list.d";\n// the office cache serves the bundle itself, '
                             'not through its apt proxy\nAcquire::http::Proxy::192.168.1.10 "DIRECT";\n'), apt_conf
    assert result["renderer"].render(f"{{{{ '{KEY_URL}' | from_bundle }}}}") == \
        "http://192.168.1.10:8080/bundle/files/abc/gpgkey"
    model = rendered(seeded, "model server", "desk-1", ("model",), hf_source={"url": "http://192.168.1.10:8080"})["tasks"]
    assert not model["Hugging Face hub through the office cache"].skipped  # the mirror serves the bundle's copy
    assert model["vLLM image loaded from the offline bundle"].skipped  # pulled from the seed registry


def test_a_host_without_the_cache_keeps_its_file_sources(tmp_path: Path) -> None:
    play = next(play for play in load_playbook(SITE) if play.name == "GPU inference host")
    bundle = {"source": "/b", "path": "", "hosts": {"here": {"release": "debian-bookworm", "packages": True,
                                                             "files": [{"path": "a", "size": 1, "sha256": "0" * 64}]}}}
    variables = {**host_variables(play, load_inventory_of(tmp_path).host("here"), {"offline_bundle": bundle}),
                 "facts": facts("debian12-rtx5090-standin-fresh.txt").as_vars(), "inventory_hostname": "here"}
    render_with = Renderer(make_environment(play.template_dirs), variables)
    tasks = {task.name: render(task, render_with) for task in play.tasks if task.role == "offline_bundle"}
    assert "URIs: file:/var/lib/provision/bundle/apt/debian-bookworm\n" in \
        tasks["the bundle's apt repository for this release"].args.content
    assert tasks["apt reads only the bundle"].args.content.endswith('"/etc/provision/bundle/sources.list.d";\n')


def load_inventory_of(tmp_path: Path) -> Any:
    (tmp_path / "one.yaml").write_text("all:\n  hosts:\n    here: {ansible_host: 192.168.1.61}\n")
    return load_inventory(tmp_path / "one.yaml")


class Registry(http.server.BaseHTTPRequestHandler):
    """Answers a manifest for vllm/vllm-openai:v0.11.0 whose config is IMAGE_ID, as distribution does."""

    def do_GET(self) -> None:
        if self.path == "/v2/vllm/vllm-openai/manifests/v0.11.0":
            body = json.dumps({"schemaVersion": 2, "config": {"digest": IMAGE_ID}}, indent=3).encode()
            self.send_response(200)
        else:
            body = b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}'
            self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_the_seed_program_checks_each_image_by_the_config_its_manifest_names() -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), Registry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    program = REPO / "roles/office_cache/templates/seed-registry.sh"
    registry = f"127.0.0.1:{server.server_address[1]}"
    try:
        def check(*image: str) -> int:
            return subprocess.run(["sh", str(program), "check", "/b", registry, *image]).returncode

        assert check("images/vllm.tar", IMAGE_ID, "vllm/vllm-openai", "v0.11.0") == 0
        assert check("images/vllm.tar", "sha256:" + "e" * 64, "vllm/vllm-openai", "v0.11.0") == 1  # another image
        assert check("images/x.tar", IMAGE_ID, "vllm/other", "v1") == 1  # not there
    finally:
        server.shutdown()
