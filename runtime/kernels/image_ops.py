"""Image ops: resizing (NHWC images, ``size`` = [new_height, new_width]).

Source coordinates are computed as TensorFlow's CPU kernels compute them, in float32:

- scale = (in - 1) / (out - 1) with ``align_corners`` (and out > 1), else in / out;
- bilinear: x = (i + 0.5) * scale - 0.5 with ``half_pixel_centers``, else i * scale; it blends the pixels
  max(floor(x), 0) and min(ceil(x), in - 1) with weight x - floor(x), in float32;
- nearest: x = (i + 0.5) * scale with ``half_pixel_centers``, else i * scale; it takes pixel round(x)
  (half away from zero) with ``align_corners``, else floor(x), clamped to [0, in - 1].
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from poolserve.proto import types_pb2
from poolserve.runtime import dtypes
from poolserve.runtime.errors import InvalidArgumentError, ResourceExhaustedError
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_RESIZE_TYPES = (
    types_pb2.DT_INT8,
    types_pb2.DT_UINT8,
    types_pb2.DT_INT16,
    types_pb2.DT_UINT16,
    types_pb2.DT_INT32,
    types_pb2.DT_INT64,
    types_pb2.DT_BFLOAT16,
    types_pb2.DT_HALF,
    types_pb2.DT_FLOAT,
    types_pb2.DT_DOUBLE,
)
_HALF = np.float32(0.5)
_INT64_MAX = 2**63 - 1

Indices = tuple[Any, ...]


def _check_type_attr(node: Node) -> None:
    if not node.has_attr("T"):
        return
    t = node.attr_type("T")
    if t not in _RESIZE_TYPES:
        allowed = ", ".join(dtypes.name(a) for a in _RESIZE_TYPES)
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): Value for attr 'T' of {dtypes.name(t)} is not in the list "
            f"of allowed values: {allowed}",
            node.name,
        )


def _scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def _positions(out_size: int) -> Any:
    # static_cast<float>(i): numpy's int -> float32 conversion rounds the same way
    return np.arange(out_size).astype(np.float32)


def _bilinear_axis(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> Indices:
    scale = _scale(in_size, out_size, align_corners)
    i = _positions(out_size)
    x = (i + _HALF) * scale - _HALF if half_pixel else i * scale
    floor = np.floor(x)
    lower = np.clip(floor, 0, in_size - 1).astype(np.intp)
    upper = np.clip(np.ceil(x), 0, in_size - 1).astype(np.intp)
    lerp = (x - floor).astype(np.float32)
    return lower, upper, lerp


def _nearest_axis(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> Any:
    scale = _scale(in_size, out_size, align_corners)
    i = _positions(out_size)
    x = ((i + _HALF) * scale if half_pixel else i * scale).astype(np.float64)
    if align_corners:
        # roundf: halves away from zero (x >= 0 here); exact in float64
        floor = np.floor(x)
        idx = floor + (x - floor >= 0.5)
    else:
        idx = np.floor(x)
    return np.clip(idx, 0, in_size - 1).astype(np.intp)


def _resize_factory(
    node: Node,
    axis: Callable[[int, int, bool, bool], Any],
    resize: Callable[[Any, Any, Any, Any], None],
    out_dtype: np.dtype[Any] | None,
) -> Compute:
    """Shared checks of both resizes; ``axis`` makes the per-axis index data, ``resize`` fills the output.

    ``out_dtype`` None means the input's dtype.
    """
    _check_type_attr(node)
    align_corners = node.attr_bool("align_corners", False)
    half_pixel = node.attr_bool("half_pixel_centers", False)
    # TensorFlow checks this when the op runs, not when the graph is loaded.
    attr_error = (
        "If half_pixel_centers is True, align_corners must be False."
        if align_corners and half_pixel
        else None
    )
    # The index data of the last geometry seen: (in_h, in_w, out_h, out_w) -> (rows, cols).
    cache: list[tuple[tuple[int, int, int, int], tuple[Any, Any]]] = []

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        images, size = inputs
        if attr_error is not None:
            raise InvalidArgumentError(attr_error)
        out_h, out_w = _output_size(images, size)
        batch, in_h, in_w, channels = images.shape
        out_shape = (batch, out_h, out_w, channels)
        if batch * out_h * out_w * channels > _INT64_MAX:
            raise InvalidArgumentError(
                f"Encountered overflow: output shape {_shape_str(out_shape)} is too large"
            )
        # Allocated first: a size too large fails here, before any index array is made.
        dtype = images.dtype if out_dtype is None else out_dtype
        try:
            out = np.empty(out_shape, dtype)
        except (ValueError, MemoryError):
            raise ResourceExhaustedError(
                f"OOM when allocating tensor with shape{_shape_str(out_shape)} and type {dtype}"
            ) from None
        key = (in_h, in_w, out_h, out_w)
        cached = cache[0] if cache else None
        if cached is not None and cached[0] == key:
            rows, cols = cached[1]
        else:
            rows = axis(in_h, out_h, align_corners, half_pixel)
            cols = axis(in_w, out_w, align_corners, half_pixel)
            cache[:] = [(key, (rows, cols))]
        resize(images, rows, cols, out)
        return (out,)

    return compute


def _output_size(images: Any, size: Any) -> tuple[int, int]:
    """Validates the inputs as TensorFlow's ImageResizerState does, in its order."""
    if images.ndim != 4:
        raise InvalidArgumentError(f"input must be 4-dimensional{_shape_str(images.shape)}")
    size = np.asarray(size)
    if size.ndim != 1:
        raise InvalidArgumentError(f"shape_t must be 1-dimensional{_shape_str(size.shape)}")
    if size.shape[0] != 2:
        raise InvalidArgumentError(f"shape_t must have two elements{_shape_str(size.shape)}")
    out_h, out_w = int(size[0]), int(size[1])
    if out_h <= 0 or out_w <= 0:
        raise InvalidArgumentError("output dimensions must be positive")
    if images.shape[3] <= 0:
        raise InvalidArgumentError("image must have at least one channel")
    if images.shape[1] <= 0 or images.shape[2] <= 0:
        raise InvalidArgumentError("input image must be of non-zero size")
    return out_h, out_w


