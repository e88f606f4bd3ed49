"""EncodePng (runtime/kernels/image_encode_ops.py) against what TensorFlow 2.21 encoded from the same pixels
(tools/make_serving_op_cases.py, group "encode_png"): byte for byte, uint8 and uint16 with 1-4 channels,
one-row and one-column images, every compression level, batches, images past libpng's narrowed zlib window
and its 8 KiB IDAT chunks, and the inputs TensorFlow refuses."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np
import pytest
from support import OpCases, run_op

from poolserve.runtime.errors import InvalidArgumentError

CASES = OpCases("encode_png")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow_byte_for_byte(case: str) -> None:
    CASES.check(case)


def unfiltered(png: bytes) -> Any:
    """The rows of an 8-bit PNG, its filters undone (PNG's own definition, not the encoder's code)."""
    width, height, _, color = struct.unpack(">IIBB", png[16:26])
    channels = {0: 1, 4: 2, 2: 3, 6: 4}[color]
    at, idat = 8, b""
    while at < len(png):
        (n,) = struct.unpack(">I", png[at : at + 4])
        idat += png[at + 8 : at + 8 + n] if png[at + 4 : at + 8] == b"IDAT" else b""
        at += 12 + n
    data = zlib.decompress(idat)
    stride = width * channels
    out = np.zeros((height + 1, stride + channels), np.int64)  # a zero row above, zero pixel to the left
    for y in range(height):
        kind, line = data[y * (stride + 1)], data[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]
        for x, v in enumerate(line):
            a, b, c = out[y + 1, x], out[y, x + channels], out[y, x]
            p = a + b - c
            pred = [0, a, b, (a + b) // 2, min((abs(p - a), 0, a), (abs(p - b), 1, b), (abs(p - c), 2, c))[2]]
            out[y + 1, x + channels] = (v + pred[kind]) & 0xFF
    return out[1:, channels:].reshape(height, width, channels)


def test_the_bytes_decode_to_the_pixels() -> None:
    rng = np.random.default_rng(0)
    for shape in ((6, 5, 4), (4, 7, 1), (3, 3, 2)):
        image = rng.integers(0, 256, shape).astype(np.uint8)
        image[1:] //= 16  # smooth rows, filtered otherwise than None
        np.testing.assert_array_equal(unfiltered(run_op("EncodePng", [image]).item()), image)


def test_refuses_other_dtypes_and_compression_levels() -> None:
    with pytest.raises(InvalidArgumentError, match="must be uint8 or uint16"):
        run_op("EncodePng", [np.zeros((2, 2, 3), np.float32)])
    with pytest.raises(InvalidArgumentError, match="attr 'compression' should be in \\[-1,9\\], got 10"):
        run_op("EncodePng", [np.zeros((2, 2, 3), np.uint8)], {"compression": 10})
