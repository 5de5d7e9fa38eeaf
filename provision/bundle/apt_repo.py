"""A release's signed apt repository, built in a throwaway container of that release (apt_repo.sh).

Why a container of the release: apt resolves dependencies against that release's archive and its
versions, whatever the controller runs. Why apt-ftparchive: one small package (apt-utils) writes
both Packages and Release with their hashes (dpkg-scanpackages needs dpkg-dev and perl and writes
no Release). The repository is flat (`deb file:/... ./`), signed by the bundle's own key.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from importlib import resources
from pathlib import Path

import docker
import docker.errors

from provision.bundle.progress import Transfer
from provision.errors import ProvisionError

KB = {"B": 1, "kB": 1000, "MB": 1000**2, "GB": 1000**3}
NEED = re.compile(r"^Need to get ([0-9.,]+) (B|kB|MB|GB)(?:/([0-9.,]+) (B|kB|MB|GB))? of archives")
GET = re.compile(r"^Get:\d+ .* \[([0-9.,]+) (B|kB|MB|GB)\]$")


def _bytes(number: str, unit: str) -> int:
    return int(float(number.replace(",", "")) * KB[unit])


class AptProgress:
    """Reads apt-get's download lines: "Need to get 708 kB/13.5 MB of archives." (to fetch / the
    whole closure) and "Get:1 URL suite pkg arch version [392 kB]" as each file starts."""

    def __init__(self, transfer: Transfer) -> None:
        self.transfer = transfer
        self.total = 0
        self.downloading = False  # the script's own tools (apt-utils, gnupg) come first: not the bundle's

    def feed(self, line: str) -> None:
        if line.startswith("step="):
            self.downloading = line == "step=download"
            return
        if not self.downloading:
            return
        need, get = NEED.match(line), GET.match(line)
        if need:
            fetch = _bytes(need.group(1), need.group(2))
            self.total += fetch
            self.transfer.set(total=self.total)
        elif get:
            self.transfer.advance(_bytes(get.group(1), get.group(2)))


def build_repository(out: Path, release_image: str, key_dir: Path, with_recommends: list[str],
                     without_recommends: list[str], transfer: Transfer,
                     setup_dir: Path | None = None) -> tuple[str, list[str]]:
    """Fill `out` (debs, Packages, Release, InRelease, Release.gpg) and write `out.parent/key.asc`;
    return (the key's fingerprint, every package name in the repository). `setup_dir` holds the
    repositories and preferences the roles configure (see apt_repo.sh), added before resolving."""
    client = docker.from_env()
    out.mkdir(parents=True, exist_ok=True)
    key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    script = resources.files("provision.bundle").joinpath("apt_repo.sh").read_text(encoding="utf-8")
    # one container per repository folder: a build killed here leaves its container running, and the
    # next build must not write beside it
    name = "provision-bundle-" + hashlib.sha256(str(out.absolute()).encode()).hexdigest()[:16]
    with contextlib.suppress(docker.errors.NotFound):
        client.containers.get(name).remove(force=True)
    volumes = {str(out.absolute()): {"bind": "/bundle/repo", "mode": "rw"},
               str(key_dir.absolute()): {"bind": "/bundle/key", "mode": "rw"}}
    if setup_dir is not None:
        volumes[str(setup_dir.absolute())] = {"bind": "/bundle/setup", "mode": "ro"}
    try:
        # this machine's network: a repository the inventory names (a mirror on localhost, a proxy only
        # this machine reaches) is reached from the container as from the controller
        container = client.containers.run(
            release_image, ["bash", "-c", script, "apt_repo.sh"], detach=True, name=name, network_mode="host",
            environment={"OUT": "/bundle/repo", "KEY_DIR": "/bundle/key", "WITH_RECOMMENDS": " ".join(with_recommends),
                         "WITHOUT_RECOMMENDS": " ".join(without_recommends),
                         "SETUP_DIR": "/bundle/setup" if setup_dir is not None else "",
                         "OWNER": f"{os.getuid()}:{os.getgid()}"},
            volumes=volumes)
    except docker.errors.ImageNotFound as error:
        raise ProvisionError(f"the release image {release_image} is not on this machine and cannot be pulled: "
                             "set bundle_release_images") from error
    reader, lines, fingerprint, buffer = AptProgress(transfer), [], "", b""
    try:
        for chunk in container.logs(stream=True, follow=True):
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for raw in complete:
                line = raw.decode(errors="replace").rstrip()
                lines.append(line)
                reader.feed(line)
                if line.startswith("fingerprint="):
                    fingerprint = line.split("=", 1)[1]
        status = container.wait()["StatusCode"]
    finally:
        container.remove(force=True)
    if status != 0:
        tail = "\n".join(lines[-15:])
        raise ProvisionError(f"building the apt repository in {release_image} failed (exit {status}):\n{tail}")
    (out / "key.asc").replace(out.parent.parent / "key.asc")
    return fingerprint, sorted(package_versions((out / "Packages").read_text()))


def package_versions(packages: str) -> dict[str, list[str]]:
    """Package name -> its versions in an apt `Packages` index (stanzas of `Package:`, `Version:`)."""
    versions: dict[str, list[str]] = {}
    name = ""
    for line in packages.splitlines():
        if line.startswith("Package:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:") and name:
            versions.setdefault(name, []).append(line.split(":", 1)[1].strip())
    return {name: sorted(found) for name, found in versions.items()}
