"""Image decoding against what TensorFlow 2.21 decoded from the same files (tests/fixtures/images,
tools/make_image_decode_fixture.py): JPEG (4:2:0, 4:4:4, gray, progressive; channels, DCT scaling, DCT
method, upsampling), PNG (8- and 16-bit, gray, gray+alpha, RGBA, palette; channels, dtype), GIF (frames),
BMP (24- and 32-bit) and DecodeImage over all of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import run_op

from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError

FOLDER = Path(__file__).parent / "fixtures" / "images"
with np.load(FOLDER / "tf_decoded.npz") as _data:
    DECODED = {k: _data[k] for k in _data.files}
# a 16-bit color PNG keeps only 8 bits here (Pillow): refused where TensorFlow answers from all 16
REFUSED_HERE = {
    k
    for k in DECODED
    if k.startswith("rgb16.png") and ("dtype=uint16" in k or "dtype=float32" in k or "channels=1" in k)
}


def attrs(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        key, value = item.split("=")
        if key == "dtype":
            out[key] = np.dtype(value)
        elif key in ("fancy_upscaling", "expand_animations"):
            out[key] = value == "1"
        elif key == "dct_method":
            out[key] = value
        else:
            out[key] = int(value)
    return out


def decode(key: str) -> Any:
    name, op, text = key.split("|")
    data = b"not an image" if name == "garbage" else (FOLDER / name).read_bytes()
    return run_op(op, [np.array(data, dtype=object)], attrs(text))


@pytest.mark.parametrize(
    "key", sorted(k for k in DECODED if not k.endswith("!error") and k not in REFUSED_HERE)
)
def test_decodes_as_tensorflow(key: str) -> None:
    got, want = decode(key), DECODED[key]
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == np.float32:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("key", sorted(k for k in DECODED if k.endswith("!error")))
def test_refuses_what_tensorflow_refuses(key: str) -> None:
    with pytest.raises(InvalidArgumentError):
        decode(key.removesuffix("!error"))


def test_sixteen_bit_color_pngs_are_refused_where_their_low_bits_would_be_needed() -> None:
    assert len(REFUSED_HERE) == 9
    for key in sorted(REFUSED_HERE):
        with pytest.raises(UnimplementedError, match="16-bit color PNG"):
            decode(key)
    # their 8-bit colors are TensorFlow's (the high bytes)
    np.testing.assert_array_equal(
        decode("rgb16.png|DecodePng|channels=3,dtype=uint8"),
        DECODED["rgb16.png|DecodePng|channels=3,dtype=uint8"],
    )


def test_bad_contents_name_what_is_wrong() -> None:
    with pytest.raises(InvalidArgumentError, match="Invalid JPEG data"):
        run_op("DecodeJpeg", [np.array(b"\xff\xd8\xff junk", dtype=object)])
    with pytest.raises(InvalidArgumentError, match="Unknown image file format"):
        run_op("DecodeImage", [np.array(b"GIF", dtype=object)])
    with pytest.raises(InvalidArgumentError, match="Incomplete bmp content"):
        run_op("DecodeBmp", [np.array(b"BM1234", dtype=object)])
    with pytest.raises(InvalidArgumentError, match="contents must be scalar"):
        run_op("DecodePng", [np.array([b"x", b"y"], dtype=object)])
