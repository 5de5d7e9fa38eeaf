"""`provision bench --workload office`: the office's real workload, measured and kept as history.

The promise (REFERENCE.md, the user's workload): 2-3 concurrent users per machine, long documents up
to the profile's context, an image per request, more than 100 tokens/s per stream. So N users (3)
each send, one after another, a document of every size in a sweep up to the served context
(`max_model_len` from the server's own /v1/models) with the test image, streamed with usage. Per
request: time to first token and decode tokens/s = completion_tokens / (t_last - t_first) (the
seed's method, bench.py); per user: their mean and slowest stream; over all: TTFT p50/p95 and the
errors. The gate is the promise: every stream faster than the gate (a bimodal release's slow mode
fails it) and the largest document served (the context fits), no errors.

The result is kept on the host (<state_dir>/bench/<release>.json, written to a temporary file and
renamed, so a cut connection leaves the old one whole) with the release it measured, and compared
with the latest kept result of another release: a mean or a slowest stream lower by more than the
noise band flags the upgrade as a regression.
"""

from __future__ import annotations

import base64
import json
import math
import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from provision.shell import quote
from provision.vllm.bench import STREAMING
from provision.vllm.endpoint import Endpoint
from provision.vllm.png import red_gradient_png

if TYPE_CHECKING:  # `provision up` builds its parser (these defaults) before it may load the service layer
    from provision.vllm.release import Layout

CLIENT = STREAMING + r'''
import base64
base, model = sys.argv[1], sys.argv[2]
users, max_tokens = int(sys.argv[3]), int(sys.argv[4])
fractions = [float(f) for f in sys.argv[5].split(",")]
reserve = int(sys.argv[6])
image = "data:image/png;base64," + os.environ["BENCH_IMAGE"]
with urllib.request.urlopen(urllib.request.Request(base + "/v1/models", headers=headers), timeout=30) as reply:
    context = int(json.load(reply)["data"][0].get("max_model_len") or 0)
print(json.dumps({"context": context}), flush=True)
room = max(context - max_tokens - reserve, 16)
sizes = [max(16, int(room * f)) for f in fractions]
def one(user, size):
    words = ("report " * size).rstrip()
    body = {"model": model, "user": "office-%d" % user, "max_tokens": max_tokens, "ignore_eos": True,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Summarise: " + words},
                                                      {"type": "image_url", "image_url": {"url": image}}]}]}
    record = {"user": user, "size": size, "start": time.monotonic(), "first": None, "last": None}
    try:
        usage = stream(base + "/v1/chat/completions", body, record, 3600)
        record["completion_tokens"] = usage.get("completion_tokens")
        record["prompt_tokens"] = usage.get("prompt_tokens")
    except Exception as error:
        record["error"] = (type(error).__name__ + ": " + str(error))[:300]
    say(record)
def user_loop(user):
    for size in sizes:
        one(user, size)
threads = [threading.Thread(target=user_loop, args=(user,)) for user in range(users)]
[t.start() for t in threads]; [t.join() for t in threads]
'''


@dataclass(frozen=True)
class OfficeWorkload:
    """The office workload and its gate (the reference promise by default)."""

    users: int = 3
    max_tokens: int = 1000
    # document sizes as fractions of the room the context leaves (context - answer - image and template)
    sweep: tuple[float, ...] = (0.05, 0.25, 0.5, 1.0)
    reserve_tokens: int = 1024  # the image's tokens and the chat template's, kept free of the document
    gate_tokens_per_s: float = 100.0
    noise_band_percent: float = 10.0


@dataclass(frozen=True)
class Request:
    user: int
    prompt_words: int
    ttft_s: float | None = None
    decode_tokens_per_s: float | None = None
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    error: str | None = None


def office_script(endpoint: Endpoint, layout: Layout, workload: OfficeWorkload) -> str:
    """The bash script run on the host: the current release id and the kept results, then the client."""
    args = " ".join(quote(a) for a in (endpoint.url(""), endpoint.served_name, workload.users, workload.max_tokens,
                                       ",".join(str(f) for f in workload.sweep), workload.reserve_tokens))
    image = base64.b64encode(red_gradient_png()).decode()
    return (f"{endpoint.auth_prelude()}\n"
            f"printf '@@record %s\\n' \"$(tr -d '\\n' < {quote(layout.record_path)} 2>/dev/null)\"\n"
            f"for kept in {quote(layout.bench_dir)}/*.json; do [ -f \"$kept\" ] && "
            f"printf '@@kept %s\\n' \"$(tr -d '\\n' < \"$kept\")\"; done\n"
            f"export BENCH_IMAGE={quote(image)} BENCH_KEY=\"$api_key\"\n"
            f"python3 -c {quote(CLIENT)} {args}\n")


