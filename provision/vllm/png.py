"""The vision check's test image: a 64x64 red gradient PNG, made here with zlib (no imaging library).

Red runs from dark to bright left to right, with a faint green/blue tint top to bottom, so every
pixel is unmistakably red while the image is not one flat colour (a model must look at it).
"""

from __future__ import annotations

import base64
import struct
import zlib

SIZE = 64


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def red_gradient_png(size: int = SIZE) -> bytes:
    """An 8-bit RGB PNG of `size` x `size` pixels, every one of them red."""
    rows = bytearray()
    for y in range(size):
        rows.append(0)  # filter type 0 (None) for each scanline
        tint = 40 * y // max(size - 1, 1)
        for x in range(size):
            rows += bytes((150 + 105 * x // max(size - 1, 1), tint, tint))
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(bytes(rows), 9))
            + _chunk(b"IEND", b""))


def data_uri(png: bytes) -> str:
    """The image as the `data:` URL an OpenAI-style image_url part carries."""
    return "data:image/png;base64," + base64.b64encode(png).decode()
