"""The whole site (playbooks/site.yaml) from an offline bundle, on a fresh GPU lab laptop (simulated
RTX 5090 Laptop, nouveau loaded) whose egress filter lets out nothing but its SSH server's replies.

`provision bundle` gathers on this machine what the laptop needs: the apt packages of Debian bookworm
resolved with NVIDIA's CUDA and container toolkit repositories configured (the stand-in ones, served
on this machine: only their base URLs differ from NVIDIA's) and the driver's version pin applied; the
keyring package and the toolkit's key; the GPU check image and the stand-in vLLM image; the stand-in
hub's weights. `provision up --bundle` converges the laptop with one reboot for the driver, a rerun
changes nothing, and the stand-in vLLM serves. The figures are printed (run with -s).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import docker
import pytest

from tests.e2e.helpers import HELD_BY_UP, provision, sh
from tests.lab import Lab
from tests.lab.image import IMAGE
from tests.lab.net import free_port
from tests.standins.hub.cli import start_hub
from tests.standins.nvidia import HostTraits, build_repo, serve
from tests.standins.nvidia.catalogue import DRIVER_VERSIONS
from tests.standins.vllm.build import build_images

pytestmark = pytest.mark.lab

MIB = 1024 * 1024
FIRST_REPO_PORT = 18965
STANDIN_ENV = {"STANDIN_READY_DELAY": "1", "STANDIN_TOKENS_PER_S": "2000"}
REBOOT = "reboot for the NVIDIA driver"
KEY_FILE = "/etc/provision/vllm/api-key"


def local_name(lab: Lab, reference: str) -> str:
    """The image as the hosts name it (10.0.2.2:PORT/...) tagged on this machine too: the bundle takes
    it from here, where the lab registry is 127.0.0.1:PORT."""
    local = reference.replace(lab.registry.address_for_hosts, f"127.0.0.1:{lab.registry.port}")
    repository, tag = reference.rsplit(":", 1)
    docker.from_env().images.get(local).tag(repository, tag)
    return reference


@pytest.fixture(scope="module")
def site(lab: Lab, gpu_host, gpu_inventory, gpu_check_image,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("offline-gpu")
    # the stand-in NVIDIA repositories as this machine reaches them: only the bundle build reads them
    port = free_port(FIRST_REPO_PORT, set())
    repo = build_repo(tmp / "nvidia-repo", f"http://127.0.0.1:{port}")
    repo_server = serve(repo.out_dir, port)
    hub = start_hub(tmp / "hub", shard_size=2 * MIB, shards=2)
    try:
        vllm_image = local_name(lab, build_images(
            f"127.0.0.1:{lab.registry.port}", pull_registry=lab.registry.address_for_hosts, behaviours=("ok",),
            env=STANDIN_ENV, log=lambda _: None)["ok"])
        local_name(lab, gpu_check_image)
        host = gpu_host(HostTraits(nouveau_at_boot=True), prefix="offgpu", offline=True)
        inventory = gpu_inventory(
            tmp / "site.yaml", [host], nvidia_cuda_repo_base=repo.cuda_repos_base,
            nvidia_container_repo_base=repo.container_toolkit_base, nvidia_driver_version=DRIVER_VERSIONS[0],
            hf_endpoint=f"http://127.0.0.1:{hub.server.server_address[1]}", vllm_image=vllm_image,
            served_model_name="workhorse", vllm_ready_timeout=180, smoke_timeout=60, preflight_min_free_gib=5,
            bundle_release_images={"debian-bookworm": IMAGE})
        started = time.monotonic()
        built = provision("bundle", str(inventory), "--out", str(tmp / "bundle"), "--key-dir", str(tmp / "key"))
        keyring = f"{repo.cuda_repos_base}/debian12/x86_64/cuda-keyring_1.1-1_all.deb"
        yield {"tmp": tmp, "host": host, "inventory": inventory, "bundle": tmp / "bundle", "built": built,
               "inventory_keyring": keyring,
               "build_s": time.monotonic() - started, "vllm_image": vllm_image, "check_image": gpu_check_image}
    finally:
        hub.stop()
        repo_server.stop()


def up(site: dict[str, Any], name: str, *args: str) -> Any:
    started = time.monotonic()
    run = provision("up", str(site["inventory"]), "--bundle", str(site["bundle"]), *args,
                    json_path=site["tmp"] / f"{name}.json")
    site[f"{name}_s"] = time.monotonic() - started
    (site["tmp"] / f"{name}.out").write_text(run.output)
    return run


@pytest.fixture(scope="module")
def converged(site: dict[str, Any]) -> dict[str, Any]:
    assert site["built"].returncode == 0, site["built"].output
    host = site["host"]
    assert host.exec("curl -sS -m 5 -o /dev/null http://deb.debian.org/debian/")[0] != 0, \
        "the offline host reaches the Debian archive"
    first = up(site, "first")
    assert first.returncode == 0, first.output[-8000:]
    again = up(site, "again")
    return {"first": first, "again": again}


def test_the_bundle_carries_the_gpu_stack(site) -> None:
    built, bundle = site["built"], site["bundle"]
    assert built.returncode == 0, built.output
    manifest = json.loads((bundle / "manifest.json").read_text())
    release = manifest["releases"]["debian-bookworm"]
    assert {"nvidia-driver-cuda", "nvidia-kernel-open-dkms", "cuda-toolkit-12-9", "nvidia-container-toolkit",
            "libnvidia-container1", "docker.io", "curl"} <= set(release["packages"]), release["packages"]
    # resolved with the driver's pin: the pinned release, not the newest of the stand-in repository
    assert release["versions"]["nvidia-driver-cuda"] == [f"{DRIVER_VERSIONS[0]}-1"], release["versions"]
    keyring = [url for url in manifest["urls"] if url.endswith("/cuda-keyring_1.1-1_all.deb")]
    assert keyring and any(url.endswith("/libnvidia-container/gpgkey") for url in manifest["urls"]), manifest["urls"]
    assert {site["vllm_image"], site["check_image"]} <= set(manifest["images"])
    parts = {part: sum(e["size"] for p, e in manifest["files"].items() if p.startswith(part)) / MIB
             for part in ("apt/", "images/", "hub/", "files/")}
    debs = sum(1 for path in manifest["files"] if path.endswith(".deb"))
    total = sum(entry["size"] for entry in manifest["files"].values()) / MIB
    print(f"\nGPU site bundle: {total:.1f} MiB, {len(manifest['files'])} files ({debs} packages), "
          + ", ".join(f"{part} {size:.1f} MiB" for part, size in parts.items())
          + f"; built in {site['build_s']:.1f} s")


def test_a_bundle_without_the_gpu_stack_is_refused_naming_what_the_host_lacks(site) -> None:
    """The bundle as it was before it carried the GPU stack: no NVIDIA packages, keyring or key."""
    bundle, host = site["bundle"], site["host"]
    manifest = json.loads((bundle / "manifest.json").read_text())
    release = manifest["releases"]["debian-bookworm"]
    release["packages"] = [p for p in release["packages"] if "nvidia" not in p and "cuda" not in p]
    manifest["urls"] = {}
    trimmed = site["tmp"] / "no-gpu"
    trimmed.mkdir()
    (trimmed / "manifest.json").write_text(json.dumps(manifest))
    refused = provision("up", str(site["inventory"]), "--bundle", str(trimmed))
    assert refused.returncode == 2, refused.output
    assert f"host {host.name} needs apt packages cuda-toolkit-12-9, libnvidia-container-tools, " in refused.output
    assert "nvidia-driver-cuda, nvidia-kernel-open-dkms for debian-bookworm" in refused.output, refused.output
    assert f"host {host.name} needs {site['inventory_keyring']} (an apt repository's key or keyring package)" \
        in refused.output, refused.output
    assert sh(host, "ls /var/lib/provision/bundle 2>/dev/null | wc -l") == "0"


def test_a_fresh_offline_gpu_laptop_converges_the_whole_site_from_the_bundle(site, converged) -> None:
    first, host = converged["first"], site["host"]
    changed = first.changed_tasks(host.name)
    assert {"the offline bundle copied to the host and verified", "NVIDIA CUDA repository (cuda-keyring)",
            "NVIDIA Container Toolkit repository", "NVIDIA open driver installed and held", REBOOT,
            "CUDA toolkit installed", "NVIDIA Container Toolkit installed",
            "GPU check image loaded from the offline bundle", "vLLM image loaded from the offline bundle",
            "vLLM service released and checked"} <= set(changed), changed
    summaries = {task["name"]: task["summary"] for task in first.host(host.name)["tasks"]}
    assert summaries[REBOOT] == "reboot (nouveau holds the GPU)"
    assert "file:///var/lib/provision/bundle/files/" in summaries["NVIDIA CUDA repository (cuda-keyring)"]
    assert sh(host, "nvidia-smi --query-gpu=name,driver_version --format=csv,noheader") == \
        f"NVIDIA GeForce RTX 5090 Laptop GPU, {DRIVER_VERSIONS[0]}"
    # the pin and the holds work on packages whose origin is the bundle
    assert sh(host, "apt-mark showhold").split() == HELD_BY_UP
    policy = sh(host, "apt-cache policy nvidia-driver-cuda")
    assert f"Installed: {DRIVER_VERSIONS[0]}-1" in policy and f"{DRIVER_VERSIONS[0]}-1 1000" in policy, policy
    assert "file:/var/lib/provision/bundle/apt/debian-bookworm" in policy, policy
    assert "release 12.9," in sh(host, "bash -lc 'nvcc --version'")
    assert sh(host, "systemctl is-active docker vllm nvidia-persistenced").split() == ["active"] * 3
    assert "GPU 0: NVIDIA GeForce RTX 5090 Laptop GPU" in sh(
        host, f"docker run --rm --gpus all {site['check_image']} nvidia-smi -L")
    release = summaries["vLLM service released and checked"]
    assert "text " in release and "vision " in release, release
    models = sh(host, f"curl -fsS -H \"Authorization: Bearer $(cat {KEY_FILE})\" http://127.0.0.1:8000/v1/models")
    assert json.loads(models)["data"][0]["id"] == "workhorse", models
    print(f"\noffline whole-site up (one reboot): {site['first_s']:.1f} s, {len(changed)} changed")


def test_the_rerun_changes_nothing(site, converged) -> None:
    again = converged["again"]
    assert again.returncode == 0, again.output[-6000:]
    assert again.changed_tasks(site["host"].name) == [], again.output[-6000:]
    print(f"\noffline whole-site rerun: {site['again_s']:.1f} s, 0 changed")
