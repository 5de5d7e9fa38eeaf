"""What vLLM found at start-up, read from its log: the planner's figures, measured.

Lines (vLLM 0.33, see tests/standins/vllm/startup.py for where each comes from):
  Model loading took 17.12 GiB memory and 41.2 seconds
  Available KV cache memory: 3.06 GiB
  GPU KV cache size: 188,397 tokens, Maximum concurrency for 131,072 tokens per request: 1.44x
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

PATTERNS = {
    "weights_gib": re.compile(r"Model loading took ([0-9.]+) GiB"),
    "kv_available_gib": re.compile(r"Available KV cache memory: ([0-9.]+) GiB"),
    "kv_cache_tokens": re.compile(r"GPU KV cache size: ([0-9,]+) tokens"),
    "max_concurrency": re.compile(r"Maximum concurrency for [0-9,]+ tokens per request: ([0-9.]+)x"),
}


@dataclass(frozen=True)
class StartupMemory:
    weights_gib: float | None = None
    kv_available_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


def parse_startup_memory(log: str) -> StartupMemory:
    """The last start's figures (a log may hold several starts: the last match of each wins)."""
    found: dict[str, Any] = {}
    for key, pattern in PATTERNS.items():
        matches = pattern.findall(log)
        if matches:
            text = matches[-1].replace(",", "")
            found[key] = int(text) if key == "kv_cache_tokens" else float(text)
    return StartupMemory(**found)


def planned_vs_actual(planned: dict[str, Any], actual: StartupMemory) -> str:
    """One line for the run's output: `KV cache planned 3.06 GiB, vLLM found 3.06 GiB; ...`."""
    parts = []
    if actual.kv_available_gib is not None and planned.get("kv_available_gib") is not None:
        parts.append(f"KV cache planned {planned['kv_available_gib']:.2f} GiB, "
                     f"vLLM found {actual.kv_available_gib:.2f} GiB")
    if actual.max_concurrency is not None and planned.get("full_sequences") is not None:
        parts.append(f"full-length sequences planned {planned['full_sequences']:.2f}, "
                     f"vLLM {actual.max_concurrency:.2f}")
    if actual.weights_gib is not None:
        parts.append(f"weights {actual.weights_gib:.2f} GiB")
    return "; ".join(parts) or "vLLM's start-up log gave no memory figures"
