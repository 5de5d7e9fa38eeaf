"""The lab derives the Debian archive from the machine's own apt configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lab import mirror

DEBIAN_SOURCES = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.example.org/debian
Suites: bookworm
Components: main
"""


def test_deb822_entries_keep_uri_suites_and_components_and_skip_deb_src() -> None:
    assert mirror.parse_deb822(DEBIAN_SOURCES) == [
        mirror.AptSource("http://deb.debian.org/debian", ("bookworm", "bookworm-updates"), ("main",)),
        mirror.AptSource("http://deb.debian.org/debian-security", ("bookworm-security",), ("main",)),
    ]


def test_disabled_deb822_stanza_is_ignored() -> None:
    text = "Types: deb\nURIs: http://a.example/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n"
    assert mirror.parse_deb822(text) == []


def test_one_line_entries_with_options_are_parsed() -> None:
    text = ("# comment\ndeb [signed-by=/k.gpg arch=amd64] http://mirror.example/debian bookworm main contrib\n"
            "deb-src http://mirror.example/debian bookworm main\n")
    assert mirror.parse_one_line(text) == [
        mirror.AptSource("http://mirror.example/debian", ("bookworm",), ("main", "contrib"))]


def test_machine_sources_read_sources_and_list_files_without_duplicates(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEBIAN_SOURCES)
    (tmp_path / "sources.list.d" / "other.list").write_text(
        "deb http://deb.debian.org/debian-security bookworm-security main\n"
        "deb http://vendor.example/apt stable main\n")
    (tmp_path / "sources.list.d" / "off.sources.disabled").write_text(DEBIAN_SOURCES.replace("deb.", "x."))
    uris = [s.uri for s in mirror.machine_sources(tmp_path)]
    assert uris == ["http://deb.debian.org/debian", "http://deb.debian.org/debian-security",
                    "http://vendor.example/apt"]
    assert [s.uri for s in mirror.debian_sources(mirror.machine_sources(tmp_path))] == uris[:2]


def test_main_mirror_is_the_first_debian_archive_that_is_not_security() -> None:
    sources = [mirror.AptSource("http://sec.example/debian-security", ("bookworm-security",), ("main",)),
               *mirror.parse_deb822(DEBIAN_SOURCES)]
    assert mirror.main_mirror(sources) == "http://deb.debian.org/debian"


def test_main_mirror_without_a_debian_archive_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="no Debian archive"):
        mirror.main_mirror([mirror.AptSource("http://vendor.example/apt", ("stable",), ("main",))])


def test_archive_hosts_are_unique_host_names() -> None:
    assert mirror.archive_hosts(mirror.parse_deb822(DEBIAN_SOURCES)) == ["deb.debian.org"]


def test_rendered_sources_parse_back_to_the_same_entries() -> None:
    sources = mirror.parse_deb822(DEBIAN_SOURCES)
    rendered = mirror.render_deb822(sources)
    assert mirror.parse_deb822(rendered) == sources
    assert rendered.count("Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg") == 2
