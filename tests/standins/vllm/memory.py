"""GPU memory planning the way vLLM does it, so the stand-in's memory lines follow from the flags.

vLLM (v1/worker/gpu_worker.py) reserves `total * gpu_memory_utilization`, subtracts the weights,
the activation peak of a profile run and the CUDA graphs, and gives the rest to the KV cache
(v1/core/kv_cache_utils.py). Full-attention layers need KV for every token of the context; sliding
window layers only for about `window + max_num_batched_tokens` tokens (REFERENCE.md §2). The
numbers of the model come from its config.json; the card's from STANDIN_* environment variables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GIB = 1024**3
ONE_BYTE_KV_DTYPES_PREFIXES = ("fp8", "int8", "nvfp4", "turboquant", "octave", "ultraquant", "int4")


@dataclass(frozen=True)
class AttentionLayout:
    """KV-relevant shape of the text model: how many layers of each kind and their KV sizes."""

    full_layers: int
    sliding_layers: int
    full_kv_heads: int
    full_head_dim: int
    sliding_kv_heads: int
    sliding_head_dim: int
    sliding_window: int
    max_position_embeddings: int


GEMMA4_LIKE_LAYOUT = AttentionLayout(
    full_layers=5, sliding_layers=25, full_kv_heads=2, full_head_dim=512, sliding_kv_heads=8,
    sliding_head_dim=256, sliding_window=1024, max_position_embeddings=262144,
)


def layout_from_config(config: dict[str, Any]) -> AttentionLayout:
    """Read the attention layout from a HF config.json (text_config for multimodal models)."""
    text = config.get("text_config", config)
    layers = int(text.get("num_hidden_layers", 30))
    layer_types = text.get("layer_types") or []
    full = sum(1 for kind in layer_types if kind == "full_attention") if layer_types else layers // 6
    kv_heads = int(text.get("num_key_value_heads", 8))
    head_dim = int(text.get("head_dim", 256))
    return AttentionLayout(
        full_layers=full,
        sliding_layers=layers - full,
        full_kv_heads=int(text.get("num_global_key_value_heads", kv_heads)),
        full_head_dim=int(text.get("global_head_dim", head_dim)),
        sliding_kv_heads=kv_heads,
        sliding_head_dim=head_dim,
        sliding_window=int(text.get("sliding_window", 1024)),
        max_position_embeddings=int(text.get("max_position_embeddings", 131072)),
    )


def kv_bytes_per_element(kv_cache_dtype: str) -> int:
    """fp8-style caches store one byte per element; auto/bf16/fp16 two."""
    return 1 if kv_cache_dtype.startswith(ONE_BYTE_KV_DTYPES_PREFIXES) else 2


@dataclass(frozen=True)
class MemoryInputs:
    """Everything the plan depends on: the card, the flags and the model."""

    total_gib: float
    used_by_others_gib: float
    weights_gib: float
    gpu_memory_utilization: float
    kv_cache_dtype: str
    max_num_batched_tokens: int
    enforce_eager: bool
    images_per_prompt: int
    videos_per_prompt: int
    layout: AttentionLayout
    kv_cache_memory_bytes: int | None = None


@dataclass(frozen=True)
class MemoryPlan:
    """The results vLLM logs at start-up."""

    requested_gib: float
    free_gib: float
    activation_gib: float
    cudagraph_gib: float
    available_kv_gib: float


def plan_memory(inputs: MemoryInputs) -> MemoryPlan:
    """Split the card like vLLM's profile run does."""
    requested = inputs.total_gib * inputs.gpu_memory_utilization
    # The profile run encodes the largest multimodal batch a prompt may carry: a few images at most,
    # and one video costs far more than an image.
    activation = 0.15 * inputs.max_num_batched_tokens / 1024 + 0.25 * min(inputs.images_per_prompt, 4) \
        + 1.5 * min(inputs.videos_per_prompt, 1)
    cudagraphs = 0.0 if inputs.enforce_eager else 0.45
    available = requested - inputs.weights_gib - activation - cudagraphs
    if inputs.kv_cache_memory_bytes is not None:
        available = inputs.kv_cache_memory_bytes / GIB
    return MemoryPlan(
        requested_gib=requested,
        free_gib=inputs.total_gib - inputs.used_by_others_gib,
        activation_gib=activation,
        cudagraph_gib=cudagraphs,
        available_kv_gib=available,
    )


def kv_bytes_for_one_request(inputs: MemoryInputs, model_len: int) -> int:
    """KV bytes one request of `model_len` tokens needs: full layers all tokens, sliding a window."""
    layout = inputs.layout
    element = kv_bytes_per_element(inputs.kv_cache_dtype)
    full_per_token = 2 * layout.full_kv_heads * layout.full_head_dim * element * layout.full_layers
    sliding_per_token = 2 * layout.sliding_kv_heads * layout.sliding_head_dim * element * layout.sliding_layers
    sliding_tokens = min(model_len, layout.sliding_window + inputs.max_num_batched_tokens)
    return full_per_token * model_len + sliding_per_token * sliding_tokens


def estimate_max_model_len(inputs: MemoryInputs, available_bytes: int, upper: int) -> int:
    """Largest length (a multiple of the 16-token block) whose one request fits, like vLLM's search."""
    low, high = 0, upper
    while low < high:
        middle = (low + high + 1) // 2
        if kv_bytes_for_one_request(inputs, middle) <= available_bytes:
            low = middle
        else:
            high = middle - 1
    return low - low % 16


def format_gib(value_bytes: float) -> str:
    """vllm/utils/mem_utils.py format_gib: round to 2 decimals, Python's float formatting."""
    return f"{round(value_bytes / GIB, 2)}"
