"""Every line the stand-in vLLM prints, as real vLLM printed it, and where that was seen.

The pinned image is vllm/vllm-openai:v0.21.0-cu129. One posted log of v0.21.0 was found
(vllm#44494: its lines are taken from it); the others come from the nearest versions the corpus
has (tests/unit/fixtures/vllm_logs/SOURCES.md): the 2026-05 posts between v0.20 and v0.21
(`(EngineCore pid=N)` and `(APIServer pid=N)` prefixes, vllm#38820, club-3090#96), v0.24.0 and
later ones for lines v0.21 introduced ("default since v0.21.0"), older ones where nothing newer
was posted. `source` names the corpus file each line is copied from.
tests/unit/test_standin_speaks_vllm.py checks every template against its source line (level,
`[file.py:LINE]` and message, numbers free) and the start-up order against the corpus, so the
stand-in cannot drift from what vLLM says.

`tail` is text a template goes on with where the corpus line was cut (not checked); lines with no
corpus source say why in `note` (uvicorn's own lines, vLLM source text seen only in a diff).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RealLine:
    """One vLLM log line: level (None: raw output behind the process prefix), `file.py:LINE`, text."""

    level: str | None
    where: str
    template: str
    source: str | None
    tail: str = ""
    note: str = ""

    def text(self, **values: object) -> str:
        return (self.template + self.tail).format(**values)


def _line(level: str | None, where: str, template: str, source: str | None, **extra: str) -> RealLine:
    return RealLine(level, where, template, source, **extra)


CONFIG_TAIL = ("device_config=cuda, served_model_name={served}, enable_prefix_caching={prefix_caching}, "
               "enable_chunked_prefill=True")

LINES: dict[str, RealLine] = {
    # the API server's start (v0.18.0 banner and arguments: the newest posted)
    "banner_edge": _line("INFO", "utils.py:297", "", "startup__vllm-gguf-plugin-101.log"),
    "banner_1": _line("INFO", "utils.py:297", "       █     █     █▄   ▄█", "startup__vllm-gguf-plugin-101.log"),
    "banner_2": _line("INFO", "utils.py:297", " ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}",
                      "startup__vllm-gguf-plugin-101.log"),
    "banner_3": _line("INFO", "utils.py:297", "  █▄█▀ █     █     █     █  model   {model}",
                      "startup__vllm-gguf-plugin-101.log"),
    "banner_4": _line("INFO", "utils.py:297", "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀", "startup__vllm-gguf-plugin-101.log"),
    "non_default_args": _line("INFO", "utils.py:233", "non-default args: {args}", "startup__vllm-gguf-plugin-101.log"),
    "architecture": _line("INFO", "model.py:533", "Resolved architecture: {architecture}",
                          "startup__vllm-gguf-plugin-101.log"),
    "max_model_len": _line("INFO", "model.py:1582", "Using max model len {max_model_len}",
                           "startup__vllm-gguf-plugin-101.log"),
    "chunked_prefill": _line("INFO", "scheduler.py:222",
                             "Chunked prefill is enabled with max_num_batched_tokens={tokens}.",
                             "startup__vllm-23176-gemma3.log"),
    # the engine (EngineCore) start
    "engine_config": _line(
        "INFO", "core.py:114",
        "Initializing a V1 LLM engine (v{version}) with config: model='{model}', speculative_config={speculative}, "
        "tokenizer='{model}', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
        "tokenizer_revision=None, trust_remote_code={trust_remote_code}, dtype=torch.bfloat16, "
        "max_seq_len={max_model_len}, download_dir=None, load_format={load_format}, tensor_parallel_size=1, "
        "pipeline_parallel_size=1, "
        "data_parallel_size=1, decode_context_parallel_size=1, dcp_comm_backend=ag_rs, "
        "disable_custom_all_reduce=False, quantization=compressed-tensors, quantization_config=None, "
        "enforce_eager={enforce_eager}, enable_return_routed_experts=False, kv_cache_dtype={kv_cache_dtype}, ",
        "startup__vllm-49011-config.log", tail=CONFIG_TAIL),
    "start_loading": _line("INFO", "gpu_model_runner.py:2530", "Starting to load model {model}...",
                           "startup__vllm-25340.log"),
    "fp8_scale": _line("WARNING", "kv_cache.py:103",
                       "Using KV cache scaling factor 1.0 for fp8_e4m3. If this is unintended, verify that "
                       "k/v_scale scaling factors are properly set in the checkpoint.", None,
                       note="vLLM's source text (vllm-project/vllm#25968, kv_cache.py); no posted log has it"),
    "weights_took": _line("INFO", "default_loader.py:384", "Loading weights took {seconds:.2f} seconds",
                          "startup__vllm-38820-engine.log"),
    "model_loading": _line("INFO", "gpu_model_runner.py:4959", "Model loading took {gib} GiB memory and "
                           "{seconds:.6f} seconds", "unknown__vllm-44494-v0.21.0-gemma4.log"),
    "encoder_cache": _line("INFO", "gpu_model_runner.py:5820",
                           "Encoder cache will be initialized with a budget of {tokens} tokens, and profiled "
                           "with {items} {modality} items of the maximum feature size.",
                           "startup__vllm-38820-engine.log"),
    "rms_norm": _line("WARNING", "op.py:241", "Priority not set for op rms_norm, using native implementation.",
                      "startup__vllm-38820-engine.log"),
    "compile_cache": _line("INFO", "backends.py:1069", "Using cache directory: {folder} for vLLM's torch.compile",
                           "startup__vllm-38820-engine.log"),
    "dynamo": _line("INFO", "backends.py:1128", "Dynamo bytecode transform time: {seconds:.2f} s",
                    "startup__vllm-38820-engine.log"),
    "compile_range": _line("INFO", "backends.py:390", "Compiling a graph for compile range (1, {tokens}) takes "
                           "{seconds:.2f} s", "startup__vllm-39033.log"),
    "compile_total": _line("INFO", "monitor.py:53", "torch.compile took {seconds:.2f} s in total",
                           "startup__vllm-48214.log"),
    "warmup": _line("INFO", "monitor.py:81", "Initial profiling/warmup run took {seconds:.2f} s",
                    "startup__vllm-48214.log"),
    "graph_profiling": _line("INFO", "gpu_model_runner.py:6483", "Profiling CUDA graph memory: PIECEWISE={sizes} "
                             "(largest={largest})", "startup__vllm-48214.log"),
    "graph_estimate": _line("INFO", "gpu_model_runner.py:6588", "Estimated CUDA graph memory: {gib:.2f} GiB total",
                            "startup__vllm-48214.log"),
    "kv_available": _line("INFO", "gpu_worker.py:508", "Available KV cache memory: {gib} GiB",
                          "startup__vllm-48214.log"),
    "kv_reserved": _line(
        "INFO", "gpu_worker.py:492",
        "Initial free memory {free:.2f} GiB, reserved {gib:.2f} GiB memory for KV Cache as specified by "
        "kv_cache_memory_bytes config and skipped memory profiling. This does not respect the "
        "gpu_memory_utilization config. Only use kv_cache_memory_bytes config when you want manual control of KV "
        "cache memory size. If OOM'ed, check the difference of initial free memory between the current run and "
        "the previous run where kv_cache_memory_bytes is suggested and update it correspondingly.",
        "unknown__intel-arc-b70-4.log"),
    "graph_profiling_default": _line(
        "INFO", "gpu_worker.py:523",
        "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
        "--gpu-memory-utilization={current:.4f} is equivalent to --gpu-memory-utilization={without:.4f} without "
        "CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase "
        "--gpu-memory-utilization to {raise_to:.4f}.", "startup__vllm-48214.log"),
    "kv_tokens": _line("INFO", "kv_cache_utils.py:2146", "GPU KV cache size: {tokens:,} tokens",
                       "startup__club-3090-612-rtx5090.log"),
    "concurrency": _line("INFO", "kv_cache_utils.py:2147", "Maximum concurrency for {tokens:,} tokens per request: "
                         "{times:.2f}x", "startup__club-3090-612-rtx5090.log"),
    "capturing": _line(None, "", "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|██████████| "
                       "{sizes}/{sizes} [00:01<00:00, 33.44it/s]", "startup__vllm-29335.log"),
    "graphs_done": _line("INFO", "gpu_model_runner.py:3480", "Graph capturing finished in {seconds} secs, took "
                         "{gib:.2f} GiB", "startup__GLM-V-204.log"),
    "init_engine": _line("INFO", "core.py:210", "init engine (profile, create kv cache, warmup model) took "
                         "{seconds:.2f} seconds", "startup__GLM-V-204.log"),
    # the API server serves
    "serving": _line("INFO", "api_server.py:602", "Starting vLLM server on http://{host}:{port}",
                     "startup__vllm-38820-api.log"),
    "routes": _line("INFO", "launcher.py:37", "Available routes are:", "startup__vllm-38820-api.log"),
    "route": _line("INFO", "launcher.py:46", "Route: {route}, Methods: {methods}", "startup__vllm-38820-api.log"),
    "uvicorn_started": _line(None, "", "INFO:     Started server process [{pid}]", None,
                             note="uvicorn's own message (no vLLM log posted with it in the corpus)"),
    "uvicorn_waiting": _line(None, "", "INFO:     Waiting for application startup.", None,
                             note="uvicorn's own message"),
    "uvicorn_complete": _line(None, "", "INFO:     Application startup complete.", None,
                              note="uvicorn's own message"),
    "uvicorn_shutting_down": _line(None, "", "INFO:     Shutting down", None, note="uvicorn's own message"),
    "uvicorn_shutdown": _line(None, "", "INFO:     Application shutdown complete.", None, note="uvicorn's own message"),
    "uvicorn_finished": _line(None, "", "INFO:     Finished server process [{pid}]", None,
                              note="uvicorn's own message"),
    # failures: the engine's traceback (raw, behind the process prefix) and the API server's
    "engine_failed": _line("ERROR", "core.py:1140", "EngineCore failed to start.",
                           "unknown__vllm-44494-v0.21.0-gemma4.log"),
    "traceback": _line(None, "", "Traceback (most recent call last):", "unknown__club-3090-58.log"),
    "process_engine_core": _line(None, "", "Process EngineCore:", "unknown__club-3090-58.log"),
    "frame": _line(None, "", '  File "{path}", line {number}, in {function}', "unknown__club-3090-58.log"),
    "frame_engine_core": _line(None, "", "    engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)",
                               "unknown__vllm-44494-v0.21.0-gemma4.log"),
    "raise_value_error": _line(None, "", "    raise ValueError(", "gpu_memory_taken__club-3090-4.log"),
    "kv_too_small": _line(
        None, "", "ValueError: To serve at least one request with the models's max seq len ({max_model_len}), "
        "({needed} GiB KV cache is needed, which is larger than the available KV cache memory ({available} GiB). "
        "Based on the available memory, the estimated maximum model length is {estimate}. Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
        "kv_cache_too_small__xinference-4926.log"),
    "free_memory": _line(
        None, "", "ValueError: Free memory on device cuda:0 ({free:.2f}/{total:.1f} GiB) on startup is less than "
        "desired GPU memory utilization ({utilization}, {requested:.2f} GiB). Decrease GPU memory utilization or "
        "reduce GPU memory used", "gpu_memory_taken__club-3090-4.log", tail=" by other processes."),
    "no_cache_blocks": _line(None, "", "ValueError: No available memory for the cache blocks. Try increasing "
                             "`gpu_memory_utilization` when initializing the engine.",
                             "no_cache_blocks__rl-swarm-118.log"),
    "cuda_oom": _line(
        None, "", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {ask:.2f} GiB. GPU 0 has a total "
        "capacity of {total:.2f} GiB of which {free:.2f} MiB is free. Including non-PyTorch memory, this process "
        "has {used:.2f} GiB memory in use. Of the allocated memory {torch:.2f} GiB is allocated by PyTorch, with "
        "81.88 MiB allocated in private pools (e.g., CUDA Graphs), and 368.65 MiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        "cuda_oom__vllm-14452-rtx5080.log"),
    "no_kernel_image": _line(None, "", "RuntimeError: CUDA error: no kernel image is available for execution on "
                             "the device", "no_kernel_image__vllm-18995.log"),
    "cuda_async": _line(None, "", "CUDA kernel errors might be asynchronously reported at some other API call, so "
                        "the stacktrace below might be incorrect.", "no_kernel_image__vllm-18995.log"),
    "cuda_blocking": _line(None, "", "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
                           "no_kernel_image__vllm-18995.log"),
    "cuda_dsa": _line(None, "", "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
                      "no_kernel_image__vllm-18995.log"),
    "mmap_failed": _line(None, "", "RuntimeError: unable to mmap {size} bytes from file <{path}>: Cannot allocate "
                         "memory (12)", "unknown__vllm-759.log"),
    "backend_invalid": _line(None, "", "ValueError: Selected backend AttentionBackendEnum.{backend} is not valid "
                             "for this configuration. Reason: ['head_size not supported']", None,
                             note="vLLM 0.33.0's source text (PyPI wheel); no posted log has it"),
    "engine_init_failed": _line(None, "", "RuntimeError: Engine core initialization failed. See root cause above.",
                                "unknown__vllm-19045.log", tail=" Failed core proc(s): {{'EngineCore': 1}}"),
    "cuda_803": _line(None, "", "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
                      "functions before calling NumCudaDevices() that might have already set an error? Error 803: "
                      "system has unsupported display driver / cuda driver combination",
                      "cuda_driver_mismatch__gpustack-4678.log"),
    "no_device": _line(None, "", "RuntimeError: Failed to infer device type, please set the environment variable",
                       "no_gpu_in_container__index-60066888710.log"),
    "no_device_2": _line(None, "", "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug the issue.",
                         "no_gpu_in_container__index-60066888710.log"),
    "validation_header": _line(None, "", "pydantic_core._pydantic_core.ValidationError: 1 validation error for "
                               "{config}", "invalid_value__MiniCPM-V-CookBook-51.log"),
    "value_error": _line(None, "", "  Value error, {message} [type=value_error, input_value={value}, "
                         "input_type={type}]", "invalid_value__MiniCPM-V-CookBook-51.log"),
    "pydantic_link": _line(None, "", "    For further information visit https://errors.pydantic.dev/2.12/v/value_error",
                           "invalid_value__MiniCPM-V-CookBook-51.log"),
    "bad_repo": _line(None, "", "  Value error, Invalid repository ID or local directory specified: '{model}'.",
                      "weights_missing__tt-inference-server-4026.log"),
    "bad_repo_gguf": _line(None, "", "  Loading GGUF from a remote repo directly is not yet supported.",
                           "weights_missing__tt-inference-server-4026.log"),
}

# the order of a start that succeeds (kv lines and the fp8 warning only where they apply)
STARTUP_ORDER = (
    "banner_edge", "banner_1", "banner_2", "banner_3", "banner_4", "banner_edge", "non_default_args", "architecture",
    "max_model_len", "chunked_prefill", "engine_config", "start_loading", "fp8_scale", "weights_took", "model_loading",
    "encoder_cache", "rms_norm", "compile_cache", "dynamo", "compile_range", "compile_total", "warmup",
    "graph_profiling", "graph_estimate", "kv_available", "kv_reserved", "graph_profiling_default", "kv_tokens",
    "concurrency", "capturing", "graphs_done", "init_engine", "serving", "routes", "route", "uvicorn_started",
    "uvicorn_waiting", "uvicorn_complete")
