"""The engine's start-up as vLLM logs it, and the failures a real GPU host produces.

Messages and the `file.py:LINE` they are logged from are vLLM 0.33.0's (PyPI wheel):
v1/engine/core.py:140 "Initializing a V1 LLM engine", v1/worker/gpu_model_runner.py:5089 "Model
loading took %s GiB memory and %.6f seconds", v1/worker/gpu_worker.py:773 "Available KV cache
memory: %s GiB", v1/core/kv_cache_utils.py:1148 "%s KV cache size: %s tokens, Maximum concurrency
for %s tokens per request: %.2fx", v1/core/kv_cache_planning.py:74 (the KV-too-small ValueError),
v1/worker/utils.py:766 (free memory below the requested share), v1/engine/utils.py:1474 and
v1/engine/core.py:1584 (engine failed to start). The start-up time is spread over the stages.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .logs import API_SERVER, ENGINE_CORE, VllmLog
from .memory import (
    GIB,
    MemoryInputs,
    estimate_max_model_len,
    format_gib,
    kv_bytes_for_one_request,
    plan_memory,
)

CONSERVING_MEMORY_URL = "https://docs.vllm.ai/en/latest/configuration/conserving_memory/"
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


def _fail(log: VllmLog, exception_lines: list[str]) -> EngineStartFailure:
    """Print the EngineCore traceback tail and the API server's RuntimeError, as vLLM does."""
    where = "core.py:1584"
    log.error(ENGINE_CORE, where, "EngineCore failed to start.")
    log.error(ENGINE_CORE, where, "Traceback (most recent call last):")
    log.error(ENGINE_CORE, where, '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", '
                                  "line 1547, in run_engine_core")
    log.error(ENGINE_CORE, where, "    engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)")
    for line in exception_lines:
        log.error(ENGINE_CORE, where, line)
    log.raw(ENGINE_CORE, "Process EngineCore:")
    log.raw(ENGINE_CORE, "Traceback (most recent call last):")
    for line in exception_lines:
        log.raw(ENGINE_CORE, line)
    log.raw(API_SERVER, "Traceback (most recent call last):")
    log.raw(API_SERVER, '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/utils.py", '
                        "line 1474, in wait_for_engine_startup")
    log.raw(API_SERVER, "RuntimeError: Engine core initialization failed. See root cause above. "
                        "Failed core proc(s): {'EngineCore': 1}")
    return EngineStartFailure(exception_lines[-1])


def _engine_config_line(settings: EngineSettings) -> str:
    memory = settings.memory
    return (
        f"Initializing a V1 LLM engine (v{settings.version}) with config: model='{settings.model}', "
        f"speculative_config=None, tokenizer='{settings.model}', skip_tokenizer_init=False, "
        f"tokenizer_mode=auto, revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
        f"max_seq_len={settings.max_model_len}, download_dir=None, load_format=auto, tensor_parallel_size=1, "
        f"pipeline_parallel_size=1, data_parallel_size=1, disable_custom_all_reduce=False, "
        f"quantization=compressed-tensors, enforce_eager={memory.enforce_eager}, "
        f"kv_cache_dtype={memory.kv_cache_dtype}, device_config=cuda, "
        f"served_model_name={','.join(settings.served_names)}, "
        f"enable_prefix_caching={settings.prefix_caching}, enable_chunked_prefill=True"
    )


def _select_attention(log: VllmLog, settings: EngineSettings) -> None:
    backend = settings.attention_backend
    if backend and backend in WIDE_HEAD_BACKENDS and settings.max_head_dim > 256:
        raise _fail(log, ["ValueError: Selected backend AttentionBackendEnum."
                          f"{backend} is not valid for this configuration. Reason: ['head_size not supported']"])
    if backend:
        log.info(ENGINE_CORE, "cuda.py:448", f"Using AttentionBackendEnum.{backend} backend.")
    else:
        log.info(ENGINE_CORE, "cuda.py:509", "Using TRITON_ATTN attention backend out of potential "
                                             "backends: ['TRITON_ATTN', 'FLEX_ATTENTION'].")


