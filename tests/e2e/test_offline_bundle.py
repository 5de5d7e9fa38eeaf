"""The offline bundle on a lab host with no internet: its egress filter lets out nothing but its SSH
server's replies (no Debian archive, no registry, no hub, no DNS). `provision bundle` gathers on this
machine what the host needs for the docker, model, vllm and smoke roles (the apt packages of Debian
bookworm with their dependencies as a signed repository, resolved in a container of the lab's own
bookworm image; the stand-in vLLM image; the stand-in hub's weights); `provision up --bundle` then
converges the host from it, and a rerun changes nothing. A bundle without the weights is refused
(exit 2, naming host and weights) before anything on the host changes.

The GPU stack is left out here (the stand-in vLLM runs without `--gpus`); the whole site, GPU stack
included, from a bundle is tests/e2e/test_offline_gpu_bundle.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from tests.e2e.helpers import REPO, provision
from tests.lab import Lab
from tests.lab.image import IMAGE
from tests.standins.hub.cli import start_hub
from tests.standins.vllm.build import build_images

pytestmark = pytest.mark.lab

MIB = 1024 * 1024
TAGS = "docker,model,vllm,smoke"
STANDIN_ENV = {"STANDIN_READY_DELAY": "1", "STANDIN_TOKENS_PER_S": "2000"}
# what a refused run must not touch (logs and systemd's own state change with every SSH login)
UNCHANGED = "find /etc /usr /opt /var -xdev -newer /run/before-refusal -not -path '/var/log/*' " \
            "-not -path '/var/lib/systemd/*' -not -path '/var/tmp/*' -print"


@pytest.fixture(scope="module")
def site(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("offline")
    hub = start_hub(tmp / "hub", shard_size=2 * MIB, shards=2)
    try:
        image = build_images(f"127.0.0.1:{lab.registry.port}", pull_registry=lab.registry.address_for_hosts,
                             behaviours=("ok",), env=STANDIN_ENV, log=lambda _: None)["ok"]
        # this machine reaches the lab registry as 127.0.0.1, hosts as 10.0.2.2: the bundle takes the
        # image as the hosts name it, present here
        local = image.replace(lab.registry.address_for_hosts, f"127.0.0.1:{lab.registry.port}")
        repository, tag = image.rsplit(":", 1)
        docker.from_env().images.get(local).tag(repository, tag)
        host = lab.new_host(prefix="offline", offline=True)
        inventory = lab.write_inventory(
            tmp / "site.yaml", [host], hf_endpoint=f"http://127.0.0.1:{hub.server.server_address[1]}",
            vllm_image=image, served_model_name="workhorse", vllm_ready_timeout=180, smoke_timeout=60,
            vllm_docker_run_options=["--ipc=host"], bundle_release_images={"debian-bookworm": IMAGE})
        started = time.monotonic()
        built = provision("bundle", str(inventory), "--tags", TAGS, "--out", str(tmp / "bundle"),
                          "--key-dir", str(tmp / "key"))
        yield {"tmp": tmp, "host": host, "inventory": inventory, "bundle": tmp / "bundle", "built": built,
               "build_s": time.monotonic() - started, "hub": hub, "image": image}
    finally:
        hub.stop()


def up(site: dict[str, Any], bundle: Path, name: str) -> Any:
    return provision("up", str(site["inventory"]), "--tags", TAGS, "--bundle", str(bundle),
                     json_path=site["tmp"] / f"{name}.json")


def test_the_bundle_holds_a_signed_repository_the_image_and_the_weights(site) -> None:
    built, bundle = site["built"], site["bundle"]
    assert built.returncode == 0, built.output
    manifest = json.loads((bundle / "manifest.json").read_text())
    release = manifest["releases"]["debian-bookworm"]
    assert {"docker.io", "curl", "containerd", "libc6"} <= set(release["packages"]), release["packages"]
    assert {"InRelease", "Release.gpg", "Packages"} <= {p.name for p in (bundle / "apt/debian-bookworm").iterdir()}
    assert manifest["images"][site["image"]]["id"].startswith("sha256:")
    (weights,) = manifest["weights"].values()
    assert weights["commit"] == site["hub"].repository.commit
    sums = (bundle / "SHA256SUMS").read_text().splitlines()
    assert len(sums) == len(manifest["files"]) and all(len(line.split()[0]) == 64 for line in sums)
    parts = {part: sum(e["size"] for p, e in manifest["files"].items() if p.startswith(part)) / MIB
             for part in ("apt/", "images/", "hub/")}
    debs = sum(1 for path in manifest["files"] if path.endswith(".deb"))
    print(f"\nbundle: {manifest_size(manifest) / MIB:.1f} MiB, {len(manifest['files'])} files ({debs} packages), "
          + ", ".join(f"{part} {size:.1f} MiB" for part, size in parts.items()) + f"; built in {site['build_s']:.1f} s")


def manifest_size(manifest: dict[str, Any]) -> int:
    return sum(entry["size"] for entry in manifest["files"].values())


def test_a_bundle_without_the_weights_is_refused_before_anything_changes(site) -> None:
    host, bundle = site["host"], site["bundle"]
    trimmed = site["tmp"] / "no-weights"
    trimmed.mkdir()
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"] = {path: entry for path, entry in manifest["files"].items() if not path.startswith("hub/")}
    manifest["weights"] = {}
    (trimmed / "manifest.json").write_text(json.dumps(manifest))
    shutil.copy(bundle / "key.asc", trimmed / "key.asc")
    assert host.exec("touch /run/before-refusal && sleep 1")[0] == 0
    refused = up(site, trimmed, "refused")
    assert refused.returncode == 2, refused.output
    assert f"host {host.name} needs the weights {site['hub'].repository.repo_id}@main" in refused.output, \
        refused.output
    rc, changed = host.exec(UNCHANGED)
    assert rc == 0 and changed.strip() == "", changed


def test_a_host_with_no_internet_converges_from_the_bundle(site) -> None:
    host = site["host"]
    rc, _ = host.exec("curl -sS -m 5 -o /dev/null http://deb.debian.org/debian/")
    assert rc != 0, "the offline host reaches the Debian archive"
    check = provision("up", str(site["inventory"]), "--tags", TAGS, "--bundle", str(site["bundle"]), "--check",
                      json_path=site["tmp"] / "check.json")
    assert check.returncode == 0, check.output
    started = time.monotonic()
    first = up(site, site["bundle"], "first")
    elapsed = time.monotonic() - started
    assert first.returncode == 0, first.output
    changed = set(first.changed_tasks(host.name))
    assert {"the offline bundle copied to the host and verified", "Docker engine installed",
            "vLLM image loaded from the offline bundle", "model weights downloaded and verified",
            "vLLM service released and checked"} <= changed, changed
    assert changed <= set(check.changed_tasks(host.name)) | {"restart docker"}, check.output
    rc, active = host.exec("systemctl is-active vllm docker")
    assert active.split() == ["active", "active"], active
    manifest = json.loads((site["bundle"] / "manifest.json").read_text())
    _, loaded = host.exec(f"docker image inspect --format '{{{{.Id}}}}' {site['image']}")
    assert loaded.strip() == manifest["images"][site["image"]]["id"]
    print(f"\noffline up: {elapsed:.1f} s")


def test_the_rerun_changes_nothing(site) -> None:
    again = up(site, site["bundle"], "again")
    assert again.returncode == 0, again.output
    assert again.changed_tasks(site["host"].name) == [], again.output


def test_a_bundle_already_on_the_host_is_used_where_it_is(site) -> None:
    """`--bundle host:PATH` (a USB disk): the manifest is read on the host, nothing is copied; only
    the apt source's path changes (the packages, the image and the weights are already in place)."""
    host, missing_path = site["host"], "host:/media/usb/bundle"
    missing = provision("up", str(site["inventory"]), "--tags", TAGS, "--bundle", missing_path)
    assert missing.returncode == 2 and f"host {host.name}: no bundle at /media/usb/bundle" in missing.output, \
        missing.output
    assert host.exec("mkdir -p /media/usb")[0] == 0
    subprocess.run(["docker", "cp", str(site["bundle"]), f"{host.container_name}:/media/usb/bundle"], check=True)
    on_disk = provision("up", str(site["inventory"]), "--tags", TAGS, "--bundle", missing_path,
                        json_path=site["tmp"] / "on-disk.json")
    assert on_disk.returncode == 0, on_disk.output
    tasks = {t["name"]: t for t in on_disk.host(host.name)["tasks"]}
    assert tasks["the offline bundle copied to the host and verified"]["status"] == "skipped", tasks
    assert on_disk.changed_tasks(host.name) == ["the bundle's apt repository for this release"], on_disk.output
    _, sources = host.exec("cat /etc/provision/bundle/sources.list.d/bundle.sources")
    assert "URIs: file:/media/usb/bundle/apt/debian-bookworm" in sources, sources


