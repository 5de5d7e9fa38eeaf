"""The apt repositories the roles configure, carried by the bundle: their keys and keyring packages
as files (`files/`), and a setup folder that adds them (and the roles' apt preferences, and the
components they add to the release's own entries) to the throwaway release container before its
packages are resolved (apt_repo.sh).

On the host, `up --bundle` reads each of those URLs from the bundle's copy (the `from_bundle` filter
of the roles' apt_repository tasks), while apt itself reads only the bundle's own repository.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import shutil
import tarfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import docker
import docker.errors

from provision.bundle.manifest import sha256_of
from provision.errors import ProvisionError
from provision.ops.apt_components import add_components
from provision.ops.apt_repository import DEB_ARCHITECTURES, AptRepositoryArgs, dearmor, render_sources

FILES_DIR = "files"
TIMEOUT_S = 60


def url_file(url: str) -> str:
    """Where the bundle keeps the copy of `url`: files/<hash of the URL>/<its file name>. The name is
    kept: a keyring package's version is read from it (cuda-keyring_1.1-1_all.deb)."""
    name = unquote(posixpath.basename(urlparse(url).path)) or "index"
    return f"{FILES_DIR}/{hashlib.sha256(url.encode()).hexdigest()[:16]}/{name}"


def fetch_url(url: str, out: Path) -> Path:
    """Download `url` into the bundle (beside, then renamed); return the file."""
    target = out / url_file(url)
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response, part.open("wb") as handle:
            shutil.copyfileobj(response, handle)
    except (urllib.error.URLError, OSError) as error:
        part.unlink(missing_ok=True)
        raise ProvisionError(f"downloading {url} for the bundle failed: {error}") from error
    part.replace(target)
    return target


def image_file(release_image: str, path: str) -> str | None:
    """The text of `path` in the release image (None when the image has no such file), read from a
    created, never started, container."""
    client = docker.from_env()
    container = client.containers.create(release_image, ["true"])
    try:
        chunks, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as archive:
            member = archive.extractfile(archive.getmembers()[0])
            return member.read().decode() if member else None
    except docker.errors.NotFound:
        return None
    finally:
        container.remove(force=True)


def write_components(setup: Path, release_image: str, components: dict[str, list[str]]) -> None:
    """The release's own sources files with the components the roles add (root/<path>), edited as
    the apt_components operation edits them on a host; a file the image lacks is left absent."""
    for path, wanted in sorted(components.items()):
        text = image_file(release_image, path)
        if text is None or not wanted:
            continue
        target = setup / "root" / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(add_components(path, text, wanted))


def write_setup(setup: Path, out: Path, repositories: list[dict[str, Any]], preferences: dict[str, str],
                arch: str) -> str:
    """Fill `setup` (sources/, keys/, debs/, preferences/) from the repositories (their downloads
    already in `out`); return a digest of what it holds (root/ included), part of the build's inputs."""
    for folder in ("sources", "keys", "debs", "preferences"):
        (setup / folder).mkdir(parents=True, exist_ok=True)
    deb_arch = DEB_ARCHITECTURES.get(arch, "amd64")
    for raw in repositories:
        args = AptRepositoryArgs(**raw)
        if args.keyring_package_url:
            deb = out / url_file(args.keyring_package_url)
            shutil.copy(deb, setup / "debs" / deb.name)
            continue
        if args.key_url:
            key = (out / url_file(args.key_url)).read_bytes()
            keyring = dearmor(key.decode(errors="replace")) if b"-----BEGIN PGP" in key else key
        else:
            keyring = dearmor(str(args.key_file))
        (setup / "keys" / posixpath.basename(args.keyring_path)).write_bytes(keyring)
        sources = render_sources(args, args.architectures if args.architectures is not None else [deb_arch])
        (setup / "sources" / posixpath.basename(args.sources_path)).write_text(sources)
    for dest, text in preferences.items():
        (setup / "preferences" / posixpath.basename(dest)).write_text(text)
    digest = hashlib.sha256()
    for path in sorted(p for p in setup.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(setup)} {sha256_of(path)}\n".encode())
    return digest.hexdigest()
