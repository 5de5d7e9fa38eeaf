"""The office cache is found from the inventory's `office_cache` group: clients get the apt proxy,
the registry mirror and the hub mirror; without the group nothing of it is written; the cache's
own play runs on no host of an inventory without one."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from provision.inventory.loader import load_inventory
from provision.playbook.loader import load_playbook
from provision.runner.runner import RunConfig, Runner
from provision.settings.variables import host_variables, inventory_variables
from tests.unit.test_roles_gpu_support import SITE, facts, render, renderer, site_play

FRESH_DEBIAN = "debian12-rtx5090-standin-fresh.txt"
FLEET = """all:
  hosts:
    desk-1: {ansible_host: 192.168.1.61}
    desk-2: {ansible_host: 192.168.1.62}
  children:
    office_cache:
      hosts:
        nas: {ansible_host: 192.168.1.10}
"""
NO_CACHE = """all:
  hosts:
    desk-1: {ansible_host: 192.168.1.61}
"""


def client_tasks(tmp_path: Path, text: str, **overrides: object) -> dict[str, object]:
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    inventory = load_inventory(path)
    host = inventory.host("desk-1")
    variables = {**inventory_variables(inventory), **host_variables(site_play(), host, {}), **overrides}
    render_with = renderer(facts(FRESH_DEBIAN), **variables)
    return {task.name: render(task, render_with) for task in site_play().tasks if task.role == "office_cache_client"}


def test_clients_are_pointed_at_the_first_host_of_the_office_cache_group(tmp_path: Path) -> None:
    tasks = client_tasks(tmp_path, FLEET)
    apt_conf = tasks["apt asks the office cache first"].args
    assert apt_conf.state == "present"
    assert 'Provision::OfficeCache::Proxy "http://192.168.1.10:3142";' in apt_conf.content
    assert 'Acquire::http::Proxy-Auto-Detect "/usr/local/sbin/provision-apt-proxy-detect";' in apt_conf.content
    daemon = tasks["dockerd pulls through the office cache"]
    assert daemon.active and daemon.args.data == {  # the seed registry (a bundle's images) first
        "registry-mirrors": ["http://192.168.1.10:5001", "http://192.168.1.10:5000"],
        "insecure-registries": ["192.168.1.10:5001", "192.168.1.10:5000"]}
    assert tasks["container images through the office cache"].args.mirror == "http://192.168.1.10:5000"


def test_an_address_the_clients_see_overrides_the_inventory_address(tmp_path: Path) -> None:
    tasks = client_tasks(tmp_path, FLEET, office_cache_address="cache.office.lan")
    assert tasks["apt packages through the office cache"].args.mirror == "http://cache.office.lan:3142"


def test_without_the_group_nothing_points_anywhere(tmp_path: Path) -> None:
    tasks = client_tasks(tmp_path, NO_CACHE)
    assert tasks["apt asks the office cache first"].args.state == "absent"
    assert tasks["apt's proxy detect program"].args.state == "absent"
    assert tasks["dockerd pulls through the office cache"].skipped
    assert tasks["apt packages through the office cache"].args.mirror == ""


def test_the_hub_is_chosen_per_run_and_the_download_uses_the_choice() -> None:
    model = next(play for play in load_playbook(SITE) if play.name == "model server")
    names = [task.name for task in model.tasks]
    hub, download = "Hugging Face hub through the office cache", "model weights downloaded and verified"
    assert names.index(hub) < names.index(download)
    download = next(task for task in model.tasks if task.op == "hf_snapshot")
    assert download.args["endpoint"] == "{{ bundle_hf_endpoint if bundle_weights_here else hf_source.url }}"


def test_the_cache_play_runs_on_no_host_without_the_group(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(NO_CACHE)
    cache_play = next(play for play in load_playbook(SITE) if play.name == "office cache")
    assert Runner(load_inventory(path), RunConfig(), reporter=None).play_hosts(cache_play) == set()  # type: ignore[arg-type]
    path.write_text(FLEET)
    assert Runner(load_inventory(path), RunConfig(), reporter=None)  # type: ignore[arg-type].play_hosts(cache_play) == {"nas"}


DETECT = Path(__file__).resolve().parents[2] / "roles/office_cache_client/templates/apt-proxy-detect.sh"


@pytest.mark.skipif(shutil.which("apt-config") is None, reason="needs apt-config (Debian/Ubuntu)")
def test_apt_proxy_detect_answers_the_cache_while_it_listens_else_direct(tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    config = tmp_path / "apt.conf"
    config.write_text(f'Provision::OfficeCache::Proxy "http://127.0.0.1:{port}";\n')

    def detect() -> str:
        done = subprocess.run(["bash", str(DETECT), "http://deb.debian.org"], capture_output=True, text=True,
                              env={**os.environ, "APT_CONFIG": str(config)}, timeout=10, check=True)
        return done.stdout.strip()

    try:
        assert detect() == f"http://127.0.0.1:{port}"
    finally:
        listener.close()
    assert detect() == "DIRECT"


def test_the_cache_host_gets_the_archive_backends_and_its_resolver(tmp_path: Path) -> None:
    from provision.playbook.templating import Renderer, make_environment

    cache_play = next(play for play in load_playbook(SITE) if play.name == "office cache")
    variables = {**cache_play.defaults, "facts": facts(FRESH_DEBIAN).as_vars(),
                 "office_cache_dns": {"output": "10.0.2.3"}, "inventory_hostname": "nas",
                 "office_cache_seed_unit": {"changed": False}}
    render_with = Renderer(make_environment(cache_play.template_dirs), variables)
    tasks = {task.name: render(task, render_with) for task in cache_play.tasks}
    assert tasks["apt-cacher-ng's Debian archive"].args.content.strip() == "http://deb.debian.org/debian/"
    conf = tasks["apt-cacher-ng listens on the cache port"].args.content
    assert "Port: 3142" in conf and "Remap-debrep: file:deb_mirror*.gz /debian ; file:backends_debian_provision" in conf
    nginx = tasks["nginx caches the hub's files by commit"].args.content
    assert "resolver 10.0.2.3 ipv6=off;" in nginx and "proxy_pass https://huggingface.co;" in nginx
    registry = tasks["the registry is a pull-through cache of the upstream"].args.content
    assert 'remoteurl: "http://127.0.0.1:5002"' in registry  # through nginx, which fetches each blob once
    fill = tasks["nginx fetches each of the registry's blobs once"].args.content
    assert "listen 127.0.0.1:5002;" in fill and fill.count("proxy_pass https://registry-1.docker.io;") == 2
    assert fill.count("proxy_cache_lock on;") == 1 and "proxy_cache off;" in fill
    assert "resolver 10.0.2.3 ipv6=off;" in fill
