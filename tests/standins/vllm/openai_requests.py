"""Turn an OpenAI-style request body into a generation job, with vLLM's validation errors.

Checks the stand-in applies like vLLM: the model must be a served name (404 NotFoundError), no
more images/videos than `--limit-mm-per-prompt` allows (400, multimodal/processing/context.py:
"At most N image(s) may be provided in one prompt."), images must decode, and prompt plus
max_tokens must fit `--max-model-len`.
"""

from __future__ import annotations

import base64
import binascii
import random
from dataclasses import dataclass
from typing import Any

from .generation import answer_text, completion_tokens, count_prompt_tokens
from .png import PngError, dominant_colour


class RequestError(Exception):
    """A request vLLM would refuse: the HTTP status, error type and message it answers with."""

    def __init__(self, status: int, message: str, error_type: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param,
                          "code": self.status}}


@dataclass(frozen=True)
class ServingLimits:
    """What the server was started with that requests are checked against."""

    served_names: tuple[str, ...]
    max_model_len: int
    mm_limits: dict[str, int]
    behaviour: str


@dataclass(frozen=True)
class GenerationJob:
    """One validated request: what to say and how."""

    model: str
    prompt_tokens: int
    tokens: tuple[str, ...]
    finish_reason: str
    stream: bool
    include_usage: bool
    user: str = ""  # the OpenAI `user` field, kept only for the stand-in's own request record


def _content_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [part if isinstance(part, dict) else {"type": "text", "text": str(part)} for part in content]
    return []


def _image_bytes(part: dict[str, Any]) -> bytes:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url:
        raise RequestError(400, "image_url must contain a url")
    if not url.startswith("data:"):
        raise RequestError(400, f"Failed to fetch image from {url}: no network access")
    header, _, payload = url.partition(",")
    if ";base64" not in header:
        raise RequestError(400, "Only base64-encoded data URLs are supported for images")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as error:
        raise RequestError(400, f"Failed to decode base64 image data: {error}") from error


def parse_job(body: dict[str, Any], limits: ServingLimits, chat: bool) -> GenerationJob:
    """Validate a /v1/chat/completions (chat=True) or /v1/completions body."""
    model = body.get("model") or limits.served_names[0]
    if model not in limits.served_names:
        raise RequestError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    texts: list[str] = []
    images: list[bytes] = []
    videos = 0
    messages = 0
    if chat:
        raw_messages = body.get("messages")
        if not isinstance(raw_messages, list) or not raw_messages:
            raise RequestError(400, "messages must be a non-empty list", param="messages")
        for message in raw_messages:
            messages += 1
            for part in _content_parts(message.get("content") if isinstance(message, dict) else None):
                kind = part.get("type")
                if kind == "text":
                    texts.append(str(part.get("text", "")))
                elif kind == "image_url":
                    images.append(_image_bytes(part))
                elif kind == "video_url":
                    videos += 1
    else:
        prompt = body.get("prompt")
        texts = [prompt] if isinstance(prompt, str) else [str(p) for p in prompt or []]
        if not texts:
            raise RequestError(400, "prompt must be given", param="prompt")
    for modality, count in (("image", len(images)), ("video", videos)):
        limit = limits.mm_limits.get(modality, 1 if modality == "image" else 0)
        if count > limit:
            raise RequestError(400, f"At most {limit} {modality}(s) may be provided in one prompt.")
    try:
        colours = [dominant_colour(image) for image in images]
    except PngError as error:
        raise RequestError(400, f"Failed to load image: cannot identify image file ({error})") from error
    if limits.behaviour == "wrong-vision" and colours:
        colours = ["Blue"]
    prompt_text = "\n".join(texts)
    prompt_tokens = count_prompt_tokens(texts, len(images), messages)
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise RequestError(400, f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens")
    if prompt_tokens >= limits.max_model_len or (
            max_tokens is not None and prompt_tokens + max_tokens > limits.max_model_len):
        raise RequestError(
            400,
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum "
            f"context length is {limits.max_model_len} tokens and your request has {prompt_tokens} input "
            f"tokens ({max_tokens} > {limits.max_model_len} - {prompt_tokens}).",
            param="max_tokens",
        )
    temperature = body.get("temperature", 1.0)
    seed_text = prompt_text if not temperature else f"{prompt_text}#{random.random()}"
    tokens, finish_reason = completion_tokens(answer_text(seed_text, colours), max_tokens,
                                              bool(body.get("ignore_eos", False)))
    stream_options = body.get("stream_options") or {}
    return GenerationJob(
        model=model,
        prompt_tokens=prompt_tokens,
        tokens=tuple(tokens),
        finish_reason=finish_reason,
        stream=bool(body.get("stream", False)),
        include_usage=bool(stream_options.get("include_usage", False)),
        user=str(body.get("user") or ""),
    )
