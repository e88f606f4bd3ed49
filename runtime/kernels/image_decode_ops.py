"""Image decoding: DecodeJpeg (and DecodeAndCropJpeg, ExtractJpegShape), DecodePng, DecodeGif, DecodeBmp,
DecodeWebP and DecodeImage (whichever of them the bytes are), what a serving graph that takes encoded images
holds (TF Serving's ``{"b64": ...}`` JPEGs).

Decoders, each giving TensorFlow's pixels:

- JPEG: simplejpeg, libjpeg-turbo as TensorFlow links it, with TensorFlow's settings: the fast integer DCT
  unless ``dct_method`` is INTEGER_ACCURATE, fancy upsampling unless ``fancy_upscaling`` is false,
  ``ratio`` 2/4/8 as libjpeg's DCT scaling, ``channels`` 1 as libjpeg's grayscale output (the luma plane).
  (Pillow decodes with the accurate DCT only: pixels 1-4 off TensorFlow's.)
- PNG, GIF, WebP: Pillow. PNG conversions as TensorFlow asks libpng for them: RGB to gray with weights
  0.299/0.587/0.114 in 1/32768 steps, rounded down; gray to RGB repeated; an alpha channel asked away is
  dropped, one asked for is opaque; 8-bit values times 257 for ``dtype`` uint16, 16-bit ones their high
  byte for uint8. A 16-bit color PNG read as uint16 is refused (Pillow keeps 8 bits of it).
- BMP: read here, as TensorFlow's own decoder does: uncompressed 24- and 32-bit bitmaps, bottom-up or
  top-down, BGR(A) to RGB(A).
- GIF: every frame as RGB, composed on the ones before ([frames, h, w, 3]).
- DecodeImage: the format by its magic bytes, GIF frames kept (``expand_animations``) or the first, and
  ``dtype`` as ``convert_image_dtype`` scales (uint8 to uint16 times 256, to float32 in [0, 1]).
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.runtime.kernels._common import _bad_attr
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node


def _pil() -> Any:
    from PIL import Image  # imported when a graph decodes images: Pillow loads its codecs on import

    return Image


def _contents(node: Node, value: Any) -> bytes:
    if value.ndim != 0:
        raise InvalidArgumentError(f"contents must be scalar, got shape {list(value.shape)}")
    data = value.item()
    if not isinstance(data, bytes):
        raise InvalidArgumentError("contents must be a string (the encoded image)")
    return data


def _format(data: bytes) -> str | None:
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if data[:2] == b"BM":
        return "bmp"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def _open(data: bytes, what: str) -> Any:
    try:
        image = _pil().open(io.BytesIO(data))
        image.load()
    except Exception:
        raise InvalidArgumentError(f"Invalid {what} data, or the image is truncated") from None
    return image


def _jpeg(data: bytes, channels: int, ratio: int = 1, fancy: bool = True, dct: str = "") -> Any:
    if channels not in (0, 1, 3):
        raise InvalidArgumentError(f"JPEG does not support {channels} channels")
    import simplejpeg

    try:
        height, width, space, _ = simplejpeg.decode_jpeg_header(data)
        gray = channels == 1 or (channels == 0 and space == "Gray")
        # libjpeg scales by 1/ratio, rounding sizes up: the smallest scaling at least that large
        image = simplejpeg.decode_jpeg(
            data,
            colorspace="GRAY" if gray else "RGB",
            fastdct=dct != "INTEGER_ACCURATE",
            fastupsample=not fancy,
            min_height=-(-height // ratio),
            min_width=-(-width // ratio),
        )
    except (ValueError, OSError):
        raise InvalidArgumentError("jpeg::Uncompress failed. Invalid JPEG data or crop window.") from None
    return image if image.ndim == 3 else image[:, :, None]


# the RGB-to-gray weights TensorFlow gives libpng (0.299, 0.587), in 1/32768 steps
_GRAY_WEIGHTS = (9798, 19235, 3735)


def _png(data: bytes, channels: int, dtype: np.dtype[Any]) -> Any:
    if channels not in (0, 1, 2, 3, 4):
        raise InvalidArgumentError(f"channels must be 0, 1, 2, 3 or 4 for PNG, got {channels}")
    image = _open(data, "PNG")
    if image.format != "PNG":
        raise InvalidArgumentError("Invalid PNG data, size 0")
    if image.mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
    mode = image.mode
    # IHDR, always the first chunk: bit depth at byte 24, color type (2 RGB, 6 RGBA) at 25
    if data[24] == 16 and data[25] in (2, 6) and (dtype == np.uint16 or channels in (1, 2)):
        raise UnimplementedError(
            "a 16-bit color PNG decodes to its uint8 colors only here (Pillow keeps 8 of its bits)"
        )
    if mode in ("I;16", "I;16B", "I"):
        arr = np.asarray(image).astype(np.uint16)[:, :, None]
        sixteen = True
    else:
        if mode == "1":
            image = image.convert("L")
        if mode == "LA" or mode == "La":
            image = image.convert("LA")
        arr = np.asarray(image)
        if arr.ndim == 2:
            arr = arr[:, :, None]
        sixteen = False
    have = arr.shape[2]
    want = have if channels == 0 else channels
    color = have >= 3
    alpha = arr[:, :, -1:] if have in (2, 4) else None
    base = arr[:, :, :3] if color else arr[:, :, :1]
    if want in (1, 2) and color:
        wide = base.astype(np.uint32)
        r, g, b = wide[..., 0], wide[..., 1], wide[..., 2]
        rc, gc, bc = _GRAY_WEIGHTS
        base = ((rc * r + gc * g + bc * b) >> 15).astype(arr.dtype)[:, :, None]
    elif want in (3, 4) and not color:
        base = np.repeat(base, 3, axis=2)
    if want in (2, 4):
        if alpha is None:
            alpha = np.full(base.shape[:2] + (1,), 65535 if sixteen else 255, dtype=arr.dtype)
        out = np.concatenate([base, alpha], axis=2)
    else:
        out = base
    if dtype == np.uint16:
        return out.astype(np.uint16) if sixteen else out.astype(np.uint16) * 257
    return (out >> 8).astype(np.uint8) if sixteen else out.astype(np.uint8)


def _gif(data: bytes) -> Any:
    image = _open(data, "GIF")
    frames = []
    for index in range(getattr(image, "n_frames", 1)):
        image.seek(index)
        frames.append(np.asarray(image.convert("RGB"), dtype=np.uint8))
    return np.stack(frames)


def _bmp(data: bytes, channels: int) -> Any:
    """An uncompressed 24- or 32-bit bitmap, as TensorFlow's decoder reads one."""
    if channels not in (0, 3, 4):
        raise InvalidArgumentError(f"`channels` must be 0, 3 or 4 for BMP, but got {channels}")
    if len(data) < 54:
        raise InvalidArgumentError(f"Incomplete bmp content, requires at least 54 bytes, got {len(data)}")
    offset = int.from_bytes(data[10:14], "little")
    width = int.from_bytes(data[18:22], "little", signed=True)
    height = int.from_bytes(data[22:26], "little", signed=True)
    bits = int.from_bytes(data[28:30], "little")
    depth = bits // 8
    if bits not in (24, 32) or width <= 0 or height == 0:
        raise InvalidArgumentError(f"only uncompressed 24- and 32-bit BMPs are supported, got {bits} bits")
    rows = abs(height)
    stride = (width * depth + 3) // 4 * 4  # rows are padded to 4 bytes
    if offset + stride * rows > len(data):
        raise InvalidArgumentError("Incomplete bmp content: fewer bytes than the header declares")
    raw = np.frombuffer(data, np.uint8, stride * rows, offset).reshape(rows, stride)[:, : width * depth]
    pixels = raw.reshape(rows, width, depth)
    if height > 0:  # stored bottom-up
        pixels = pixels[::-1]
    rgb = pixels[:, :, [2, 1, 0, 3][:depth]]
    want = channels or depth
    if want == 3:
        return np.ascontiguousarray(rgb[:, :, :3])
    if depth == 4:
        return np.ascontiguousarray(rgb)
    return np.concatenate([rgb, np.full((rows, width, 1), 255, np.uint8)], axis=2)


