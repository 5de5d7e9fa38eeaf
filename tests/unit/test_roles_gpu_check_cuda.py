"""The GPU-in-container check runs the serving image with the model's GPU request and initialises CUDA
in it (issue 21, item 8): NVML can work while CUDA cannot (vLLM images from 0.15 under CDI on driver
580: Error 803, gpustack/gpustack#4678, vllm-project/vllm#33116). The script's probe runs here against
the stand-in image's own `torch` (tests/standins/vllm/torch), on a container root with and without the
image's compat libcuda on the library path."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.standins.vllm import build
from tests.unit.test_roles_gpu_cdi import CHECK_SCRIPT, CONVERGED_DEBIAN12, TRIXIE_DOCKER
from tests.unit.test_roles_gpu_support import REPO, facts, render_tasks

STANDINS = REPO / "tests/standins/vllm"
CHECK = "a container sees the GPU"


def test_the_check_runs_the_serving_image_with_the_model_s_request_and_starts_cuda() -> None:
    rendered = render_tasks(facts(CONVERGED_DEBIAN12, docker_version=TRIXIE_DOCKER),
                            vllm_image="10.0.2.2:5000/vllm/vllm-openai:standin-ok")
    assert rendered[CHECK].args.cmd == ("'/usr/local/sbin/provision-gpu-in-container-check' --cuda "
                                        "'10.0.2.2:5000/vllm/vllm-openai:standin-ok' --device nvidia.com/gpu=all")
    assert rendered["GPU check image pulled"].args.image == "10.0.2.2:5000/vllm/vllm-openai:standin-ok"


def test_an_image_without_torch_is_checked_with_nvml_only() -> None:
    rendered = render_tasks(facts(CONVERGED_DEBIAN12, docker_version=TRIXIE_DOCKER),
                            container_toolkit_check_image="ubuntu:24.04", container_toolkit_check_cuda=False)
    assert rendered[CHECK].args.cmd == ("'/usr/local/sbin/provision-gpu-in-container-check' 'ubuntu:24.04' "
                                        "--device nvidia.com/gpu=all")


@pytest.fixture
def container(tmp_path: Path) -> Path:
    """The container's view of the stand-in GPU (what the CDI spec mounts) and of the image's files."""
    root = tmp_path / "root"
    (root / "run/nvidia-standin").mkdir(parents=True)
    (root / "run/nvidia-standin/loaded-version").write_text("580.95.05\n")
    compat = root / build.COMPAT_DIR
    compat.mkdir(parents=True)
    (compat / f"libcuda.so.{build.COMPAT_VERSION}").write_text("")
    (compat / "libcuda.so.1").symlink_to(f"libcuda.so.{build.COMPAT_VERSION}")
    (root / "etc/ld.so.conf.d").mkdir(parents=True)
    site = tmp_path / "site"  # the image's site-packages: the stand-in `vllm` and `torch`
    site.mkdir()
    (site / "vllm").symlink_to(STANDINS)
    (site / "torch").symlink_to(STANDINS / "torch")
    log = tmp_path / "calls"
    # docker: `exec NAME CMD...` runs CMD here, in the container's view; the rest only logged
    (tmp_path / "docker").write_text(
        "#!/bin/sh\n"
        f'echo "docker $*" >> {log}\n'
        'if [ "$1" = exec ] && [ "$3" = nvidia-smi ]; then\n'
        '  echo "GPU 0: NVIDIA GeForce RTX 5090 Laptop GPU"; exit 0; fi\n'
        'if [ "$1" = exec ]; then shift 2; exec "$@"; fi\n')
    (tmp_path / "systemctl").write_text(f'#!/bin/sh\necho "systemctl $*" >> {log}\n')
    for tool in ("docker", "systemctl"):
        (tmp_path / tool).chmod(0o755)
    return tmp_path


def run_check(folder: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{folder}:{os.environ['PATH']}", "PROVISION_GPU_CHECK_STAMP": str(folder / "state/pass"),
           "NVIDIA_STANDIN_ROOT": str(folder / "root"), "PYTHONPATH": str(folder / "site"),
           "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([str(CHECK_SCRIPT), "--cuda", "vllm:standin", "--device", "nvidia.com/gpu=all"],
                          env=env, capture_output=True, text=True, check=False)


def test_cuda_starts_in_the_serving_image(container: Path) -> None:
    result = run_check(container)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CUDA initialised in the container: NVIDIA GeForce RTX 5090 Laptop GPU" in result.stdout
    calls = (container / "calls").read_text().splitlines()
    assert calls[0].endswith("--device nvidia.com/gpu=all --entrypoint sleep -- vllm:standin 300")
    assert any(" python3 -c import torch; torch.cuda.init()" in call for call in calls)


def test_the_compat_libcuda_on_the_library_path_fails_the_check_with_error_803(container: Path) -> None:
    (container / "root/etc/ld.so.conf.d" / build.COMPAT_CONF).write_text(f"/{build.COMPAT_DIR}\n")
    result = run_check(container)
    assert result.returncode != 0
    assert result.stdout.rstrip().splitlines()[-1].endswith(
        "Error 803: system has unsupported display driver / cuda driver combination")
    assert not (container / "state/pass").exists()
    assert "systemctl daemon-reload" not in (container / "calls").read_text()  # stopped at CUDA