def keep_script(layout: Layout, release: str, result: dict[str, Any]) -> str:
    """Write the result as <bench dir>/<release>.json atomically (a temporary file, then rename)."""
    if not release or "/" in release or release.startswith("."):
        raise ValueError(f"cannot keep a bench result for release {release!r}")
    final = posixpath.join(layout.bench_dir, f"{release}.json")
    return (f"install -d -m 0755 {quote(layout.bench_dir)}\n"
            f"printf '%s\\n' {quote(json.dumps(result))} > {quote(final + '.tmp')}\n"
            f"mv -f {quote(final + '.tmp')} {quote(final)}\n")


def parse_output(output: str) -> tuple[str, int | None, list[dict[str, Any]], list[Request]]:
    """(release id, served context, kept results, requests) from the script's output."""
    release, context, kept, requests = "", None, [], []
    for line in output.splitlines():
        if line.startswith("@@record "):
            release = release_of(line.split(" ", 1)[1])
        elif line.startswith("@@kept "):
            try:
                kept.append(json.loads(line.split(" ", 1)[1]))
            except ValueError:
                continue  # a damaged kept file is not history
        elif line.startswith("{"):
            record = json.loads(line)
            if "context" in record:
                context = record["context"]
            else:
                requests.append(request_of(record))
    return release, context, kept, requests


def release_of(record_text: str) -> str:
    """The current release's id in release.json's text ('' when none or unreadable)."""
    try:
        return str((json.loads(record_text).get("current") or {}).get("id") or "")
    except (ValueError, AttributeError):
        return ""


def request_of(record: dict[str, Any]) -> Request:
    """One request's figures from its stream timings; no tokens or no timing is an error."""
    user, words = int(record["user"]), int(record["size"])
    if record.get("error"):
        return Request(user, words, error=record["error"])
    first, last, tokens = record.get("first"), record.get("last"), record.get("completion_tokens")
    if first is None or last is None or not tokens or last <= first:
        return Request(user, words, error="no streamed tokens or usage")
    return Request(user, words, first - record["start"], tokens / (last - first), tokens, record.get("prompt_tokens"))


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile (p95 of 12 values is the 12th, never an interpolation below it)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def summarize(requests: list[Request], workload: OfficeWorkload, context: int | None) -> dict[str, Any]:
    """Per-user figures, TTFT percentiles, errors and the gate's verdict."""
    good = [r for r in requests if r.error is None]
    per_user = {}
    for user in sorted({r.user for r in requests}):
        rates = [r.decode_tokens_per_s for r in good if r.user == user and r.decode_tokens_per_s]
        per_user[str(user)] = {"mean_tokens_per_s": round(sum(rates) / len(rates), 2) if rates else None,
                               "min_tokens_per_s": round(min(rates), 2) if rates else None,
                               "requests": len(rates), "errors": sum(1 for r in requests if r.user == user and r.error)}
    rates = [r.decode_tokens_per_s for r in good if r.decode_tokens_per_s]
    ttfts = [r.ttft_s for r in good if r.ttft_s is not None]
    reasons = []
    if errors := [r for r in requests if r.error]:
        reasons.append(f"{len(errors)} request(s) failed: {errors[0].error}")
    if rates and min(rates) <= workload.gate_tokens_per_s:
        reasons.append(f"slowest stream {min(rates):.1f} tok/s is not above {workload.gate_tokens_per_s:g} tok/s "
                       f"at {workload.users} users")
    largest = max((r.prompt_words for r in requests), default=0)
    if not any(r.prompt_words == largest for r in good):
        reasons.append(f"the largest document ({largest} words of a {context}-token context) was not served")
    if not rates:
        reasons.append("no request streamed tokens")
    return {"users": workload.users, "context": context, "per_user": per_user,
            "mean_tokens_per_s": round(sum(rates) / len(rates), 2) if rates else None,
            "min_tokens_per_s": round(min(rates), 2) if rates else None,
            "ttft_p50_s": round(percentile(ttfts, 0.5), 3) if ttfts else None,
            "ttft_p95_s": round(percentile(ttfts, 0.95), 3) if ttfts else None,
            "errors": len(errors), "largest_prompt_tokens": max((r.prompt_tokens or 0 for r in good), default=0),
            "gate_tokens_per_s": workload.gate_tokens_per_s, "passed": not reasons, "reasons": reasons}


def previous_result(kept: list[dict[str, Any]], release: str) -> dict[str, Any] | None:
    """The latest kept result of another release (the one this release replaced, as far as kept)."""
    others = [entry for entry in kept if entry.get("release") != release and entry.get("measured_at")]
    return max(others, key=lambda entry: entry["measured_at"], default=None)


def regression(result: dict[str, Any], previous: dict[str, Any] | None, band_percent: float) -> str | None:
    """Why this result is a regression against the previous release's (beyond the noise band), or None."""
    if not previous:
        return None
    found = []
    for key, label in (("mean_tokens_per_s", "mean stream"), ("min_tokens_per_s", "slowest stream")):
        before, now = previous.get(key), result.get(key)
        if before and now is not None and now < before * (1 - band_percent / 100):
            found.append(f"{label} {now:.1f} tok/s < {before:.1f} of release {previous.get('release')} "
                         f"(-{100 * (1 - now / before):.0f}%, band {band_percent:g}%)")
    return "; ".join(found) or None
