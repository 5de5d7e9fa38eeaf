"""The offline bundle without hosts: what a host needs (read from the site's own tasks), what a bundle
lacks (named), the apt progress reader on real output, the weights fetched on the
controller as a static copy of the hub that hf_snapshot reads through file:// (resumed, checked,
read offline by the real huggingface_hub), bundle_copy resuming and verifying, docker_load matching
by image id."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from provision.bundle.apt_repo import AptProgress
from provision.bundle.manifest import Manifest
from provision.bundle.needs import HostNeeds, Weights, host_needs
from provision.bundle.weights import api_path, fetch, file_list, resolve_path
from provision.cli.bundle import target_facts
from provision.connection.local import LocalConnection
from provision.errors import CommandFailed, ProvisionError, TaskFailed
from provision.facts.model import HostFacts, OsInfo
from provision.inventory.loader import load_inventory
from provision.ops import REGISTRY
from provision.playbook.loader import load_playbook
from provision.runner.host_run import RunOptions
from tests.standins.hub.cli import start_hub
from tests.standins.hub.server import HubOptions
from tests.unit.ops_support import LocalTestConnection, context, plan, probe_local
from tests.unit.test_roles_gpu_support import SITE

MIB = 1024 * 1024
FIXTURES = Path(__file__).parent / "fixtures"
BOOKWORM = HostFacts(os=OsInfo(id="debian", version_id="12", codename="bookworm"), arch="x86_64").as_vars()


class Bar:
    """A stand-in for a rich progress bar: what the readers told it."""

    def __init__(self) -> None:
        self.completed = 0
        self.total: int | None = None

    def advance(self, count: int) -> None:
        self.completed += count

    def set(self, completed: int | None = None, total: int | None = None, description: str | None = None) -> None:
        self.completed = self.completed if completed is None else completed
        self.total = self.total if total is None else total


def needs_for(tmp_path: Path, tags: str, **host_vars: object) -> HostNeeds:
    inventory_file = tmp_path / "inventory.yaml"
    inventory_file.write_text(json.dumps({"all": {"hosts": {"desk-1": {"ansible_host": "192.0.2.1", **host_vars}}}}))
    inventory = load_inventory(inventory_file)
    return host_needs(load_playbook(SITE), inventory, inventory.host("desk-1"), BOOKWORM, {},
                      RunOptions(tags=frozenset(tags.split(","))))


def test_a_host_needs_what_its_selected_tasks_install_pull_and_download(tmp_path: Path) -> None:
    needs = needs_for(tmp_path, "docker,model,vllm")
    assert needs.release == "debian-bookworm"
    # docker.io without its Recommends, what dockerd uses named beside it (roles/docker/defaults.yaml)
    assert needs.with_recommends == []
    assert needs.without_recommends == ["docker.io", "apparmor", "ca-certificates", "xz-utils", "pigz", "curl"]
    assert needs.images == [load_playbook(SITE)[-1].defaults["vllm_image"]]
    assert needs.weights == [Weights("cyankiwi/gemma-4-26B-A4B-it-AWQ-4bit", "main")]
    assert needs.unresolved == []
    other = needs_for(tmp_path, "docker", docker_distro_packages=["docker.io", "docker-compose"])
    assert other.packages == ["docker-compose", "docker.io"] and other.images == [] and other.weights == []


def manifest() -> Manifest:
    return Manifest(
        releases={"debian-bookworm": {"repo": "apt/debian-bookworm", "packages": ["curl", "docker.io", "libc6"],
                                      "requested": ["curl", "docker.io"], "hosts": ["desk-1"]}},
        images={"r/x:1": {"file": "images/abc.tar", "id": "sha256:" + "a" * 64, "repo_digests": [], "hosts": []}},
        weights={"org/m@main": {"repo": "org/m", "revision": "main", "commit": "c" * 40, "hosts": [],
                                "files": ["hub/org/m/resolve/x/w.bin"]}},
        files={"key.asc": {"size": 1, "sha256": "k"}, "apt/debian-bookworm/Packages": {"size": 1, "sha256": "p"},
               "images/abc.tar": {"size": 1, "sha256": "i"}, "hub/org/m/resolve/x/w.bin": {"size": 1, "sha256": "w"},
               "apt/debian-trixie/Packages": {"size": 1, "sha256": "t"}})


def test_what_a_bundle_lacks_is_named_and_what_a_host_uses_is_its_part_only() -> None:
    full = HostNeeds("desk-1", "debian-bookworm", ["docker.io"], ["curl=7.88*"], ["r/x:1"], [Weights("org/m", "main")])
    assert manifest().missing(full) == []
    assert manifest().files_for(full) == ["apt/debian-bookworm/Packages", "hub/org/m/resolve/x/w.bin",
                                          "images/abc.tar", "key.asc"]
    lacking = HostNeeds("desk-2", "ubuntu-noble", ["docker.io"], [], ["r/y:2"], [Weights("org/m", "v2")])
    assert manifest().missing(lacking) == [
        "the apt packages for ubuntu-noble (the bundle has packages for: debian-bookworm)",
        "the image r/y:2", "the weights org/m@v2"]
    assert manifest().missing(HostNeeds("d", "debian-bookworm", ["nvidia-open", "curl"])) == [
        "apt packages nvidia-open for debian-bookworm"]


def test_apt_progress_counts_only_the_bundle_downloads() -> None:
    """Lines as apt-get 2.6 printed them in a bookworm container (provision/bundle/apt_repo.sh)."""
    bar = Bar()
    reader = AptProgress(bar)  # type: ignore[arg-type]
    for line in ["step=tools", "Need to get 2227 kB of archives.",
                 "Get:1 http://deb.debian.org/debian bookworm/main amd64 apt-utils amd64 2.6.1 [222 kB]",
                 "step=download", "Need to get 708 kB/13.5 MB of archives.",
                 "Get:1 http://deb.debian.org/debian bookworm/main amd64 libcurl4 amd64 7.88.1-10+deb12u15 [392 kB]",
                 "Get:2 http://deb.debian.org/debian bookworm/main amd64 curl amd64 7.88.1-10+deb12u15 [316 kB]",
                 "step=index"]:
        reader.feed(line)
    assert (bar.completed, bar.total) == (708_000, 708_000)


@pytest.fixture
def static_hub(tmp_path: Path):
    """A bundle's copy of the stand-in hub, fetched as `provision bundle` fetches it."""
    running = start_hub(tmp_path / "repo", shard_size=MIB, shards=2, options=HubOptions(drop_after_bytes=MIB // 2))
    try:
        repo = running.repository.repo_id
        commit, files, body = file_list(running.url, repo, "main", None)
        hub = tmp_path / "bundle" / "hub"
        api_path(hub, repo, "main").parent.mkdir(parents=True)
        api_path(hub, repo, "main").write_bytes(body)
        for repo_file in files:
            target = resolve_path(hub, repo, commit, repo_file.path)
            try:
                fetch(running.url, repo, commit, repo_file, target, None, Bar())  # type: ignore[arg-type]
            except ProvisionError as dropped:  # the stand-in drops the connection once per file
                assert "run again: it resumes" in str(dropped)
                fetch(running.url, repo, commit, repo_file, target, None, Bar())  # type: ignore[arg-type]
        ranges = [r["range"] for r in running.state.requests if r["path"].endswith(".safetensors")]
        yield hub, running.repository, ranges
    finally:
        running.stop()


def test_weights_from_the_bundle_land_in_the_hf_cache_and_read_offline(static_hub, tmp_path: Path) -> None:
    huggingface_hub = pytest.importorskip("huggingface_hub")
    hub, repository, ranges = static_hub
    assert any(r and r.startswith("bytes=") for r in ranges), f"a dropped fetch resumes with a Range: {ranges}"
    cache = tmp_path / "hf" / "hub"
    args = {"repo": repository.repo_id, "cache_dir": str(cache), "endpoint": f"file://{hub}"}
    first = plan("hf_snapshot", probe_local("hf_snapshot", **args), **args)
    assert first.changed and f"download {len(repository.files)} of {len(repository.files)} files" in first.summary
    REGISTRY["hf_snapshot"].apply(context(LocalTestConnection()), first)
    again = plan("hf_snapshot", probe_local("hf_snapshot", **args), **args)
    assert not again.changed and "complete" in again.summary
    snapshot = Path(huggingface_hub.snapshot_download(repository.repo_id, cache_dir=cache, local_files_only=True))
    assert snapshot.name == repository.commit
    for repo_file in repository.files:
        assert (snapshot / repo_file.path).read_bytes() == (repository.folder / repo_file.path).read_bytes()
    absent = {**args, "revision": "v9"}  # not (yet) on the host: planned, and fails clearly if run
    planned = plan("hf_snapshot", probe_local("hf_snapshot", **absent), **absent)
    assert planned.changed and "its file list is not there yet" in planned.summary
    with pytest.raises(CommandFailed, match="was not found"):
        REGISTRY["hf_snapshot"].apply(context(LocalTestConnection()), planned)


class UploadingConnection(LocalTestConnection):
    """Runs here, uploads as the local connection does."""

    def upload(self, local: Path, remote: str, offset: int, advance) -> None:
        LocalConnection().upload(local, remote, offset, advance)


def test_bundle_copy_resumes_a_part_verifies_and_converges(tmp_path: Path) -> None:
    source, dest = tmp_path / "bundle", tmp_path / "host" / "bundle"
    (source / "images").mkdir(parents=True)
    data = bytes(range(256)) * 8192
    (source / "images/a.tar").write_bytes(data)
    (source / "key.asc").write_text("key")
    files = [{"path": "images/a.tar", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()},
             {"path": "key.asc", "size": 3, "sha256": hashlib.sha256(b"key").hexdigest()}]
    (dest / "images").mkdir(parents=True)
    (dest / "images/a.tar.part").write_bytes(data[:300_000])
    args = {"source": str(source), "dest": str(dest), "files": files}
    first = plan("bundle_copy", probe_local("bundle_copy", **args), **args)
    assert "copy 2 of 2" in first.summary and "resuming after 0.3 MiB" in first.summary
    progress: list[tuple[object, ...]] = []
    REGISTRY["bundle_copy"].apply(context(UploadingConnection(), progress=progress), first)
    assert (dest / "images/a.tar").read_bytes() == data and not list(dest.rglob("*.part"))
    assert progress[-1][1] == progress[-1][2] == len(data) - 300_000 + 3, "only what was missing moved"
    assert "MiB" in str(progress[-1][0])
    assert not plan("bundle_copy", probe_local("bundle_copy", **args), **args).changed
    (dest / "key.asc").unlink()
    (dest / "key.asc.part").write_text("bad")  # a part of the right size with the wrong bytes
    broken = plan("bundle_copy", probe_local("bundle_copy", **args), **args)
    (source / "key.asc").write_text("kez")
    with pytest.raises(TaskFailed, match="is not the bundle's"):
        REGISTRY["bundle_copy"].apply(context(UploadingConnection()), broken)
    assert not (dest / "key.asc.part").exists() and not (dest / "key.asc").exists()


def test_docker_load_matches_by_image_id() -> None:
    image = {"reference": "r/x:1", "file": "images/a.tar", "id": "sha256:" + "a" * 64}
    args = {"dir": "/var/lib/provision/bundle", "images": [image]}
    assert not plan("docker_load", f"id={image['id']}\n", **args).changed
    for found in ("id=\n", "id=sha256:" + "b" * 64 + "\n"):
        load = plan("docker_load", found, **args)
        assert load.changed and load.scripts[0].env == {"ARCHIVE": "/var/lib/provision/bundle/images/a.tar"}
        assert "docker load --quiet --input" in load.scripts[0].script


def test_docker_load_reports_the_bytes_docker_has_read(tmp_path: Path) -> None:
    """docker_load.sh against a `docker` that reads the archive in two steps, as the CLI streams it."""
    import os
    import subprocess
    from importlib import resources

    from provision.ops.docker_load import LoadProgress

    archive = tmp_path / "images" / "a.tar"
    archive.parent.mkdir()
    archive.write_bytes(b"x" * 3000)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text('#!/bin/sh\nexec 3< "$4"\ndd bs=1000 count=1 <&3 >/dev/null 2>&1\n'
                                    "sleep 2.5\ncat <&3 >/dev/null\n")
    (bin_dir / "docker").chmod(0o755)
    script = resources.files("provision.ops").joinpath("docker_load.sh").read_text(encoding="utf-8")
    ran = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                              "ARCHIVE": str(tmp_path / "images" / ".." / "images" / "a.tar")})
    assert ran.returncode == 0, ran.stderr
    progress, seen = LoadProgress(), []
    for line in ran.stdout.splitlines():
        if progress.feed(line):
            seen.append(progress.loaded)
    assert progress.size == 3000 and 1000 in seen, ran.stdout
    assert progress.describe("docker load images/a.tar", ", 1.0 MiB/s")[0] == \
        "docker load images/a.tar: 0.0/0.0 MiB, 1.0 MiB/s"


