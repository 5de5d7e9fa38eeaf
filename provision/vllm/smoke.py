"""Smoke checks: a real text completion and a vision question, sent on the host, judged here.

Text: a short chat completion must come back non-empty with a sane finish reason ("stop", or
"length" when the answer ran into max_tokens). Vision: a 64x64 red gradient PNG made in code (png.py)
goes as a data URI; the answer must contain "red" (case-insensitive), as the seed's check did
(REFERENCE.md §1, §5). Both requests run in one round trip; the wall time of each is curl's own
measurement on the host. The judging (smoke_judge.py) is pure, unit-tested, and the same file the
host's upgrade guard runs.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from provision.errors import TaskFailed
from provision.shell import quote
from provision.vllm.endpoint import Endpoint
from provision.vllm.png import data_uri, red_gradient_png
from provision.vllm.smoke_judge import SANE_FINISH_REASONS, CheckResult, SmokeReport, judge_answer, judge_smoke

__all__ = ["SANE_FINISH_REASONS", "CheckResult", "SmokeReport", "judge_answer", "judge_smoke"]

TEXT_PROMPT = "In one short sentence: what is a GPU used for?"
VISION_PROMPT = "What colour is this image? Answer with one word."


class SmokeFailed(TaskFailed):
    """A smoke check got a wrong, empty or failed answer; the message names which and what came back."""

    def __init__(self, reason: str, report: SmokeReport | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.report = report


def text_request(served_name: str, prompt: str = TEXT_PROMPT, max_tokens: int = 48) -> dict[str, Any]:
    return {"model": served_name, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0}


def vision_request(served_name: str, prompt: str = VISION_PROMPT, max_tokens: int = 16) -> dict[str, Any]:
    content = [{"type": "text", "text": prompt},
               {"type": "image_url", "image_url": {"url": data_uri(red_gradient_png())}}]
    return {"model": served_name, "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "temperature": 0}


def _check(endpoint: Endpoint, name: str, timeout: float, body_file: str) -> str:
    """Bash POSTing "$request" and printing `NAME_status=`, `NAME_time=` and `NAME_body=` (base64)."""
    url = quote(endpoint.url("/v1/chat/completions"))
    return f"""out=$(printf '%s' "$request" | curl -s -o {body_file} -w '%{{http_code}} %{{time_total}}' \\
  --max-time {timeout:g} -K <(auth) -H 'Content-Type: application/json' --data-binary @- {url} 2>/dev/null) || true
echo "{name}_status=${{out%% *}}"
echo "{name}_time=${{out#* }}"
echo "{name}_body=$(base64 -w0 < {body_file})"
"""


def smoke_script(endpoint: Endpoint, names: list[str], timeout: float) -> str:
    """Bash that POSTs each request body (one JSON per line on fd 3) and prints, per check NAME,
    `NAME_status=`, `NAME_time=` and `NAME_body=` (base64)."""
    lines = ["set +e +o pipefail", endpoint.auth_prelude(), "body_file=$(mktemp); trap 'rm -f -- \"$body_file\"' EXIT"]
    for name in names:
        check = _check(endpoint, name, timeout, '"$body_file"')
        lines.append(f"IFS= read -r request <&3 || request=''\n{check}: > \"$body_file\"\n")
    return "\n".join(lines)


def embedded_smoke_script(endpoint: Endpoint, names: list[str], bodies: list[dict[str, Any]], timeout: float) -> str:
    """Bash that sends the checks with their request bodies in its own text (a probe snippet has no
    stdin payload), all at once, and prints what smoke_script prints, check by check. It expects
    `auth` defined (Endpoint.auth_prelude: the key is read on the host, never in this text)."""
    lines = ["smoke_dir=$(mktemp -d); trap 'rm -rf -- \"$smoke_dir\"' EXIT"]
    for name, body in zip(names, bodies, strict=True):
        body_file = f'"$smoke_dir/{name}.body"'
        check = _check(endpoint, name, timeout, body_file)
        lines.append(f'(\nrequest={quote(_compact(body))}\n: > {body_file}\n{check}) > "$smoke_dir/{name}.out" &')
    lines.append("wait")
    lines.append("cat -- " + " ".join(f'"$smoke_dir/{name}.out"' for name in names))
    return "\n".join(lines) + "\n"


def smoke_payload(bodies: list[dict[str, Any]]) -> bytes:
    """The requests, one compact JSON document a line (what smoke_script reads from fd 3)."""
    return "".join(_compact(body) + "\n" for body in bodies).encode()


def _compact(body: dict[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"))


def judge_source() -> str:
    """smoke_judge.py's text, for the host (the upgrade guard runs it with python3)."""
    return resources.files("provision.vllm").joinpath("smoke_judge.py").read_text(encoding="utf-8")


def smoke_requests(endpoint: Endpoint, vision: bool) -> tuple[list[str], list[dict[str, Any]]]:
    """The checks' names and request bodies, in the order smoke_script sends them."""
    names = ["text", *(["vision"] if vision else [])]
    bodies = [text_request(endpoint.served_name), *([vision_request(endpoint.served_name)] if vision else [])]
    return names, bodies


def run_smoke(run: Any, endpoint: Endpoint, vision: bool, timeout: float) -> SmokeReport:
    """Run the checks through `run(script, payload) -> stdout`; raise SmokeFailed when one fails."""
    names, bodies = smoke_requests(endpoint, vision)
    report = judge_smoke(run(smoke_script(endpoint, names, timeout), smoke_payload(bodies)), vision)
    if not report.ok:
        raise SmokeFailed(report.failure(), report)
    return report
