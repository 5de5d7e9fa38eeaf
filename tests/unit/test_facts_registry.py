"""Facts are sections their owners register (issue 26): the registry's contract, and the engine's
distance from the NVIDIA package it loads by name only."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from provision.facts.model import HostFacts
from provision.facts.probe import probe_script
from provision.facts.sections import SECTION_MODULES, registry
from provision.ops.dpkg_lock import dpkg_lock_script

ROOT = Path(__file__).resolve().parents[2]


def test_each_section_and_field_is_registered_once_and_parses_to_its_declared_fields() -> None:
    sections = registry().sections
    assert len({s.name for s in sections}) == len(sections)
    fields = Counter(name for s in sections for name in s.fields)
    assert [name for name, count in fields.items() if count > 1] == []
    for section in sections:  # a section missing from the output still gives a value for each field
        assert set(section.parse(lambda _name: "")) == set(section.fields), section.name


def test_an_unregistered_field_is_refused() -> None:
    try:
        HostFacts(gpu_temperature=80)
    except TypeError as error:
        assert "gpu_temperature" in str(error)
    else:
        raise AssertionError("HostFacts took a field no section registers")


def test_the_facts_engine_names_the_gpu_package_only_in_its_registration_list() -> None:
    assert "provision.gpu.facts" in SECTION_MODULES
    for path in (ROOT / "provision" / "facts").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not any(name.startswith("provision.gpu") for name in names), path.name


def test_the_probe_and_the_apt_wait_share_one_lock_reader() -> None:
    shared = (ROOT / "provision" / "facts" / "fcntl_lock.sh").read_text()
    assert probe_script().count(shared) == 1 and dpkg_lock_script().count(shared) == 1
    awk = "awk -v key="
    in_repo = [p for p in (ROOT / "provision").rglob("*.sh") if awk in p.read_text()]
    assert [p.name for p in in_repo] == ["fcntl_lock.sh"]
