"""Stand-in for the `vllm/vllm-openai` image's server: `vllm serve MODEL [options]`.

Invoked like the real entrypoint (ENTRYPOINT ["vllm", "serve"]):
    python3 server.py serve MODEL --served-model-name NAME --api-key KEY --port 8000 ...
    python3 -m vllm.entrypoints.openai.api_server --model MODEL ...   (inside the stand-in image)
It parses vLLM's real options (vllm_flags.txt), prints vLLM's start-up lines, binds the port at once
but listens only when the engine is "ready" (connections are refused until then, as with vLLM,
which binds early and lets uvicorn listen later), then serves the OpenAI-compatible API.

Knobs (environment, baked into image variants): STANDIN_BEHAVIOUR (ok, wrong-vision, alternating,
slow-start, and the failed starts of FAILURES), STANDIN_READY_DELAY (seconds,
default 2; 60 for slow-start), STANDIN_TOKENS_PER_S (140), STANDIN_GPU_MEMORY_GIB (24),
STANDIN_GPU_USED_GIB (0, memory other processes hold), STANDIN_MODEL_WEIGHTS_GIB (17.12),
STANDIN_REQUIRE_WEIGHTS (1: the model must be in the HF cache or a local folder, as without
network), STANDIN_VLLM_VERSION (0.21.0, the pinned image's). VLLM_API_KEY works as in vLLM.
What it prints is real vLLM's lines (real_lines.py, each citing the real log it is copied from).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: make this folder importable as the package `vllm`, as in the image
    _HERE = Path(__file__).resolve().parent
    sys.path.insert(0, str(_HERE.parent))
    __package__ = _HERE.name
    importlib.import_module(__package__)

from .flags import (
    build_api_server_parser,
    build_vllm_cli_parser,
    load_flag_table,
    preprocess_serve_args,
)
from .http_api import ServingState, StandinHTTPServer
from .logs import API_SERVER, VllmLog
from .memory import GEMMA4_LIKE_LAYOUT, MemoryInputs, layout_from_config
from .metrics import Metrics
from .model_files import ModelFilesError, locate_model
from .openai_requests import ServingLimits
from .startup import EngineSettings, EngineStartFailure, start_engine

# failed starts, each what real vLLM prints for one cause (fatal.py's classes; docker's own failures,
# driver too old or no GPU runtime, happen before any vLLM runs and are not the image's to show)
FAILURES = ("kv-cache-too-small", "cuda-oom", "no-kernel-image", "no-cache-blocks", "gpu-memory-taken", "no-gpu",
            "weights-missing", "bad-config", "mmap-failed")
# cuda-compat: the image's compat libcuda is on the library path (build.py); CUDA fails with 803 (cuda.py)
BEHAVIOURS = ("ok", *FAILURES, "wrong-vision", "alternating", "slow-start", "cuda-compat")
VERSION = "0.21.0"
ROUTES = (("/openapi.json", "HEAD, GET"), ("/docs", "HEAD, GET"), ("/docs/oauth2-redirect", "HEAD, GET"),
          ("/redoc", "HEAD, GET"), ("/tokenize", "POST"), ("/detokenize", "POST"), ("/load", "GET"),
          ("/version", "GET"), ("/health", "GET"), ("/metrics", "GET"), ("/v1/models", "GET"),
          ("/v1/chat/completions", "POST"), ("/v1/completions", "POST"))
DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
DEFAULTS: dict[str, Any] = {"port": 8000, "gpu_memory_utilization": 0.92, "kv_cache_dtype": "auto",
                            "max_num_batched_tokens": 8192, "max_num_seqs": 256, "enable_prefix_caching": True}
SENSITIVE = ("api_key", "hf_token")


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


class ConfigError(Exception):
    """A value vLLM rejects when it builds its config (after argparse accepted it): exit 1."""


def _validation_error(config_class: str, field: str, message: str, value: Any) -> ConfigError:
    return ConfigError(
        f"pydantic_core._pydantic_core.ValidationError: 1 validation error for {config_class}\n{field}\n"
        f"  Value error, {message} [type=value_error, input_value={value!r}, input_type={type(value).__name__}]\n"
        "    For further information visit https://errors.pydantic.dev/2.14/v/value_error")


def parse_command_line(argv: list[str], entry: str) -> argparse.Namespace:
    """Parse like `vllm` (entry='vllm', argv starts with the subcommand) or the api_server module."""
    table = load_flag_table()
    if entry == "vllm":
        parser = build_vllm_cli_parser(table)
        args = parser.parse_args(preprocess_serve_args(argv))
        if args.version:
            print(os.environ.get("STANDIN_VLLM_VERSION", VERSION))
            raise SystemExit(0)
        if args.subparser is None:
            parser.print_help()
            raise SystemExit(0)
        if args.subparser != "serve":
            parser.error(f"the stand-in image implements only `vllm serve`, not `vllm {args.subparser}`")
    else:
        args = build_api_server_parser(table).parse_args(preprocess_serve_args(argv))
    args.model = args.model_tag or args.model or DEFAULT_MODEL
    for name, value in DEFAULTS.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    _validate_config_values(args, table.post_parse_values)
    return args


def _validate_config_values(args: argparse.Namespace, allowed: dict[str, tuple[str, ...]]) -> None:
    dtypes = allowed.get("--kv-cache-dtype", ())
    if dtypes and args.kv_cache_dtype not in dtypes:
        raise _validation_error("CacheConfig", "cache_dtype", f"Invalid kv_cache_dtype: {args.kv_cache_dtype!r}. "
                                f"Valid values are: {list(dtypes)}", args.kv_cache_dtype)
    backend = args.attention_backend
    backends = allowed.get("--attention-backend", ())
    if backend is not None and backend.lower() != "auto" and backend.upper() not in backends:
        raise _validation_error("AttentionConfig", "backend", f"Unknown attention backend: '{backend.upper()}'. "
                                f"Valid options are: {', '.join(backends)}", backend)
    if not 0 < args.gpu_memory_utilization <= 1:
        raise ConfigError("pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig\n"
                          "gpu_memory_utilization\n  Input should be less than or equal to 1"
                          if args.gpu_memory_utilization > 1 else
                          "pydantic_core._pydantic_core.ValidationError: 1 validation error for CacheConfig\n"
                          "gpu_memory_utilization\n  Input should be greater than 0")
    limits = args.limit_mm_per_prompt or {}
    if not isinstance(limits, dict) or not all(isinstance(v, int | dict) for v in limits.values()):
        raise ConfigError("pydantic_core._pydantic_core.ValidationError: 1 validation error for MultiModalConfig\n"
                          f"limit_per_prompt\n  Input should be a valid dictionary [input_value={limits!r}]")


def _mm_limits(args: argparse.Namespace) -> dict[str, int]:
    given = args.limit_mm_per_prompt or {}
    limits = {"image": 999, "video": 999}
    for modality, value in given.items():
        limits[modality] = int(value.get("count", 999)) if isinstance(value, dict) else int(value)
    return limits


def _non_default_args(args: argparse.Namespace) -> dict[str, Any]:
    shown = {}
    for name, value in vars(args).items():
        if name in ("subparser", "version") or value in (None, False) or DEFAULTS.get(name) == value:
            continue
        shown[name] = "***" if name in SENSITIVE else value
    return shown


def _bind(host: str | None, port: int) -> socket.socket:
    """Bind without listening: connections are refused until the server is ready (vLLM's setup_server)."""
    family = socket.AF_INET6 if host and ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host or "", port))
    return sock


