"""The bundle's index, `manifest.json`: what it holds, for which hosts and releases, every file's size
and sha256 (also as `SHA256SUMS`, for `sha256sum -c`).

It is written last, atomically, after every file it names has been written and hashed, so a bundle
with a manifest is complete; a build starts by removing it (a killed build leaves none).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provision.bundle.needs import HostNeeds, package_name
from provision.errors import InputError
from provision.input_files import read_input_text
from provision.ops.fields import SHA256, relative_path_problem

MANIFEST = "manifest.json"
SUMS = "SHA256SUMS"
FORMAT = 1
KEY_FILE = "key.asc"
CHUNK = 1024 * 1024
IMAGE_ID = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass
class Manifest:
    """`releases`: release -> {repo, packages (every package name in its repository), requested,
    hosts}; `images`: reference -> {file, id, repo_digests, hosts}; `weights`: "repo@revision" ->
    {repo, revision, commit, hosts, files}; `urls`: URL -> {file, hosts} (an apt repository's key or
    keyring package, read from `file` under `up --bundle`); `files`: path -> {size, sha256}."""

    created: str = ""
    key_fingerprint: str = ""
    releases: dict[str, dict[str, Any]] = field(default_factory=dict)
    images: dict[str, dict[str, Any]] = field(default_factory=dict)
    weights: dict[str, dict[str, Any]] = field(default_factory=dict)
    urls: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    format: int = FORMAT

    @property
    def size(self) -> int:
        return sum(entry["size"] for entry in self.files.values())

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str) -> Manifest:
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError(f"expected a JSON object, got {type(data).__name__}")
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, this provision reads format {FORMAT}")
            manifest = cls(**data)
            manifest.check()
            return manifest
        except RecursionError:
            raise InputError("not a bundle manifest: nested too deep to read", file=where) from None
        except (ValueError, TypeError, KeyError, AttributeError) as error:
            raise InputError(f"not a bundle manifest: {error}", file=where) from error

    def check(self) -> None:
        """ValueError unless every value that reaches a host's script has its format: a bundle on a
        host (`--bundle host:PATH`) or a disk passed around is data from outside."""
        named = [*self.files, *(i["file"] for i in self.images.values()), *(u["file"] for u in self.urls.values()),
                 *(f for w in self.weights.values() for f in w.get("files", []))]
        for path in named:
            problem = relative_path_problem(str(path))
            if problem:
                raise ValueError(f"file {path!r}: {problem}")
        for path, entry in self.files.items():
            size, sha256 = entry["size"], entry["sha256"]
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise ValueError(f"files.{path}.size {size!r} is not a byte count")
            if not SHA256.fullmatch(str(sha256)):
                raise ValueError(f"files.{path}.sha256 {sha256!r} is not 64 lowercase hex digits")
        for reference, image in self.images.items():
            if not IMAGE_ID.fullmatch(str(image["id"])):
                raise ValueError(f"images.{reference}.id {image['id']!r} is not sha256:<64 hex digits>")

    def missing(self, needs: HostNeeds) -> list[str]:
        """What `needs` asks for that this bundle lacks, each named for a person."""
        gaps = []
        release = self.releases.get(needs.release)
        if needs.packages and release is None:
            have = ", ".join(sorted(self.releases)) or "none"
            gaps.append(f"the apt packages for {needs.release} (the bundle has packages for: {have})")
        elif release is not None:
            absent = sorted({package_name(p) for p in needs.packages} - set(release["packages"]))
            if absent:
                gaps.append(f"apt packages {', '.join(absent)} for {needs.release}")
            gaps += [f"{spec} for {needs.release} (the bundle has {', '.join(have)})"
                     for spec, have in wrong_versions(needs.packages, release.get("versions") or {})]
        gaps += [f"the image {image}" for image in needs.images if image not in self.images]
        gaps += [f"the weights {weights}" for weights in needs.weights if str(weights) not in self.weights]
        gaps += [f"{url} (an apt repository's key or keyring package)" for url in needs.urls if url not in self.urls]
        return gaps

    def files_for(self, needs: HostNeeds) -> list[str]:
        """The bundle files a host with these needs uses (what is copied to it), sorted."""
        wanted: set[str] = set()
        if needs.packages and needs.release in self.releases:
            prefix = self.releases[needs.release]["repo"] + "/"
            wanted |= {path for path in self.files if path.startswith(prefix)} | {KEY_FILE}
        wanted |= {self.images[image]["file"] for image in needs.images if image in self.images}
        for weights in needs.weights:
            wanted |= set(self.weights.get(str(weights), {}).get("files", []))
        wanted |= {self.urls[url]["file"] for url in needs.urls if url in self.urls}
        return sorted(wanted)


def wrong_versions(specs: list[str], versions: dict[str, list[str]]) -> list[tuple[str, list[str]]]:
    """The `name=version` specs (apt's `*` globs, as the roles pin) that no version of that package in
    the bundle matches, each with the versions it has: a bundle built for driver 580.95.05 cannot
    install 580.105.08, and apt would only find out on the host."""
    wrong = []
    for spec in specs:
        name, _, wanted = spec.partition("=")
        have = versions.get(name)
        if wanted and have and not any(fnmatch.fnmatchcase(version, wanted) for version in have):
            wrong.append((spec, have))
    return wrong


def sha256_of(path: Path, advance: Callable[[int], None] = lambda _: None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            advance(len(chunk))
    return digest.hexdigest()


def atomic_write(path: Path, text: str) -> None:
    """Write beside, flush to disk, rename: a reader sees the old file or the whole new one."""
    part = path.with_name(f".{path.name}.part")
    with part.open("w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    part.replace(path)


def write(directory: Path, manifest: Manifest) -> None:
    """SHA256SUMS, then the manifest (last: its presence means the bundle is complete)."""
    atomic_write(directory / SUMS, "".join(f"{entry['sha256']}  {path}\n"
                                           for path, entry in sorted(manifest.files.items())))
    atomic_write(directory / MANIFEST, manifest.to_json())


def load(directory: Path) -> Manifest:
    path = directory / MANIFEST
    if not path.is_file():
        raise InputError(f"no {MANIFEST} in {directory}: not a bundle, or its build did not finish "
                         "(run `provision bundle` again: it resumes)", key="--bundle")
    return Manifest.from_json(read_input_text(path), str(path))
