"""`torch` STAND-IN in the stand-in vLLM image (not PyTorch): only `torch.cuda`'s initialisation, so
that the GPU-in-container check can initialise CUDA in the serving image (tests/standins/vllm/cuda.py)."""

from . import cuda

__version__ = "2.9.0+standin"
__all__ = ["cuda"]
