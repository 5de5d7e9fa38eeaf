"""Helpers for end-to-end tests: run the real `provision` command, read its JSON results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.lab import Lab

REPO = Path(__file__).resolve().parents[2]
# `apt-mark showhold` after `up` on a Debian lab laptop: the driver's top-level packages and the container
# toolkit's four, held at their pin so that no background upgrade moves them (issue 21)
HELD_BY_UP = ["libnvidia-container-tools", "libnvidia-container1", "nvidia-container-toolkit",
              "nvidia-container-toolkit-base", "nvidia-driver-cuda", "nvidia-kernel-open-dkms"]


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    results: dict[str, Any] | None

    def host(self, name: str) -> dict[str, Any]:
        assert self.results is not None, self.output
        return self.results["hosts"][name]

    def changed_tasks(self, name: str) -> list[str]:
        return [t["name"] for t in self.host(name)["tasks"] if t["changed"]]

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def sh(host: Any, command: str) -> str:
    """Run `command` on a lab host as root; its output, stripped. Fails the test, quoting the output,
    when it exits non-zero."""
    rc, output = host.exec(command)
    assert rc == 0, f"{command}: {output}"
    return output.strip()


def provision(*args: str, json_path: Path | None = None, timeout: float = 900, env: dict | None = None) -> Run:
    """Run `python -m provision ARGS` from the repository root, like a user would."""
    argv = [sys.executable, "-m", "provision", *args]
    if json_path is not None:
        json_path.unlink(missing_ok=True)
        argv += ["--json-file", str(json_path)]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=timeout, check=False,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})
    results = json.loads(json_path.read_text()) if json_path and json_path.exists() else None
    return Run(done.returncode, done.stdout, done.stderr, results)


def tiny_image(lab: Lab, tmp: Path, name: str = "tiny:1") -> str:
    """A busybox image pushed to the lab registry; returns the reference hosts pull it by."""
    root = tmp / "tiny-root"
    (root / "bin").mkdir(parents=True, exist_ok=True)
    busybox = root / "bin/busybox"
    busybox.write_bytes(Path("/bin/busybox").read_bytes())
    busybox.chmod(0o755)
    for applet in ("sh", "echo", "cat", "hostname", "sleep"):
        link = root / "bin" / applet
        if not link.exists():
            link.symlink_to("busybox")
    archive = tmp / "tiny.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(root, arcname=".")
    subprocess.run(["docker", "import", str(archive), f"provision-test/{name}"], check=True, capture_output=True)
    lab.registry.push(f"provision-test/{name}", name)
    return f"{lab.registry.address_for_hosts}/{name}"
