"""How the smoke checks are judged, written once for the controller and the host.

The controller imports it (smoke.py sends the checks, this judges them); the host's upgrade guard
runs this very file with the host's python3 (`python3 smoke_judge.py [--vision] < fields`, exit 0
when every check passed, the summary or the failure on stdout), so a release the controller did not
live to check is judged by the same rules. Standard library only, for that reason.

Text: a non-empty answer with a sane finish reason ("stop", or "length" when the answer ran into
max_tokens). Vision: the answer must contain "red" (case-insensitive; REFERENCE.md §1, §5).
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
from dataclasses import dataclass
from typing import Any

SANE_FINISH_REASONS = ("stop", "length")


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

    def failure(self) -> str:
        """What failed, as the run and the guard report it."""
        return "smoke check failed: " + "; ".join(check.describe() for check in self.checks() if not check.ok)

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "text": self.text.as_dict(),
                "vision": self.vision.as_dict() if self.vision else None}


def _field(output: str, key: str) -> str:
    for line in output.splitlines():
        name, sep, value = line.partition("=")
        if sep and name == key:
            return value
    return ""


def judge_answer(name: str, output: str, expect: str | None = None) -> CheckResult:
    """Judge one check's `NAME_*` fields: HTTP 200, a non-empty answer, a sane finish reason, and
    (for vision) the expected word in the answer."""
    status = _field(output, f"{name}_status")
    try:
        seconds = float(_field(output, f"{name}_time") or 0)
    except ValueError:
        seconds = 0.0
    try:
        body = base64.b64decode(_field(output, f"{name}_body"), validate=True).decode(errors="replace")
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


def main(argv: list[str]) -> int:
    """The host's entry point: the smoke script's fields on stdin; prints the verdict."""
    report = judge_smoke(sys.stdin.read(), vision="--vision" in argv)
    if report.ok:
        print(report.summary())
        return 0
    print(report.failure())
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
