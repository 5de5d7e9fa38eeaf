"""A small PNG decoder and colour namer: the stand-in "sees" the image it is sent.

The vision check must fail when the payload is wrong or corrupted, so the stand-in decodes the real
bytes (8-bit grey, grey+alpha, RGB, RGBA; non-interlaced; all five filter types) and names the colour
most of the opaque pixels have. A corrupted file raises PngError, which the server turns into a 400.
"""

from __future__ import annotations

import colorsys
import struct
import zlib
from collections import Counter

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS_BY_COLOUR_TYPE = {0: 1, 2: 3, 4: 2, 6: 4}


class PngError(ValueError):
    """The bytes are not a PNG this decoder can read."""


def decode_png(data: bytes) -> tuple[int, int, list[tuple[int, int, int, int]]]:
    """Return (width, height, RGBA pixels row by row)."""
    if not data.startswith(PNG_SIGNATURE):
        raise PngError("not a PNG file (bad signature)")
    width = height = bit_depth = colour_type = interlace = -1
    compressed = bytearray()
    position = len(PNG_SIGNATURE)
    while position + 8 <= len(data):
        length, chunk_type = struct.unpack(">I4s", data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        crc_bytes = data[position + 8 + length:position + 12 + length]
        if len(body) != length or len(crc_bytes) != 4:
            raise PngError("truncated PNG chunk")
        if zlib.crc32(chunk_type + body) != struct.unpack(">I", crc_bytes)[0]:
            raise PngError(f"CRC mismatch in {chunk_type.decode(errors='replace')} chunk")
        if chunk_type == b"IHDR":
            width, height, bit_depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", body)
        elif chunk_type == b"IDAT":
            compressed += body
        elif chunk_type == b"IEND":
            break
        position += 12 + length
    if width <= 0 or height <= 0:
        raise PngError("missing IHDR chunk")
    if bit_depth != 8 or colour_type not in CHANNELS_BY_COLOUR_TYPE or interlace != 0:
        raise PngError(f"unsupported PNG (bit depth {bit_depth}, colour type {colour_type}, "
                       f"interlace {interlace})")
    try:
        raw = zlib.decompress(bytes(compressed))
    except zlib.error as error:
        raise PngError(f"corrupt image data: {error}") from error
    channels = CHANNELS_BY_COLOUR_TYPE[colour_type]
    rows = _unfilter(raw, width, height, channels)
    return width, height, [_to_rgba(row[i:i + channels]) for row in rows for i in range(0, len(row), channels)]


def _unfilter(raw: bytes, width: int, height: int, bpp: int) -> list[bytes]:
    stride = width * bpp
    if len(raw) < height * (stride + 1):
        raise PngError("image data shorter than its header says")
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        filter_type = raw[start]
        line = bytearray(raw[start + 1:start + 1 + stride])
        for x in range(stride):
            left = line[x - bpp] if x >= bpp else 0
            up = previous[x]
            up_left = previous[x - bpp] if x >= bpp else 0
            if filter_type == 1:
                line[x] = (line[x] + left) & 0xFF
            elif filter_type == 2:
                line[x] = (line[x] + up) & 0xFF
            elif filter_type == 3:
                line[x] = (line[x] + (left + up) // 2) & 0xFF
            elif filter_type == 4:
                line[x] = (line[x] + _paeth(left, up, up_left)) & 0xFF
            elif filter_type != 0:
                raise PngError(f"bad filter type {filter_type} in row {y}")
        rows.append(bytes(line))
        previous = line
    return rows


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def _to_rgba(pixel: bytes) -> tuple[int, int, int, int]:
    if len(pixel) == 1:
        return pixel[0], pixel[0], pixel[0], 255
    if len(pixel) == 2:
        return pixel[0], pixel[0], pixel[0], pixel[1]
    if len(pixel) == 3:
        return pixel[0], pixel[1], pixel[2], 255
    return pixel[0], pixel[1], pixel[2], pixel[3]


def colour_name(red: int, green: int, blue: int) -> str:
    """Name one pixel's colour the way a person would (dark red is still red, near-black is black)."""
    hue, lightness, saturation = colorsys.rgb_to_hls(red / 255, green / 255, blue / 255)
    value = max(red, green, blue) / 255
    if value < 0.12:
        return "Black"
    if saturation < 0.2 or (max(red, green, blue) - min(red, green, blue)) < 30:
        return "White" if lightness > 0.85 else "Gray"
    degrees = hue * 360
    for upper, name in ((15, "Red"), (45, "Orange"), (70, "Yellow"), (165, "Green"), (200, "Cyan"),
                        (255, "Blue"), (290, "Purple"), (335, "Pink"), (360, "Red")):
        if degrees < upper:
            return name
    return "Red"


def dominant_colour(png_bytes: bytes) -> str:
    """The colour name most opaque pixels of the PNG have."""
    _, _, pixels = decode_png(png_bytes)
    counts = Counter(colour_name(r, g, b) for r, g, b, a in pixels if a >= 128)
    if not counts:
        return "Transparent"
    return counts.most_common(1)[0][0]
