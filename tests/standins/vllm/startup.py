"""The engine's start-up as vLLM logs it, and the failures a real GPU host produces.

Every line comes from real_lines.LINES (real vLLM lines of the versions next to the pinned v0.21.0,
each citing the corpus log it is copied from), in the order real logs print them: weights, compile,
CUDA graph profiling (on by default since v0.21.0, so it comes before "Available KV cache memory"),
the KV cache size and concurrency on separate lines, graph capture, "init engine ... took". A fault
prints what vLLM prints for it: "EngineCore failed to start." and the traceback through the
logger (ERROR [core.py:1136]), the multiprocessing copy of the traceback (raw), and the API
server's RuntimeError. The start-up time is spread over the stages.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .cuda import compat_mismatch
from .logs import API_SERVER, ENGINE_CORE, VllmLog
from .memory import (
    GIB,
    MemoryInputs,
    estimate_max_model_len,
    format_gib,
    kv_bytes_for_one_request,
    plan_memory,
)
from .real_lines import LINES

WIDE_HEAD_BACKENDS = ("FLASH_ATTN", "FLASHINFER")


class EngineStartFailure(Exception):
    """The engine died during start-up; the server has already printed vLLM's lines for it."""


@dataclass(frozen=True)
class EngineSettings:
    """What the engine start-up depends on (from flags, model config and STANDIN_* knobs)."""

    model: str
    served_names: tuple[str, ...]
    architecture: str
    max_model_len: int
    config_max_len: int
    memory: MemoryInputs
    attention_backend: str | None
    max_head_dim: int
    prefix_caching: bool
    behaviour: str
    ready_delay: float
    version: str


@dataclass(frozen=True)
class EngineReady:
    """What the API side needs from a started engine."""

    max_model_len: int
    kv_capacity_tokens: int


def _fail(log: VllmLog, exception: list[tuple[str, dict[str, object]]], raising: str = "") -> EngineStartFailure:
    """vLLM's failed start: the logged traceback, the multiprocessing copy, the API server's error.

    `exception`: (real line key, values) for the exception's lines; `raising`: the source line that
    raised it (real_lines key), shown as the frame's code."""
    texts = [LINES[key].text(**values) for key, values in exception]
    traceback = [LINES["traceback"].text(), *FRAMES, *([LINES[raising].text()] if raising else []), *texts]
    log.real(ENGINE_CORE, "engine_failed")
    for text in traceback:
        log.error(ENGINE_CORE, LINES["engine_failed"].where, text)
    log.real(ENGINE_CORE, "process_engine_core")
    for text in traceback:
        log.raw(ENGINE_CORE, text)
    log.real(API_SERVER, "traceback")
    log.real(API_SERVER, "frame", path="/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/utils.py",
             number=1474, function="wait_for_engine_startup")
    log.real(API_SERVER, "engine_init_failed")
    return EngineStartFailure(texts[0])


# the frames between vLLM's engine entry and the failing call (v0.21.0's, vllm#44494)
FRAMES = (LINES["frame"].text(path="/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", number=1114,
                              function="run_engine_core"),
          LINES["frame_engine_core"].text())


def _engine_config(log: VllmLog, settings: EngineSettings) -> None:
    memory = settings.memory
    log.real(ENGINE_CORE, "engine_config", version=settings.version, model=settings.model, speculative=None,
             trust_remote_code=False, load_format="auto",
             max_model_len=settings.max_model_len, enforce_eager=memory.enforce_eager,
             kv_cache_dtype=memory.kv_cache_dtype, served=",".join(settings.served_names),
             prefix_caching=settings.prefix_caching)


def _select_attention(log: VllmLog, settings: EngineSettings) -> None:
    """Gemma 4's 512-wide heads rule out FlashAttention/FlashInfer (REFERENCE.md §1)."""
    backend = settings.attention_backend
    if backend and backend in WIDE_HEAD_BACKENDS and settings.max_head_dim > 256:
        raise _fail(log, [("backend_invalid", {"backend": backend})])


