"""Build and serve the stand-in NVIDIA apt repositories, laid out like the real ones.

    BASE/cuda/repos/<distro>/x86_64/            flat repo (debian12, debian13, ubuntu2404), like
                                                https://developer.download.nvidia.com/compute/cuda/repos/
    BASE/libnvidia-container/gpgkey             ASCII-armored key, like https://nvidia.github.io/libnvidia-container/gpgkey
    BASE/libnvidia-container/stable/deb/amd64/  flat repo, the `$(ARCH)` of the real sources line
    BASE/libnvidia-container/stable/deb/nvidia-container-toolkit.list

So a host's settings for an offline mirror only change the base URL. Each repository has Packages,
Packages.gz, Release, InRelease and Release.gpg, signed by its own throwaway key. Lab hosts reach
this machine's loopback as 10.0.2.2, so the lab builds with base_url "http://10.0.2.2:PORT" and
serves on 127.0.0.1:PORT. A build is cached in OUT_DIR by the hash of the sources and base URL.

    python -m tests.standins.nvidia build OUT_DIR --base-url http://10.0.2.2:8765
    python -m tests.standins.nvidia serve OUT_DIR --port 8765
"""

from __future__ import annotations

import argparse
import fcntl
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from email.utils import formatdate
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from . import catalogue
from .debs import DebSpec, build_deb
from .packages_cuda import cuda_repo_packages, keyring_package
from .packages_toolkit import container_repo_packages
from .signing import SigningKey, ThrowawayGpg

FORMAT = 1  # bump when the layout changes: old caches are rebuilt
INFO_FILE = "standin-repo.json"
CUDA_KEYRING = "/usr/share/keyrings/cuda-archive-keyring.gpg"
CONTAINER_KEYRING = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
SOURCE_DIR = Path(__file__).parent


@dataclass(frozen=True)
class KeyInfo:
    """A repository's public key: what a host needs to trust it."""

    fingerprint: str
    armored: str


@dataclass(frozen=True)
class RepoInfo:
    """Where a build lies and how a host reaches it."""

    out_dir: str
    base_url: str
    cuda_repos_base: str  # replaces https://developer.download.nvidia.com/compute/cuda/repos
    container_toolkit_base: str  # replaces https://nvidia.github.io/libnvidia-container
    cuda_key: KeyInfo
    container_key: KeyInfo
    driver_versions: tuple[str, ...]
    container_toolkit_versions: tuple[str, ...]
    cuda_toolkit_version: str
    # repository ("cuda", "container-toolkit") -> package -> versions, oldest first
    package_versions: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    build_id: str = ""

    def cuda_repo_url(self, distro: str = "debian12") -> str:
        return f"{self.cuda_repos_base}/{distro}/x86_64/"

    def cuda_keyring_deb_url(self, distro: str = "debian12") -> str:
        return f"{self.cuda_repo_url(distro)}cuda-keyring_1.1-1_all.deb"

    def cuda_sources_line(self, distro: str = "debian12") -> str:
        """The line cuda-keyring installs as /etc/apt/sources.list.d/cuda-<distro>-x86_64.list."""
        return f"deb [signed-by={CUDA_KEYRING}] {self.cuda_repo_url(distro)} /"

    @property
    def container_gpgkey_url(self) -> str:
        return f"{self.container_toolkit_base}/gpgkey"

    @property
    def container_repo_url(self) -> str:
        return f"{self.container_toolkit_base}/stable/deb/amd64/"

    def container_sources_line(self) -> str:
        """NVIDIA's nvidia-container-toolkit.list line (apt expands $(ARCH) itself)."""
        return f"deb [signed-by={CONTAINER_KEYRING}] {self.container_toolkit_base}/stable/deb/$(ARCH) /"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> RepoInfo:
        data = json.loads(text)
        data["cuda_key"] = KeyInfo(**data["cuda_key"])
        data["container_key"] = KeyInfo(**data["container_key"])
        data["driver_versions"] = tuple(data["driver_versions"])
        data["container_toolkit_versions"] = tuple(data["container_toolkit_versions"])
        return cls(**data)