def build_engine_settings(args: argparse.Namespace, log: VllmLog) -> EngineSettings:
    """Model files, memory inputs and knobs for the engine start-up (raises ModelFilesError)."""
    behaviour = os.environ.get("STANDIN_BEHAVIOUR", "ok")
    if behaviour not in BEHAVIOURS:
        raise ConfigError(f"ValueError: unknown STANDIN_BEHAVIOUR {behaviour!r}; one of {', '.join(BEHAVIOURS)}")
    config: dict[str, Any] = {}
    try:
        config = locate_model(args.model, args.revision).config
    except ModelFilesError:
        if os.environ.get("STANDIN_REQUIRE_WEIGHTS", "1") != "0":
            raise
    layout = layout_from_config(config) if config else GEMMA4_LIKE_LAYOUT
    limits = _mm_limits(args)
    memory = MemoryInputs(
        total_gib=env_float("STANDIN_GPU_MEMORY_GIB", 24),
        used_by_others_gib=env_float("STANDIN_GPU_USED_GIB", 4.0 if behaviour == "gpu-memory-taken" else 0),
        weights_gib=env_float("STANDIN_MODEL_WEIGHTS_GIB", 17.12),
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_cache_dtype=args.kv_cache_dtype,
        max_num_batched_tokens=args.max_num_batched_tokens,
        enforce_eager=bool(args.enforce_eager),
        images_per_prompt=limits.get("image", 0),
        videos_per_prompt=limits.get("video", 0),
        layout=layout,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
    )
    max_len = args.max_model_len if args.max_model_len is not None else layout.max_position_embeddings
    default_delay = 60.0 if behaviour == "slow-start" else 2.0
    return EngineSettings(
        model=args.model,
        served_names=tuple(args.served_model_name or [args.model]),
        architecture=(config.get("architectures") or ["Gemma4ForConditionalGeneration"])[0],
        max_model_len=max_len,
        config_max_len=layout.max_position_embeddings,
        memory=memory,
        attention_backend=(args.attention_backend.upper() if args.attention_backend
                           and args.attention_backend.lower() != "auto" else None),
        max_head_dim=max(layout.full_head_dim, layout.sliding_head_dim),
        prefix_caching=bool(args.enable_prefix_caching),
        behaviour=behaviour,
        ready_delay=env_float("STANDIN_READY_DELAY", default_delay),
        version=os.environ.get("STANDIN_VLLM_VERSION", VERSION),
    )


