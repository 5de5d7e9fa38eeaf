"""Building a bundle (`provision bundle`, provision/cli/bundle.py): gather on this (connected) machine
what the hosts need, into a folder: a signed apt repository per OS release, the image, the weights,
the manifest.

Each part is built beside its final name and renamed when whole;
`.build-state.json` records each finished part with the sha256 of its files, so a killed build run
again re-verifies what it has, resumes downloads and builds only the rest. The manifest is removed
first and written last: a bundle with a manifest is complete.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from provision.bundle import apt_repo, image, manifest, repositories, weights
from provision.bundle.manifest import KEY_FILE, Manifest, atomic_write, sha256_of
from provision.bundle.needs import HostNeeds, Weights
from provision.bundle.progress import Transfer, transfer_progress
from provision.errors import ProvisionError

STATE = ".build-state.json"


class BuildState:
    """The finished parts of a bundle being built: key -> {inputs, files: {path: sha256}, extra}."""

    def __init__(self, out: Path) -> None:
        self.path = out / STATE
        self.parts: dict[str, Any] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def finished(self, key: str, inputs: Any) -> dict[str, Any] | None:
        part = self.parts.get(key)
        return part if part and part["inputs"] == inputs else None

    def record(self, key: str, inputs: Any, out: Path, files: list[Path], extra: dict[str, Any]) -> None:
        self.parts[key] = {"inputs": inputs, "extra": extra,
                           "files": {str(path.relative_to(out)): sha256_of(path) for path in files}}
        atomic_write(self.path, json.dumps(self.parts, indent=1, sort_keys=True))


class BundleBuilder:
    def __init__(self, out: Path, key_dir: Path, console: Console) -> None:
        self.out = out
        self.key_dir = key_dir
        self.console = console
        self.state = BuildState(out)
        self.manifest = Manifest(created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        self.progress = transfer_progress(console)

    def say(self, text: str) -> None:
        self.progress.console.print(text, highlight=False, markup=False, soft_wrap=True)

    def urls(self, needs: list[HostNeeds]) -> None:
        """The keys and keyring packages the hosts' apt repositories are configured from (KBs: fetched
        again at every build, so the bundle has what the URL gives today)."""
        wanted: dict[str, list[str]] = {}
        for need in needs:
            for url in need.urls:
                wanted.setdefault(url, []).append(need.host)
        for url, hosts in sorted(wanted.items()):
            path = repositories.fetch_url(url, self.out)
            self.say(f"file {url}: {path.stat().st_size} bytes")
            relative = str(path.relative_to(self.out))
            self.manifest.urls[url] = {"file": relative, "hosts": sorted(hosts)}
            self.manifest.files[relative] = {"size": path.stat().st_size, "sha256": ""}

    def apt(self, release: str, needs: list[HostNeeds], release_image: str) -> None:
        with_rec = sorted({p for n in needs for p in n.with_recommends})
        without = sorted({p for n in needs for p in n.without_recommends} - set(with_rec))
        with tempfile.TemporaryDirectory(prefix="provision-bundle-setup-") as setup_dir:
            setup = Path(setup_dir)
            configured = {repo["name"]: repo for n in needs for repo in n.repositories}
            preferences = {path: text for n in needs for path, text in n.preferences.items()}
            components: dict[str, list[str]] = {}
            for need in needs:
                for path, wanted in need.components.items():
                    components.setdefault(path, []).extend(c for c in wanted if c not in components[path])
            repositories.write_components(setup, release_image, components)
            setup_digest = repositories.write_setup(setup, self.out, list(configured.values()), preferences,
                                                    needs[0].arch)
            self._apt(release, needs, release_image, with_rec, without, setup, setup_digest)

    def _apt(self, release: str, needs: list[HostNeeds], release_image: str, with_rec: list[str],
             without: list[str], setup: Path, setup_digest: str) -> None:
        inputs = {"image": release_image, "with": with_rec, "without": without, "setup": setup_digest}
        key, repo = f"apt/{release}", self.out / "apt" / release
        part = self.state.finished(key, inputs)
        if part is None or not repo.is_dir():
            building = repo.with_name(release + ".part")
            if (building / ".inputs").is_file() and json.loads((building / ".inputs").read_text()) != inputs:
                shutil.rmtree(building)  # a killed build of other packages: its debs are not these
            building.mkdir(parents=True, exist_ok=True)
            (building / ".inputs").write_text(json.dumps(inputs))
            transfer = Transfer(self.progress, f"apt {release}: {len(with_rec) + len(without)} packages "
                                               f"and dependencies ({release_image})")
            fingerprint, names = apt_repo.build_repository(building, release_image, self.key_dir, with_rec,
                                                           without, transfer, setup)
            transfer.finish(f"apt {release}: {len(names)} packages")
            (building / ".inputs").unlink()
            shutil.rmtree(repo, ignore_errors=True)
            building.replace(repo)
            files = [*sorted(p for p in repo.iterdir() if p.is_file()), self.out / KEY_FILE]
            versions = apt_repo.package_versions((repo / "Packages").read_text())
            self.state.record(key, inputs, self.out, files, {"fingerprint": fingerprint, "packages": names,
                                                            "versions": versions})
            part = self.state.finished(key, inputs)
        else:
            self.say(f"apt {release}: built before, re-verifying")
        assert part is not None
        self.manifest.key_fingerprint = part["extra"]["fingerprint"]
        self.manifest.releases[release] = {"repo": key, "packages": part["extra"]["packages"],
                                           "versions": part["extra"].get("versions", {}),
                                           "requested": sorted({*with_rec, *without}),
                                           "hosts": sorted(n.host for n in needs)}
        self.claim(part)

    def image(self, reference: str, hosts: list[str]) -> None:
        pull = Transfer(self.progress, f"image {reference}: pull")
        found = image.present_or_pulled(reference, pull)
        pull.finish(f"image {reference}: present ({found.id[:19]})")
        key = f"image/{reference}"
        name = "images/" + found.id.split(":", 1)[-1][:16] + ".tar"
        part = self.state.finished(key, {"id": found.id})
        if part is None or not (self.out / name).is_file():
            (self.out / "images").mkdir(parents=True, exist_ok=True)
            transfer = Transfer(self.progress, f"image {reference}: docker save")
            image.save_image(found, reference, self.out / name, transfer)
            transfer.finish()
            self.state.record(key, {"id": found.id}, self.out, [self.out / name],
                              {"file": name, "id": found.id, "repo_digests": found.attrs.get("RepoDigests", [])})
            part = self.state.finished(key, {"id": found.id})
        assert part is not None
        self.manifest.images[reference] = {**part["extra"], "hosts": sorted(hosts)}
        self.claim(part)

    def weights(self, wanted: Weights, hosts: list[str], endpoint: str, token: Any, trusted_http: bool = False) -> None:
        commit, files, listing = weights.file_list(endpoint, wanted.repo, wanted.revision, token, trusted_http)
        hub = self.out / "hub"
        listed = weights.api_path(hub, wanted.repo, wanted.revision)
        listed.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(listed, listing.decode())
        total = sum(f.size for f in files)
        transfer = Transfer(self.progress, f"weights {wanted.repo}@{commit[:12]} from {endpoint}", total)
        paths = [listed]
        for repo_file in files:
            target = weights.resolve_path(hub, wanted.repo, commit, repo_file.path)
            if target.is_file() and target.stat().st_size == repo_file.size and weights.matches(repo_file, target):
                transfer.advance(repo_file.size)  # downloaded before, checked again
            else:
                weights.fetch(endpoint, wanted.repo, commit, repo_file, target, token, transfer, trusted_http)
            paths.append(target)
        transfer.finish()
        relative = [str(p.relative_to(self.out)) for p in paths]
        self.manifest.weights[str(wanted)] = {"repo": wanted.repo, "revision": wanted.revision, "commit": commit,
                                              "hosts": sorted(hosts), "files": relative}
        for path in paths:
            self.manifest.files[str(path.relative_to(self.out))] = {"size": path.stat().st_size, "sha256": ""}

    def claim(self, part: dict[str, Any]) -> None:
        for path, sha in part["files"].items():
            self.manifest.files[path] = {"size": (self.out / path).stat().st_size, "sha256": sha}

    def verify_and_write(self) -> None:
        """Hash every file again (what was recorded must still be there), then the manifest."""
        total = sum(entry["size"] for entry in self.manifest.files.values())
        transfer = Transfer(self.progress, f"verifying {len(self.manifest.files)} files", total)
        for path, entry in sorted(self.manifest.files.items()):
            actual = sha256_of(self.out / path, transfer.advance)
            if entry["sha256"] and actual != entry["sha256"]:
                (self.out / path).unlink()
                self.state.parts = {k: v for k, v in self.state.parts.items() if path not in v["files"]}
                atomic_write(self.state.path, json.dumps(self.state.parts, indent=1, sort_keys=True))
                raise ProvisionError(f"{self.out / path} changed since it was written (sha256 {actual}, "
                                     f"recorded {entry['sha256']}); removed: run `provision bundle` again")
            entry["sha256"] = actual
        transfer.finish()
        manifest.write(self.out, self.manifest)


def group(needs: list[HostNeeds]) -> tuple[dict[str, list[HostNeeds]], dict[str, list[str]], dict[Weights, list[str]]]:
    releases: dict[str, list[HostNeeds]] = {}
    images: dict[str, list[str]] = {}
    wanted: dict[Weights, list[str]] = {}
    for need in needs:
        if need.packages:
            releases.setdefault(need.release, []).append(need)
        for reference in need.images:
            images.setdefault(reference, []).append(need.host)
        for item in need.weights:
            wanted.setdefault(item, []).append(need.host)
    return releases, images, wanted
