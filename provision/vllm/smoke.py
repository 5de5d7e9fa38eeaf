"""Smoke checks: a real text completion and a vision question, sent on the host, judged here.

Text: a short chat completion must come back non-empty with a sane finish reason ("stop", or
"length" when the answer ran into max_tokens). Vision: a 64x64 red gradient PNG made in code (png.py)
goes as a data URI; the answer must contain "red" (case-insensitive), as the seed's check did
(REFERENCE.md §1, §5). Both requests run in one round trip; the wall time of each is curl's own
measurement on the host. The judging functions are pure and unit-tested.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from provision.errors import TaskFailed
from provision.shell import field_value, quote
from provision.vllm.endpoint import Endpoint
from provision.vllm.png import data_uri, red_gradient_png

SANE_FINISH_REASONS = ("stop", "length")
TEXT_PROMPT = "In one short sentence: what is a GPU used for?"
VISION_PROMPT = "What colour is this image? Answer with one word."


class SmokeFailed(TaskFailed):
    """A smoke check got a wrong, empty or failed answer; the message names which and what came back."""

    def __init__(self, reason: str, report: SmokeReport | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.report = report


@dataclass(frozen=True)
class CheckResult:
    """One smoke check: passed or not, the answer, the finish reason, the time and the tokens."""

    name: str
    ok: bool
    answer: str = ""
    finish_reason: str = ""
    seconds: float = 0.0
    tokens: int = 0
    problem: str = ""

    def describe(self) -> str:
        if not self.ok:
            return f"{self.name}: {self.problem}"
        return f"{self.name} {self.seconds:.2f}s {self.answer[:60]!r} ({self.finish_reason}, {self.tokens} tokens)"

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "answer": self.answer, "finish_reason": self.finish_reason,
                "seconds": round(self.seconds, 3), "tokens": self.tokens, "problem": self.problem}


@dataclass(frozen=True)
class SmokeReport:
    """The text check and (unless turned off) the vision check."""

    text: CheckResult
    vision: CheckResult | None

    @property
    def ok(self) -> bool:
        return self.text.ok and (self.vision is None or self.vision.ok)

    def checks(self) -> list[CheckResult]:
        return [self.text, *([self.vision] if self.vision else [])]

    def summary(self) -> str:
        return "; ".join(check.describe() for check in self.checks())

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "text": self.text.as_dict(),
                "vision": self.vision.as_dict() if self.vision else None}


def text_request(served_name: str, prompt: str = TEXT_PROMPT, max_tokens: int = 48) -> dict[str, Any]:
    return {"model": served_name, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0}


def vision_request(served_name: str, prompt: str = VISION_PROMPT, max_tokens: int = 16) -> dict[str, Any]:
    content = [{"type": "text", "text": prompt},
               {"type": "image_url", "image_url": {"url": data_uri(red_gradient_png())}}]
    return {"model": served_name, "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "temperature": 0}


def smoke_script(endpoint: Endpoint, names: list[str], timeout: float) -> str:
    """Bash that POSTs each request body (one JSON per line on fd 3) and prints, per check NAME,
    `NAME_status=`, `NAME_time=` and `NAME_body=` (base64)."""
    lines = ["set +e +o pipefail", endpoint.auth_prelude(), "body_file=$(mktemp); trap 'rm -f -- \"$body_file\"' EXIT"]
    for name in names:
        lines.append(f"""IFS= read -r request <&3 || request=''
out=$(printf '%s' "$request" | curl -s -o "$body_file" -w '%{{http_code}} %{{time_total}}' --max-time {timeout:g} \\
  -K <(auth) -H 'Content-Type: application/json' --data-binary @- {quote(endpoint.url('/v1/chat/completions'))} \\
  2>/dev/null) || true
echo "{name}_status=${{out%% *}}"
echo "{name}_time=${{out#* }}"
echo "{name}_body=$(base64 -w0 < "$body_file")"
: > "$body_file"
""")
    return "\n".join(lines)


def smoke_payload(bodies: list[dict[str, Any]]) -> bytes:
    """The requests, one compact JSON document a line (what smoke_script reads from fd 3)."""
    return "".join(json.dumps(body, separators=(",", ":")) + "\n" for body in bodies).encode()


def judge_answer(name: str, output: str, expect: str | None = None) -> CheckResult:
    """Judge one check's `NAME_*` fields: HTTP 200, a non-empty answer, a sane finish reason, and
    (for vision) the expected word in the answer."""
    status = field_value(output, f"{name}_status")
    try:
        seconds = float(field_value(output, f"{name}_time") or 0)
    except ValueError:
        seconds = 0.0
    try:
        body = base64.b64decode(field_value(output, f"{name}_body"), validate=True).decode(errors="replace")
    except (binascii.Error, ValueError):
        body = ""
    if status != "200":
        shown = body.strip()[:300] or "no answer"
        return CheckResult(name, False, seconds=seconds,
                           problem=f"HTTP {status if status not in ('', '000') else 'request failed'}: {shown}")
    try:
        data = json.loads(body)
        choice = data["choices"][0]
        answer = str(choice["message"].get("content") or "")
        finish = str(choice.get("finish_reason") or "")
        tokens = int((data.get("usage") or {}).get("completion_tokens") or 0)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return CheckResult(name, False, seconds=seconds, problem=f"not a chat completion: {body[:300]!r}")
    result = CheckResult(name, True, answer=answer.strip(), finish_reason=finish, seconds=seconds, tokens=tokens)
    if not answer.strip():
        return _failed(result, "the answer is empty")
    if finish not in SANE_FINISH_REASONS:
        return _failed(result, f"finish reason {finish!r} (expected one of {', '.join(SANE_FINISH_REASONS)})")
    if expect is not None and expect.lower() not in answer.lower():
        return _failed(result, f"the answer {answer.strip()[:120]!r} does not contain {expect!r}")
    return result


def _failed(result: CheckResult, problem: str) -> CheckResult:
    return CheckResult(result.name, False, result.answer, result.finish_reason, result.seconds, result.tokens, problem)


def judge_smoke(output: str, vision: bool) -> SmokeReport:
    return SmokeReport(text=judge_answer("text", output),
                       vision=judge_answer("vision", output, expect="red") if vision else None)


def run_smoke(run: Any, endpoint: Endpoint, vision: bool = True, timeout: float = 300) -> SmokeReport:
    """Run the checks through `run(script, payload) -> stdout`; raise SmokeFailed when one fails."""
    names = ["text", *(["vision"] if vision else [])]
    bodies = [text_request(endpoint.served_name), *([vision_request(endpoint.served_name)] if vision else [])]
    report = judge_smoke(run(smoke_script(endpoint, names, timeout), smoke_payload(bodies)), vision)
    if not report.ok:
        failed = [check.describe() for check in report.checks() if not check.ok]
        raise SmokeFailed("smoke check failed: " + "; ".join(failed), report)
    return report