def _webp(data: bytes, channels: int) -> Any:
    if channels not in (0, 3, 4):
        raise InvalidArgumentError(f"channels must be 0, 3 or 4 for WebP, got {channels}")
    image = _open(data, "WebP")
    want = channels or (4 if image.mode == "RGBA" else 3)
    return np.asarray(image.convert("RGBA" if want == 4 else "RGB"), dtype=np.uint8)


def _channels(node: Node, allowed: tuple[int, ...]) -> int:
    channels = node.attr_int("channels", 0)
    if channels not in allowed:
        raise _bad_attr(node, "channels", f"must be one of {allowed}, got {channels}")
    return channels


def _jpeg_attrs(node: Node) -> tuple[int, int, bool, str]:
    """DecodeJpeg's and DecodeAndCropJpeg's channels, ratio, fancy_upscaling and dct_method."""
    channels = _channels(node, (0, 1, 3))
    ratio = node.attr_int("ratio", 1)
    if ratio not in (1, 2, 4, 8):
        raise _bad_attr(node, "ratio", f"must be 1, 2, 4 or 8, got {ratio}")
    return channels, ratio, node.attr_bool("fancy_upscaling", True), node.attr_str("dct_method", "")


@kernel("DecodeJpeg", expensive=True)
def decode_jpeg(node: Node) -> Compute:
    channels, ratio, fancy, dct = _jpeg_attrs(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_jpeg(_contents(node, inputs[0]), channels, ratio, fancy, dct),)

    return compute