def test_the_gpu_roles_need_their_repositories_keys_and_driver_pin(tmp_path: Path) -> None:
    needs = needs_for(tmp_path, "nvidia_driver,cuda_toolkit,container_toolkit", nvidia_driver_version="580.95.05",
                      nvidia_kernel_headers={"debian": []}, nvidia_dkms_packages=[])
    keyring = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb"
    assert needs.urls == [keyring, "https://nvidia.github.io/libnvidia-container/gpgkey"]
    assert [repo["name"] for repo in needs.repositories] == ["cuda", "nvidia-container-toolkit-keyring"]
    # g++: nvcc's host compiler, for the toolkit's compile check (from the release's own archive)
    assert {"nvidia-driver-cuda=580.95.05-*", "cuda-toolkit-12-9", "g++", "nvidia-container-toolkit=1.18.2-1"} <= set(
        needs.packages)
    assert needs.components == {"/etc/apt/sources.list.d/debian.sources": ["contrib"],
                                "/etc/apt/sources.list": ["contrib"]}
    (pin,) = needs.preferences.values()
    assert "Pin: version 580.95.05-*\nPin-Priority: 1000" in pin
    assert needs.unresolved == []


def test_a_bundle_without_a_repository_key_or_with_another_driver_release_is_named() -> None:
    bundle = manifest()
    bundle.releases["debian-bookworm"]["packages"].append("nvidia-driver-cuda")
    bundle.releases["debian-bookworm"]["versions"] = {"nvidia-driver-cuda": ["580.95.05-1"]}
    needs = HostNeeds("desk-1", "debian-bookworm", ["nvidia-driver-cuda=580.105.08-*"],
                      urls=["https://example.invalid/gpgkey"])
    assert bundle.missing(needs) == [
        "nvidia-driver-cuda=580.105.08-* for debian-bookworm (the bundle has 580.95.05-1)",
        "https://example.invalid/gpgkey (an apt repository's key or keyring package)"]
    bundle.urls["https://example.invalid/gpgkey"] = {"file": "files/abc/gpgkey", "hosts": ["desk-1"]}
    bundle.files["files/abc/gpgkey"] = {"size": 1, "sha256": "g"}
    assert bundle.missing(HostNeeds("desk-1", "debian-bookworm", ["nvidia-driver-cuda=580.95.*"],
                                    urls=["https://example.invalid/gpgkey"])) == []
    assert "files/abc/gpgkey" in bundle.files_for(needs)