def start_engine(log: VllmLog, settings: EngineSettings) -> EngineReady:
    """Log the engine's start-up stages over `ready_delay` seconds; raise EngineStartFailure on a fault."""
    memory, behaviour = settings.memory, settings.behaviour
    eager = memory.enforce_eager
    step = settings.ready_delay / (4 if eager else 5)
    plan = plan_memory(memory)
    _engine_config(log, settings)
    if compat_mismatch() is not None:  # the worker's torch.cuda.set_device: CUDA cannot start (cuda.py)
        raise _fail(log, [("cuda_803", {})])
    if plan.free_gib < plan.requested_gib:
        raise _fail(log, [("free_memory", {"free": plan.free_gib, "total": memory.total_gib,
                                           "utilization": memory.gpu_memory_utilization,
                                           "requested": plan.requested_gib})], raising="raise_value_error")
    log.real(ENGINE_CORE, "start_loading", model=settings.model)
    _select_attention(log, settings)
    if memory.kv_cache_dtype.startswith("fp8"):
        log.real(ENGINE_CORE, "fp8_scale")
    time.sleep(step)
    if behaviour == "cuda-oom" or memory.weights_gib > plan.requested_gib:
        raise _fail(log, [("cuda_oom", {"ask": 1.5, "total": memory.total_gib, "free": 953.94,
                                        "used": memory.total_gib - 0.93, "torch": memory.total_gib - 3.3})])
    if behaviour == "mmap-failed":
        folder = "/root/.cache/huggingface/hub/models--" + settings.model.replace("/", "--")
        raise _fail(log, [("mmap_failed", {"size": int(memory.weights_gib * GIB),
                                           "path": f"{folder}/snapshots/{'0' * 40}/model.safetensors"})])
    log.real(ENGINE_CORE, "weights_took", seconds=step * 0.8)
    log.real(ENGINE_CORE, "model_loading", gib=format_gib(memory.weights_gib * GIB), seconds=step)
    if memory.images_per_prompt:
        log.real(ENGINE_CORE, "encoder_cache", tokens=memory.max_num_batched_tokens,
                 items=memory.images_per_prompt, modality="image")
    log.real(ENGINE_CORE, "rms_norm")
    time.sleep(step)
    if behaviour == "no-kernel-image":
        raise _fail(log, [("no_kernel_image", {}), ("cuda_async", {}), ("cuda_blocking", {}), ("cuda_dsa", {})])
    if not eager:
        log.real(ENGINE_CORE, "compile_cache", folder="/root/.cache/vllm/torch_compile_cache/6e1f2a9c3b/rank_0_0/"
                                                      "backbone")
        log.real(ENGINE_CORE, "dynamo", seconds=step * 0.3)
        time.sleep(step)
        log.real(ENGINE_CORE, "compile_range", tokens=memory.max_num_batched_tokens, seconds=step * 0.6)
        log.real(ENGINE_CORE, "compile_total", seconds=step)
    log.real(ENGINE_CORE, "warmup", seconds=step * 0.1)
    if not eager:
        log.real(ENGINE_CORE, "graph_profiling", sizes=CAPTURE_SIZES, largest=512)
        log.real(ENGINE_CORE, "graph_estimate", gib=plan.cudagraph_gib)
    available = int(plan.available_kv_gib * GIB)
    needed = kv_bytes_for_one_request(memory, settings.max_model_len)
    if behaviour == "kv-cache-too-small":
        available = min(available, int(needed * 0.45))
    if behaviour == "no-cache-blocks":
        available = 0
    if memory.kv_cache_memory_bytes is not None:
        # a fixed reservation: vLLM skips the profile and says so (intel-arc-pro-b70-inference-cookbook#4)
        log.real(ENGINE_CORE, "kv_reserved", free=plan.free_gib, gib=available / GIB)
    else:
        log.real(ENGINE_CORE, "kv_available", gib=format_gib(max(available, 0)))
    if not eager and memory.kv_cache_memory_bytes is None:
        share = plan.cudagraph_gib / memory.total_gib
        utilization = memory.gpu_memory_utilization
        log.real(ENGINE_CORE, "graph_profiling_default", current=utilization, without=utilization - share,
                 raise_to=utilization + share)
    max_model_len = settings.max_model_len
    if max_model_len == -1:
        max_model_len = estimate_max_model_len(memory, max(available, 0), settings.config_max_len)
        needed = kv_bytes_for_one_request(memory, max_model_len)
    _check_kv_fits(log, memory, available, needed, max_model_len)
    concurrency = available / needed
    tokens = int(concurrency * max_model_len)
    log.real(ENGINE_CORE, "kv_tokens", tokens=tokens)
    log.real(ENGINE_CORE, "concurrency", tokens=max_model_len, times=concurrency)
    time.sleep(step)
    if not eager:
        log.real(ENGINE_CORE, "capturing", sizes=CAPTURE_SIZES)
        log.real(ENGINE_CORE, "graphs_done", seconds=max(1, round(step)), gib=plan.cudagraph_gib)
    time.sleep(step)
    log.real(ENGINE_CORE, "init_engine", seconds=step * 5)
    return EngineReady(max_model_len=max_model_len, kv_capacity_tokens=tokens)


CAPTURE_SIZES = 51


def _check_kv_fits(log: VllmLog, memory: MemoryInputs, available: int, needed: int, max_model_len: int) -> None:
    if available <= 0:
        raise _fail(log, [("no_cache_blocks", {})], raising="raise_value_error")
    if needed <= available:
        return
    estimate = estimate_max_model_len(memory, available, max_model_len)
    raise _fail(log, [("kv_too_small", {"max_model_len": max_model_len, "needed": format_gib(needed),
                                        "available": format_gib(available), "estimate": estimate})],
                raising="raise_value_error")
