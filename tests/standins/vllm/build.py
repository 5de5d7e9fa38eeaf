"""Build the stand-in `vllm/vllm-openai` images and push them to a registry.

Layers, shared by every variant so a host pulls them once:
  1. base: Debian bookworm minbase from this machine's Debian archive (debootstrap) with python3,
     ca-certificates and curl, made with `docker import`; cached as a zstd `docker save` tarball under
     `$PROVISION_LAB_CACHE` (default ~/.cache/provision-lab), rebuilt only when the recipe changes.
  2. the REAL Hugging Face client (huggingface_hub and its dependencies, wheels from PyPI unpacked
     into /usr/local/lib/python3.11/dist-packages) with its `hf` command, as the real image ships it.
  3. the stand-in server as the package `vllm`, the `vllm` command and ENTRYPOINT ["vllm", "serve"]
     (`python3 -m vllm.entrypoints.openai.api_server --model M` works too), a stand-in `torch` whose
     `torch.cuda.init()` fails as the real one does (vllm/cuda.py), and CUDA's forward-compatibility
     libcuda in /usr/local/cuda-12.9/compat, as the real cu129 image ships it (cuda-compat-12-9,
     575.57.08), not on the library path.
Each variant only adds `ENV STANDIN_BEHAVIOUR=<behaviour>` (no layer): `vllm-openai:standin-<b>`;
`cuda-compat` also names the compat folder in /etc/ld.so.conf.d, as vLLM's images from 0.15 did
(gpustack/gpustack#4678): CUDA then fails with Error 803 in it.

    python -m tests.standins.vllm.build [--registry 127.0.0.1:5000] [--pull-registry 10.0.2.2:5000]
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import docker
import docker.errors

from tests.lab import mirror
from tests.standins.vllm.server import BEHAVIOURS

HERE = Path(__file__).resolve().parent
BASE_REPO = "vllm-standin-base"
COMMON_REPO = "vllm-standin-common"
IMAGE_REPO = "vllm-openai"
REGISTRY_PATH = "vllm/vllm-openai"
BASE_PACKAGES = ("python3", "ca-certificates", "curl")
HF_REQUIREMENT = "huggingface_hub==2.4.0"
SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"
SERVER_FILES = ("*.py", "vllm_flags.txt", "entrypoints/**/*.py", "torch/**/*.py")
TOP_LEVEL = ("torch",)  # stand-in packages of their own, beside `vllm` in site-packages
COMPAT_DIR = "usr/local/cuda-12.9/compat"
COMPAT_VERSION = "575.57.08"  # cuda-compat-12-9's libcuda (NVIDIA's CUDA repository, 12.9.1)
COMPAT_CONF = "cuda-compat.conf"  # its name in vLLM 0.15 images (vllm-project/vllm#33992 removes it by it)
LEFT_OUT = ("build.py", "extract_flags.py", "launch.py")
Log = Callable[[str], None]

DOCKERFILE = """\
FROM {base}
COPY hf-client/ /{site}/
COPY hf /usr/local/bin/hf
COPY standin/ /{site}/
COPY vllm /usr/local/bin/vllm
COPY cuda-compat/ /{compat}/
ENV PYTHONDONTWRITEBYTECODE=1
EXPOSE 8000
ENTRYPOINT ["vllm", "serve"]
"""
VLLM_SCRIPT = """#!/usr/bin/python3
import sys
from vllm.server import main
sys.exit(main(sys.argv[1:], entry="vllm"))
"""
HF_SCRIPT = """#!/usr/bin/python3
import sys
from huggingface_hub.cli.hf import main
sys.exit(main())
"""


def cache_dir() -> Path:
    return Path(os.environ.get("PROVISION_LAB_CACHE", "~/.cache/provision-lab")).expanduser()


def _run(argv: list[str], log_file: Path) -> None:
    with log_file.open("a") as sink:
        subprocess.run(argv, check=True, stdout=sink, stderr=subprocess.STDOUT)


def ensure_base(client: docker.DockerClient, log: Log = print) -> str:
    """The base image (layer 1): from docker, else the cached tarball, else debootstrap (about 60 s)."""
    sources = mirror.debian_sources(mirror.machine_sources())
    sources_text = mirror.render_deb822(sources)
    stamp = hashlib.sha256(f"{BASE_PACKAGES}\n{sources_text}".encode()).hexdigest()[:12]
    tag = f"{BASE_REPO}:{stamp}"
    tarball = cache_dir() / f"{BASE_REPO}-{stamp}.tar.zst"
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / "vllm-standin.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            client.images.get(tag)
            return tag
        except docker.errors.ImageNotFound:
            pass
        if tarball.is_file():
            log(f"loading {tag} from {tarball}")
            subprocess.run(f"zstd -dc '{tarball}' | docker load", shell=True, check=True, capture_output=True)
            return tag
        log(f"building {tag} with debootstrap (log: {cache_dir() / 'vllm-standin-build.log'})")
        _debootstrap_and_import(tag, sources, sources_text)
        partial = tarball.with_suffix(".partial")
        subprocess.run(f"docker save '{tag}' | zstd -q -3 -T0 > '{partial}'", shell=True, check=True)
        partial.rename(tarball)
    return tag


def _debootstrap_and_import(tag: str, sources: list[mirror.AptSource], sources_text: str) -> None:
    work = Path(tempfile.mkdtemp(prefix="vllm-standin-rootfs-", dir=cache_dir()))
    rootfs = work / "rootfs"
    build_log = cache_dir() / "vllm-standin-build.log"
    build_log.write_text("")
    (cache_dir() / "vllm-standin-debs").mkdir(exist_ok=True)
    try:
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
              f"--cache-dir={cache_dir() / 'vllm-standin-debs'}", "bookworm", str(rootfs),
              mirror.main_mirror(sources)], build_log)
        (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
        (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(sources_text)
        for folder in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man",
                       "usr/share/locale", "usr/share/info"):
            for path in (rootfs / folder).glob("*"):
                if path.is_file() or path.is_symlink():
                    path.unlink()
                elif path.is_dir() and path.name != "partial":
                    shutil.rmtree(path)
        repository, _, version = tag.partition(":")
        _run(["sh", "-c", f"tar -C '{rootfs}' --numeric-owner -cf - . | docker import "
                          f"--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' "
                          f"--change 'CMD [\"/bin/bash\"]' - '{repository}:{version}'"], build_log)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def hf_wheels(log: Log = print) -> list[Path]:
    """huggingface_hub and its dependencies for bookworm's Python 3.11, downloaded once into the cache."""
    folder = cache_dir() / "vllm-standin-wheels" / HF_REQUIREMENT.replace("==", "-")
    if not list(folder.glob("huggingface_hub-*.whl")):
        log(f"downloading {HF_REQUIREMENT} wheels into {folder}")
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", HF_REQUIREMENT, "--only-binary=:all:",
                        "--python-version", "3.11", "--platform", "manylinux2014_x86_64", "-d", str(folder),
                        "--quiet"], check=True)
    return sorted(folder.glob("*.whl"))


