"""The installed tool runs from anywhere: a wheel in a fresh venv outside the checkout, run from /tmp.

`pip wheel .`, a new venv in a temporary folder, `pip install` of that wheel (its dependencies from
the package index), then `provision --version`, `render` and `up --check` with /tmp as the working
directory: the playbooks and roles are the ones inside the installed package.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOST_STACK = "preflight,plan,nvidia_driver,cuda_toolkit,docker,container_toolkit,host_tuning"


def run(argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
                          env={key: value for key, value in os.environ.items()
                               if key not in ("PYTHONPATH", "VIRTUAL_ENV")} | {"COLUMNS": "200"})


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `provision` executable of a fresh venv holding only the wheel and its dependencies."""
    tmp = tmp_path_factory.mktemp("installed")
    built = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO), "-w", str(tmp / "dist")], tmp)
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp / "dist").glob("provision-*.whl")
    venv = tmp / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)], tmp).returncode == 0
    done = run([str(venv / "bin/pip"), "install", "-q", str(wheel)], tmp)
    assert done.returncode == 0, done.stderr
    return venv / "bin/provision"


def test_version_names_the_shipped_playbook_and_roles(installed):
    done = run([str(installed), "--version"], Path("/tmp"))
    assert done.returncode == 0, done.stderr
    shipped = installed.parents[1] / "lib"
    assert "provision 0.1.0" in done.stdout
    for line in done.stdout.splitlines()[1:]:
        assert str(shipped) in line and "/_shipped/" in line, done.stdout


def test_render_works_from_tmp(installed, tmp_path):
    inventory = tmp_path / "host.yaml"
    inventory.write_text((REPO / "inventory" / "host.yaml").read_text())
    done = run([str(installed), "render", str(inventory)], Path("/tmp"))
    assert done.returncode == 0, done.stderr
    assert "--max-model-len\n131072" in done.stdout and "--kv-cache-dtype\nfp8" in done.stdout


def test_settings_are_checked_by_the_installed_tool(installed, tmp_path):
    inventory = tmp_path / "host.yaml"
    inventory.write_text("address: 192.0.2.1\nvars:\n  gpu_memory_utilisation: 0.8\n")
    done = run([str(installed), "render", str(inventory)], Path("/tmp"))
    assert done.returncode == 2 and f"{inventory}:3: gpu_memory_utilisation" in done.stderr


@pytest.mark.lab
def test_up_check_against_a_lab_host_works_from_tmp(installed, gpu_host, gpu_inventory, tmp_path):
    host = gpu_host(prefix="wheel")
    inventory = gpu_inventory(tmp_path / "inventory.yaml", [host])
    done = run([str(installed), "up", str(inventory), "--check", "--tags", HOST_STACK], Path("/tmp"), timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "would change" in done.stdout or "changed" in done.stdout, done.stdout
    rc, _ = host.exec("test -e /etc/apt/sources.list.d/cuda.list || dpkg -s docker.io")
    assert rc != 0, "check mode changed the host"
