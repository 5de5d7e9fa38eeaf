"""What the stand-in "model" says, and how fast.

Answers are deterministic (chosen by a hash of the prompt) so tests can rely on them. A vision
request is answered with the dominant colour of the image it carried. Token pacing follows
STANDIN_TOKENS_PER_S, slowed a little per extra running request as a real batch would be; the
`alternating` behaviour switches requests between a fast and a slow rate, like the DFlash drafter's
bimodal throughput (REFERENCE.md §1).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator

SENTENCES = (
    "The report covers three topics and each one is summarised in the sections below.",
    "Here is a short answer: the request was understood and the details follow.",
    "Based on the text you provided, the main point is clear and easy to act on.",
    "Thank you for the question; the answer depends on the context you described.",
)
FILLER = (
    " This paragraph continues the answer with further detail so that a long generation keeps going"
    " at a steady pace, one token after another, until the requested length is reached."
)
IMAGE_TOKENS = 256
TOKEN_PATTERN = re.compile(r"\s*[\w']+|\s*[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Split text into word and punctuation tokens (a stand-in for the real tokenizer)."""
    return TOKEN_PATTERN.findall(text)


def count_prompt_tokens(texts: list[str], images: int, messages: int) -> int:
    """Prompt length: text tokens, a fixed number per image, and chat-template overhead per message."""
    return sum(len(tokenize(text)) for text in texts) + IMAGE_TOKENS * images + 4 * messages + 1


def answer_text(prompt: str, image_colours: list[str]) -> str:
    """The natural answer (before max_tokens cuts it): a colour for images, else a sentence."""
    if image_colours:
        return f"{image_colours[0]}. The image is mostly {image_colours[0].lower()}."
    digest = hashlib.sha256(prompt.encode()).digest()
    return SENTENCES[digest[0] % len(SENTENCES)]


def completion_tokens(answer: str, max_tokens: int | None, ignore_eos: bool) -> tuple[list[str], str]:
    """Tokens to emit and the finish reason ("stop" at the answer's end, "length" when cut)."""
    natural = tokenize(answer)
    if ignore_eos and max_tokens is not None:
        tokens: list[str] = []
        filler = tokenize(FILLER)
        source: Iterator[str] = iter(natural)
        while len(tokens) < max_tokens:
            token = next(source, None)
            if token is None:
                source = iter(filler)
                continue
            tokens.append(token)
        return tokens, "length"
    if max_tokens is not None and max_tokens < len(natural):
        return natural[:max_tokens], "length"
    return natural, "stop"


def decode_rate(base_tokens_per_s: float, behaviour: str, request_number: int, running: int) -> float:
    """Tokens/s for one request: batching costs each stream a little; `alternating` is bimodal.

    Decode on one GPU is memory-bound, so a few extra sequences cost each stream a few percent, not
    a share: published vLLM runs on an RTX 5090 give 259 tok/s for one stream of a 3B-active vision
    model (https://joshua8.ai/vllm-v016-blackwell-throughput-benchmark, sequential baseline) and a
    median 7.06 ms per output token (142 tok/s per stream) for a 3B-active model under a saturating
    load (https://r.arson.gg/r/LocalLLaMA?after=t3_1rmeozj); 5% per extra running sequence keeps
    the office's 3 streams at 140 / 1.1 = 127 tok/s, above the reference promise as the real
    laptop's are. `alternating` is the DFlash drafter's bimodal release (REFERENCE.md §1: runs of
    218-229 and 62 tok/s)."""
    rate = base_tokens_per_s
    if behaviour == "alternating":  # 220 and 62 tok/s at the default 140
        rate = base_tokens_per_s * (220 / 140 if request_number % 2 == 0 else 62 / 140)
    return rate / (1 + 0.05 * max(running - 1, 0))
