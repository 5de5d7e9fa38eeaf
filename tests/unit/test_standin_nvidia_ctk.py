"""The stand-in container toolkit: nvidia-ctk's daemon.json edit, the runtime, the hook and the cli."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.standins.nvidia import RepoInfo, build_repo
from tests.standins.nvidia.sandbox import StandinRoot

TOOLKIT = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
           "libnvidia-container1")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> RepoInfo:
    return build_repo(tmp_path_factory.getbasetemp() / "standin-nvidia-repo", "http://10.0.2.2:8765")


@pytest.fixture
def host(repo: RepoInfo, tmp_path: Path) -> StandinRoot:
    root = StandinRoot(tmp_path / "root", repo)
    root.unpack("1.17.8-1", *TOOLKIT)
    return root


def ctk(host: StandinRoot, *args: str) -> subprocess.CompletedProcess[str]:
    return host.run("/usr/bin/nvidia-ctk", *args)


def test_configure_creates_daemon_json_in_gos_format(host: StandinRoot, tmp_path: Path) -> None:
    config = tmp_path / "docker/daemon.json"
    result = ctk(host, "runtime", "configure", "--runtime=docker", f"--config={config}")
    assert result.returncode == 0
    assert config.read_text() == ('{\n    "runtimes": {\n        "nvidia": {\n            "args": [],\n'
                                  '            "path": "nvidia-container-runtime"\n        }\n    }\n}')
    assert f'msg="Wrote updated config to {config}"' in result.stderr
    assert 'msg="It is recommended that docker daemon be restarted."' in result.stderr


def test_configure_keeps_every_other_key_and_runtime(host: StandinRoot, tmp_path: Path) -> None:
    config = tmp_path / "daemon.json"
    config.write_text(json.dumps({"insecure-registries": ["10.0.2.2:5000"], "log-driver": "json-file",
                                  "runtimes": {"crun": {"path": "/usr/bin/crun"}}}))
    assert ctk(host, "runtime", "configure", "--runtime=docker", f"--config={config}").returncode == 0
    merged = json.loads(config.read_text())
    assert merged == {"insecure-registries": ["10.0.2.2:5000"], "log-driver": "json-file",
                      "runtimes": {"crun": {"path": "/usr/bin/crun"},
                                   "nvidia": {"args": [], "path": "nvidia-container-runtime"}}}
    assert config.read_text().startswith('{\n    "insecure-registries": [\n        "10.0.2.2:5000"\n    ],')
    before = config.read_text()
    assert ctk(host, "runtime", "configure", "--runtime=docker", f"--config={config}").returncode == 0
    assert config.read_text() == before  # a second run is a no-op in content


def test_configure_refuses_a_broken_file_and_leaves_it(host: StandinRoot, tmp_path: Path) -> None:
    config = tmp_path / "daemon.json"
    config.write_text("{not json")
    result = ctk(host, "runtime", "configure", "--runtime=docker", f"--config={config}")
    assert result.returncode == 1 and "unable to load config for runtime docker" in result.stderr
    assert config.read_text() == "{not json"


def test_version_and_dev_char_symlinks(host: StandinRoot) -> None:
    assert ctk(host, "--version").stdout.startswith("NVIDIA Container Toolkit CLI version 1.17.8\ncommit: ")
    assert ctk(host, "system", "create-dev-char-symlinks", "--create-all").returncode == 0


def test_runtime_adds_the_hook_for_gpu_containers_then_execs_runc(host: StandinRoot, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    spec = {"process": {"env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"]}, "root": {"path": "rootfs"}}
    (bundle / "config.json").write_text(json.dumps(spec))
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "runc").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/runc-args\n')
    (fake_bin / "runc").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake_bin}:/usr/bin:/bin"}
    args = ["--root", "/run/runc", "create", "--bundle", str(bundle), "--pid-file", "p", "ctr1"]
    subprocess.run([str(host.root / "usr/bin/nvidia-container-runtime"), *args], env=env, check=True)
    assert (tmp_path / "runc-args").read_text().split() == args
    hooks = json.loads((bundle / "config.json").read_text())["hooks"]["prestart"]
    assert hooks == [{"path": "/usr/bin/nvidia-container-runtime-hook",
                      "args": ["nvidia-container-runtime-hook", "prestart"]}]


def test_hook_configures_gpu_containers_only(host: StandinRoot, tmp_path: Path) -> None:
    host.write("/usr/bin/nvidia-container-cli", f'#!/bin/sh\necho "$@" > {tmp_path}/cli-args\n', 0o755)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    state = json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 4242, "bundle": str(bundle)})
    (bundle / "config.json").write_text(json.dumps({"process": {"env": ["PATH=/bin"]}, "root": {"path": "rootfs"}}))
    assert host.run("/usr/bin/nvidia-container-runtime-hook", "prestart", stdin=state).returncode == 0
    assert not (tmp_path / "cli-args").exists()
    (bundle / "config.json").write_text(json.dumps(
        {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]}, "root": {"path": "rootfs"}}))
    assert host.run("/usr/bin/nvidia-container-runtime-hook", "prestart", stdin=state).returncode == 0
    assert (tmp_path / "cli-args").read_text().split() == [
        "--load-kmods", "configure", "--ldconfig=@/sbin/ldconfig", "--device=all", "--compute", "--utility",
        "--pid=4242", f"{bundle}/rootfs"]


def test_hook_marks_its_containers_with_the_reload_stamp_unless_docker_runs_cgroupfs(
        host: StandinRoot, tmp_path: Path) -> None:
    """NVIDIA/nvidia-container-toolkit#48: the hook's devices are lost at a daemon-reload when systemd
    manages the container's cgroup; the stand-in nvidia-smi reads this mark (see the hook's docstring)."""
    host.write("/usr/bin/nvidia-container-cli", "#!/bin/sh\n", 0o755)
    host.write("/run/nvidia-standin/daemon-reload", "1700000000000000000\n", 0o644)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    state = json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 4242, "bundle": str(bundle)})
    (bundle / "config.json").write_text(json.dumps(
        {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]}, "root": {"path": "rootfs"}}))
    mark = bundle / "rootfs/etc/nvidia-standin-hook-devices"
    assert host.run("/usr/bin/nvidia-container-runtime-hook", "prestart", stdin=state).returncode == 0
    assert mark.read_text() == "1700000000000000000\n"
    mark.unlink()
    host.write("/etc/docker/daemon.json", json.dumps({"exec-opts": ["native.cgroupdriver=cgroupfs"]}), 0o644)
    assert host.run("/usr/bin/nvidia-container-runtime-hook", "prestart", stdin=state).returncode == 0
    assert not mark.exists()


def test_cli_fails_like_nvidia_container_cli_until_the_driver_is_loaded(host: StandinRoot) -> None:
    no_driver = host.run("/usr/bin/nvidia-container-cli", "info")
    assert (no_driver.returncode, no_driver.stderr) == (
        1, "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open "
           "shared object file: no such file or directory\n")
    host.unpack("580.95.05-1", "nvidia-smi", "libnvidia-ml1", "nvidia-kernel-open-dkms")
    assert host.run("/usr/bin/nvidia-container-cli", "info").stderr == (
        "nvidia-container-cli: initialization error: nvml error: driver not loaded\n")
    host.reboot()
    info = host.run("/usr/bin/nvidia-container-cli", "info")
    assert info.returncode == 0
    assert "NVRM version:   580.95.05\n" in info.stdout
    assert "Model:          NVIDIA GeForce RTX 5090 Laptop GPU\n" in info.stdout
    host.unpack("580.105.08-1", "nvidia-smi", "libnvidia-ml1", "nvidia-kernel-open-dkms")
    assert host.run("/usr/bin/nvidia-container-cli", "info").stderr == (
        "nvidia-container-cli: initialization error: nvml error: driver/library version mismatch\n")