@kernel("DecodeAndCropJpeg", expensive=True)
def decode_and_crop_jpeg(node: Node) -> Compute:
    """``tf.image.decode_and_crop_jpeg`` (ResNet-style preprocessing): the window [y, x, height, width] of
    the decoded image, which must lie inside it. TensorFlow's libjpeg-turbo decodes only the window's
    columns, so with chroma subsampling (4:2:0, its encoder's default) it upsamples the window's last column
    (and its first, past the first 16) without the chroma outside: those pixels differ from the full
    decode's by a few levels, which is what this gives. Grayscale and 4:4:4 JPEGs are TensorFlow's exactly."""
    channels, ratio, fancy, dct = _jpeg_attrs(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        data, window = _contents(node, inputs[0]), inputs[1]
        if window.ndim != 1:
            raise InvalidArgumentError(f"crop_window must be 1-D, got shape {list(window.shape)}")
        if window.shape[0] != 4:
            raise InvalidArgumentError(f"crop_size must have four elements {list(window.shape)}")
        y, x, h, w = (int(v) for v in window)
        image = _jpeg(data, channels, ratio, fancy, dct)
        if not (
            h > 0 and w > 0 and x >= 0 and y >= 0 and y + h <= image.shape[0] and x + w <= image.shape[1]
        ):
            raise InvalidArgumentError(
                "jpeg::Uncompress failed. Invalid JPEG data or crop window. (The window "
                f"[y={y}, x={x}, height={h}, width={w}] is not inside the {image.shape[0]}x{image.shape[1]} "
                "image.)"
            )
        return (np.ascontiguousarray(image[y : y + h, x : x + w]),)

    return compute


def _jpeg_header(data: bytes) -> tuple[int, int, int] | None:
    """(height, width, components) from a JPEG's start-of-frame marker, or None: the header only, as
    libjpeg's jpeg_read_header reads it."""
    if data[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # no length
            i += 2
            continue
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF):
            if i + 10 > len(data):
                return None
            height = int.from_bytes(data[i + 5 : i + 7], "big")
            width = int.from_bytes(data[i + 7 : i + 9], "big")
            return height, width, data[i + 9]
        if marker in (0xD9, 0xDA):  # end of image, or scan data before any frame header
            return None
        i += 2 + length
    return None


@kernel("ExtractJpegShape")
def extract_jpeg_shape(node: Node) -> Compute:
    """``tf.io.extract_jpeg_shape``: [height, width, channels] from the header, without decoding."""
    out = node.attr_dtype("output_type", 3)  # DT_INT32
    if out not in (np.int32, np.int64):
        raise _bad_attr(node, "output_type", f"must be int32 or int64, got {out}")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        data = _contents(node, inputs[0])
        shape = _jpeg_header(data)
        if shape is None:
            raise InvalidArgumentError(f"Invalid JPEG data, size {len(data)}")
        return (np.array(shape, out),)

    return compute


@kernel("DecodePng", expensive=True)
def decode_png(node: Node) -> Compute:
    channels = _channels(node, (0, 1, 2, 3, 4))
    dtype = node.attr_dtype("dtype", 4)  # DT_UINT8
    if dtype not in (np.uint8, np.uint16):
        raise _bad_attr(node, "dtype", f"must be uint8 or uint16, got {dtype}")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_png(_contents(node, inputs[0]), channels, dtype),)

    return compute


