"""vLLM's fatal start-up lines (REFERENCE.md §2, §5): find the one that says why, to quote it.

A start that cannot succeed is recognised from the container's log instead of waiting out the
readiness timeout. Causes are ranked: a line naming the cause (out of memory, KV cache too small, no
kernel image for this GPU, weights missing, a rejected flag) beats the generic "EngineCore failed to
start" that vLLM prints first, so the quote tells the user what to change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# (pattern, what it means); the order is the ranking
SPECIFIC_CAUSES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), meaning) for pattern, meaning in (
        (r"KV cache is needed, which is larger than the available KV cache memory",
         "the context does not fit in the KV cache: lower max_model_len or raise gpu_memory_utilization"),
        (r"larger than the maximum number of tokens that can be stored in KV cache",
         "the context does not fit in the KV cache: lower max_model_len or raise gpu_memory_utilization"),
        (r"No available memory for the cache blocks", "no GPU memory left for the KV cache"),
        (r"Free memory on device .* is less than desired GPU memory utilization",
         "another process holds GPU memory: lower gpu_memory_utilization or free the GPU"),
        (r"CUDA out of memory", "out of GPU memory"),
        (r"no kernel image is available for execution on the device",
         "the image has no kernels for this GPU (wrong CUDA architecture)"),
        (r"couldn't connect to .* to load the files|Cannot find an appropriate cached snapshot",
         "the weights are not in the mounted cache"),
        (r"Cannot find any model weights", "the weights are not in the mounted cache"),
        (r"(?:vllm serve|vllm|api_server\.py): error: ", "vLLM rejected its command line"),
        (r"Value error, |ValidationError", "vLLM rejected a configuration value"),
        (r"Error response from daemon", "docker could not start the container"),
    )
)
GENERIC_CAUSES: tuple[re.Pattern[str], ...] = (
    re.compile(r"EngineCore failed to start"),
    re.compile(r"Engine core initialization failed"),
)
VLLM_PREFIX = re.compile(r"^\((?:APIServer|EngineCore)[^)]*\)\s+(?:[A-Z]+\s+\d\d-\d\d \d\d:\d\d:\d\d\s+\[[^\]]*\]\s+)?")
QUOTE_LIMIT = 400


@dataclass(frozen=True)
class FatalLine:
    """The log line that explains a failed start, and whether it names a cause."""

    line: str
    meaning: str
    specific: bool

    def describe(self) -> str:
        return f"{self.meaning}: {self.line!r}" if self.meaning else repr(self.line)


def clean(line: str) -> str:
    """A log line without vLLM's process/level/time prefix, cut to a quotable length."""
    text = VLLM_PREFIX.sub("", line.strip())
    return text if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT] + " ..."


def find_fatal(lines: list[str]) -> FatalLine | None:
    """The best-ranked fatal line in `lines` (the first occurrence of the best cause), or None."""
    for pattern, meaning in SPECIFIC_CAUSES:
        for line in lines:
            if pattern.search(line):
                return FatalLine(clean(line), meaning, specific=True)
    for line in lines:
        if any(pattern.search(line) for pattern in GENERIC_CAUSES):
            return FatalLine(clean(line), "vLLM's engine failed to start", specific=False)
    return None
