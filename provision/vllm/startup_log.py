"""What vLLM found at start-up, read from its log: the planner's figures, measured.

The wordings differ between versions (real lines in tests/unit/fixtures/vllm_logs/, SOURCES.md):
  Model loading took 15.26 GiB memory and 23.107530 seconds        (v0.1x-v0.2x; "GiB and" in 0.10)
  Model loading took 3.3414 GB and 0.742108 seconds                 (V0, early 2025)
  Loading model weights took 14.9888 GB                             (V0, 2024)
  Available KV cache memory: 5.98 GiB                               (V1)
  ... total_gpu_memory=23.58GiB ... non_torch_memory=0.35GiB kv_cache_size=3.81GiB
      gpu_memory_utilization=0.90                                   (V0 "Memory profiling results", 2024)
  the current vLLM instance can use total_gpu_memory (79.32GiB) x gpu_memory_utilization (0.80) = 63.45GiB
  model weights take 15.53GiB; non_torch_memory takes 0.09GiB; PyTorch activation peak memory takes
      1.72GiB; the rest of the memory reserved for KV Cache is 46.11GiB.  (V0 workers, early 2025)
  model weights take   14.96GiB / PyTorch activation peak memory   1.26GiB /
      available_kv_cache_memory    53.29GiB                         (one figure a line, late 2024)
  Free memory on device (43.91/44.4 GiB) on startup. Desired GPU memory utilization is (0.9, 39.96 GiB).
      Actual usage is 13.72 GiB for weight, 1.83 GiB for peak activation, 0.04 GiB for non-torch memory,
      and 0.0 GiB for CUDAGraph memory. ...                         (V1 DEBUG)
  Initial free memory 93.88 GiB, reserved 49.0 GiB memory for KV Cache as specified by
      kv_cache_memory_bytes config and skipped memory profiling.    (--kv-cache-memory-bytes, V1)
  GPU KV cache size: 567,978 tokens
  Maximum concurrency for 131,072 tokens per request: 4.33x         (its own line since V1; once
                                                                     on the size line)
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

NUMBER = r"([0-9][0-9.,]*)"
DESIRED = r"Desired GPU memory utilization is \("  # V1's DEBUG line (gpu_worker.py), not the refusal
PATTERNS: dict[str, tuple[re.Pattern[str], ...]] = {
    "weights_gib": (re.compile(rf"Model loading took {NUMBER} ?Gi?B"),
                    re.compile(rf"Loading model weights took {NUMBER} ?Gi?B"),
                    re.compile(rf"model weights take\s+{NUMBER} ?GiB"),
                    re.compile(rf"Actual usage is {NUMBER} ?GiB for weight")),
    "activation_peak_gib": (re.compile(rf"PyTorch activation peak memory(?: takes)?\s+{NUMBER} ?GiB"),
                            re.compile(rf"{NUMBER} ?GiB for peak activation")),
    "non_torch_gib": (re.compile(rf"non_torch_memory(?: takes\s+|\s+|=){NUMBER} ?GiB"),
                      re.compile(rf"{NUMBER} ?GiB for non-torch memory")),
    "cudagraph_gib": (re.compile(rf"{NUMBER} ?GiB for CUDAGraph memory"),),
    "gpu_total_gib": (re.compile(rf"total_gpu_memory(?: \(|\s+|=){NUMBER} ?GiB"),
                      re.compile(rf"Free memory on device \([0-9.]+/{NUMBER} ?GiB\) on startup\. {DESIRED}")),
    "gpu_memory_utilization": (re.compile(rf"gpu_memory_utilization(?: \(|\s+|=){NUMBER}"),
                               re.compile(rf"{DESIRED}{NUMBER}, ")),
    "usable_gib": (re.compile(rf"the current vLLM instance can use(?: total_gpu_memory .*? =)?\s+{NUMBER} ?GiB"),
                   re.compile(rf"{DESIRED}[0-9.]+, {NUMBER} ?GiB\)")),
    "initial_free_gib": (re.compile(rf"Initial free memory {NUMBER} ?GiB"),
                         re.compile(rf"Free memory on device \({NUMBER}/[0-9.]+ ?GiB\) on startup\. {DESIRED}")),
    "kv_available_gib": (re.compile(rf"Available KV cache memory: {NUMBER} ?GiB"),
                         re.compile(rf"kv_cache_size={NUMBER} ?GiB"),
                         re.compile(rf"the rest of the memory reserved for KV Cache is {NUMBER} ?GiB"),
                         re.compile(rf"available_kv_cache_memory\s+{NUMBER} ?GiB"),
                         re.compile(rf"Current kv cache memory in use is {NUMBER} ?GiB")),
    # --kv-cache-memory-bytes: vLLM reserves what it was told and skips the profile (gpu_worker.py)
    "kv_reserved_gib": (re.compile(rf"reserved {NUMBER} ?GiB memory for KV Cache as specified by "
                                   "kv_cache_memory_bytes"),),
    "kv_cache_tokens": (re.compile(rf"GPU KV cache size: {NUMBER} tokens"),),
    "concurrency_tokens": (re.compile(rf"Maximum concurrency for {NUMBER} tokens per request"),),
    "max_concurrency": (re.compile(rf"Maximum concurrency for [0-9,]+ tokens per request: {NUMBER}x"),),
}
INTEGERS = ("kv_cache_tokens", "concurrency_tokens")
# what a journal filter must keep (grep -E): every line any pattern above reads
JOURNAL_FILTER = ("Model loading took|Loading model weights took|Available KV cache memory|kv_cache_size="
                  "|reserved for KV Cache|for KV Cache as specified|kv cache memory in use|GPU KV cache size"
                  "|Maximum concurrency for|model weights take|activation peak memory|non_torch_memory"
                  "|total_gpu_memory|gpu_memory_utilization|instance can use|available_kv_cache_memory"
                  "|Initial free memory|Desired GPU memory utilization is")


@dataclass(frozen=True)
class StartupMemory:
    weights_gib: float | None = None
    kv_available_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_tokens: int | None = None
    kv_reserved_gib: float | None = None
    activation_peak_gib: float | None = None
    non_torch_gib: float | None = None
    cudagraph_gib: float | None = None
    gpu_total_gib: float | None = None
    gpu_memory_utilization: float | None = None
    usable_gib: float | None = None
    initial_free_gib: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @property
    def kv_gib(self) -> float | None:
        """The KV cache memory vLLM has: profiled, or the fixed reservation of --kv-cache-memory-bytes."""
        return self.kv_available_gib if self.kv_available_gib is not None else self.kv_reserved_gib

    @property
    def kv_pinned(self) -> bool:
        """The KV size was given (--kv-cache-memory-bytes): vLLM skipped the profile the plan predicts."""
        return self.kv_available_gib is None and self.kv_reserved_gib is not None


def _last_match(key: str, log: str) -> tuple[int, str] | None:
    found = [(match.start(), match.group(1)) for pattern in PATTERNS[key] for match in pattern.finditer(log)]
    return max(found) if found else None


def parse_startup_memory(log: str) -> StartupMemory:
    """The last start's figures (a log may hold several starts: the last match of each wins)."""
    figures: dict[str, Any] = {}
    for key in PATTERNS:
        match = _last_match(key, log)
        if match is not None:
            text = match[1].replace(",", "").rstrip(".")
            figures[key] = int(text) if key in INTEGERS else float(text)
    return StartupMemory(**figures)


