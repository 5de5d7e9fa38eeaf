"""A bundle seeds the office cache, on real lab hosts: `provision bundle` gathers on this machine what a
cache host and its clients need (the cache's own packages, the clients' docker and curl, the stand-in
vLLM image as a Docker Hub image, the stand-in hub's weights); `up --bundle` seeds the cache host from
it (every file copied and sha256-checked; the image pushed into its seed registry), then two fresh
clients roll out through the cache with the bundle. The stand-in hub serves no weight file and the
upstream registry (the lab registry, standing for Docker Hub behind the pull-through cache) no layer:
the clients got the weights from the seed's hub copy, the image from the seed registry and the apt
packages from the bundle's repository on the cache (apt-cacher-ng fetched nothing). A rerun changes
nothing. Light on purpose, like tests/e2e/test_office_cache.py: docker + the model role, no GPU stack.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.helpers import provision
from tests.e2e.office_cache_support import (
    CACHE_PORTS,
    Upstreams,
    add_group,
    apt_cacher_bytes,
    cache_urls,
    docker_hub_image,
)
from tests.lab import Lab
from tests.lab.image import IMAGE
from tests.lab.net import MACHINE_FROM_HOSTS
from tests.standins.hub.cli import start_hub
from tests.standins.hub.server import HubOptions, read_request_log

pytestmark = pytest.mark.lab

MIB = 1024 * 1024
SEED_REGISTRY_PORT = 5001  # roles/office_cache: office_cache_seed_registry_port
TAGS = "office_cache_client,docker,model"
BUNDLE_TAGS = f"office_cache,{TAGS}"


@pytest.fixture(scope="module")
def office(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("office-seed")
    hub = start_hub(tmp / "hub", shard_size=4 * MIB, shards=2, options=HubOptions(request_log=tmp / "hub.jsonl"))
    try:
        hub_name = docker_hub_image(lab, tag_here=True)  # present here too: the bundle build pulls nothing
        cache_ports = [*CACHE_PORTS.values(), SEED_REGISTRY_PORT]
        cache, *clients = lab.new_host_set({"prefix": "scache", "extra_ports": cache_ports},
                                           {"prefix": "sclient"}, {"prefix": "sclient"})
        inventory = lab.write_inventory(
            tmp / "office.yaml", [cache, *clients],
            hf_endpoint=f"http://{MACHINE_FROM_HOSTS}:{hub.server.server_address[1]}", vllm_image=hub_name,
            office_cache_registry_upstream=f"http://{lab.registry.address_for_hosts}", office_cache_min_free_gib=1,
            bundle_release_images={"debian-bookworm": IMAGE},
            **cache_urls(cache, {**CACHE_PORTS, "seed_registry": SEED_REGISTRY_PORT}))
        add_group(inventory, "office_cache", cache.name)
        started = time.monotonic()
        # this machine reaches the stand-in hub as 127.0.0.1, hosts as 10.0.2.2
        built = provision("bundle", str(inventory), "--tags", BUNDLE_TAGS, "--out", str(tmp / "bundle"),
                          "--key-dir", str(tmp / "key"),
                          "-e", f"hf_endpoint=http://127.0.0.1:{hub.server.server_address[1]}")
        assert built.returncode == 0, built.output
        yield {"tmp": tmp, "inventory": inventory, "cache": cache, "clients": clients, "hub_name": hub_name, "hub": hub,
               "bundle": tmp / "bundle", "build_s": time.monotonic() - started,
               "upstreams": Upstreams(tmp / "hub.jsonl", lab.registry.dir / "registry.log")}
    finally:
        hub.stop()


def seed(office: dict[str, Any], name: str) -> Any:
    return provision("up", str(office["inventory"]), "--bundle", str(office["bundle"]), "--limit",
                     office["cache"].name, "--tags", "office_cache", json_path=office["tmp"] / f"{name}.json")


def rollout(office: dict[str, Any], name: str, *extra: str) -> Any:
    return provision("up", str(office["inventory"]), "--bundle", str(office["bundle"]), "--limit",
                     f"!{office['cache'].name}", "--tags", TAGS, *extra, json_path=office["tmp"] / f"{name}.json")


@pytest.fixture(scope="module")
def seeded(office: dict[str, Any]) -> dict[str, Any]:
    mark = office["upstreams"].snapshot()
    lists_before = file_lists_asked(office)
    started = time.monotonic()
    setup = seed(office, "seed")
    assert setup.returncode == 0, setup.output
    seed_s = time.monotonic() - started
    started = time.monotonic()
    rolled = rollout(office, "rollout", "--serial", "1,100%")
    assert rolled.returncode == 0, rolled.output
    return {"setup": setup, "rollout": rolled, "served": office["upstreams"].since(mark), "seed_s": seed_s,
            "rollout_s": time.monotonic() - started, "lists_asked": file_lists_asked(office) - lists_before}


def file_lists_asked(office: dict[str, Any]) -> int:
    """How often the stand-in hub was asked for a revision's file list (its log works, the hub is up)."""
    return sum(1 for entry in read_request_log(office["tmp"] / "hub.jsonl") if entry["path"].startswith("/api/"))


