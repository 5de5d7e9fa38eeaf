"""UbuntuArchive: the stand-in noble archive as a real, signed apt archive (dists/ and pool/), published
month by month: `publish("two")` replaces what noble-updates and noble-security list, as Ubuntu's
archive does when a kernel SRU or a driver SRU is released (the pool keeps every file).

Hosts reach it as http://archive.ubuntu.com:PORT/ubuntu (the lab host maps that name to this machine):
its own host name keeps apt preferences by origin (the NVIDIA repository's stand-in is 10.0.2.2)
apart, as on a real laptop.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
from email.utils import formatdate
from pathlib import Path

from tests.standins.nvidia.debs import DebSpec, build_deb
from tests.standins.nvidia.signing import ThrowawayGpg

from . import packages
from .catalogue import MONTHS, SERIES

ARCHIVE_HOST = "archive.ubuntu.com"
POCKETS = ("", "-updates", "-security")
COMPONENTS = ("main", "restricted")
KEYRING = "/usr/share/keyrings/ubuntu-archive-keyring.gpg"


def month_packages(name: str) -> list[DebSpec]:
    """Every package the archive lists in month NAME (the newest version of each)."""
    month = MONTHS[name]
    specs = [spec for kernel in month.kernels for spec in packages.kernel_packages(kernel)]
    specs += packages.flavour_metas(month.newest, month.newest_with_module)
    return specs + packages.driver_packages(month.driver)


class UbuntuArchive:
    """The archive under OUT_DIR/ubuntu, signed by a key made for it (`keyring` is its public half)."""

    def __init__(self, out_dir: Path) -> None:
        self.root = Path(out_dir) / "ubuntu"
        self.pool = self.root / "pool"
        self.pool.mkdir(parents=True, exist_ok=True)
        self._gpg = ThrowawayGpg()
        self._key = self._gpg.generate("Ubuntu Archive stand-in <archive@lab.invalid>")
        self.keyring: bytes = self._key.binary

    def close(self) -> None:
        self._gpg.__exit__(None, None, None)

    def publish(self, month: str) -> list[DebSpec]:
        """List month MONTH's packages in every pocket (noble keeps month one's, as a release does)."""
        specs = month_packages(month)
        listed = self.pool / month
        listed.mkdir(exist_ok=True)
        for spec in specs:
            build_deb(spec, listed)
        for pocket in POCKETS:
            if pocket == "" and (self.root / "dists" / SERIES / "Release").exists():
                continue  # the release pocket is frozen at release
            self._index(f"{SERIES}{pocket}", month, specs)
        return specs

    def _index(self, suite: str, month: str, specs: list[DebSpec]) -> None:
        dists = self.root / "dists" / suite
        entries = []
        for component in COMPONENTS:
            restricted = component == "restricted"
            names = {spec.filename for spec in specs if spec.section.startswith("restricted") == restricted}
            folder = dists / component / "binary-amd64"
            folder.mkdir(parents=True, exist_ok=True)
            stage = self.pool / f".{month}-{component}"
            stage.mkdir(exist_ok=True)
            for old in stage.iterdir():
                old.unlink()
            for name in names:
                os.link(self.pool / month / name, stage / name)
            where = str(stage.relative_to(self.root))
            scan = subprocess.run(["dpkg-scanpackages", "--multiversion", where, "/dev/null"], cwd=self.root,
                                  capture_output=True, check=True).stdout
            for name, data in (("Packages", scan), ("Packages.gz", gzip.compress(scan, mtime=0))):
                (folder / name).write_bytes(data)
                entries.append((f"{component}/binary-amd64/{name}", data))
        lines = ["Origin: Ubuntu", "Label: Ubuntu", f"Suite: {suite}", f"Codename: {SERIES}", "Version: 24.04",
                 f"Date: {formatdate(usegmt=True)}", "Architectures: amd64", f"Components: {' '.join(COMPONENTS)}",
                 "Description: Ubuntu Noble 24.04 (stand-in of the provision test lab)"]
        for title, algorithm in (("MD5Sum", "md5"), ("SHA256", "sha256")):
            lines.append(f"{title}:")
            lines += [f" {hashlib.new(algorithm, data).hexdigest()} {len(data):>16} {path}" for path, data in entries]
        release = dists / "Release"
        release.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self._gpg.sign_release(self._key, release)