def _api_server_traceback(log: VllmLog, keys: list[tuple[str, dict[str, object]]]) -> int:
    """The API server dies before the engine starts: its traceback's last lines, exit 1."""
    log.real(API_SERVER, "traceback")
    log.real(API_SERVER, "frame", path="/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py",
             number=1360, function="create_model_config")
    for key, values in keys:
        log.real(API_SERVER, key, **values)
    return 1


def _banner(log: VllmLog, args: argparse.Namespace, version: str) -> None:
    for key in ("banner_edge", "banner_1", "banner_2", "banner_3", "banner_4", "banner_edge"):
        log.real(API_SERVER, key, version=version, model=args.model)
    log.real(API_SERVER, "non_default_args", args=_non_default_args(args))


def serve(args: argparse.Namespace, log: VllmLog) -> int:
    """Start-up, then serve until SIGTERM/SIGINT. Returns the exit status."""
    version = os.environ.get("STANDIN_VLLM_VERSION", VERSION)
    _banner(log, args, version)
    behaviour = os.environ.get("STANDIN_BEHAVIOUR", "ok")
    if behaviour == "no-gpu":
        return _api_server_traceback(log, [("no_device", {}), ("no_device_2", {})])
    if behaviour == "bad-config":
        return _api_server_traceback(log, [("validation_header", {"config": "ModelConfig"}), (
            "value_error", {"message": "Expecting value: line 1 column 1 (char 0)",
                            "value": "ArgsKwargs((), {'model': ...rocessor_plugin': None})", "type": "ArgsKwargs"}),
            ("pydantic_link", {})])
    try:
        sock = _bind(args.host, args.port)
    except OSError as error:
        log.raw(API_SERVER, f"OSError: [Errno {error.errno}] {error.strerror}")
        return 1
    try:
        if behaviour == "weights-missing":
            raise ModelFilesError(["the weights are not in the cache"])
        settings = build_engine_settings(args, log)
    except ModelFilesError as error:
        if behaviour == "weights-missing" or os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0", "false"):
            # current vLLM, offline, with a repo id it cannot find in the cache (REFERENCE.md §7)
            return _api_server_traceback(log, [("validation_header", {"config": "ModelConfig"}),
                                               ("bad_repo", {"model": args.model}), ("bad_repo_gguf", {}),
                                               ("pydantic_link", {})])
        log.raw(API_SERVER, "Traceback (most recent call last):\n" + "\n".join(error.lines))
        return 1
    except ConfigError as error:
        log.raw(API_SERVER, str(error))
        return 1
    log.real(API_SERVER, "architecture", architecture=settings.architecture)
    if settings.max_model_len != -1:
        log.real(API_SERVER, "max_model_len", max_model_len=settings.max_model_len)
    log.real(API_SERVER, "chunked_prefill", tokens=args.max_num_batched_tokens)
    try:
        ready = start_engine(log, settings)
    except EngineStartFailure:
        return 1
    api_keys = tuple(k for k in (args.api_key or [os.environ.get("VLLM_API_KEY")]) if k)
    state = ServingState(
        limits=ServingLimits(served_names=settings.served_names, max_model_len=ready.max_model_len,
                             mm_limits=_mm_limits(args), behaviour=settings.behaviour),
        model_root=args.model,
        api_keys=api_keys,
        tokens_per_s=env_float("STANDIN_TOKENS_PER_S", 140),
        version=version,
        metrics=Metrics(settings.served_names[0], ready.kv_capacity_tokens),
        log=log,
        slots=threading.Semaphore(args.max_num_seqs),
    )
    server = StandinHTTPServer(state)
    server.socket.close()
    server.socket = sock
    server.server_address = sock.getsockname()[:2]
    host = args.host or "0.0.0.0"
    log.real(API_SERVER, "serving", host=host, port=args.port)
    log.real(API_SERVER, "routes")
    for route, methods in ROUTES:
        log.real(API_SERVER, "route", route=route, methods=methods)
    server.server_activate()
    log.real(API_SERVER, "uvicorn_started", pid=os.getpid())
    log.real(API_SERVER, "uvicorn_waiting")
    log.real(API_SERVER, "uvicorn_complete")

    def stop(_signum: int, _frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever(poll_interval=0.2)
    log.real(API_SERVER, "uvicorn_shutting_down")
    log.real(API_SERVER, "uvicorn_shutdown")
    log.real(API_SERVER, "uvicorn_finished", pid=os.getpid())
    server.server_close()
    return 0


def main(argv: list[str] | None = None, entry: str = "vllm") -> int:
    """Command-line entry: `vllm ...` (entry='vllm') or `python -m vllm.entrypoints.openai.api_server`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse_command_line(argv, entry)
    except ConfigError as error:
        # the config is built in the API server process: its lines carry the process prefix (MiniCPM#51)
        VllmLog().raw(API_SERVER, f"Traceback (most recent call last):\n{error}")
        return 1
    except ValueError as error:
        print("Traceback (most recent call last):", file=sys.stderr)
        print(f"ValueError: {error}", file=sys.stderr)
        return 1
    if isinstance(args.limit_mm_per_prompt, str):
        args.limit_mm_per_prompt = json.loads(args.limit_mm_per_prompt)

    def interrupt_start_up(signum: int, _frame: Any) -> None:
        # vLLM also installs this before the engine starts; as PID 1 in a container, a signal without
        # a handler would be ignored and `docker stop` would wait for its timeout.
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, interrupt_start_up)
    signal.signal(signal.SIGINT, interrupt_start_up)
    return serve(args, VllmLog())


if __name__ == "__main__":
    sys.exit(main())
