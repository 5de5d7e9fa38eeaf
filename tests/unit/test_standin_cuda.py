"""The stand-in image's CUDA start (tests/standins/vllm/cuda.py and its `torch.cuda`): it fails where
the real one was reported to fail (Error 803 with the image's compat libcuda first on the library
path, gpustack/gpustack#4678; no driver without a GPU request) and nowhere else, and fatal.py reads
the stand-in server's failure as the real line's cause."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from provision.vllm.fatal import find_fatal
from tests.standins.vllm import build, cuda

DRIVER = "580.95.05"


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A container's view: the driver the CDI spec mounts, the image's compat folder, not on the path."""
    monkeypatch.setenv("NVIDIA_STANDIN_ROOT", str(tmp_path))
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    (tmp_path / "run/nvidia-standin").mkdir(parents=True)
    (tmp_path / "run/nvidia-standin/loaded-version").write_text(DRIVER + "\n")
    compat = tmp_path / build.COMPAT_DIR
    compat.mkdir(parents=True)
    (compat / f"libcuda.so.{build.COMPAT_VERSION}").write_text("")
    (compat / "libcuda.so.1").symlink_to(f"libcuda.so.{build.COMPAT_VERSION}")
    (tmp_path / "etc/ld.so.conf.d").mkdir(parents=True)
    (tmp_path / "etc/ld.so.conf.d/x86_64-linux-gnu.conf").write_text("/usr/local/lib/x86_64-linux-gnu\n")
    return tmp_path


def torch_cuda():
    """The stand-in `torch.cuda` as the image imports it (its `vllm` is the stand-in package)."""
    sys.modules.setdefault("vllm", importlib.import_module("tests.standins.vllm"))
    sys.modules.setdefault("vllm.cuda", cuda)
    return importlib.import_module("tests.standins.vllm.torch.cuda")


def test_cuda_starts_with_the_driver_and_the_compat_folder_off_the_path(root: Path) -> None:
    assert cuda.init_error() is None
    torch_cuda().init()
    assert torch_cuda().get_device_name(0) == "NVIDIA GeForce RTX 5090 Laptop GPU"


def test_the_compat_folder_in_ld_so_conf_gives_error_803(root: Path) -> None:
    (root / "etc/ld.so.conf.d" / build.COMPAT_CONF).write_text(f"/{build.COMPAT_DIR}\n")
    with pytest.raises(RuntimeError, match="Error 803: system has unsupported display driver / cuda driver"):
        torch_cuda().init()
    assert torch_cuda().is_available() is False


def test_the_compat_folder_on_ld_library_path_gives_error_803(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/{build.COMPAT_DIR}")
    assert cuda.init_error() == cuda.ERROR_803


def test_the_drivers_own_libcuda_first_is_no_mismatch(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # gpustack#4678's workaround: the driver's libraries first on LD_LIBRARY_PATH
    (root / "etc/ld.so.conf.d" / build.COMPAT_CONF).write_text(f"/{build.COMPAT_DIR}\n")
    driver = root / "usr/local/nvidia/lib64"
    driver.mkdir(parents=True)
    (driver / f"libcuda.so.{DRIVER}").write_text("")
    (driver / "libcuda.so.1").symlink_to(f"libcuda.so.{DRIVER}")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64")
    assert cuda.init_error() is None


def test_no_driver_in_the_container_is_torchs_no_driver_error(root: Path) -> None:
    (root / "run/nvidia-standin/loaded-version").unlink()
    with pytest.raises(RuntimeError, match=r"^Found no NVIDIA driver on your system"):
        torch_cuda().init()


def test_the_stand_in_servers_803_is_read_as_the_real_lines_cause(root: Path) -> None:
    fatal = find_fatal(["(EngineCore pid=68) RuntimeError: " + cuda.ERROR_803], exited=True)
    assert fatal is not None and fatal.cause == "cuda_driver_mismatch"


def test_the_image_carries_torch_beside_vllm_and_the_compat_library(tmp_path: Path) -> None:
    build._build_context(tmp_path, "base:1", [])
    site = tmp_path / "standin"
    assert (site / "torch/cuda/__init__.py").is_file() and (site / "vllm/cuda.py").is_file()
    assert not (site / "vllm/torch").exists()
    assert (tmp_path / "cuda-compat/libcuda.so.1").readlink().name == f"libcuda.so.{build.COMPAT_VERSION}"
    assert f"COPY cuda-compat/ /{build.COMPAT_DIR}/" in (tmp_path / "Dockerfile").read_text()
