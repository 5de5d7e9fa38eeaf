"""MonthlyArchive: what the stand-in distribution archives (tests/standins/ubuntu, tests/standins/debian)
share: a real, signed apt archive under OUT_DIR/NAME (dists/, pool/) whose suites are re-listed month
by month, as a distribution's archive re-lists a suite when updates are released (the pool keeps every
file). Each archive says which suites, components and Release fields it has; this builds the debs,
scans them with dpkg-scanpackages and signs each suite's Release with a key made for the archive.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import subprocess
from collections.abc import Callable, Sequence
from email.utils import formatdate
from pathlib import Path

from tests.standins.nvidia.debs import DebSpec, build_deb
from tests.standins.nvidia.signing import ThrowawayGpg


class MonthlyArchive:
    """A signed archive under OUT_DIR/NAME (`keyring`: the public half of its key, made for it)."""

    def __init__(self, out_dir: Path, name: str, signer: str) -> None:
        self.root = Path(out_dir) / name
        self.pool = self.root / "pool"
        self.pool.mkdir(parents=True, exist_ok=True)
        self._gpg = ThrowawayGpg()
        self._key = self._gpg.generate(signer)
        self.keyring: bytes = self._key.binary

    def close(self) -> None:
        self._gpg.__exit__(None, None, None)

    def build(self, month: str, specs: Sequence[DebSpec]) -> None:
        """Build month MONTH's packages into pool/MONTH."""
        listed = self.pool / month
        listed.mkdir(exist_ok=True)
        for spec in specs:
            build_deb(spec, listed)

    def list_suite(self, suite: str, month: str, components: dict[str, Callable[[DebSpec], bool]],
                   specs: Sequence[DebSpec], release_fields: Sequence[str]) -> None:
        """Make dists/SUITE list, per component, those of month MONTH's packages its predicate takes,
        under a signed Release that starts with RELEASE_FIELDS (Origin, Label, Suite, ...)."""
        dists = self.root / "dists" / suite
        entries = []
        for component, takes in components.items():
            stage = self.pool / f".{month}-{component}"  # dpkg-scanpackages scans a folder: this component's
            stage.mkdir(exist_ok=True)
            for old in stage.iterdir():
                old.unlink()
            for name in {spec.filename for spec in specs if takes(spec)}:
                os.link(self.pool / month / name, stage / name)
            scan = subprocess.run(["dpkg-scanpackages", "--multiversion", str(stage.relative_to(self.root)),
                                   "/dev/null"], cwd=self.root, capture_output=True, check=True).stdout
            folder = dists / component / "binary-amd64"
            folder.mkdir(parents=True, exist_ok=True)
            for name, data in (("Packages", scan), ("Packages.gz", gzip.compress(scan, mtime=0))):
                (folder / name).write_bytes(data)
                entries.append((f"{component}/binary-amd64/{name}", data))
        lines = [*release_fields, f"Date: {formatdate(usegmt=True)}", "Architectures: amd64",
                 f"Components: {' '.join(components)}"]
        for title, algorithm in (("MD5Sum", "md5"), ("SHA256", "sha256")):
            lines.append(f"{title}:")
            lines += [f" {hashlib.new(algorithm, data).hexdigest()} {len(data):>16} {path}" for path, data in entries]
        release = dists / "Release"
        release.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self._gpg.sign_release(self._key, release)
