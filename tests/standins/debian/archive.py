"""DebianSecurityArchive: the stand-in of Debian 12's security archive as a real, signed apt archive
(dists/bookworm-security, pool/), published month by month: `publish("two")` replaces what the suite
lists, as a kernel DSA does (the pool keeps every file).

Its Release says what Debian's says where unattended-upgrades looks (Origin: Debian, Label:
Debian-Security, Codename: bookworm-security), so Debian's stock 50unattended-upgrades origins take
it. Hosts reach it as http://security.debian.org:PORT/debian-security (the lab host maps that name to
this machine; the lab's real Debian mirror is reached under its own name).
"""

from __future__ import annotations

import gzip
import hashlib
import subprocess
from email.utils import formatdate
from pathlib import Path

from tests.standins.nvidia.debs import DebSpec, build_deb
from tests.standins.nvidia.signing import ThrowawayGpg

from . import packages
from .catalogue import MONTHS, SUITE

ARCHIVE_HOST = "security.debian.org"


def month_packages(name: str) -> list[DebSpec]:
    """Every package the archive lists in month NAME."""
    month = MONTHS[name]
    specs = [spec for kernel in month.kernels for spec in packages.kernel_packages(kernel)]
    return specs + packages.flavour_metas(month.newest)


class DebianSecurityArchive:
    """The archive under OUT_DIR/debian-security, signed by a key made for it (`keyring`: its public half)."""

    def __init__(self, out_dir: Path) -> None:
        self.root = Path(out_dir) / "debian-security"
        self.pool = self.root / "pool"
        self.pool.mkdir(parents=True, exist_ok=True)
        self._gpg = ThrowawayGpg()
        self._key = self._gpg.generate("Debian Security Archive stand-in <security@lab.invalid>")
        self.keyring: bytes = self._key.binary

    def close(self) -> None:
        self._gpg.__exit__(None, None, None)

    def publish(self, month: str) -> list[DebSpec]:
        """List month MONTH's packages in bookworm-security/main."""
        specs = month_packages(month)
        listed = self.pool / month
        listed.mkdir(exist_ok=True)
        for spec in specs:
            build_deb(spec, listed)
        where = str(listed.relative_to(self.root))
        scan = subprocess.run(["dpkg-scanpackages", "--multiversion", where, "/dev/null"], cwd=self.root,
                              capture_output=True, check=True).stdout
        dists = self.root / "dists" / SUITE
        folder = dists / "main" / "binary-amd64"
        folder.mkdir(parents=True, exist_ok=True)
        entries = []
        for name, data in (("Packages", scan), ("Packages.gz", gzip.compress(scan, mtime=0))):
            (folder / name).write_bytes(data)
            entries.append((f"main/binary-amd64/{name}", data))
        lines = ["Origin: Debian", "Label: Debian-Security", "Suite: stable-security", f"Codename: {SUITE}",
                 "Version: 12", f"Date: {formatdate(usegmt=True)}", "Architectures: amd64", "Components: main",
                 "Description: Debian 12 - Security Updates (stand-in of the provision test lab)"]
        for title, algorithm in (("MD5Sum", "md5"), ("SHA256", "sha256")):
            lines.append(f"{title}:")
            lines += [f" {hashlib.new(algorithm, data).hexdigest()} {len(data):>16} {path}" for path, data in entries]
        release = dists / "Release"
        release.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self._gpg.sign_release(self._key, release)
        return specs
