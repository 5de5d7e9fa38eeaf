"""CUDA's initialisation as the stand-in image does it (STAND-IN, not NVIDIA's or PyTorch's code).

The stand-in `torch.cuda` (tests/standins/vllm/torch/) and the stand-in server both ask this module
whether CUDA would start in the container. Two real failures are reproduced:

- no driver in the container (no GPU requested): torch's "Found no NVIDIA driver on your system";
- the image's CUDA forward-compatibility libcuda on the library path, first before the host driver's:
  real CUDA then fails with Error 803 although NVML (nvidia-smi) works. Reported for the vLLM images
  from 0.15 under CDI on driver 580 (vllm-project/vllm#33116, #34821; gpustack/gpustack#4678: "Starting
  from vLLM v0.15.0, the image configures ld.so.conf", the CDI hook's ldconfig then puts the compat
  libcuda first; workaround LD_LIBRARY_PATH with the driver's libraries first; ggml-org/llama.cpp#23111
  on an RTX 5090). vLLM's fixes: /etc/ld.so.conf.d/cuda-compat.conf only with
  VLLM_ENABLE_CUDA_COMPATIBILITY=1 (vllm-project/vllm#33992), renamed zzz-cuda-compat.conf to come
  after the driver's entry (#34226). The error text is the one posted in gpustack#4678 (and in
  tests/unit/fixtures/vllm_logs/cuda_driver_mismatch__gpustack-4678.log).

The driver is the one the stand-in CDI spec mounts (/run/nvidia-standin/loaded-version); the library
search is the dynamic loader's order: LD_LIBRARY_PATH, then the folders of /etc/ld.so.conf.d/*.conf
(file order), then the driver's own libcuda. A libcuda found there whose version (the name its
libcuda.so.1 link points at) is not the running driver's is a compat library: 803.
"""

from __future__ import annotations

import glob
import os

NO_DRIVER = ("Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed "
             "a driver from http://www.nvidia.com/Download/index.aspx")
ERROR_803 = ("Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
             "NumCudaDevices() that might have already set an error? Error 803: system has unsupported display "
             "driver / cuda driver combination")


def root() -> str:
    """The stand-in NVIDIA root (tests/standins/nvidia: `$NVIDIA_STANDIN_ROOT`, default /)."""
    return os.environ.get("NVIDIA_STANDIN_ROOT", "")


def driver_version() -> str:
    """The running driver the container was given ("" when none: no GPU was requested)."""
    try:
        with open(root() + "/run/nvidia-standin/loaded-version", encoding="utf-8") as handle:
            return handle.readline().strip()
    except OSError:
        return ""


def library_folders() -> list[str]:
    """Where the loader looks for libcuda.so.1 before the driver's own folder, in its order."""
    folders = [part for part in os.environ.get("LD_LIBRARY_PATH", "").split(":") if part]
    for conf in sorted(glob.glob(root() + "/etc/ld.so.conf.d/*.conf")):
        try:
            with open(conf, encoding="utf-8") as handle:
                folders += [line.strip() for line in handle if line.strip() and not line.startswith("#")]
        except OSError:
            continue
    return folders


def libcuda_found() -> tuple[str, str] | None:
    """(path, version) of the first libcuda.so.1 on the library path, or None (the driver's is used)."""
    for folder in library_folders():
        link = os.path.join(root() + folder, "libcuda.so.1")
        if os.path.lexists(link):
            target = os.path.basename(os.path.realpath(link))
            return link, target.removeprefix("libcuda.so.")
    return None


def compat_mismatch() -> str | None:
    """The 803 message when a libcuda that is not the running driver's comes first, else None."""
    found = libcuda_found()
    if found is not None and found[1] != driver_version():
        return ERROR_803
    return None


def init_error() -> str | None:
    """Why CUDA cannot initialise here (torch's RuntimeError text), or None when it can."""
    if not driver_version():
        return NO_DRIVER
    return compat_mismatch()