def build_repo(out_dir: Path | str, base_url: str, dkms: bool = False) -> RepoInfo:
    """Build both repositories into OUT_DIR for hosts that reach it at BASE_URL (cached by content);
    `dkms`: nvidia-kernel-open-dkms is a real DKMS source package (packages_cuda.dkms_module_package)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / ".build.lock", "w") as lock:  # parallel test workers build once
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_locked(out_dir, base_url.rstrip("/"), dkms)


def _build_locked(out_dir: Path, base_url: str, dkms: bool) -> RepoInfo:
    build_id = _build_id(base_url + ("#dkms" if dkms else ""))
    info_path = out_dir / INFO_FILE
    if info_path.exists():
        cached = RepoInfo.from_json(info_path.read_text(encoding="utf-8"))
        if cached.build_id == build_id and cached.out_dir == str(out_dir):
            return cached
    for stale in (INFO_FILE, "cuda", "libnvidia-container"):
        path = out_dir / stale
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    cuda_base = f"{base_url}/cuda/repos"
    container_base = f"{base_url}/libnvidia-container"
    with ThrowawayGpg() as gpg:
        cuda_key = gpg.generate("cudatools stand-in <cudatools@lab.invalid>")
        container_key = gpg.generate("NVIDIA CONTAINER TOOLKIT stand-in <cudatools@lab.invalid>")
        cuda_versions = _build_cuda_repos(out_dir, cuda_base, cuda_key, gpg, dkms)
        container_versions = _build_container_repo(out_dir, container_base, container_key, gpg)
    info = RepoInfo(
        out_dir=str(out_dir), base_url=base_url, cuda_repos_base=cuda_base, container_toolkit_base=container_base,
        cuda_key=KeyInfo(cuda_key.fingerprint, cuda_key.armored),
        container_key=KeyInfo(container_key.fingerprint, container_key.armored),
        driver_versions=catalogue.DRIVER_VERSIONS,
        container_toolkit_versions=catalogue.CONTAINER_TOOLKIT_VERSIONS,
        cuda_toolkit_version=catalogue.CUDA_TOOLKIT.package_version,
        package_versions={"cuda": cuda_versions, "container-toolkit": container_versions},
        build_id=build_id,
    )
    info_path.write_text(info.to_json(), encoding="utf-8")
    return info


def _build_cuda_repos(out_dir: Path, cuda_base: str, key: SigningKey, gpg: ThrowawayGpg,
                      dkms: bool = False) -> dict[str, list[str]]:
    specs = cuda_repo_packages(dkms)
    shared = out_dir / "cuda" / ".pool"
    shared.mkdir(parents=True)
    debs = _build_all(specs, shared)
    for distro in catalogue.CUDA_DISTROS:
        repo = out_dir / "cuda" / "repos" / distro / "x86_64"
        repo.mkdir(parents=True)
        for deb in debs:
            os.link(deb, repo / deb.name)
        keyring = keyring_package(distro, f"{cuda_base}/{distro}/x86_64/", key.binary)
        build_deb(keyring, repo)
        # the older way NVIDIA documents: apt-key adv --fetch-keys .../<short id>.pub
        (repo / f"{key.fingerprint[-8:].lower()}.pub").write_text(key.armored, encoding="utf-8")
        _index_and_sign(repo, key, gpg, label="NVIDIA CUDA")
    shutil.rmtree(shared)
    return _versions([*specs, keyring_package("debian12", "", b"")])


def _build_container_repo(out_dir: Path, base: str, key: SigningKey, gpg: ThrowawayGpg) -> dict[str, list[str]]:
    specs = container_repo_packages()
    root = out_dir / "libnvidia-container"
    repo = root / "stable" / "deb" / "amd64"
    repo.mkdir(parents=True)
    _build_all(specs, repo)
    _index_and_sign(repo, key, gpg, label="NVIDIA Container Toolkit")
    (root / "gpgkey").write_text(key.armored, encoding="utf-8")
    line = f"deb [signed-by={CONTAINER_KEYRING}] {base}/stable/deb/$(ARCH) /\n"
    (root / "stable" / "deb" / "nvidia-container-toolkit.list").write_text(line, encoding="utf-8")
    return _versions(specs)


def _build_all(specs: Iterable[DebSpec], directory: Path) -> list[Path]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(partial(build_deb, out_dir=directory), specs))


def _versions(specs: Iterable[DebSpec]) -> dict[str, list[str]]:
    versions: dict[str, list[str]] = {}
    for spec in specs:
        versions.setdefault(spec.name, []).append(spec.version)
    return versions


def _index_and_sign(repo: Path, key: SigningKey, gpg: ThrowawayGpg, label: str) -> None:
    """Packages (dpkg-scanpackages, every version), Packages.gz, Release, InRelease, Release.gpg."""
    scan = subprocess.run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], cwd=repo,
                          capture_output=True, check=True)
    (repo / "Packages").write_bytes(scan.stdout)
    (repo / "Packages.gz").write_bytes(gzip.compress(scan.stdout, mtime=0))
    architecture = "x86_64" if "CUDA" in label else "amd64"
    lines = ["Origin: NVIDIA", f"Label: {label}", f"Architecture: {architecture}",
             f"Date: {formatdate(usegmt=True)}"]
    for title, algorithm in (("MD5Sum", "md5"), ("SHA1", "sha1"), ("SHA256", "sha256"), ("SHA512", "sha512")):
        lines.append(f"{title}:")
        for name in ("Packages", "Packages.gz"):
            data = (repo / name).read_bytes()
            lines.append(f" {hashlib.new(algorithm, data).hexdigest()} {len(data):>16} {name}")
    release = repo / "Release"
    release.write_text("\n".join(lines) + "\n", encoding="utf-8")
    gpg.sign_release(key, release)


def _build_id(base_url: str) -> str:
    digest = hashlib.sha256(f"{FORMAT}\n{base_url}\n".encode())
    for path in sorted(SOURCE_DIR.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and "captures" not in path.parts:
            digest.update(path.relative_to(SOURCE_DIR).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


class _QuietHandler(SimpleHTTPRequestHandler):
    """Serves files; records request paths on the server instead of logging them."""

    def log_message(self, format: str, *args: object) -> None:
        self.server.requests.append(self.path)  # type: ignore[attr-defined]


class RepoServer:
    """An HTTP server on HOST:PORT serving OUT_DIR from a daemon thread; `stop()` or use `with`."""

    def __init__(self, out_dir: Path | str, port: int = 0, host: str = "127.0.0.1") -> None:
        handler = partial(_QuietHandler, directory=str(out_dir))
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._server.requests = []  # type: ignore[attr-defined]
        self.host = host
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="standin-nvidia-repo", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def requests(self) -> list[str]:
        """Request paths served so far (e.g. to prove a host used this mirror)."""
        return list(self._server.requests)  # type: ignore[attr-defined]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> RepoServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(out_dir: Path | str, port: int = 0, host: str = "127.0.0.1") -> RepoServer:
    """Serve a built repository directory on HOST:PORT (0: any free port; see `.port`)."""
    return RepoServer(out_dir, port, host)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.standins.nvidia", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build (or reuse) the repositories")
    build.add_argument("out_dir", type=Path)
    build.add_argument("--base-url", required=True)
    serve_command = commands.add_parser("serve", help="serve a built directory until interrupted")
    serve_command.add_argument("out_dir", type=Path)
    serve_command.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    if args.command == "build":
        print(build_repo(args.out_dir, args.base_url).to_json())
        return
    server = serve(args.out_dir, args.port)
    print(f"serving {args.out_dir} on {server.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
