"""The lab hosts' base images: Debian booting systemd, with sshd, apt and sudo.

`ensure_image()` makes `provision-lab/bookworm-systemd:latest` exist (`ensure_image(suite="trixie")`
the Debian 13 one: its docker.io 26 reads CDI specs), cheapest way first: the image
already in docker > a cached `docker save | zstd` tarball > a build from debootstrap (about 80 s).
The cache file name carries a stamp of the recipe (this file, the `rootfs/` overlay and the apt
sources), so changing any of them builds a new image instead of loading a stale one.

The image holds no SSH host keys (each host makes its own at first boot) and no client key (the lab
writes its key into each container before it starts), so one cached image serves every lab.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import docker
import docker.errors

from tests.lab import mirror

SUITES = ("bookworm", "trixie")
IMAGE_REPO = "provision-lab/bookworm-systemd"
IMAGE = f"{IMAGE_REPO}:latest"
DEPLOY_UID = 1000
PACKAGES = ("systemd-sysv", "systemd", "dbus", "openssh-server", "iproute2", "ca-certificates",
            "python3", "curl", "gnupg", "sudo")
# Units that would touch the machine's network, devices or kernel, or wait for things a container
# never has; plus the apt timers that would grab the dpkg lock in the middle of a test.
MASKED_UNITS = (
    "systemd-networkd.service", "systemd-networkd.socket", "systemd-networkd-wait-online.service",
    "systemd-udevd.service", "systemd-udevd-control.socket", "systemd-udevd-kernel.socket",
    "systemd-udev-trigger.service", "systemd-udev-settle.service", "systemd-modules-load.service",
    "systemd-sysctl.service", "systemd-remount-fs.service", "systemd-firstboot.service",
    "sys-kernel-config.mount", "sys-kernel-debug.mount", "sys-kernel-tracing.mount",
    "dev-hugepages.mount", "getty@tty1.service", "serial-getty@ttyS0.service",
    "console-getty.service", "fstrim.timer", "e2scrub_all.timer", "e2scrub_reap.service",
    "apt-daily.timer", "apt-daily-upgrade.timer",
)
OVERLAY = Path(__file__).parent / "rootfs"
Log = Callable[[str], None]


def cache_dir() -> Path:
    """Where built images are cached: `$PROVISION_LAB_CACHE`, default `~/.cache/provision-lab`."""
    return Path(os.environ.get("PROVISION_LAB_CACHE", "~/.cache/provision-lab")).expanduser()


def recipe_stamp(sources_text: str) -> str:
    """A short hash of everything that decides the image's content."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in sorted(p for p in OVERLAY.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(OVERLAY)).encode())
        digest.update(b"x" if os.access(path, os.X_OK) else b"-")
        digest.update(path.read_bytes())
    digest.update(sources_text.encode())
    return digest.hexdigest()[:12]


def image_name(suite: str = "bookworm") -> str:
    """The lab image of a Debian suite: `provision-lab/<suite>-systemd:latest`."""
    return f"provision-lab/{suite}-systemd:latest"


def ensure_image(client: docker.DockerClient | None = None, log: Log = print, suite: str = "bookworm") -> str:
    """Make the lab image of `suite` (one of SUITES) exist in docker and return its name."""
    if suite not in SUITES:
        raise ValueError(f"no lab image for Debian {suite!r}: one of {', '.join(SUITES)}")
    client = client or docker.from_env()
    sources = mirror.for_suite(mirror.debian_sources(mirror.machine_sources()), suite)
    sources_text = mirror.render_deb822(sources)
    stamp = recipe_stamp(sources_text)
    image_repo = image_name(suite).rsplit(":", 1)[0]
    stamped = f"{image_repo}:{stamp}"
    tarball = cache_dir() / f"{suite}-systemd-{stamp}.tar.zst"
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two labs starting at once build (or load) only once
        try:
            client.images.get(stamped)
        except docker.errors.ImageNotFound:
            if tarball.is_file():
                log(f"loading {stamped} from {tarball}")
                _load(client, tarball)
            else:
                log(f"building {stamped} with debootstrap (about 80 s; log in {cache_dir() / 'build.log'})")
                _build(client, stamped, suite, sources, sources_text)
                _save(client, stamped, tarball, suite)
        client.images.get(stamped).tag(image_repo, "latest")
    return image_name(suite)


