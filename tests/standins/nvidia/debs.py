"""Describe a Debian package as data and build it with `dpkg-deb --build`.

Packages are tiny (scripts and marker files), so building one takes a few tens of milliseconds and
installing one well under a second.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

MAINTAINER = "provision test lab stand-ins <standins@lab.invalid>"


@dataclass(frozen=True)
class PackageFile:
    """A file the package installs: its absolute path on the host, bytes and mode."""

    path: str
    content: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class PackageLink:
    """A symbolic link the package installs."""

    path: str
    target: str


@dataclass(frozen=True)
class DebSpec:
    """One binary package: control fields, files, links and maintainer scripts."""

    name: str
    version: str
    description: str
    architecture: str = "amd64"
    section: str = "multiverse/devel"
    depends: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    extra_fields: Mapping[str, str] = field(default_factory=dict)
    files: tuple[PackageFile, ...] = ()
    links: tuple[PackageLink, ...] = ()
    # maintainer scripts by name (postinst, prerm, postrm, preinst): shell text
    scripts: Mapping[str, str] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        """The pool file name, as dpkg-name would give it (epoch dropped)."""
        version = self.version.split(":", 1)[-1]
        return f"{self.name}_{version}_{self.architecture}.deb"

    def control(self) -> str:
        """The DEBIAN/control text."""
        lines = [
            f"Package: {self.name}",
            f"Version: {self.version}",
            f"Architecture: {self.architecture}",
            f"Maintainer: {MAINTAINER}",
            f"Section: {self.section}",
            "Priority: optional",
        ]
        for label, values in (("Depends", self.depends), ("Conflicts", self.conflicts),
                              ("Provides", self.provides)):
            if values:
                lines.append(f"{label}: {', '.join(values)}")
        lines += [f"{key}: {value}" for key, value in self.extra_fields.items()]
        summary, _, body = self.description.partition("\n")
        lines.append(f"Description: {summary}")
        lines += [f" {line}" if line.strip() else " ." for line in body.splitlines()]
        return "\n".join(lines) + "\n"


def build_deb(spec: DebSpec, out_dir: Path) -> Path:
    """Build SPEC into OUT_DIR/<filename> and return its path."""
    with tempfile.TemporaryDirectory(prefix="standin-deb-") as staging:
        root = Path(staging)
        debian = root / "DEBIAN"
        debian.mkdir()
        (debian / "control").write_text(spec.control(), encoding="utf-8")
        conffiles = [item.path for item in spec.files if item.path.startswith("/etc/")]
        if conffiles:
            (debian / "conffiles").write_text("".join(f"{path}\n" for path in conffiles), encoding="utf-8")
        for name, text in spec.scripts.items():
            script = debian / name
            script.write_text(text if text.startswith("#!") else "#!/bin/sh\nset -e\n" + text, encoding="utf-8")
            script.chmod(0o755)
        for item in spec.files:
            target = root / item.path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(item.content)
            target.chmod(item.mode)
        for link in spec.links:
            target = root / link.path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(link.target)
        for directory in [root, *root.rglob("*")]:
            if directory.is_dir() and not directory.is_symlink():
                directory.chmod(0o755)
        deb = out_dir / spec.filename
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", str(root), str(deb)],
            check=True, capture_output=True, text=True)
    return deb
