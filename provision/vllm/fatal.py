"""vLLM's fatal start-up lines: the cause, and the line that says why, to quote it.

A start that cannot succeed is recognised from the container's log instead of waiting out the
readiness timeout. Read against real logs pasted in public issues (tests/unit/fixtures/vllm_logs/,
SOURCES.md there): the line that names the cause is often not the line a first pattern finds.
- vLLM prints "EngineCore failed to start" before the traceback whose last exception says why;
- pydantic prints a `ValidationError` header, the reason is the next line (`Value error, ...`);
- docker prints `Error response from daemon: ... stderr: ...`, the NVIDIA hook's reason follows
  (`nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.9, ...`);
- terminals and issue posts wrap long lines, so a reason may span two lines.
So every line is cleaned of its prefixes, causes are ranked (a named cause beats a header, a
header beats the generic engine failure), and a failure that matches no cause quotes the last real
exception line of the traceback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KV_TOO_SMALL = "the context does not fit in the KV cache: lower max_model_len or raise gpu_memory_utilization"


@dataclass(frozen=True)
class Cause:
    """One failure class: its id, the pattern of the line naming it, and what the user should do."""

    id: str
    pattern: re.Pattern[str]
    meaning: str


def _cause(cause_id: str, pattern: str, meaning: str) -> Cause:
    return Cause(cause_id, re.compile(pattern, re.IGNORECASE), meaning)


# the order is the ranking: the first cause with a matching line wins
CAUSES: tuple[Cause, ...] = (
    _cause("kv_cache_too_small", r"KV cache is needed, which is larger than the available KV cache memory"
           r"|larger than the maximum number of tokens that can be stored in KV cache", KV_TOO_SMALL),
    _cause("gpu_memory_taken", r"Free memory on device .*is less than desired GPU memory utilization",
           "another process holds GPU memory: lower gpu_memory_utilization or free the GPU"),
    _cause("no_cache_blocks", r"No available memory for the cache blocks|# GPU blocks: 0,",
           "no GPU memory left for the KV cache: raise gpu_memory_utilization or use a smaller model"),
    _cause("cuda_oom", r"CUDA out of memory|CUDA (?:driver )?error: out of memory",
           "out of GPU memory: lower gpu_memory_utilization or max_model_len, or use a smaller model"),
    _cause("no_kernel_image", r"no kernel image is available for execution on the device",
           "the image has no kernels for this GPU (wrong CUDA architecture): use an image built for it"),
    # CUDA's own initialisation fails though NVML (nvidia-smi) works: the libcuda in use is not the host
    # driver's. vLLM images from 0.15 put CUDA's forward-compatibility libraries on the library path, and
    # under CDI on driver 580 they gave 803 (vllm#33116, #34821; gpustack#4678, whose log line is in the
    # corpus); GeForce cards cannot use forward compatibility at all: 804 (vllm#5510).
    _cause("cuda_driver_mismatch", r"Error 803: system has unsupported display driver / cuda driver combination",
           "CUDA in the container does not match the host driver (the image's CUDA compatibility libraries "
           "are on its library path): leave VLLM_ENABLE_CUDA_COMPATIBILITY unset, or reboot after a driver update"),
    _cause("cuda_forward_compat", r"Error 804: forward compatibility was attempted on non supported HW",
           "the image's CUDA needs a newer driver and this GPU cannot use CUDA forward compatibility: "
           "upgrade the host driver or use an image built for its CUDA version"),
    _cause("no_gpu_in_container", r"Failed to infer device type",
           "the container sees no GPU: check `--gpus all` and the NVIDIA container runtime"),
    _cause("docker_no_gpu_driver", r"could not select device driver \".*\" with capabilities: \[\[gpu\]\]",
           "docker has no GPU runtime: install and configure the NVIDIA container toolkit"),
    _cause("driver_too_old", r"unsatisfied condition: cuda\s*>=|CUDA driver version is insufficient"
           r"|NVIDIA driver on your system is too old",
           "the image needs a newer NVIDIA driver: upgrade the driver or use an image for an older CUDA"),
    _cause("weights_missing", r"Invalid repository ID or local directory specified"
           r"|Cannot find an appropriate cached snapshot|couldn't connect to .* to load the files"
           r"|Cannot find any model weights",
           "the weights are not in the mounted Hugging Face cache (offline): download them first"),
    _cause("unknown_flag", r"error: unrecognized arguments",
           "vLLM rejected its command line: an unknown flag"),
    _cause("invalid_value", r"^Value error, |(?:vllm|vllm serve|api_server\.py): error: argument ",
           "vLLM rejected a configuration value"),
    _cause("invalid_value", r"validation error for \w+", "vLLM rejected a configuration value"),
    # not the unit's `ExecStartPre=-docker rm -f` before a first start: docker prints "Error response from
    # daemon: No such container: NAME" for a container that is not there (seen on docker 20.10.24 and 26)
    _cause("docker_failed", r"Error response from daemon(?!: No such container)",
           "docker could not start the container"),
)
GENERIC = re.compile(r"EngineCore failed to start|Engine core initialization failed|EngineCore encountered an issue")
EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit)\b(?::|$)")
HEADERS = re.compile(r"validation error for \w+|Error response from daemon.*stderr: .*$")
PREFIXES = tuple(re.compile(pattern) for pattern in (
    r"^\x1b\[[0-9;]*m",                                                  # a colour code
    r"^[^\s|]{2,}\s+\|\s",                                               # docker compose `vllm-1  | `
    r"^> ",                                                              # quoted in a post
    r"^\S{3} \d{1,2} \d\d:\d\d:\d\d \S+ [^\s:]+: ",                      # syslog/journal `Aug 19 ... vllm[8707]: `
    r"^\[\d{4}-\d\d-\d\dT[\d:.]+Z\] ",                                   # CI timestamps `[2026-02-24T20:21:58Z] `
    r"^\d{4}-\d\d-\d\dT[\d:.]+Z ",                                       # `docker logs --timestamps`
    r"^[A-Z][a-z]{2} \d\d\s+\d\d:\d\d:\d\d\.\d+",                          # Modal's `Jun 04  07:43:14.027`
    r"^\d\d:\d\d:\d\d \[[A-Z]+\] (?:\[[^\]]*\] )*",                      # a wrapper's own log prefix
    r"^\((?:APIServer|EngineCore\w*|VllmWorker\w*|Worker\w*|RayWorkerWrapper)[^)]*\) ?",  # vLLM's process
    r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)(?: \d\d-\d\d \d\d:\d\d:\d\d)? \[?[\w./-]+\.py:\d+\] ?",
    r"^\[[\w./-]+\.py:\d+\] ?",                                          # a bare `[core.py:632] `
    r"^\[rank\d+\]: ",
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| [A-Z]+ \| \w+ \| ",
))
QUOTE_LIMIT = 400


@dataclass(frozen=True)
class FatalLine:
    """The log line that explains a failed start; `specific` when it names a known cause."""

    line: str
    meaning: str
    specific: bool
    cause: str = "unknown"

    def describe(self) -> str:
        return f"{self.meaning}: {self.line!r}" if self.meaning else repr(self.line)


def strip_prefixes(line: str) -> str:
    """The message of a log line: every prefix vLLM, docker, journald or a CI runner put before it."""
    text = line.rstrip()
    while True:
        for prefix in PREFIXES:
            shorter = prefix.sub("", text, count=1)
            if shorter != text:
                text = shorter
                break
        else:
            return text.strip()


def clean(line: str) -> str:
    """A log line without its prefixes, cut to a quotable length."""
    text = strip_prefixes(line)
    return text if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT] + " ..."


def _reason_after(lines: list[str], index: int) -> str:
    """A header's reason: the next line (pydantic's `Value error, ...`, docker's hook error); a bare
    pydantic field name is joined with its message (`field: Input should be ...`)."""
    following = [text for text in lines[index + 1:index + 4] if text and not text.startswith("For further")]
    if not following:
        return ""
    if " " not in following[0] and len(following) > 1:
        return f"{following[0]}: {following[1]}"
    return following[0]


def _find(cause: Cause, lines: list[str]) -> str | None:
    """The quote for `cause`: its line (an exception line before others), or two lines a terminal
    wrapped; a header's quote is the reason that follows it."""
    found: list[str] = []
    for index, text in enumerate(lines):
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if cause.pattern.search(text):
            quote = _reason_after(lines, index) if HEADERS.search(text) else text
            quote = quote or text
        elif following and cause.pattern.search(text + following) and not cause.pattern.search(following):
            quote = text + following
        else:
            continue
        if EXCEPTION.match(quote):
            return quote
        found.append(quote)
    return found[0] if found else None


def find_fatal(lines: list[str], exited: bool = False) -> FatalLine | None:
    """The best-ranked cause in `lines` and its quote, or None.

    `exited`: the process is known to have died, so a traceback that names no known cause is a
    failure too: its last real exception line is quoted (a healthy start may log exceptions that
    are only warnings, so without `exited` only a known cause or vLLM's own failure line counts)."""
    text = [strip_prefixes(line) for line in lines]
    for cause in CAUSES:
        quote = _find(cause, text)
        if quote is not None:
            return FatalLine(_cut(quote), cause.meaning, specific=True, cause=cause.id)
    generics = [line for line in text if GENERIC.search(line)]
    generic = next((line for line in generics if EXCEPTION.match(line)), generics[0] if generics else None)
    if generic is None and not exited:
        return None
    exceptions = [line for line in text if EXCEPTION.match(line) and not GENERIC.search(line)]
    if exceptions:
        return FatalLine(_cut(exceptions[-1]), "no known cause; vLLM's last error", specific=False)
    if generic is not None:
        return FatalLine(_cut(generic), "vLLM's engine failed to start", specific=False)
    return None


def _cut(text: str) -> str:
    return text if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT] + " ..."
