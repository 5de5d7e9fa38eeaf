"""A directory that stands for a host's root filesystem, to exercise the stand-ins without a host.

Packages from a built repository are unpacked into it (`dpkg-deb -x`, no maintainer scripts) and
the stand-in programs run against it through `NVIDIA_STANDIN_ROOT`, which every stand-in prefixes
to the paths of its state. `reboot()` empties what a reboot empties (/run and the kernel's view).
Used by the unit tests; the lab runs the same packages on real (container) hosts instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .host_traits import HostTraits, host_traits_files, make_fake_firmware_tree, make_fake_pci_tree
from .repo import RepoInfo


class StandinRoot:
    """ROOT: packages unpacked, host traits written, programs run with NVIDIA_STANDIN_ROOT=ROOT."""

    def __init__(self, root: Path, repo: RepoInfo, traits: HostTraits | None = None) -> None:
        self.root = root
        self.repo = repo
        root.mkdir(parents=True, exist_ok=True)
        traits = traits or HostTraits()
        # what the lab bind-mounts, written in place
        make_fake_pci_tree(root / "sys/bus/pci/devices", traits.pci_devices())
        if traits.secure_boot is not None:
            make_fake_firmware_tree(root / "sys/firmware", traits.secure_boot)
        for item in host_traits_files(traits):
            self.write(item.path, item.content, item.mode)

    def deb(self, name: str, version: str) -> Path:
        """The .deb of NAME at VERSION in either repository."""
        out = Path(self.repo.out_dir)
        for directory in (out / "cuda/repos/debian12/x86_64", out / "libnvidia-container/stable/deb/amd64"):
            matches = sorted(directory.glob(f"{name}_{version}_*.deb"))
            if matches:
                return matches[0]
        raise FileNotFoundError(f"no {name} {version} in {out}")

    def unpack(self, version: str, *names: str) -> None:
        """Unpack packages NAMES at VERSION over the root (an install or an upgrade, files only)."""
        for name in names:
            subprocess.run(["dpkg-deb", "-x", str(self.deb(name, version)), str(self.root)], check=True)

    def write(self, path: str, content: bytes | str, mode: int = 0o644) -> Path:
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
        target.chmod(mode)
        return target

    def read(self, path: str) -> str:
        return (self.root / path.lstrip("/")).read_text(encoding="utf-8")

    def exists(self, path: str) -> bool:
        return (self.root / path.lstrip("/")).exists()

    def run(self, program: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run the stand-in PROGRAM (a path inside the root) with ARGS."""
        env = {**os.environ, "NVIDIA_STANDIN_ROOT": str(self.root)}
        return subprocess.run([str(self.root / program.lstrip("/")), *args], env=env, input=stdin,
                              capture_output=True, text=True, timeout=30, check=False)

    def reboot(self) -> subprocess.CompletedProcess[str] | None:
        """Empty /run, /sys/module and /proc/driver, then run what boot runs (the module loader)."""
        for volatile in ("run", "sys/module", "proc/driver"):
            shutil.rmtree(self.root / volatile, ignore_errors=True)
        (self.root / "run").mkdir()
        if self.exists("/usr/local/lib/nvidia-standin/nouveau-at-boot"):
            self.run("/usr/local/lib/nvidia-standin/nouveau-at-boot")
        if self.exists("/usr/lib/nvidia-standin/modload"):
            return self.run("/usr/lib/nvidia-standin/modload", "--boot", "nvidia")
        return None