def start_engine(log: VllmLog, settings: EngineSettings) -> EngineReady:
    """Log the engine's start-up stages over `ready_delay` seconds; raise EngineStartFailure on a fault."""
    step = settings.ready_delay / (4 if settings.memory.enforce_eager else 5)
    memory = settings.memory
    plan = plan_memory(memory)
    log.info(ENGINE_CORE, "core.py:140", _engine_config_line(settings))
    if plan.free_gib < plan.requested_gib:
        raise _fail(log, [
            f"ValueError: Free memory on device cuda:0 ({plan.free_gib:.2f}/{memory.total_gib:.2f} GiB) on "
            f"startup is less than desired GPU memory utilization ({memory.gpu_memory_utilization}, "
            f"{plan.requested_gib:.2f} GiB). Decrease GPU memory utilization or reduce GPU memory used by "
            "other processes."])
    log.info(ENGINE_CORE, "gpu_model_runner.py:4979", f"Starting to load model {settings.model}...")
    _select_attention(log, settings)
    time.sleep(step)
    if settings.behaviour == "cuda-oom" or memory.weights_gib > plan.requested_gib:
        oom = (f"CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of "
               f"{memory.total_gib:.2f} GiB of which 1.12 GiB is free. Including non-PyTorch memory, this "
               f"process has {memory.total_gib - 1.12:.2f} GiB memory in use. Of the allocated memory "
               f"{memory.total_gib - 1.6:.2f} GiB is allocated by PyTorch, and 0.13 GiB is reserved by "
               "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
               "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
        log.error(ENGINE_CORE, "gpu_model_runner.py:5086",
                  "Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization to free "
                  "memory for weights, increasing --tensor-parallel-size, or using --quantization. See "
                  f"{CONSERVING_MEMORY_URL} for more tips. (original error: {oom})")
        raise _fail(log, [f"torch.OutOfMemoryError: {oom}"])
    log.info(ENGINE_CORE, "default_loader.py:507", f"Loading weights took {step * 0.8:.2f} seconds")
    log.info(ENGINE_CORE, "gpu_model_runner.py:5089",
             f"Model loading took {format_gib(memory.weights_gib * GIB)} GiB memory and {step:.6f} seconds")
    time.sleep(step)
    if settings.behaviour == "no-kernel-image":
        raise _fail(log, [
            "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device",
            "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
            "below might be incorrect.",
            "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
            "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."])
    if not memory.enforce_eager:
        log.info(ENGINE_CORE, "monitor.py:34", "Starting torch.compile")
        time.sleep(step)
        log.info(ENGINE_CORE, "monitor.py:45", f"torch.compile took {step:.2f} s in total")
    available = int(plan.available_kv_gib * GIB)
    needed = kv_bytes_for_one_request(memory, settings.max_model_len)
    if settings.behaviour == "kv-cache-too-small":
        available = min(available, int(needed * 0.45))
    log.info(ENGINE_CORE, "gpu_worker.py:773", f"Available KV cache memory: {format_gib(available)} GiB")
    max_model_len = settings.max_model_len
    if max_model_len == -1:
        max_model_len = estimate_max_model_len(memory, max(available, 0), settings.config_max_len)
        needed = kv_bytes_for_one_request(memory, max_model_len)
    _check_kv_fits(log, memory, available, needed, max_model_len)
    concurrency = available / needed
    tokens = int(concurrency * max_model_len)
    log.info(ENGINE_CORE, "kv_cache_utils.py:1148", f"GPU KV cache size: {tokens:,} tokens, Maximum "
                                                     f"concurrency for {max_model_len:,} tokens per request: "
                                                     f"{concurrency:.2f}x")
    time.sleep(step)
    if not memory.enforce_eager:
        log.info(ENGINE_CORE, "gpu_model_runner.py:6517",
                 f"Graph capturing finished in {step:.0f} secs, took {plan.cudagraph_gib:.2f} GiB")
    time.sleep(step)
    log.info(ENGINE_CORE, "core.py:413",
             f"init engine (profile, create kv cache, warmup model) took {step * 5:.2f} s")
    return EngineReady(max_model_len=max_model_len, kv_capacity_tokens=tokens)


def _check_kv_fits(log: VllmLog, memory: MemoryInputs, available: int, needed: int, max_model_len: int) -> None:
    if available <= 0:
        raise _fail(log, [
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            "when initializing the engine (this flag also controls CPU memory reservation on the CPU backend, "
            f"despite its name). See {CONSERVING_MEMORY_URL} for more details."])
    if needed <= available:
        return
    estimate = estimate_max_model_len(memory, available, max_model_len)
    estimated = (f"Based on the available memory, the estimated maximum model length is {estimate}. "
                 if estimate > 0 else "")
    raise _fail(log, [
        f"ValueError: To serve at least one request with the model's max seq len ({max_model_len}), "
        f"({format_gib(needed)} GiB KV cache is needed, which is larger than the available KV cache memory "
        f"({format_gib(available)} GiB). {estimated}Try increasing `gpu_memory_utilization` (which also "
        "controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. "
        f"See {CONSERVING_MEMORY_URL} for more details."])
