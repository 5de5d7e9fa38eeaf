"""Every shell body that lives as a file passes shellcheck, every severity (style included).

The files: `*.sh` under provision/, roles/ and tests/, the files there whose first line is a sh/bash
shebang (the stand-ins' payloads, the lab's init), and the roles' `*.sh.j2` templates, rendered with
a placeholder for every variable. A construct shellcheck flags but that is intended carries
`# shellcheck disable=SCxxxx # why` on the line above it. Without shellcheck the test is skipped,
except under CI=true (the test command installs it: tests/lab/install-host-packages.sh).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest

from provision.playbook.templating import make_environment

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("provision", "roles", "tests")
SHEBANG = re.compile(rb"^#!\s*(/usr/bin/env\s+)?(/bin/|/usr/bin/)?(ba)?sh\b")
SKIPPED_PARTS = {".venv", "__pycache__", ".pytest_cache", "node_modules"}


def shell_files() -> list[Path]:
    """The shell files of the repository, sorted (a template is returned as its `.sh.j2` file)."""
    found = []
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*"):
            if not path.is_file() or SKIPPED_PARTS & set(path.relative_to(ROOT).parts):
                continue
            if path.name.endswith((".sh", ".sh.j2")) or (path.suffix == "" and _has_shell_shebang(path)):
                found.append(path)
    return sorted(found)


def _has_shell_shebang(path: Path) -> bool:
    with path.open("rb") as handle:
        return bool(SHEBANG.match(handle.readline()))


class Placeholder(jinja2.Undefined):
    """Every template variable renders as a plain word, so the shell around it is what is checked."""

    def __str__(self) -> str:
        return "PLACEHOLDER"


def checked_text(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    if path.name.endswith(".j2"):
        env = jinja2.Environment(undefined=Placeholder, keep_trailing_newline=True)
        env.filters.update(make_environment().filters)  # the tool's own filters (shquote, ...)
        text = env.from_string(text).render()
    return text


def shellcheck() -> str:
    found = shutil.which("shellcheck")
    if found is None:
        reason = "shellcheck is not installed (Debian: apt-get install shellcheck)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    return found


def test_the_repository_has_its_shell_files_found() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in shell_files()}
    assert {"provision/facts/probe.sh", "provision/ops/docker_pull.sh", "tests/standins/nvidia/payload/nvidia-smi",
            "roles/cuda_toolkit/templates/cuda.sh.j2"} <= names
    assert not any(name.endswith(".py") for name in names)


@pytest.mark.parametrize("path", shell_files(), ids=lambda path: path.relative_to(ROOT).as_posix())
def test_shellcheck_finds_nothing(path: Path) -> None:
    tool = shellcheck()
    if path.name.endswith(".j2"):  # rendered, fed on stdin; profile.d scripts are sourced by sh
        done = subprocess.run([tool, "--format=gcc", "--shell=sh", "-"], input=checked_text(path),
                              capture_output=True, text=True, check=False)
    else:
        done = subprocess.run([tool, "--format=gcc", path.name], capture_output=True, text=True,
                              cwd=path.parent, check=False)
    assert done.returncode == 0, f"shellcheck {path.relative_to(ROOT)}:\n{done.stdout}{done.stderr}"


def test_shellcheck_is_strict_here() -> None:
    """The check is not a formality: the same call reports an unquoted expansion (SC2086)."""
    tool = shellcheck()
    done = subprocess.run([tool, "--format=gcc", "-"], input='#!/bin/bash\nrm -f $1\n', capture_output=True,
                          text=True, check=False)
    assert done.returncode != 0 and "SC2086" in done.stdout
