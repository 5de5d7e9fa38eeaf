"""`dpkg_rows` (provision/facts/dpkg_rows.sh) against dpkg-query itself, on this machine's real
package database: alone, and in a probe batch whose one dpkg-query read every call's patterns."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from provision.facts.dpkg_rows import dpkg_rows_shell, patterns_called
from provision.runner.probe import build_script, split_output
from tests.unit.command_counting import counting

pytestmark = pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs a Debian-like machine")

PATTERNS = ["bash", "lib*", "zz-not-a-package", "coreutils", "nvidia-*", "docker.io", "dpkg"]
# the formats the facts' packages section and the apt probe asked dpkg-query for before dpkg_rows
FORMATS = {"facts": "${db:Status-Abbrev} ${Package} ${Version}\n",
           "apt": "${Package}\t${Version}\t${db:Status-Abbrev}\n"}


SHOW = 'printf %s "${dpkg_rows_out:-}"'  # `apt` leaves its rows in dpkg_rows_out (`facts` prints them)


def dpkg_query(name: str, patterns: list[str]) -> str:
    return subprocess.run(["dpkg-query", "-W", f"-f={FORMATS[name]}", "--", *patterns], capture_output=True,
                          text=True).stdout


def test_alone_it_prints_what_dpkg_query_prints():
    words = " ".join(f"'{p}'" for p in PATTERNS[:4])
    for name in FORMATS:
        out = subprocess.run(["bash", "-c", f"{dpkg_rows_shell()}\ndpkg_rows {name} {words}; {SHOW}"],
                             capture_output=True, text=True, check=True).stdout
        assert out == dpkg_query(name, PATTERNS[:4]) and "bash" in out


def test_a_batch_reads_the_database_once_and_each_call_gets_its_own_rows(tmp_path: Path):
    env = counting("dpkg-query", tmp_path / "bin")
    calls = [("facts", PATTERNS[:3]), ("apt", PATTERNS[3:]), ("apt", ["bash:amd64"])]
    snippets = [f"{dpkg_rows_shell()}\ndpkg_rows {name} {' '.join(repr(p) for p in words)}; {SHOW}"
                for name, words in calls]
    assert patterns_called(snippets) == PATTERNS  # the architecture-qualified one is left to its own call
    out = subprocess.run(["bash", "-c", build_script(snippets, "tok")], capture_output=True, text=True, check=True,
                         env=env).stdout
    outputs = split_output(out, "tok", 3)
    for (name, words), output in zip(calls, outputs, strict=True):
        assert output == dpkg_query(name, words) and output
    assert (tmp_path / "bin" / "calls").read_text().count("x") == 2  # the batch's one, and bash:amd64's own
