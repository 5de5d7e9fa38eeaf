"""The stand-in NVIDIA apt repositories: layout, real package names, signatures, serving."""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.standins.nvidia import RepoInfo, build_repo, serve

BASE_URL = "http://10.0.2.2:8765"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> RepoInfo:
    # one directory per session: build_repo's cache makes every later build near-instant
    return build_repo(tmp_path_factory.getbasetemp() / "standin-nvidia-repo", BASE_URL)


def repo_dirs(repo: RepoInfo) -> dict[str, Path]:
    out = Path(repo.out_dir)
    return {
        "debian12": out / "cuda/repos/debian12/x86_64",
        "ubuntu2404": out / "cuda/repos/ubuntu2404/x86_64",
        "container": out / "libnvidia-container/stable/deb/amd64",
    }


def packages(directory: Path) -> list[dict[str, str]]:
    stanzas = (directory / "Packages").read_text().strip().split("\n\n")
    return [dict(line.split(": ", 1) for line in stanza.splitlines() if not line.startswith(" "))
            for stanza in stanzas]


def dearmor(armored: str, tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    keyring = tmp_path / "keyring.gpg"
    subprocess.run(["gpg", "--batch", "--yes", "--dearmor", "--output", str(keyring)], input=armored.encode(),
                   env={**os.environ, "GNUPGHOME": str(tmp_path)}, check=True, capture_output=True)
    return keyring


def test_urls_and_sources_lines_only_change_the_base_url(repo: RepoInfo) -> None:
    assert repo.cuda_repo_url() == f"{BASE_URL}/cuda/repos/debian12/x86_64/"
    assert repo.cuda_sources_line() == (
        f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {BASE_URL}/cuda/repos/debian12/x86_64/ /")
    assert repo.container_gpgkey_url == f"{BASE_URL}/libnvidia-container/gpgkey"
    assert repo.container_sources_line() == (
        "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
        f"{BASE_URL}/libnvidia-container/stable/deb/$(ARCH) /")
    for directory in repo_dirs(repo).values():
        for name in ("Packages", "Packages.gz", "Release", "InRelease", "Release.gpg"):
            assert (directory / name).is_file(), directory / name


@pytest.mark.parametrize("which", ["debian12", "ubuntu2404", "container"])
def test_inrelease_and_release_gpg_verify_against_the_exported_key(repo: RepoInfo, which: str,
                                                                    tmp_path: Path) -> None:
    directory = repo_dirs(repo)[which]
    key = repo.container_key if which == "container" else repo.cuda_key
    keyring = dearmor(key.armored, tmp_path)
    assert subprocess.run(["gpgv", "--keyring", str(keyring), str(directory / "InRelease")],
                          capture_output=True).returncode == 0
    assert subprocess.run(["gpgv", "--keyring", str(keyring), str(directory / "Release.gpg"),
                           str(directory / "Release")], capture_output=True).returncode == 0
    # the other repository's key must not verify it: each repository has its own key
    other = repo.cuda_key if which == "container" else repo.container_key
    wrong = dearmor(other.armored, tmp_path / "other")
    assert subprocess.run(["gpgv", "--keyring", str(wrong), str(directory / "InRelease")],
                          capture_output=True).returncode != 0


def test_a_tampered_release_fails_verification(repo: RepoInfo, tmp_path: Path) -> None:
    directory = repo_dirs(repo)["debian12"]
    tampered = tmp_path / "InRelease"
    tampered.write_text((directory / "InRelease").read_text().replace("Label: NVIDIA CUDA", "Label: evil"))
    keyring = dearmor(repo.cuda_key.armored, tmp_path)
    assert subprocess.run(["gpgv", "--keyring", str(keyring), str(tampered)], capture_output=True).returncode != 0


def test_release_hashes_match_the_indexes(repo: RepoInfo) -> None:
    directory = repo_dirs(repo)["container"]
    release = (directory / "Release").read_text()
    for name in ("Packages", "Packages.gz"):
        data = (directory / name).read_bytes()
        assert f" {hashlib.sha256(data).hexdigest()} {len(data):>16} {name}\n" in release
    assert gzip.decompress((directory / "Packages.gz").read_bytes()) == (directory / "Packages").read_bytes()


def test_cuda_repo_lists_the_real_names_in_both_driver_versions(repo: RepoInfo) -> None:
    listed = {(stanza["Package"], stanza["Version"]) for stanza in packages(repo_dirs(repo)["debian12"])}
    for name in ("nvidia-open", "nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-kernel-dkms",
                 "nvidia-smi", "nvidia-persistenced", "cuda-drivers"):
        assert {(name, "580.95.05-1"), (name, "580.105.08-1")} <= listed, name
    assert {("cuda-toolkit-12-9", "12.9.1-1"), ("cuda-12-9", "12.9.1-1"), ("cuda-keyring", "1.1-1")} <= listed
    assert repo.driver_versions == ("580.95.05", "580.105.08")


def test_driver_packages_pin_each_other_exactly(repo: RepoInfo) -> None:
    by_key = {(s["Package"], s["Version"]): s for s in packages(repo_dirs(repo)["debian12"])}
    assert by_key[("nvidia-open", "580.95.05-1")]["Depends"] == (
        "nvidia-kernel-open-dkms (= 580.95.05-1), nvidia-driver-cuda (= 580.95.05-1)")
    assert "nvidia-kernel-dkms (= 580.105.08-1)" in by_key[("cuda-drivers", "580.105.08-1")]["Depends"]
    assert by_key[("nvidia-kernel-open-dkms", "580.95.05-1")]["Conflicts"] == "nvidia-kernel-dkms"
    assert "cuda-drivers" in by_key[("cuda-12-9", "12.9.1-1")]["Depends"]


def test_container_repo_has_the_four_packages_with_nvidias_dependencies(repo: RepoInfo) -> None:
    by_key = {(s["Package"], s["Version"]): s for s in packages(repo_dirs(repo)["container"])}
    for name in ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                 "libnvidia-container1"):
        assert {(name, "1.17.8-1"), (name, "1.18.0-1")} <= set(by_key), name
    toolkit = by_key[("nvidia-container-toolkit", "1.17.8-1")]["Depends"]
    assert "nvidia-container-toolkit-base (= 1.17.8-1)" in toolkit
    assert "libnvidia-container-tools (>= 1.17.8-1), libnvidia-container-tools (<< 2.0.0)" in toolkit
    assert "libnvidia-container1 (>= 1.18.0-1)" in by_key[("libnvidia-container-tools", "1.18.0-1")]["Depends"]


def test_cuda_keyring_installs_the_key_and_a_sources_entry_for_this_repo(repo: RepoInfo, tmp_path: Path) -> None:
    for distro in ("debian12", "ubuntu2404"):
        deb = repo_dirs(repo)[distro] / "cuda-keyring_1.1-1_all.deb"
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path / distro)], check=True)
        sources = (tmp_path / distro / f"etc/apt/sources.list.d/cuda-{distro}-x86_64.list").read_text()
        assert sources == repo.cuda_sources_line(distro) + "\n"
        keyring = (tmp_path / distro / "usr/share/keyrings/cuda-archive-keyring.gpg").read_bytes()
        assert keyring == dearmor(repo.cuda_key.armored, tmp_path / f"{distro}-key").read_bytes()


