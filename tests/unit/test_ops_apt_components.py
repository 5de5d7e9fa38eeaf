"""`apt_components` on recorded sources files: Debian's `contrib` added where NVIDIA's Debian
instructions need it, in both formats, idempotently, third-party entries untouched.

Fixtures (tests/unit/fixtures/recorded/apt_sources/): `debian12-netinst-contrib-nonfree.list` is a
Debian 12.4 netinst `/etc/apt/sources.list` as printed by `cat` in a public tutorial (found with the
code index, file id 43559624197), whose owner had added `contrib non-free`; `debian12-netinst.list` is
the same without those two words, as the installer writes it; `debian12-snapshot.sources` is this
development machine's own `/etc/apt/sources.list.d/debian.sources` (deb822, with comment lines)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from provision.ops.apt_components import add_components
from tests.unit.ops_support import plan

FIXTURES = Path(__file__).parent / "fixtures/recorded/apt_sources"
CONTRIB = ["contrib"]


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_sources_list_gains_contrib_on_debian_lines_only() -> None:
    text = fixture("debian12-netinst.list") + (
        "deb [arch=amd64 signed-by=/etc/apt/keyrings/docker.asc] "
        "https://download.docker.com/linux/debian bookworm stable\n")
    edited = add_components("/etc/apt/sources.list", text, CONTRIB)
    changed = [(old, new) for old, new in zip(text.splitlines(), edited.splitlines(), strict=True) if old != new]
    assert changed == [
        ("deb http://deb.debian.org/debian/ bookworm main non-free-firmware",
         "deb http://deb.debian.org/debian/ bookworm main non-free-firmware contrib"),
        ("deb http://security.debian.org/debian-security bookworm-security main non-free-firmware",
         "deb http://security.debian.org/debian-security bookworm-security main non-free-firmware contrib"),
        ("deb http://deb.debian.org/debian/ bookworm-updates main non-free-firmware",
         "deb http://deb.debian.org/debian/ bookworm-updates main non-free-firmware contrib")]
    assert add_components("/etc/apt/sources.list", edited, CONTRIB) == edited  # idempotent


def test_sources_list_that_has_contrib_is_left_as_it_is() -> None:
    text = fixture("debian12-netinst-contrib-nonfree.list")
    assert add_components("/etc/apt/sources.list", text, CONTRIB) == text


def test_deb822_gains_contrib_in_each_debian_stanza() -> None:
    text = fixture("debian12-snapshot.sources") + (
        "\nTypes: deb\nURIs: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/\n"
        "Suites: /\nSigned-By: /usr/share/keyrings/cuda-archive-keyring.gpg\n"
        "\nTypes: deb\nEnabled: no\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\n")
    edited = add_components("/etc/apt/sources.list.d/debian.sources", text, CONTRIB)
    assert edited.count("Components: main contrib\n") == 2
    assert edited.endswith("Suites: bookworm-backports\nComponents: main\n")  # disabled: untouched
    assert "# http://snapshot.debian.org/archive/debian/20250520T000000Z\n" in edited
    assert add_components("/etc/apt/sources.list.d/debian.sources", edited, CONTRIB) == edited


def recorded(text: str) -> str:
    data = text.encode()
    return (f"type=file\nmode=644\nuid=0\ngid=0\nowner=root\ngroup=root\nsize={len(data)}\n"
            f"sha256={hashlib.sha256(data).hexdigest()}\ncontent={base64.b64encode(data).decode()}\n")


def test_the_operation_rewrites_only_when_something_is_missing() -> None:
    path = "/etc/apt/sources.list"
    missing = plan("apt_components", "type=absent\n", path=path, components=CONTRIB)
    assert not missing.changed and missing.summary == f"{path} is absent: nothing to add to"
    done = plan("apt_components", recorded(fixture("debian12-netinst-contrib-nonfree.list")), path=path,
                components=CONTRIB)
    assert not done.changed and done.commands == []
    todo = plan("apt_components", recorded(fixture("debian12-netinst.list")), path=path, components=CONTRIB)
    assert todo.changed and todo.summary == f"{path}: add contrib"
    assert "+deb http://deb.debian.org/debian/ bookworm main non-free-firmware contrib" in todo.diff
