"""The stand-in's HTTP side: vLLM's OpenAI-compatible routes over the standard library's server.

Routes: GET /health (200, empty), /ping, /version, /v1/models, /metrics; POST /v1/chat/completions
and /v1/completions (JSON or `stream: true` server-sent events ending in `data: [DONE]`, with a
usage chunk when `stream_options.include_usage`). With an API key, paths under /v1, /v2,
/inference and /cohere need `Authorization: Bearer KEY` (vllm/entrypoints/serve/middleware/
authenticate.py); /health and /metrics never do. At most --max-num-seqs requests run at once; the
rest wait, as the scheduler makes them.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .generation import decode_rate
from .logs import API_SERVER, VllmLog
from .metrics import Metrics
from .openai_requests import GenerationJob, RequestError, ServingLimits, parse_job

GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
# Prefill grows linearly with the prompt: an office PDF of 100K tokens waits seconds for its first
# token, a chat line milliseconds. The order of magnitude follows published vLLM runs on an RTX 5090
# (https://r.arson.gg/r/LocalLLaMA?after=t3_1rmeozj: Qwen3-Coder-30B-A3B AWQ under `vllm bench serve`,
# mean TTFT 549 ms with requests queued; context swept 8K..120K at flat decode throughput).
PREFILL_TOKENS_PER_S = 20000.0


def record_request(user: str, first_token_at: float, last_token_at: float, tokens: int, rate: float) -> None:
    """The server's own record of a streamed request (STANDIN_REQUEST_LOG, a JSON line each): an
    account of tokens sent and when, independent of any client, to check a load generator against."""
    path = os.environ.get("STANDIN_REQUEST_LOG")
    if path:
        with open(path, "a") as log:
            log.write(json.dumps({"user": user, "first": first_token_at, "last": last_token_at, "tokens": tokens,
                                  "paced_tokens_per_s": rate}) + "\n")


@dataclass
class ServingState:
    """Everything a request handler needs; shared by all handler threads."""

    limits: ServingLimits
    model_root: str
    api_keys: tuple[str, ...]
    tokens_per_s: float
    version: str
    metrics: Metrics
    log: VllmLog
    slots: threading.Semaphore
    request_counter: int = 0
    counter_lock: threading.Lock = field(default_factory=threading.Lock)

    def next_request_number(self) -> int:
        with self.counter_lock:
            number = self.request_counter
            self.request_counter += 1
            return number


class StandinHTTPServer(ThreadingHTTPServer):
    """A threading server on an already bound socket (vLLM binds early and listens when ready)."""

    daemon_threads = True

    def __init__(self, state: ServingState) -> None:
        super().__init__(("127.0.0.1", 0), VllmRequestHandler, bind_and_activate=False)
        self.state = state


class VllmRequestHandler(BaseHTTPRequestHandler):
    """One HTTP connection (keep-alive, HTTP/1.1 like uvicorn)."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    server: StandinHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """uvicorn's access log line."""
        if len(args) >= 2 and str(args[0]).startswith(("GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS")):
            request_line, status = str(args[0]), int(args[1])
            self.server.state.log.raw(API_SERVER, f'INFO:     {self.client_address[0]}:{self.client_address[1]}'
                                                  f' - "{request_line}" {status} {HTTPStatus(status).phrase}')

    # --- plumbing ---

    def _send_json(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_text(self, status: int, text: str, content_type: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorized(self) -> bool:
        keys = self.server.state.api_keys
        if not keys or not self.path.startswith(GUARDED_PREFIXES):
            return True
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(token.encode()).digest()
        return any(secrets.compare_digest(digest, hashlib.sha256(k.encode()).digest()) for k in keys)

    def _read_json(self) -> dict[str, Any]:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"null")
        except json.JSONDecodeError as error:
            raise RequestError(400, f"JSON decode error: {error}") from error
        if not isinstance(body, dict):
            raise RequestError(400, "request body must be a JSON object")
        return body

    # --- routes ---

    def do_GET(self) -> None:
        if not self._authorized():
            self._send_json(401, {"error": "Unauthorized"})
            return
        state = self.server.state
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/ping"):
            self._send_text(200, "", "application/json")
        elif path == "/version":
            self._send_json(200, {"version": state.version})
        elif path == "/metrics":
            self._send_text(200, state.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/v1/models":
            created = int(time.time())
            self._send_json(200, {"object": "list", "data": [
                {"id": name, "object": "model", "created": created, "owned_by": "vllm",
                 "root": state.model_root, "parent": None, "max_model_len": state.limits.max_model_len,
                 "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                                 "created": created, "allow_create_engine": False, "allow_sampling": True,
                                 "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                                 "allow_fine_tuning": False, "organization": "*", "group": None,
                                 "is_blocking": False}]}
                for name in state.limits.served_names]})
        elif path in ("/v1/chat/completions", "/v1/completions"):
            self._send_json(405, {"detail": "Method Not Allowed"})
        else:
            self._send_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        if not self._authorized():
            self._send_json(401, {"error": "Unauthorized"})
            return
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/ping", "/version", "/v1/models", "/metrics"):
            self._send_json(405, {"detail": "Method Not Allowed"})
            return
        if path not in ("/v1/chat/completions", "/v1/completions"):
            self._send_json(404, {"detail": "Not Found"})
            return
        chat = path == "/v1/chat/completions"
        try:
            job = parse_job(self._read_json(), self.server.state.limits, chat)
        except RequestError as error:
            self._send_json(error.status, error.body())
            return
        Generation(self, job, chat).run()