def _shape_str(shape: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _lerp_into_b(a: Any, b: Any, weight: Any) -> Any:
    """a + (b - a) * weight in float32, written over ``b`` (a fresh array)."""
    np.subtract(b, a, out=b)
    np.multiply(b, weight, out=b)
    np.add(b, a, out=b)
    return b


def _bilinear(images: Any, rows: Indices, cols: Indices, out: Any) -> None:
    y_lo, y_hi, y_lerp = rows
    x_lo, x_hi, x_lerp = cols
    img = images.astype(np.float32, copy=False)
    x_weight = x_lerp[:, None]
    # float32 throughout, in TensorFlow's order of operations. Fancy indexing copies, so the
    # in-place steps never touch the input.
    top = img[:, y_lo]
    top_row = _lerp_into_b(top[:, :, x_lo], top[:, :, x_hi], x_weight)
    del top
    bottom = img[:, y_hi]
    bottom_row = _lerp_into_b(bottom[:, :, x_lo], bottom[:, :, x_hi], x_weight)
    del bottom
    np.subtract(bottom_row, top_row, out=bottom_row)
    np.multiply(bottom_row, y_lerp[:, None, None], out=bottom_row)
    np.add(top_row, bottom_row, out=out)


def _nearest(images: Any, rows: Any, cols: Any, out: Any) -> None:
    # the indices are in range: mode="clip" lets np.take write straight into ``out``
    np.take(np.take(images, rows, axis=1, mode="clip"), cols, axis=2, out=out, mode="clip")


@kernel("ResizeBilinear", expensive=True)
def resize_bilinear(node: Node) -> Compute:
    """Output is float32 whatever the input type."""
    return _resize_factory(node, _bilinear_axis, _bilinear, np.dtype(np.float32))


@kernel("ResizeNearestNeighbor", expensive=True)
def resize_nearest_neighbor(node: Node) -> Compute:
    """Output has the input's type."""
    return _resize_factory(node, _nearest_axis, _nearest, None)


# --- bicubic and area: a weight matrix per axis ----------------------------------------------------------
#
# Each output pixel is a weighted sum of input pixels, separable by axis: the weights of an axis are a
# matrix [out, in] (four taps a row for bicubic, the covered cells for area), made once per geometry, and
# the image is multiplied by the width's matrix, then by the height's, in float32, as TensorFlow sums the
# columns of each row first.

_CUBIC_TABLE_SIZE = 1024


def _cubic_table(a: float) -> Any:
    """TensorFlow's table of Keys' cubic weights (``a`` = -0.5 with half-pixel centers, else -0.75): entry
    2i is the weight at distance i / 1024 from the tap, 2i + 1 at 1 + i / 1024."""
    x = (np.arange(_CUBIC_TABLE_SIZE + 1) / _CUBIC_TABLE_SIZE).astype(np.float32).astype(np.float64)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    x1 = (x.astype(np.float32) + np.float32(1)).astype(np.float64)
    far = ((a * x1 - 5 * a) * x1 + 8 * a) * x1 - 4 * a
    table = np.empty(2 * (_CUBIC_TABLE_SIZE + 1), np.float32)
    table[0::2], table[1::2] = near, far
    return table


_CUBIC_TABLES = {True: _cubic_table(-0.5), False: _cubic_table(-0.75)}


def _bicubic_axis(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> Any:
    scale = _scale(in_size, out_size, align_corners)
    i = _positions(out_size)
    x = (i + _HALF) * scale - _HALF if half_pixel else i * scale
    loc = np.floor(x).astype(np.int64)
    delta = (x - loc.astype(np.float32)).astype(np.float32)
    offset = np.rint(delta * np.float32(_CUBIC_TABLE_SIZE)).astype(np.int64)  # lrintf: halves to even
    table = _CUBIC_TABLES[half_pixel]
    far = _CUBIC_TABLE_SIZE - offset
    weights = np.stack([table[offset * 2 + 1], table[offset * 2], table[far * 2], table[far * 2 + 1]], axis=1)
    taps = loc[:, None] + np.arange(-1, 3)
    bounded = np.clip(taps, 0, in_size - 1)
    if half_pixel:
        # Keys' kernel: taps outside the image weigh 0 and the others are renormalized to sum to 1
        weights = np.where(bounded == taps, weights, np.float32(0))
        total = weights.sum(axis=1, dtype=np.float32)
        ok = np.abs(total) >= 1000 * np.finfo(np.float32).tiny
        weights = np.where(ok[:, None], weights * (np.float32(1) / np.where(ok, total, 1))[:, None], weights)
    matrix = np.zeros((out_size, in_size), np.float32)
    np.add.at(matrix, (np.repeat(np.arange(out_size), 4), bounded.ravel()), weights.ravel())
    return matrix


def _area_axis(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> Any:
    scale = _scale(in_size, out_size, align_corners)
    matrix = np.zeros((out_size, in_size), np.float32)
    if scale == 0:  # one pixel stretched by align_corners: TensorFlow answers that pixel
        matrix[:, 0] = 1
        return matrix
    for o in range(out_size):
        start = np.float32(o) * scale
        end = np.float32(o + 1) * scale
        for i in range(int(np.floor(start)), int(np.ceil(end))):
            if i < start:
                part = scale if i + 1 > end else np.float32(i + 1) - start
            else:
                part = end - np.float32(i) if i + 1 > end else np.float32(1)
            matrix[o, min(max(i, 0), in_size - 1)] += part
    return matrix * (np.float32(1) / scale)


def _by_matrices(images: Any, rows: Any, cols: Any, out: Any) -> None:
    n, h = images.shape[:2]
    across = np.matmul(cols, images.astype(np.float32, copy=False))  # [n, h, out_w, c]: each row's columns
    down = np.matmul(rows, across.reshape(n, h, -1))  # [n, out_h, out_w * c]
    out[...] = down.reshape(out.shape)


@kernel("ResizeBicubic", expensive=True)
def resize_bicubic(node: Node) -> Compute:
    """Output is float32 whatever the input type."""
    return _resize_factory(node, _bicubic_axis, _by_matrices, np.dtype(np.float32))


@kernel("ResizeArea", expensive=True)
def resize_area(node: Node) -> Compute:
    """Output is float32 whatever the input type; each output pixel averages the input cells it covers."""
    return _resize_factory(node, _area_axis, _by_matrices, np.dtype(np.float32))


# --- color: HSV conversions and adjustments -------------------------------------------------------------


def _rgb_to_hsv(rgb: Any) -> tuple[Any, Any, Any]:
    """TensorFlow's RGB-to-HSV (colorspace_op.h), in the input's float type, over the last axis."""
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    one = rgb.dtype.type(1)
    v = np.maximum(np.maximum(r, g), b)
    spread = v - np.minimum(np.minimum(r, g), b)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(v > 0, spread / v, rgb.dtype.type(0))
        norm = one / spread * (one / rgb.dtype.type(6))
        h = np.where(
            r == v,
            norm * (g - b),
            np.where(g == v, norm * (b - r) + rgb.dtype.type(2) / 6, norm * (r - g) + rgb.dtype.type(4) / 6),
        )
    h = np.where(spread > 0, h, rgb.dtype.type(0))
    h = np.where(h < 0, h + one, h)
    return h.astype(rgb.dtype), s.astype(rgb.dtype), v


def _hsv_to_rgb(h: Any, s: Any, v: Any) -> Any:
    """TensorFlow's HSV-to-RGB (colorspace_op.h)."""
    t = h.dtype.type
    dh = h * t(6)
    dr = np.clip(np.abs(dh - t(3)) - t(1), t(0), t(1))
    dg = np.clip(-np.abs(dh - t(2)) + t(2), t(0), t(1))
    db = np.clip(-np.abs(dh - t(4)) + t(2), t(0), t(1))
    one_s = -s + t(1)
    return np.stack([(one_s + s * dr) * v, (one_s + s * dg) * v, (one_s + s * db) * v], axis=-1)


def _check_rgb(images: Any, op: str) -> None:
    if images.ndim < 1 or images.shape[-1] != 3:
        have = images.shape[-1] if images.ndim else 0
        raise InvalidArgumentError(f"input must have 3 channels but input only has {have} channels.")


@kernel("RGBToHSV")
def rgb_to_hsv(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (images,) = inputs
        _check_rgb(images, node.op)
        return (np.stack(_rgb_to_hsv(images), axis=-1),)

    return compute


@kernel("HSVToRGB")
def hsv_to_rgb(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (images,) = inputs
        _check_rgb(images, node.op)
        return (_hsv_to_rgb(images[..., 0], images[..., 1], images[..., 2]),)

    return compute


@kernel("AdjustContrastv2")
def adjust_contrast_v2(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        images, factor = inputs
        if images.ndim < 3:
            raise InvalidArgumentError(f"input must be at least 3-D, got shape{_shape_str(images.shape)}")
        if factor.ndim != 0:
            raise InvalidArgumentError(f"contrast_factor must be scalar: {factor.ndim}")
        x = images.astype(np.float32, copy=False)
        mean = x.mean(axis=(-3, -2), keepdims=True, dtype=np.float32)
        return (((x - mean) * factor.astype(np.float32) + mean).astype(images.dtype, copy=False),)

    return compute


def _hsv_to_rgb_sectors(h: Any, s: Any, v: Any) -> Any:
    """adjust_saturation_op.cc's per-pixel HSV-to-RGB (by the hue's sector), in float32."""
    f = np.float32
    c = s * v
    m = v - c
    dh = h * f(6)
    sector = dh.astype(np.int32)
    # fmod(dh, 2) into (0, 2): dh is in [0, 6]
    wrapped = np.where(dh <= 0, dh + f(2), dh)
    wrapped = wrapped - f(2) * np.floor(wrapped / f(2))
    x = c * (f(1) - np.abs(wrapped - f(1)))
    zero = np.zeros_like(c)
    choices = [(c, x, zero), (x, c, zero), (zero, c, x), (zero, x, c), (x, zero, c), (c, zero, x)]
    out = []
    for channel in range(3):
        value = zero
        for k, parts in enumerate(choices):
            value = np.where(sector == k, parts[channel], value)
        out.append(value + m)
    return np.stack(out, axis=-1)


@kernel("AdjustSaturation")
def adjust_saturation(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        images, scale = inputs
        _check_rgb(images, node.op)
        if scale.ndim != 0:
            raise InvalidArgumentError(f"scale must be scalar: {_shape_str(scale.shape)}")
        x = images.astype(np.float32, copy=False)
        h, s, v = _rgb_to_hsv(x)
        s = np.clip(s * scale.astype(np.float32), np.float32(0), np.float32(1))
        return (_hsv_to_rgb_sectors(h, s, v).astype(images.dtype, copy=False),)

    return compute


def _hue_range(r: Any, g: Any, b: Any) -> tuple[Any, Any, Any]:
    """adjust_hue_op.cc's RGB to (hue in [0, 6), min, max): the hue's sector by the channels' order."""
    f = np.float32
    rg, br, bg = r < g, b < r, b > g
    gb, rb = b < g, b > r
    # sectors and (max, mid, min) as TensorFlow's branches pick them, ties falling as its comparisons do
    cases = [
        (rg & br, 1, g, r, b),
        (rg & ~br & bg, 3, b, g, r),
        (rg & ~br & ~bg, 2, g, b, r),
        (~rg & gb, 0, r, g, b),
        (~rg & ~gb & rb, 4, b, r, g),
        (~rg & ~gb & ~rb, 5, r, b, g),
    ]
    sector = np.select([c[0] for c in cases], [np.int32(c[1]) for c in cases])
    vmax = np.select([c[0] for c in cases], [c[2] for c in cases])
    vmid = np.select([c[0] for c in cases], [c[3] for c in cases])
    vmin = np.select([c[0] for c in cases], [c[4] for c in cases])
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (vmid - vmin) / (vmax - vmin)
    increase = sector % 2 == 0
    h = sector.astype(f) + np.where(increase, ratio, f(1) - ratio)
    return np.where(vmax == vmin, f(0), h).astype(f), vmin, vmax


@kernel("AdjustHue")
def adjust_hue(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        images, delta = inputs
        if images.ndim < 3:
            raise InvalidArgumentError(f"input must be at least 3-D, got shape{_shape_str(images.shape)}")
        if delta.ndim != 0:
            raise InvalidArgumentError(f"delta must be scalar: {_shape_str(delta.shape)}")
        if images.shape[-1] != 3:
            raise InvalidArgumentError(
                f"input must have 3 channels but instead has {images.shape[-1]} channels."
            )
        f = np.float32
        x = images.astype(f, copy=False)
        h, vmin, vmax = _hue_range(x[..., 0], x[..., 1], x[..., 2])
        h = h + f(delta) * f(6)
        # back into [0, 6) by whole turns, one at a time as TensorFlow's loops (|delta| is small)
        while (low := h < 0).any():
            h[low] += f(6)
        while (high := h >= 6).any():
            h[high] -= f(6)
        sector = h.astype(np.int32)
        ratio = h - sector.astype(f)
        ratio = np.where(sector % 2 == 0, ratio, f(1) - ratio)
        vmid = vmin + ratio * (vmax - vmin)
        picks = [
            (vmax, vmid, vmin),
            (vmid, vmax, vmin),
            (vmin, vmax, vmid),
            (vmin, vmid, vmax),
            (vmid, vmin, vmax),
        ]
        channels = []
        for c in range(3):
            default = (vmax, vmin, vmid)[c]  # sector 5
            channels.append(np.select([sector == k for k in range(5)], [p[c] for p in picks], default))
        return (np.stack(channels, axis=-1).astype(images.dtype, copy=False),)

    return compute


# --- projective transforms: ImageProjectiveTransformV2/V3 (Keras' ops.image.affine_transform) ------------


def _map_coordinate(c: Any, size: int, mode: str) -> Any:
    """Where an output's source coordinate lands by ``fill_mode`` (image_ops.h's MapCoordinate), float32."""
    f = np.float32
    if mode == "CONSTANT":
        return c
    if mode != "NEAREST" and size > 1:
        c = c.copy()
        low, high = c < 0, c > size - 1  # one branch each, as TensorFlow's if / else if
        lo, hi = c[low], c[high]
        if mode == "REFLECT":
            sz2 = 2 * size
            lo = np.where(lo < sz2, f(sz2) * np.trunc(-lo / f(sz2)).astype(f) + lo, lo).astype(f)
            c[low] = np.where(lo < -size, lo + f(sz2), -lo - f(1))
            hi = (hi - f(sz2) * np.trunc(hi / f(sz2)).astype(f)).astype(f)
            c[high] = np.where(hi >= size, f(sz2) - hi - f(1), hi)
        else:  # WRAP
            sz = size - 1
            c[low] = lo + f(size) * (np.trunc(-lo / f(sz)) + f(1)).astype(f)
            c[high] = hi - f(size) * np.trunc(hi / f(sz)).astype(f)
    elif mode != "NEAREST":
        c = np.where((c < 0) | (c > size - 1), f(0), c)
    return np.clip(c, f(0), f(size - 1))


def _projective(
    images: Any, transforms: Any, out_h: int, out_w: int, fill: Any, nearest: bool, mode: str
) -> Any:
    n, h, w, channels = images.shape
    f = np.float32
    ox = np.arange(out_w, dtype=np.int64).astype(f)[None, :]
    oy = np.arange(out_h, dtype=np.int64).astype(f)[:, None]
    out = np.empty((n, out_h, out_w, channels), images.dtype)
    for b in range(n):
        t = transforms[0 if transforms.shape[0] == 1 else b].astype(f)
        projection = t[6] * ox + t[7] * oy + f(1)
        with np.errstate(divide="ignore", invalid="ignore"):
            x = (t[0] * ox + t[1] * oy + t[2]) / projection
            y = (t[3] * ox + t[4] * oy + t[5]) / projection
        x = _map_coordinate(np.broadcast_to(x, (out_h, out_w)).astype(f), w, mode)
        y = _map_coordinate(np.broadcast_to(y, (out_h, out_w)).astype(f), h, mode)
        # (a point outside the input reads the fill value, corner by corner for bilinear)
        outside = np.broadcast_to(projection == 0, (out_h, out_w))
        x = np.where(outside | ~np.isfinite(x), f(-2), x)
        y = np.where(outside | ~np.isfinite(y), f(-2), y)

        def read(yi: Any, xi: Any, image: Any = images[b]) -> Any:
            inside = (yi >= 0) & (yi < h) & (xi >= 0) & (xi < w)
            values = image[np.clip(yi, 0, h - 1), np.clip(xi, 0, w - 1)]
            return np.where(inside[..., None], values, fill)

        if nearest:
            # std::round: halves away from zero (coordinates are >= 0 here)
            value = read(np.floor(y + f(0.5)).astype(np.int64), np.floor(x + f(0.5)).astype(np.int64))
        else:
            y0, x0 = np.floor(y), np.floor(x)
            y1, x1 = y0 + f(1), x0 + f(1)
            yi0, xi0, yi1, xi1 = (v.astype(np.int64) for v in (y0, x0, y1, x1))
            wx0, wx1 = (x1 - x)[..., None], (x - x0)[..., None]
            top = wx0 * read(yi0, xi0).astype(f) + wx1 * read(yi0, xi1).astype(f)
            bottom = wx0 * read(yi1, xi0).astype(f) + wx1 * read(yi1, xi1).astype(f)
            value = (y1 - y)[..., None] * top + (y - y0)[..., None] * bottom
            if images.dtype.kind in "iu":
                value = np.trunc(value)
        out[b] = np.where(outside[..., None], fill, value)
    return out


def _projective_factory(node: Node, has_fill: bool) -> Compute:
    interpolation = node.attr_str("interpolation", choices=("NEAREST", "BILINEAR"))
    mode = node.attr_str("fill_mode", "CONSTANT", choices=("REFLECT", "WRAP", "CONSTANT", "NEAREST"))
    nearest = interpolation == "NEAREST"

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        images, transforms, shape = inputs[0], inputs[1], inputs[2]
        fill = images.dtype.type(inputs[3]) if has_fill else images.dtype.type(0)
        if images.ndim != 4:
            raise InvalidArgumentError(f"Input images must have rank 4, got shape{_shape_str(images.shape)}")
        if (
            transforms.ndim != 2
            or transforms.shape[1] != 8
            or transforms.shape[0] not in (1, images.shape[0])
        ):
            raise InvalidArgumentError(
                f"Input transform should be num_images x 8 or 1 x 8, got shape{_shape_str(transforms.shape)}"
            )
        if shape.shape != (2,):
            raise InvalidArgumentError("output shape must be 1-dimensional and have 2 elements")
        out_h, out_w = (int(v) for v in shape.tolist())
        if out_h <= 0 or out_w <= 0:
            raise InvalidArgumentError("output dimensions must be positive")
        return (_projective(images, transforms, out_h, out_w, fill, nearest, mode),)

    return compute


@kernel("ImageProjectiveTransformV3", expensive=True)
def image_projective_transform_v3(node: Node) -> Compute:
    return _projective_factory(node, has_fill=True)


@kernel("ImageProjectiveTransformV2", expensive=True)
def image_projective_transform_v2(node: Node) -> Compute:
    return _projective_factory(node, has_fill=False)


# --- ScaleAndTranslate: resampling kernels (tf.image.resize's lanczos3/5, gaussian, mitchellcubic, ...) ---


def _lanczos(radius: float) -> Callable[[Any], Any]:
    pi = np.float32(3.14159265359)

    def weight(x: Any) -> Any:
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.float32(radius) * np.sin(pi * x) * np.sin(pi * x / np.float32(radius)) / (pi * pi * x * x)
        w = np.where(x <= np.float32(1e-3), np.float32(1), w)
        return np.where(x > radius, np.float32(0), w).astype(np.float32)

    return weight


def _gaussian(x: Any) -> Any:
    sigma = 1.5 / 3.0
    return np.where(x >= 1.5, 0.0, np.exp(-(x.astype(np.float64) ** 2) / (2.0 * sigma * sigma))).astype(
        np.float32
    )


def _box(x: Any) -> Any:
    return np.where(x < 0.5, np.float32(1), np.where(x == 0.5, np.float32(0.5), np.float32(0)))


def _triangle(x: Any) -> Any:
    return np.where(x < 1, np.float32(1) - x, np.float32(0)).astype(np.float32)


def _keys_cubic(x: Any) -> Any:
    f = np.float32
    far = ((f(-0.5) * x + f(2.5)) * x - f(4.0)) * x + f(2.0)
    near = ((f(1.5) * x - f(2.5)) * x) * x + f(1.0)
    return np.where(x >= 2, f(0), np.where(x >= 1, far, near)).astype(f)


def _mitchell_cubic(x: Any) -> Any:
    f = np.float32
    far = (((f(-7.0 / 18.0)) * x + f(2.0)) * x - f(10.0 / 3.0)) * x + f(16.0 / 9.0)
    near = (((f(7.0 / 6.0)) * x - f(2.0)) * x) * x + f(8.0 / 9.0)
    return np.where(x >= 2, f(0), np.where(x >= 1, far, near)).astype(f)


# kernel type -> (weight of |distance|, radius), as sampling_kernels.h defines them
_SAMPLING: dict[str, tuple[Callable[[Any], Any], float]] = {
    "lanczos1": (_lanczos(1.0), 1.0),
    "lanczos3": (_lanczos(3.0), 3.0),
    "lanczos5": (_lanczos(5.0), 5.0),
    "gaussian": (_gaussian, 1.5),
    "box": (_box, 1.0),
    "triangle": (_triangle, 1.0),
    "keyscubic": (_keys_cubic, 2.0),
    "mitchellcubic": (_mitchell_cubic, 2.0),
}


@lru_cache(maxsize=64)  # per geometry: the loop over outputs runs once, not per step
def _span_matrix(
    out_size: int, in_size: int, scale: float, translate: float, kind: str, antialias: bool
) -> Any:
    """The [out, in] weights of one axis: each output samples the input pixels within the kernel's radius
    of its source point (scaled up when downsampling with ``antialias``), normalized to sum to 1; a source
    point outside the input gives no weights (the output is 0)."""
    f = np.float32
    weight, radius = _SAMPLING[kind]
    inv_scale = f(1.0) / f(scale)
    inv_translate = -inv_scale * f(translate)
    kernel_scale = max(inv_scale, f(1)) if antialias else f(1)
    reach = f(radius) * kernel_scale
    matrix = np.zeros((out_size, in_size), np.float32)
    for x in range(out_size):
        sample = (f(x) + f(0.5)) * inv_scale + inv_translate
        if sample < 0 or sample > in_size:
            continue
        start = min(max(int(np.ceil(sample - reach - f(0.5))), 0), in_size - 1)
        end = min(max(int(np.floor(sample + reach - f(0.5))), 0), in_size - 1) + 1
        source = np.arange(start, end, dtype=np.float32)
        w = weight(np.abs((source + f(0.5) - sample) * (f(1) / kernel_scale)))
        total = w.sum(dtype=np.float32)
        if abs(total) >= 1000 * np.finfo(np.float32).tiny:
            matrix[x, start:end] = w * (f(1) / total)
    return matrix


@kernel("ScaleAndTranslate", expensive=True)
def scale_and_translate(node: Node) -> Compute:
    kind = node.attr_str("kernel_type", "lanczos3")
    if kind not in _SAMPLING:
        raise InvalidArgumentError(f"Unrecognized kernel type: {kind}")
    antialias = node.attr_bool("antialias", True)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        images, size, scale, translation = inputs
        if images.ndim != 4:
            raise InvalidArgumentError(f"input must be 4-dimensional{_shape_str(images.shape)}")
        for name, t in (("output_shape_t", size), ("t", scale), ("t", translation)):
            if t.ndim != 1:
                raise InvalidArgumentError(f"{name} must be 1-dimensional{_shape_str(t.shape)}")
            if t.size != 2:
                raise InvalidArgumentError(f"{name} must have two elements{_shape_str(t.shape)}")
        out_h, out_w = (int(v) for v in size.tolist())
        n, in_h, in_w, channels = images.shape
        if out_h <= 0 or out_w <= 0:
            raise InvalidArgumentError("output dimensions must be positive")
        if channels <= 0:
            raise InvalidArgumentError("image must have at least one channel")
        if in_h <= 0 or in_w <= 0:
            raise InvalidArgumentError("input image must be of non-zero size")
        row_scale, col_scale = (float(v) for v in scale.astype(np.float32).tolist())
        if not (row_scale > 0 and col_scale > 0):
            raise InvalidArgumentError("Scale must be greater than zero.")
        row_t, col_t = (float(v) for v in translation.astype(np.float32).tolist())
        rows = _span_matrix(out_h, in_h, row_scale, row_t, kind, antialias)
        cols = _span_matrix(out_w, in_w, col_scale, col_t, kind, antialias)
        out = np.empty((n, out_h, out_w, channels), np.float32)
        # rows first, then columns, as TensorFlow's two passes
        down = np.matmul(rows, images.astype(np.float32, copy=False).reshape(n, in_h, -1))
        out[...] = np.matmul(cols, down.reshape(n, out_h, in_w, channels))
        return (out,)

    return compute