def test_container_gpgkey_and_list_are_served_like_nvidias(repo: RepoInfo) -> None:
    out = Path(repo.out_dir)
    assert (out / "libnvidia-container/gpgkey").read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert (out / "libnvidia-container/stable/deb/nvidia-container-toolkit.list").read_text() == (
        repo.container_sources_line() + "\n")


def test_a_rebuild_is_cached_by_content_and_a_new_base_url_rebuilds(repo: RepoInfo, tmp_path: Path) -> None:
    again = build_repo(repo.out_dir, BASE_URL)
    assert again == repo
    other = build_repo(tmp_path / "other", "http://10.0.2.2:9999")
    assert other.build_id != repo.build_id
    assert other.cuda_key.fingerprint != repo.cuda_key.fingerprint
    listing = tmp_path / "other/libnvidia-container/stable/deb/nvidia-container-toolkit.list"
    assert "10.0.2.2:9999" in listing.read_text()


def test_serve_answers_over_http_and_records_requests(repo: RepoInfo) -> None:
    with serve(repo.out_dir, port=0) as server:
        with urllib.request.urlopen(f"{server.url}/cuda/repos/debian12/x86_64/InRelease", timeout=5) as response:
            body = response.read()
        assert body == (repo_dirs(repo)["debian12"] / "InRelease").read_bytes()
        assert server.requests == ["/cuda/repos/debian12/x86_64/InRelease"]
        assert server.host == "127.0.0.1"