class Generation:
    """Serves one validated job: waits for a slot, paces tokens, streams or answers at the end."""

    def __init__(self, handler: VllmRequestHandler, job: GenerationJob, chat: bool) -> None:
        self.handler = handler
        self.state = handler.server.state
        self.job = job
        self.chat = chat
        self.request_id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())

    def run(self) -> None:
        metrics = self.state.metrics
        metrics.request_waiting(1)
        self.state.slots.acquire()
        metrics.request_waiting(-1)
        metrics.request_started(self.job.prompt_tokens)
        emitted = 0
        reason = self.job.finish_reason
        try:
            if self.job.stream:
                emitted = self._stream()
            else:
                emitted = self._pace(lambda _token: None)
                self._respond_whole()
        except (BrokenPipeError, ConnectionResetError):
            reason = "abort"
        finally:
            metrics.request_finished(reason, self.job.prompt_tokens + emitted)
            self.state.slots.release()

    def _pace(self, emit: Any) -> int:
        """Sleep through prefill and decode at the request's rate, calling emit(token) on time."""
        number = self.state.next_request_number()
        started = time.monotonic()
        time.sleep(0.01 + self.job.prompt_tokens / PREFILL_TOKENS_PER_S)
        first_token_at = next_at = time.monotonic()
        self.state.metrics.first_token(first_token_at - started)
        rate = self.state.tokens_per_s
        for token in self.job.tokens:
            delay = next_at - time.monotonic()
            if delay > 0.002:
                time.sleep(delay)
            emit(token)
            self.state.metrics.token_generated()
            # every step of the batch is paced by the sequences running now: a stream slows down
            # when another joins and speeds up when one finishes, as in vLLM's continuous batching
            rate = decode_rate(self.state.tokens_per_s, self.state.limits.behaviour, number,
                               self.state.metrics.running)
            next_at += 1 / rate
        record_request(self.job.user, first_token_at, time.monotonic(), len(self.job.tokens), rate)
        return len(self.job.tokens)

    def _usage(self) -> dict[str, Any]:
        completion = len(self.job.tokens)
        return {"prompt_tokens": self.job.prompt_tokens, "total_tokens": self.job.prompt_tokens + completion,
                "completion_tokens": completion, "prompt_tokens_details": None}

    def _choice(self, text: str | None, finish: str | None, first: bool = False) -> dict[str, Any]:
        if self.chat:
            # vLLM's chat chunks carry "finish_reason" always (null until the end) and "stop_reason"
            # only on the finishing chunk (a real stream: tests/standins/vllm/real_stream.txt)
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else (
                {"content": text} if text is not None else {})
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {**choice, "stop_reason": None} if finish else choice
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish,
                "stop_reason": None}

    def _chunk(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> dict[str, Any]:
        chunk = {"id": self.request_id, "object": "chat.completion.chunk" if self.chat else "text_completion",
                 "created": self.created, "model": self.job.model, "choices": choices}
        if usage is not None:
            chunk["usage"] = usage
        return chunk

    def _respond_whole(self) -> None:
        text = "".join(self.job.tokens)
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text, "refusal": None,
                                              "annotations": None, "audio": None, "function_call": None,
                                              "tool_calls": [], "reasoning_content": None},
                      "logprobs": None, "finish_reason": self.job.finish_reason, "stop_reason": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": self.job.finish_reason,
                      "stop_reason": None, "prompt_logprobs": None}
        self.handler._send_json(200, {
            "id": self.request_id, "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created, "model": self.job.model, "choices": [choice],
            "service_tier": None, "system_fingerprint": None, "usage": self._usage(),
            "prompt_logprobs": None, "kv_transfer_params": None,
        })

    def _write_event(self, payload: Any) -> None:
        data = ("data: " + (payload if isinstance(payload, str) else json.dumps(payload)) + "\n\n").encode()
        self.handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.handler.wfile.flush()

    def _stream(self) -> int:
        handler = self.handler
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream; charset=utf-8")
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        if self.chat:
            self._write_event(self._chunk([self._choice(None, None, first=True)]))
        last = len(self.job.tokens) - 1
        tokens_sent = [0]

        # Cut at max_tokens, the last token's chunk finishes ("length"); a natural stop's end-of-sequence
        # token decodes to nothing, so it finishes in a chunk of empty content (as in real_stream.txt).
        cut = self.job.finish_reason == "length"

        def emit(token: str) -> None:
            finish = self.job.finish_reason if cut and tokens_sent[0] == last else None
            self._write_event(self._chunk([self._choice(token, finish)]))
            tokens_sent[0] += 1

        emitted = self._pace(emit)
        if not self.job.tokens or not cut:
            self._write_event(self._chunk([self._choice("", self.job.finish_reason)]))
        if self.job.include_usage:
            self._write_event(self._chunk([], self._usage()))
        self._write_event("[DONE]")
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
        return emitted
