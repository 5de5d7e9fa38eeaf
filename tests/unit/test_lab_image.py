"""The lab image's cache is keyed by its recipe, so a changed recipe never loads a stale image."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lab.image import recipe_stamp


def test_stamp_is_stable_for_the_same_recipe_and_changes_with_the_apt_sources() -> None:
    sources = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\n"
    assert recipe_stamp(sources) == recipe_stamp(sources)
    assert recipe_stamp(sources) != recipe_stamp(sources.replace("deb.debian.org", "mirror.example"))


def test_stamp_changes_when_an_overlay_file_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tests.lab.image.OVERLAY", tmp_path)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
    before = recipe_stamp("")
    (tmp_path / "etc" / "hosts").write_text("127.0.0.1 localhost lab\n")
    assert recipe_stamp("") != before
