"""The stand-in's Prometheus metrics, with vLLM's names, help texts and labels.

Names and buckets from vllm/v1/metrics/loggers.py and buckets.py (labels model_name, engine):
counters are exported with the `_total` suffix, the time-to-first-token histogram with
`_bucket`/`_sum`/`_count`. Values change as requests are served.
"""

from __future__ import annotations

import threading

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)


class Metrics:
    """Thread-safe counters and gauges for one served model."""

    def __init__(self, model_name: str, kv_capacity_tokens: int) -> None:
        self.model_name = model_name
        self.kv_capacity_tokens = max(kv_capacity_tokens, 1)
        self.lock = threading.Lock()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.running = 0
        self.waiting = 0
        self.tokens_in_cache = 0
        self.success: dict[str, int] = {"stop": 0, "length": 0, "abort": 0, "error": 0}
        self.ttft_counts = [0] * len(TTFT_BUCKETS)
        self.ttft_sum = 0.0
        self.ttft_count = 0

    def request_waiting(self, delta: int) -> None:
        with self.lock:
            self.waiting += delta

    def request_started(self, prompt_tokens: int) -> None:
        with self.lock:
            self.running += 1
            self.prompt_tokens += prompt_tokens
            self.tokens_in_cache += prompt_tokens

    def first_token(self, seconds: float) -> None:
        with self.lock:
            self.ttft_sum += seconds
            self.ttft_count += 1
            for index, bound in enumerate(TTFT_BUCKETS):
                if seconds <= bound:
                    self.ttft_counts[index] += 1

    def token_generated(self) -> None:
        with self.lock:
            self.generation_tokens += 1
            self.tokens_in_cache += 1

    def request_finished(self, reason: str, tokens_held: int) -> None:
        with self.lock:
            self.running -= 1
            self.tokens_in_cache -= tokens_held
            self.success[reason] = self.success.get(reason, 0) + 1

    def render(self) -> str:
        """Prometheus text exposition format 0.0.4."""
        labels = f'engine="0",model_name="{self.model_name}"'
        with self.lock:
            usage = min(self.tokens_in_cache / self.kv_capacity_tokens, 1.0)
            lines = [
                "# HELP vllm:num_requests_running Number of requests in model execution batches.",
                "# TYPE vllm:num_requests_running gauge",
                f"vllm:num_requests_running{{{labels}}} {float(self.running)}",
                "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
                "# TYPE vllm:num_requests_waiting gauge",
                f"vllm:num_requests_waiting{{{labels}}} {float(self.waiting)}",
                "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
                "# TYPE vllm:kv_cache_usage_perc gauge",
                f"vllm:kv_cache_usage_perc{{{labels}}} {usage}",
                "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
                "# TYPE vllm:prompt_tokens_total counter",
                f"vllm:prompt_tokens_total{{{labels}}} {float(self.prompt_tokens)}",
                "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
                "# TYPE vllm:generation_tokens_total counter",
                f"vllm:generation_tokens_total{{{labels}}} {float(self.generation_tokens)}",
                "# HELP vllm:request_success_total Count of successfully processed requests.",
                "# TYPE vllm:request_success_total counter",
            ]
            lines += [f'vllm:request_success_total{{{labels},finished_reason="{reason}"}} {float(count)}'
                      for reason, count in self.success.items()]
            lines += [
                "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
                "# TYPE vllm:time_to_first_token_seconds histogram",
            ]
            lines += [f'vllm:time_to_first_token_seconds_bucket{{{labels},le="{bound}"}} {float(count)}'
                      for bound, count in zip(TTFT_BUCKETS, self.ttft_counts, strict=True)]
            lines += [
                f'vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} {float(self.ttft_count)}',
                f"vllm:time_to_first_token_seconds_count{{{labels}}} {float(self.ttft_count)}",
                f"vllm:time_to_first_token_seconds_sum{{{labels}}} {self.ttft_sum}",
            ]
        return "\n".join(lines) + "\n"