def _build(client: docker.DockerClient, tag: str, suite: str, sources: list[mirror.AptSource],
           sources_text: str) -> None:
    work = cache_dir() / "build"
    rootfs = work / "rootfs"
    shutil.rmtree(work, ignore_errors=True)
    (cache_dir() / "debs" / suite).mkdir(parents=True, exist_ok=True)
    rootfs.mkdir(parents=True)
    with open(cache_dir() / "build.log", "w") as build_log:
        subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
             f"--cache-dir={cache_dir() / 'debs' / suite}", suite, str(rootfs), mirror.main_mirror(sources)],
            check=True, stdout=build_log, stderr=subprocess.STDOUT,
        )
        _customise(rootfs, sources_text, build_log)
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", "-", "."],
                           stdout=subprocess.PIPE)
    assert tar.stdout is not None
    repository, _, version = tag.partition(":")
    client.api.import_image(
        src=_chunks(tar.stdout), repository=repository, tag=version, stream_src=True,
        changes=["ENV container=docker", 'CMD ["/usr/local/sbin/ctr-init"]'],
    )
    if tar.wait() != 0:
        raise RuntimeError(f"tar of {rootfs} failed")
    shutil.rmtree(work)


def _customise(rootfs: Path, sources_text: str, build_log: IO[str]) -> None:
    """Turn a debootstrapped tree into a container host: the `rootfs/` overlay plus what needs tools."""
    def run(*argv: str) -> None:
        subprocess.run(argv, check=True, stdout=build_log, stderr=subprocess.STDOUT)

    for source in (p for p in OVERLAY.rglob("*") if p.is_file()):
        # modes are set here, not taken from the checkout (whose umask may differ)
        target = rootfs / source.relative_to(OVERLAY)
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        target.chmod(0o755 if os.access(source, os.X_OK) else 0o644)
    (rootfs / "etc/sudoers.d/deploy").chmod(0o440)
    (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
    (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(sources_text)
    (rootfs / "etc/fstab").write_text("")
    # a non-root user with passwordless sudo: the tool's become path is tested through it
    run("useradd", "--root", str(rootfs), "--uid", str(DEPLOY_UID), "--create-home",
        "--shell", "/bin/bash", "--password", "*", "deploy")
    for home, uid in ((rootfs / "root", 0), (rootfs / "home/deploy", DEPLOY_UID)):
        (home / ".ssh").mkdir(mode=0o700, exist_ok=True)
        os.chown(home / ".ssh", uid, uid)
    run("systemctl", f"--root={rootfs}", "enable", "ssh.service", "ssh-host-keys.service")
    run("systemctl", f"--root={rootfs}", "mask", *MASKED_UNITS)
    # per-host identity is made at first boot: machine-id by systemd, host keys by ssh-host-keys
    for key in (rootfs / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (rootfs / "etc/machine-id").write_text("")
    (rootfs / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    for leftover in [*(rootfs / "var/cache/apt/archives").glob("*.deb"),
                     *(rootfs / "var/lib/apt/lists").glob("*_*")]:
        leftover.unlink()


def _chunks(stream: IO[bytes], size: int = 1 << 20) -> Iterator[bytes]:
    yield from iter(lambda: stream.read(size), b"")


def _save(client: docker.DockerClient, tag: str, tarball: Path, suite: str) -> None:
    tarball.parent.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_suffix(".partial")
    with open(partial, "wb") as out:
        zstd = subprocess.Popen(["zstd", "-q", "-3", "-T0"], stdin=subprocess.PIPE, stdout=out)
        assert zstd.stdin is not None
        for chunk in client.images.get(tag).save(named=tag):
            zstd.stdin.write(chunk)
        zstd.stdin.close()
        if zstd.wait() != 0:
            raise RuntimeError(f"zstd failed writing {partial}")
    partial.rename(tarball)
    for stale in tarball.parent.glob(f"{suite}-systemd-*.tar.zst"):  # images of older recipes
        if stale != tarball:
            stale.unlink()


def _load(client: docker.DockerClient, tarball: Path) -> None:
    zstd = subprocess.Popen(["zstd", "-dc", str(tarball)], stdout=subprocess.PIPE)
    assert zstd.stdout is not None
    client.images.load(_chunks(zstd.stdout))
    if zstd.wait() != 0:
        raise RuntimeError(f"zstd could not read {tarball}; delete it to rebuild")
