"""The memory planner: does a context length fit on a GPU, how many sequences, and what would fit.

vLLM's own accounting (REFERENCE.md §2): per sequence, a full-attention layer holds
`2 (K and V) * kv_heads * head_dim * bytes_per_element * max_model_len` bytes, a sliding-window
layer only about `window + max_num_batched_tokens` tokens' worth. The KV memory available is
`gpu_total * gpu_memory_utilization - weights - overhead` (activation peak, CUDA graphs, the CUDA
context). Everything here is pure arithmetic on typed inputs, so it is unit-tested against the
seed's figures and usable before any host is touched.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3
KV_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "auto": 2, "bfloat16": 2, "float16": 2, "half": 2,
                  "float32": 4}
BLOCK_TOKENS = 16  # vLLM's KV block size: contexts are planned in whole blocks


@dataclass(frozen=True)
class AttentionLayers:
    """One kind of attention layer in the model: how many, and its KV shape."""

    count: int
    kv_heads: int
    head_dim: int
    window: int | None = None  # sliding-window layers keep only the window's tokens


@dataclass(frozen=True)
class ModelShape:
    full: AttentionLayers
    sliding: AttentionLayers | None
    weights_gib: float
    max_context: int


@dataclass(frozen=True)
class ServingSettings:
    max_model_len: int | None  # None: 'auto', pick the largest that fits
    gpu_memory_utilization: float
    kv_cache_dtype: str
    max_num_batched_tokens: int
    min_full_sequences: int = 1
    overhead_gib: float = 1.8


@dataclass(frozen=True)
class MemoryPlan:
    gpu_memory_gib: float
    kv_available_gib: float
    kv_per_sequence_gib: float
    max_model_len: int
    full_sequences: float
    largest_fitting_context: int
    fits: bool

    def refusal(self, wanted: int) -> str:
        """The message `provision up` stops with when `wanted` tokens cannot fit."""
        return (f"max_model_len {wanted} does not fit: one sequence needs {self.kv_per_sequence_gib:.2f} GiB of KV "
                f"cache but about {self.kv_available_gib:.2f} GiB is available on this "
                f"{self.gpu_memory_gib:.1f} GiB GPU "
                f"(weights, overhead and gpu_memory_utilization counted). The largest context that fits is "
                f"{self.largest_fitting_context}: set max_model_len to {self.largest_fitting_context} or 'auto', "
                f"or raise gpu_memory_utilization, or use kv_cache_dtype fp8.")


def dtype_bytes(kv_cache_dtype: str) -> int:
    try:
        return KV_DTYPE_BYTES[kv_cache_dtype]
    except KeyError:
        raise ValueError(f"unknown kv_cache_dtype {kv_cache_dtype!r}; known: {', '.join(KV_DTYPE_BYTES)}") from None


def kv_bytes_per_sequence(model: ModelShape, context: int, settings: ServingSettings) -> int:
    """KV cache bytes one sequence of `context` tokens reserves."""
    element = dtype_bytes(settings.kv_cache_dtype)
    full = model.full
    total = model.full.count * 2 * full.kv_heads * full.head_dim * element * context
    if model.sliding:
        sliding = model.sliding
        tokens = min(context, (sliding.window or context) + settings.max_num_batched_tokens)
        total += sliding.count * 2 * sliding.kv_heads * sliding.head_dim * element * tokens
    return total


def kv_available_bytes(gpu_memory_mib: float, model: ModelShape, settings: ServingSettings) -> float:
    usable = gpu_memory_mib * 1024**2 * settings.gpu_memory_utilization
    return usable - (model.weights_gib + settings.overhead_gib) * GIB


def largest_context(gpu_memory_mib: float, model: ModelShape, settings: ServingSettings, sequences: int) -> int:
    """The longest context of which `sequences` full-length sequences fit (whole blocks; 0 if none)."""
    available = kv_available_bytes(gpu_memory_mib, model, settings) / max(1, sequences)
    low, high = 0, model.max_context // BLOCK_TOKENS
    while low < high:  # bisection: the sliding part makes the cost piecewise linear in the context
        middle = (low + high + 1) // 2
        if kv_bytes_per_sequence(model, middle * BLOCK_TOKENS, settings) <= available:
            low = middle
        else:
            high = middle - 1
    return low * BLOCK_TOKENS


def plan_memory(gpu_memory_mib: float, model: ModelShape, settings: ServingSettings) -> MemoryPlan:
    """The plan for one GPU: with max_model_len None ('auto') the largest context that fits with
    `min_full_sequences` concurrent full-length sequences."""
    largest = largest_context(gpu_memory_mib, model, settings, settings.min_full_sequences)
    context = settings.max_model_len if settings.max_model_len is not None else largest
    available = kv_available_bytes(gpu_memory_mib, model, settings)
    per_sequence = kv_bytes_per_sequence(model, max(context, 1), settings)
    sequences = max(0.0, available / per_sequence) if per_sequence else 0.0
    return MemoryPlan(
        gpu_memory_gib=gpu_memory_mib / 1024,
        kv_available_gib=available / GIB,
        kv_per_sequence_gib=per_sequence / GIB,
        max_model_len=context,
        full_sequences=sequences,
        largest_fitting_context=largest,
        fits=context > 0 and sequences >= settings.min_full_sequences,
    )
