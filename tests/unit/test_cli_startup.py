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


# `up` up to the moment it starts opening its first SSH connection (the runner hands the host to the
# connecting thread; the connection itself is stopped there, the host reported unreachable): the
# modules loaded by then are printed
UP_PROBE = """
import json, sys
import provision.connection.ssh as ssh
from provision.errors import HostUnreachable
from provision.runner.host_run import HostState
open_early = HostState.open_early
def snapshot(self, pool):
    print(json.dumps(sorted(sys.modules)), file=sys.stderr)
    open_early(self, pool)
def stop(self):
    raise HostUnreachable("stopped before connecting")
HostState.open_early = snapshot
ssh.SSHConnection.open = stop
from provision.cli import main
main(sys.argv[1:])
"""

# what `up` must not load before it connects: operations and their pydantic models (imported when a
# task is first validated, after the connection opened), the docker SDK, the service layer's modules
NOT_BEFORE_CONNECTING = ("pydantic", "docker", "provision.ops.", "provision.vllm.ops.", "provision.vllm.release")


def test_up_connects_before_importing_operations_or_pydantic(tmp_path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("all:\n  hosts:\n    h1: {ansible_host: 127.0.0.1, ansible_port: 1}\n"
                         f"  vars: {{ansible_user: root, known_hosts: {tmp_path / 'known_hosts'}}}\n")
    done = subprocess.run([sys.executable, "-c", UP_PROBE, "up", str(inventory), "--tags", "docker"],
                          capture_output=True, text=True)
    modules = json.loads(next(line for line in done.stderr.splitlines() if line.startswith("[")))
    assert "paramiko" in modules and "provision.runner.runner" in modules  # it got as far as connecting
    early = [name for name in modules if name == "pydantic" or name.startswith(NOT_BEFORE_CONNECTING)
             or name.split(".")[0] in NOT_BEFORE_CONNECTING]
    assert early == [], early