def test_under_a_bundle_a_url_it_carries_is_read_from_its_copy() -> None:
    from provision.playbook.templating import Renderer, make_environment

    url = "https://nvidia.github.io/libnvidia-container/gpgkey"
    offline = Renderer(make_environment(), {"bundle_host": {"urls": {url: "files/abc/gpgkey"}},
                                            "bundle_path": "/media/usb/bundle/", "url": url})
    assert offline.render("{{ url | from_bundle }}") == "file:///media/usb/bundle/files/abc/gpgkey"
    online = Renderer(make_environment(), {"bundle_host": {}, "bundle_path": "/var/lib/provision/bundle", "url": url})
    assert online.render("{{ url | from_bundle }}") == url
    assert offline.render("{{ 'https://other.invalid/key' | from_bundle }}") == "https://other.invalid/key"


def test_the_release_container_gets_the_roles_repositories_and_pins(tmp_path: Path) -> None:
    from provision.bundle.repositories import url_file, write_setup

    key_url = "https://nvidia.github.io/libnvidia-container/gpgkey"
    deb_url = "https://x.invalid/r/cuda-keyring_1.1-1_all.deb"
    armored = b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nAAEC\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----\n"
    for url, data in ((key_url, armored), (deb_url, b"!<arch>\n")):
        (tmp_path / url_file(url)).parent.mkdir(parents=True)
        (tmp_path / url_file(url)).write_bytes(data)
    assert url_file(deb_url).endswith("/cuda-keyring_1.1-1_all.deb")
    setup = tmp_path / "setup"
    digest = write_setup(setup, tmp_path, [
        {"name": "cuda", "keyring_package_url": deb_url},
        {"name": "nvidia-container-toolkit-keyring", "suites": ["/"], "key_url": key_url,
         "uris": ["https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"]}],
        {"/etc/apt/preferences.d/nvidia-driver.pref": "Pin: version 580.*\n"}, "x86_64")
    assert (setup / "keys/nvidia-container-toolkit-keyring.gpg").read_bytes() == b"\x00\x01\x02"  # dearmored
    sources = (setup / "sources/nvidia-container-toolkit-keyring.sources").read_text()
    assert "Architectures: amd64" in sources
    assert "Signed-By: /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg" in sources
    assert (setup / "debs/cuda-keyring_1.1-1_all.deb").is_file()
    assert (setup / "preferences/nvidia-driver.pref").read_text() == "Pin: version 580.*\n"
    assert len(digest) == 64