WARN_APART = 0.15


def planned_vs_actual(planned: dict[str, Any], actual: StartupMemory) -> str:
    """One line for the run's output: `KV cache planned 3.06 GiB, vLLM found 3.06 GiB; ...`."""
    parts = []
    if actual.kv_gib is not None and planned.get("kv_available_gib") is not None:
        found = "reserved" if actual.kv_pinned else "found"
        parts.append(f"KV cache planned {planned['kv_available_gib']:.2f} GiB, vLLM {found} {actual.kv_gib:.2f} GiB"
                     + (" (--kv-cache-memory-bytes)" if actual.kv_pinned else ""))
    if actual.max_concurrency is not None and planned.get("full_sequences") is not None:
        parts.append(f"full-length sequences planned {planned['full_sequences']:.2f}, "
                     f"vLLM {actual.max_concurrency:.2f}")
    parts.extend(f"{what} {value:.2f} GiB" for what, value in (
        ("weights", actual.weights_gib), ("activation peak", actual.activation_peak_gib),
        ("non-torch", actual.non_torch_gib)) if value is not None)
    return "; ".join(parts) or "vLLM's start-up log gave no memory figures"


def shortfalls(planned: dict[str, Any], actual: StartupMemory) -> list[str]:
    """Warnings where vLLM found more than 15% less than the plan: the plan was off before users
    hit the limit (a context that fits on paper may not fit the real cache). None where the KV size
    was pinned: vLLM then follows the pin, not the plan, and the plan was not off."""
    if actual.kv_pinned:
        return []
    pairs = (("KV cache memory", planned.get("kv_available_gib"), actual.kv_gib, " GiB"),
             ("full-length sequences", planned.get("full_sequences"), actual.max_concurrency, ""))
    warnings = []
    for what, plan, found, unit in pairs:
        if plan and found is not None and found < plan * (1 - WARN_APART):
            warnings.append(f"vLLM found {found:.2f}{unit} of {what}, {100 * (1 - found / plan):.0f}% below "
                            f"the planned {plan:.2f}{unit}: the memory plan was off")
    return warnings