def test_a_killed_bundle_build_leaves_no_manifest_and_resumes(site) -> None:
    out = site["tmp"] / "killed"
    argv = [sys.executable, "-m", "provision", "bundle", str(site["inventory"]), "--tags", TAGS, "--out", str(out),
            "--key-dir", str(site["tmp"] / "key")]
    build = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(list((out / "apt/debian-bookworm.part").glob("*.deb"))) < 5:  # mid-download in the container
        assert build.poll() is None and time.monotonic() < deadline, "the build ended before it could be killed"
        time.sleep(0.2)
    build.kill()
    build.wait()
    assert not (out / "manifest.json").exists()
    again = provision("bundle", str(site["inventory"]), "--tags", TAGS, "--out", str(out),
                      "--key-dir", str(site["tmp"] / "key"))
    assert again.returncode == 0, again.output
    checked = subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=out, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert json.loads((out / "manifest.json").read_text())["files"].keys() == \
        json.loads((site["bundle"] / "manifest.json").read_text())["files"].keys()
    rebuilt = provision("bundle", str(site["inventory"]), "--tags", TAGS, "--out", str(out),
                        "--key-dir", str(site["tmp"] / "key"))
    assert rebuilt.returncode == 0 and "built before, re-verifying" in rebuilt.output, rebuilt.output