@kernel("DecodeGif", expensive=True)
def decode_gif(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_gif(_contents(node, inputs[0])),)

    return compute


@kernel("DecodeBmp", expensive=True)
def decode_bmp(node: Node) -> Compute:
    channels = _channels(node, (0, 3, 4))

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_bmp(_contents(node, inputs[0]), channels),)

    return compute


@kernel("DecodeWebP", expensive=True)
def decode_webp(node: Node) -> Compute:
    channels = _channels(node, (0, 3, 4))

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_webp(_contents(node, inputs[0]), channels),)

    return compute


def _as_dtype(image: Any, dtype: np.dtype[Any]) -> Any:
    """``convert_image_dtype`` of a uint8 or uint16 image: scaled between the integer types, to [0, 1]
    for float32."""
    if image.dtype == dtype:
        return image
    if dtype == np.float32:
        return (image.astype(np.float32) * np.float32(1.0 / np.iinfo(image.dtype).max)).astype(np.float32)
    if dtype == np.uint16:  # uint8 -> uint16: times 256
        return image.astype(np.uint16) << 8
    return (image >> 8).astype(np.uint8)


@kernel("DecodeImage", expensive=True)
def decode_image(node: Node) -> Compute:
    channels = _channels(node, (0, 1, 3, 4))
    dtype = node.attr_dtype("dtype", 4)
    if dtype not in (np.uint8, np.uint16, np.float32):
        raise _bad_attr(node, "dtype", f"must be uint8, uint16 or float32, got {dtype}")
    expand = node.attr_bool("expand_animations", True)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        data = _contents(node, inputs[0])
        kind = _format(data)
        if kind == "jpeg":
            if channels == 4:
                raise InvalidArgumentError("JPEG does not support 4 channels")
            image = _jpeg(data, channels)
        elif kind == "png":
            # a 16-bit PNG keeps its 16 bits for float32, as TensorFlow decodes it
            wide = dtype == np.uint16 or (dtype == np.float32 and len(data) > 24 and data[24] == 16)
            image = _png(data, channels, np.dtype(np.uint16 if wide else np.uint8))
        elif kind == "gif":
            if channels not in (0, 3):
                raise InvalidArgumentError(f"channels must be 0 or 3 for GIF, got {channels}")
            image = _gif(data)
            if not expand:
                image = image[0]
        elif kind == "bmp":
            if channels not in (0, 3, 4):
                raise InvalidArgumentError(f"`channels` must be 0, 3 or 4 for BMP, but got {channels}")
            image = _bmp(data, channels)
        elif kind == "webp":
            image = _webp(data, channels)
        else:
            raise InvalidArgumentError(
                "Unknown image file format. One of JPEG, PNG, GIF, BMP, WebP required."
            )
        return (_as_dtype(image, dtype),)

    return compute