def _server_files() -> Iterable[Path]:
    for pattern in SERVER_FILES:
        for path in sorted(HERE.glob(pattern)):
            if path.name not in LEFT_OUT and "__pycache__" not in path.parts:
                yield path


def _build_context(context: Path, base: str, wheels: list[Path]) -> None:
    """Two folders, two layers: the HF client (changes rarely) before the stand-in (changes often)."""
    client_site, standin_site = context / "hf-client", context / "standin"
    client_site.mkdir(parents=True, exist_ok=True)
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(client_site)
    for path in _server_files():
        relative = path.relative_to(HERE)
        target = standin_site / (relative if relative.parts[0] in TOP_LEVEL else "vllm" / relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    for site in (client_site, standin_site):
        for folder in [site, *(p for p in site.rglob("*") if p.is_dir())]:
            folder.chmod(0o755)
        for file in (p for p in site.rglob("*") if p.is_file()):
            file.chmod(0o755 if file.suffix == ".so" else 0o644)
    for name, text in (("vllm", VLLM_SCRIPT), ("hf", HF_SCRIPT)):
        (context / name).write_text(text)
        (context / name).chmod(0o755)
    compat = context / "cuda-compat"
    compat.mkdir()
    (compat / f"libcuda.so.{COMPAT_VERSION}").write_text("STAND-IN of CUDA's forward-compatibility libcuda\n")
    (compat / "libcuda.so.1").symlink_to(f"libcuda.so.{COMPAT_VERSION}")
    (context / "Dockerfile").write_text(DOCKERFILE.format(base=base, site=SITE_PACKAGES, compat=COMPAT_DIR))


def build_local_images(client: docker.DockerClient | None = None, *, behaviours: Iterable[str] = BEHAVIOURS,
                       env: Mapping[str, str] | None = None, log: Log = print) -> dict[str, str]:
    """Build `vllm-openai:standin-<behaviour>` on this machine's docker; return behaviour -> local tag.

    `env` is baked into every variant (e.g. STANDIN_TOKENS_PER_S or STANDIN_READY_DELAY for fast labs).
    """
    client = client or docker.from_env()
    base = ensure_base(client, log)
    wheels = hf_wheels(log)
    with tempfile.TemporaryDirectory(prefix="vllm-standin-context-") as folder:
        _build_context(Path(folder), base, wheels)
        common, _ = client.images.build(path=folder, tag=f"{COMMON_REPO}:latest", rm=True, forcerm=True)
    tags = {}
    for behaviour in behaviours:
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"unknown behaviour {behaviour!r}; one of {', '.join(BEHAVIOURS)}")
        changes = [f"ENV STANDIN_BEHAVIOUR={behaviour}", *(f"ENV {k}={v}" for k, v in (env or {}).items())]
        with tempfile.TemporaryDirectory(prefix="vllm-standin-variant-") as folder:
            if behaviour == "cuda-compat":
                Path(folder, COMPAT_CONF).write_text(f"/{COMPAT_DIR}\n")
                changes.append(f"COPY {COMPAT_CONF} /etc/ld.so.conf.d/{COMPAT_CONF}")
            Path(folder, "Dockerfile").write_text(f"FROM {common.id}\n" + "\n".join(changes) + "\n")
            tag = f"{IMAGE_REPO}:standin-{behaviour}"
            client.images.build(path=folder, tag=tag, rm=True, forcerm=True)
        tags[behaviour] = tag
        log(f"built {tag}")
    return tags


