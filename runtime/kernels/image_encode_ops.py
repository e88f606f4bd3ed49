"""Image encoding: EncodePng (``tf.io.encode_png``), what a serving graph that answers with an image (a
segmentation mask, a generated picture) ends with.

The bytes are TensorFlow's: it writes with libpng 1.6, and libpng's choices are repeated here.

- Chunks IHDR, IDAT, IEND only; 8- or 16-bit samples (big-endian), gray, gray+alpha, RGB or RGBA by the
  channel count; no interlacing.
- Each row's filter is libpng's heuristic: of None, Sub, Up, Average and Paeth (fewer for one row or one
  column) the first with the smallest sum of its bytes read as signed magnitudes.
- zlib at the ``compression`` level (-1: zlib's default), memory level 9 (TensorFlow's setting), strategy
  Z_FILTERED (libpng's when rows are filtered); a window of 2^9..2^15 bytes, the smallest that holds the
  filtered rows and zlib's 262-byte lookahead, and the header's window size then lowered to the smallest
  that holds the rows alone (libpng's ``optimize_cmf``); IDAT chunks of libpng's 8192-byte buffer.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np

from poolserve.runtime.errors import InternalError, InvalidArgumentError
from poolserve.runtime.kernels._common import _bad_attr, _shape_str, _strings
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COLOR_TYPES = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> PNG color type (gray, gray+alpha, RGB, RGBA)
_ZBUF_SIZE = 8192  # libpng's PNG_ZBUF_SIZE: IDAT chunks are this long, but the last
_MAX_WINDOW_DATA = 16384  # libpng narrows the zlib window only for this much data or less
_LOOKAHEAD = 262  # zlib's MIN_LOOKAHEAD: deflate needs this much window beyond the data


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _magnitudes(filtered: Any) -> Any:
    """libpng's cost of filtered bytes: each byte as a signed value's magnitude, summed per row."""
    v = filtered.astype(np.int64)
    return np.where(v < 128, v, 256 - v).sum(axis=1)


def _filtered_rows(raw: Any, bpp: int) -> bytes:
    """The rows (uint8 [height, row bytes]) each with its filter byte, filtered as libpng chooses."""
    height, width = raw.shape
    x = raw.astype(np.int16)
    left = np.zeros_like(x)
    left[:, bpp:] = x[:, :-bpp]
    up = np.zeros_like(x)
    up[1:] = x[:-1]
    upleft = np.zeros_like(x)
    upleft[1:, bpp:] = x[:-1, :-bpp]
    p = left + up - upleft
    pa, pb, pc = np.abs(p - left), np.abs(p - up), np.abs(p - upleft)
    paeth = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, up, upleft))
    candidates = [x, x - left, x - up, x - ((left + up) >> 1), x - paeth]
    allowed = [0, 1, 2, 3, 4]
    if height == 1:
        allowed = [0, 1]
    if width == bpp:
        allowed = [a for a in allowed if a in (0, 2)]
    filtered = np.stack([(candidates[a] & 0xFF).astype(np.uint8) for a in allowed])
    if len(allowed) == 1:
        choice = np.zeros(height, np.intp)
    else:
        costs = np.stack([_magnitudes(f) for f in filtered])
        choice = costs.argmin(axis=0)  # the first of equal costs, as libpng keeps only a smaller one
    rows = np.empty((height, width + 1), np.uint8)
    rows[:, 0] = np.asarray(allowed, np.uint8)[choice]
    rows[:, 1:] = filtered[choice, np.arange(height)]
    return rows.tobytes()


def _window_bits(size: int) -> int:
    bits = 15
    if size <= _MAX_WINDOW_DATA:
        half = 1 << (bits - 1)
        while size + _LOOKAHEAD <= half:
            half >>= 1
            bits -= 1
    return max(bits, 9)  # zlib refuses a window of 2^8 for deflate


def _optimize_cmf(stream: bytearray, size: int) -> None:
    """libpng's ``optimize_cmf``: the header's window size lowered to the smallest that holds the data."""
    cmf = stream[0]
    if size > _MAX_WINDOW_DATA or cmf & 0x0F != 8 or cmf & 0xF0 > 0x70:
        return
    cinfo = cmf >> 4
    half = 1 << (cinfo + 7)
    if size > half:
        return
    while True:
        half >>= 1
        cinfo -= 1
        if not (cinfo > 0 and size <= half):
            break
    cmf = (cmf & 0x0F) | (cinfo << 4)
    flags = stream[1] & 0xE0
    flags += 0x1F - ((cmf << 8) + flags) % 0x1F
    stream[0], stream[1] = cmf, flags


def encode_png(image: Any, level: int) -> bytes:
    """One [height, width, channels] uint8 or uint16 image as TensorFlow's PNG bytes."""
    height, width, channels = image.shape
    depth = 16 if image.dtype == np.uint16 else 8
    samples = image.astype(">u2") if depth == 16 else image
    raw = np.ascontiguousarray(samples).view(np.uint8).reshape(height, width * channels * depth // 8)
    rows = _filtered_rows(raw, channels * depth // 8)
    compressor = zlib.compressobj(level, zlib.DEFLATED, _window_bits(len(rows)), 9, zlib.Z_FILTERED)
    stream = bytearray(compressor.compress(rows) + compressor.flush())
    _optimize_cmf(stream, len(rows))
    header = struct.pack(">IIBBBBB", width, height, depth, _COLOR_TYPES[channels], 0, 0, 0)
    parts = [_SIGNATURE, _chunk(b"IHDR", header)]
    for at in range(0, len(stream), _ZBUF_SIZE):
        parts.append(_chunk(b"IDAT", bytes(stream[at : at + _ZBUF_SIZE])))
    parts.append(_chunk(b"IEND", b""))
    return b"".join(parts)


@kernel("EncodePng", expensive=True)
def encode_png_kernel(node: Node) -> Compute:
    level = node.attr_int("compression", -1)
    if not -1 <= level <= 9:
        raise _bad_attr(node, "compression", f"should be in [-1,9], got {level}")  # TensorFlow's words

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        image = inputs[0]
        if image.dtype not in (np.uint8, np.uint16):
            raise InvalidArgumentError(f"image must be uint8 or uint16, got {image.dtype}")
        if image.ndim < 3:
            raise InvalidArgumentError(f"images must be at least rank 3{_shape_str(image.shape)}")
        channels = image.shape[-1]
        if channels not in _COLOR_TYPES:
            raise InvalidArgumentError(f"image must have 1, 2, 3, or 4 channels, got {channels}")
        batch = image.shape[:-3]
        images = image.reshape(int(np.prod(batch)), *image.shape[-3:])
        if len(images) and 0 in image.shape[-3:-1]:  # libpng refuses an empty image
            failed = ", ".join(str(i) for i in range(len(images)))
            raise InternalError(f"PNG encoding failed at the following flattened batch indices: {failed}")
        encoded = [encode_png(one, level) for one in images]
        return (_strings(encoded, batch),)

    return compute
