"""Start-up: `provision --version` and `--help` import none of the heavy libraries the commands use,
so they answer in tens of milliseconds (issue 13: 0.46 s before, when every command module, its
pydantic models and paramiko were imported to build the parser)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("paramiko", "fabric", "invoke", "pydantic", "jinja2", "docker", "rich", "yaml")

# the console script's own entry (`provision = provision.cli:main`), then the modules it left loaded
PROBE = """
import json, sys
from provision.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})), file=sys.stderr)
"""


def imported_by(*argv: str) -> tuple[str, set[str]]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True)
    return done.stdout, set(json.loads(done.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["up", "--help"], ["status", "--help"]])
def test_version_and_help_import_no_heavy_library(argv: list[str]) -> None:
    out, modules = imported_by(*argv)
    assert out.startswith("provision 0.1.0" if argv == ["--version"] else "usage: provision")
    assert modules.isdisjoint(HEAVY), sorted(modules & set(HEAVY))


def test_the_probe_sees_a_heavy_import_when_a_command_runs(tmp_path) -> None:
    # the check above can fail: a command that runs imports the libraries it needs
    _, modules = imported_by("inventory", str(tmp_path / "missing.yaml"))
    assert {"rich", "yaml"} <= modules
