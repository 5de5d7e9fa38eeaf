"""`torch.cuda` STAND-IN: init() raises RuntimeError with torch's own text when CUDA cannot start
(no driver; Error 803 with the image's compat libcuda first on the library path), as the real one does."""

from __future__ import annotations

import json

from vllm import cuda as _standin

DEFAULT_NAME = "NVIDIA GeForce RTX 5090 Laptop GPU"  # the stand-in nvidia-smi's default GPU


def init() -> None:
    error = _standin.init_error()
    if error is not None:
        raise RuntimeError(error)


def is_available() -> bool:
    return _standin.init_error() is None


def device_count() -> int:
    init()
    return 1


def get_device_name(device: int = 0) -> str:
    init()
    try:  # the simulated GPU the CDI spec mounts (tests/standins/nvidia/README.md)
        with open(_standin.root() + "/etc/nvidia-standin/gpu.json", encoding="utf-8") as handle:
            return str(json.load(handle).get("name", DEFAULT_NAME))
    except (OSError, ValueError, AttributeError):
        return DEFAULT_NAME