def build_images(registry: str, *, pull_registry: str | None = None, behaviours: Iterable[str] = BEHAVIOURS,
                 env: Mapping[str, str] | None = None, log: Log = print) -> dict[str, str]:
    """Build every variant and push it to `registry` (as this machine reaches it, e.g. 127.0.0.1:5000).

    Returns behaviour -> image reference, e.g. `127.0.0.1:5000/vllm/vllm-openai:standin-ok`; with
    `pull_registry` (e.g. `10.0.2.2:5000`, the same registry as lab hosts reach it) the references use it.
    """
    client = docker.from_env()
    refs = {}
    for behaviour, local in build_local_images(client, behaviours=behaviours, env=env, log=log).items():
        tag = f"standin-{behaviour}"
        target = f"{registry}/{REGISTRY_PATH}"
        client.images.get(local).tag(target, tag)
        for line in client.images.push(target, tag=tag, stream=True, decode=True):
            if "error" in line:
                raise RuntimeError(f"push of {local} to {target}:{tag} failed: {line['error']}")
        refs[behaviour] = f"{pull_registry or registry}/{REGISTRY_PATH}:{tag}"
        log(f"pushed {target}:{tag}")
    return refs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.standins.vllm.build", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--registry", help="push to this registry (host:port as this machine reaches it)")
    parser.add_argument("--pull-registry", help="the same registry as lab hosts reach it, for the printed refs")
    parser.add_argument("--behaviour", action="append", choices=BEHAVIOURS, help="only these variants")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="bake into every variant")
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    behaviours = args.behaviour or BEHAVIOURS
    if args.registry:
        refs = build_images(args.registry, pull_registry=args.pull_registry, behaviours=behaviours, env=env)
    else:
        refs = build_local_images(behaviours=behaviours, env=env)
    for behaviour, ref in refs.items():
        print(f"{behaviour} {ref}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