def test_a_host_known_by_bundle_os_gets_kernel_headers_only_when_its_kernel_is_declared(tmp_path: Path) -> None:
    """Without the host's `uname -r` the DKMS headers' name is unknown: reported, never "linux-headers-"."""
    plays = load_playbook(SITE)
    os_only = {"id": "debian", "version_id": "12", "codename": "bookworm"}
    with_kernel = {**os_only, "kernel": "6.1.0-18-amd64"}
    for declared, expected in ((os_only, None), (with_kernel, "linux-headers-6.1.0-18-amd64")):
        inventory_file = tmp_path / "inventory.yaml"
        inventory_file.write_text(json.dumps({"all": {"hosts": {"desk-1": {"bundle_os": declared}}}}))
        inventory = load_inventory(inventory_file)
        host = inventory.host("desk-1")
        facts = target_facts(plays, host, {}, None)  # type: ignore[arg-type]  # not reached: no connection
        needs = host_needs(plays, inventory, host, facts, {}, RunOptions(tags=frozenset({"nvidia_driver"})))
        assert not any(name.endswith("-") for name in needs.packages), needs.packages
        if expected is None:
            assert any(task.startswith("nvidia_driver: kernel headers and DKMS") for task in needs.unresolved)
        else:
            assert expected in needs.packages and needs.unresolved == []