def test_the_cache_host_holds_the_bundle_and_the_clients_none(seeded, office) -> None:
    cache = office["cache"]
    changed = set(seeded["setup"].changed_tasks(cache.name))
    assert {"the offline bundle copied to the host and verified", "the bundle's images in the seed registry"} \
        <= changed, changed
    _, active = cache.exec("systemctl is-active apt-cacher-ng docker-registry provision-seed-registry nginx")
    assert active.split() == ["active"] * 4, active
    for host in office["clients"]:
        tasks = {t["name"]: t for t in seeded["rollout"].host(host.name)["tasks"]}
        assert tasks["the offline bundle copied to the host and verified"]["status"] == "skipped", tasks
        assert host.exec("test -e /var/lib/provision/bundle")[0] != 0


def test_the_hub_and_the_upstream_registry_serve_nothing_the_bundle_carried(seeded, office) -> None:
    hub, blobs = seeded["served"]
    manifest = json.loads((office["bundle"] / "manifest.json").read_text())
    assert hub == {} and blobs == {}, (hub, blobs)
    assert seeded["lists_asked"] > 0  # a branch's file list is asked upstream while the hub answers
    upstream_apt, _ = apt_cacher_bytes(office["cache"])
    assert upstream_apt == 0, upstream_apt  # apt read the bundle's repository on the cache, not the archive
    image_id = manifest["images"][office["hub_name"]]["id"]
    for host in office["clients"]:
        _, loaded = host.exec(f"docker image inspect --format '{{{{.Id}}}}' {office['hub_name']}")
        assert loaded.strip() == image_id, (host.name, loaded)  # the bundle's image, by its config's sha256
        rc, _ = host.exec("systemctl is-active docker")
        assert rc == 0
    assert "hub: office cache http://10.0.2.2:" in seeded["rollout"].output
    weights = sum(e["size"] for p, e in manifest["files"].items() if p.startswith("hub/")) / MIB
    print(f"\nseeded office: bundle {sum(e['size'] for e in manifest['files'].values()) / MIB:.1f} MiB built in "
          f"{office['build_s']:.1f} s; seed {seeded['seed_s']:.1f} s; rollout of {len(office['clients'])} clients "
          f"{seeded['rollout_s']:.1f} s; hub weight files served {sum(hub.values())} "
          f"({weights:.1f} MiB of weights per client from the seed), upstream layers served {sum(blobs.values())}, "
          f"apt-cacher-ng fetched {upstream_apt} bytes")


def test_a_rerun_changes_nothing_on_the_cache_or_the_clients(seeded, office) -> None:
    again = seed(office, "seed-again")
    assert again.returncode == 0 and again.changed_tasks(office["cache"].name) == [], again.output
    started = time.monotonic()
    clients = rollout(office, "rollout-again")
    elapsed = time.monotonic() - started
    assert clients.returncode == 0, clients.output
    for host in office["clients"]:
        assert clients.changed_tasks(host.name) == [], (host.name, clients.output)
    print(f"\nrerun of the clients: 0 changed in {elapsed:.1f} s")


def test_status_counts_what_the_seed_served_as_hits(seeded, office) -> None:
    cache = office["cache"].name
    status = provision("status", str(office["inventory"]), "--limit", cache, "--json")
    row = json.loads(status.stdout)[cache]["office_cache"]
    assert row["healthy"] and row["services"]["provision-seed-registry"] == "active", row
    assert row["hub"]["hit_rate"] == 1.0, row  # every weight file from the seed, none fetched


def test_with_the_hub_gone_the_cache_answers_the_file_list_from_the_seed(seeded, office) -> None:
    """The internet gone after the seed: nginx answers the branch's file list from the bundle (the hub's
    502), so the clients' weights check still passes and nothing changes."""
    office["hub"].stop()
    before = len(mirror_log(office))
    offline = rollout(office, "hub-gone")
    assert offline.returncode == 0, offline.output
    for host in office["clients"]:
        assert offline.changed_tasks(host.name) == [], (host.name, offline.output)
    lists = [line for line in mirror_log(office)[before:] if "/api/models/" in line]
    assert lists and all('" 200 ' in line for line in lists), lists  # answered, from the seed


def mirror_log(office: dict[str, Any]) -> list[str]:
    """The hub mirror's access log on the cache host (hf-mirror.nginx.conf.j2's provision_hf_cache)."""
    _, text = office["cache"].exec("cat /var/log/nginx/provision-hf-mirror.log")
    return text.splitlines()
