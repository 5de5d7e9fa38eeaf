"""`--json` means one thing in every command: the result as JSON on stdout, progress on stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def project(tmp_path: Path) -> Path:
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "roles" / "hello").mkdir(parents=True)
    (tmp_path / "playbooks" / "site.yaml").write_text("- hosts: all\n  roles: [hello]\n")
    (tmp_path / "roles" / "hello" / "tasks.yaml").write_text("- name: say hello\n  debug:\n    msg: hello\n")
    inventory = tmp_path / "local.yaml"
    inventory.write_text("name: localhost\nconnection: local\n")
    return inventory


def test_up_json_prints_only_the_document_on_stdout(tmp_path):
    inventory = project(tmp_path)
    done = subprocess.run([sys.executable, "-m", "provision", "up", str(inventory), "--json", "--json-file",
                           str(tmp_path / "r.json"), "--playbook", str(tmp_path / "playbooks/site.yaml")],
                          capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document == json.loads((tmp_path / "r.json").read_text())
    assert document["hosts"]["localhost"]["tasks"][0]["name"] == "say hello"
    assert "PLAY RECAP" in done.stderr


def test_every_command_takes_json_as_a_switch():
    for command in ("up", "facts", "plan", "status", "smoke", "bench", "rollback", "render", "vars", "models"):
        done = subprocess.run([sys.executable, "-m", "provision", command, "--help"], capture_output=True, text=True,
                              cwd=REPO, timeout=60, check=False, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
        line = next(line for line in done.stdout.splitlines() if line.strip().startswith("--json "))
        assert "print the result as JSON on stdout" in line, (command, line)
