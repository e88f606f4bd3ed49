"""Convolutions and pooling: Conv2D, Conv2DBackpropInput, MaxPool, MaxPoolV2, AvgPool, and the window
geometry (strides, dilations, padding) they share with DepthwiseConv2dNative (``depthwise_ops``).

Convolutions run as BLAS matmuls over strided patch views (im2col, or row taps); pooling loops over the
kernel taps only. Half-precision products are computed in float32 and rounded once, as
TensorFlow's CPU kernels do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.runtime.kernels._common import (
    _F16,
    _F32,
    _MAX_INNER,
    _PLAN_CACHE_SIZE,
    _attrs_of,
    _dims,
    _matmul,
    _reduce_taps,
    _taps,
    _widen,
)
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

# --- convolution and pooling geometry ----------------------------------------------------------------------


class _Window(NamedTuple):
    """Stride, dilation and padding of a 2-D window op; ``pads`` are explicit (top, bottom, left, right)."""

    sh: int
    sw: int
    dh: int
    dw: int
    padding: str
    pads: tuple[int, int, int, int]
    nchw: bool


def _window_attrs(node: Node) -> _Window:
    """Reads and checks strides, dilations, padding, explicit_paddings and data_format of a Conv2D-like op."""
    nchw = node.attr_str("data_format", "NHWC", choices=("NHWC", "NCHW")) == "NCHW"
    strides = node.attr_ints("strides")
    dilations = node.attr_ints("dilations", [1, 1, 1, 1])
    padding = node.attr_str("padding", choices=("SAME", "VALID", "EXPLICIT"))
    explicit = node.attr_ints("explicit_paddings", [])
    h, w, c = (2, 3, 1) if nchw else (1, 2, 3)
    with _attrs_of(node):
        if len(strides) != 4:
            raise InvalidArgumentError("Sliding window strides field must specify 4 dimensions")
        if strides[0] != 1 or strides[c] != 1:
            raise UnimplementedError(
                "Current implementation does not yet support strides in the batch and depth dimensions."
            )
        if strides[h] < 1 or strides[w] < 1:
            raise InvalidArgumentError("Row and column strides should be larger than 0.")
        if len(dilations) != 4:
            raise InvalidArgumentError("Sliding window dilations field must specify 4 dimensions")
        if dilations[0] != 1 or dilations[c] != 1:
            raise UnimplementedError(
                "Current implementation does not yet support dilations in the batch and depth dimensions."
            )
        if dilations[h] < 1 or dilations[w] < 1:
            raise InvalidArgumentError("Dilated rates should be larger than 0.")
        pads = (0, 0, 0, 0)
        if padding == "EXPLICIT":
            if len(explicit) != 8:
                raise InvalidArgumentError(
                    f"explicit_paddings attribute must contain 8 values, but got: {len(explicit)}"
                )
            if min(explicit) < 0:
                raise InvalidArgumentError("All elements of explicit_paddings must be nonnegative")
            if any(explicit[2 * c : 2 * c + 2]) or any(explicit[0:2]):
                raise InvalidArgumentError(
                    "Nonzero explicit padding in the batch or depth dimensions is not supported"
                )
            pads = (explicit[2 * h], explicit[2 * h + 1], explicit[2 * w], explicit[2 * w + 1])
        elif explicit:
            raise InvalidArgumentError(
                "explicit_paddings attribute must be empty if the padding attribute is not EXPLICIT"
            )
    return _Window(strides[h], strides[w], dilations[h], dilations[w], padding, pads, nchw)


def _out_dim(
    size: int, k: int, stride: int, dilation: int, padding: str, before: int, after: int
) -> tuple[int, int, int]:
    """(output size, pad before, pad after) of one spatial dim, as TensorFlow computes them."""
    eff = (k - 1) * dilation + 1
    if padding == "SAME":
        out = (size + stride - 1) // stride
        need = max(0, (out - 1) * stride + eff - size)
        return out, need // 2, need - need // 2
    if padding == "VALID":
        before = after = 0
    num = size + before + after - eff + stride
    out = num // stride if num >= 0 else -(-num // stride)  # C++ division truncates toward zero
    if out < 0:
        raise InvalidArgumentError(
            f"Computed output size would be negative: {out} [input_size: {size}, "
            f"effective_filter_size: {eff}, stride: {stride}]"
        )
    return out, before, after


def _geometry(win: _Window, h: int, w: int, kh: int, kw: int) -> tuple[int, int, tuple[int, int, int, int]]:
    oh, pt, pb = _out_dim(h, kh, win.sh, win.dh, win.padding, win.pads[0], win.pads[1])
    ow, pl, pr = _out_dim(w, kw, win.sw, win.dw, win.padding, win.pads[2], win.pads[3])
    return oh, ow, (pt, pb, pl, pr)


Geometry = tuple[int, int, tuple[int, int, int, int]]


def _geometry_cache(win: _Window) -> Any:
    """``_geometry`` for one node, remembered per input and filter size: a convolution's kernel sees the
    same shapes step after step, and the arithmetic costs a few microseconds a call."""
    seen: dict[tuple[int, int, int, int], Geometry] = {}

    def geometry(h: int, w: int, kh: int, kw: int) -> Geometry:
        key = (h, w, kh, kw)
        g = seen.get(key)
        if g is None:
            g = _geometry(win, h, w, kh, kw)  # raises on a negative output size: nothing is remembered
            if len(seen) >= _PLAN_CACHE_SIZE:
                seen.clear()
            seen[key] = g
        return g

    return geometry


def _window_view(x: Any, shape: tuple[int, ...], strides: tuple[int, ...]) -> Any:
    """A read-only strided view of ``x`` (patches, taps). The ndarray constructor costs about 2 us where
    numpy's ``as_strided`` costs about 11 (it goes through ``__array_interface__``); it needs a contiguous
    buffer, which a padded input always is."""
    if x.flags.c_contiguous:
        view = np.ndarray(shape, x.dtype, x, 0, strides)
        view.flags.writeable = False
        return view
    return as_strided(x, shape, strides, writeable=False)


def _pad(x: Any, pads: tuple[int, int, int, int], nchw: bool, value: Any = 0) -> Any:
    pt, pb, pl, pr = pads
    if not (pt or pb or pl or pr):
        return x
    if nchw:
        n, c, h, w = x.shape
        shape = (n, c, h + pt + pb, w + pl + pr)
    else:
        n, h, w, c = x.shape
        shape = (n, h + pt + pb, w + pl + pr, c)
    out = np.zeros(shape, x.dtype) if value == 0 else np.full(shape, value, x.dtype)
    out[_spatial(nchw, slice(pt, pt + h), slice(pl, pl + w))] = x
    return out


def _spatial(nchw: bool, rows: slice, cols: slice) -> tuple[slice, ...]:
    every = slice(None)
    return (every, every, rows, cols) if nchw else (every, rows, cols, every)


def _check_rank4(x: Any, what: str) -> None:
    if x.ndim != 4:
        raise InvalidArgumentError(f"{what} must be 4-dimensional: {_dims(x.shape)}")


# --- convolutions ------------------------------------------------------------------------------------------


# Output values per band of a chunked convolution (and the size from which one is chunked, twice this):
# 64K float32 values (256 KiB) stay in the core's cache. Measured on batch-8 shapes with bias and Relu6
# fused, one BLAS thread, best of 3 x 10 on the loaded 2-core machine, bands against whole: MobileNetV2's
# 1x1 [8, 48, 48, 8] -> 48 2.67 ms against 3.44, its stride-2 3x3 [8, 96, 96, 3] -> 16 3.12 against 3.39,
# a 3x3 [8, 32, 32, 16] -> 16 2.55 against 3.21, depthwise [8, 48, 48, 16] (taps) 3.46 against 4.26.
# Smaller outputs lose to the extra calls ([4608x8] @ [8x48] 0.36 against 0.41 ms).
_CHUNK = 1 << 16

# bias and activation, applied in place to a block of output rows (channels last) while it is in cache
Epilogue = Callable[[Any], Any]


def _conv2d(
    x: Any,
    w: Any,
    win: _Window,
    oh: int,
    ow: int,
    pads: tuple[int, int, int, int],
    groups: int,
    epilogue: Epilogue | None = None,
) -> Any:
    """im2col convolution: the patches of a strided view, reshaped to rows, times the filter matrix; then
    ``epilogue`` on the output, in place."""
    kh, kw, cf, o = w.shape
    sh, sw, dh, dw = win.sh, win.sw, win.dh, win.dw
    if win.nchw and groups > 1:
        nhwc = win._replace(nchw=False)
        y = _conv2d(x.transpose(0, 2, 3, 1), w, nhwc, oh, ow, pads, groups).transpose(0, 3, 1, 2)
        if epilogue is not None:
            epilogue(y)
        return y
    pointwise = kh == kw == 1 and not any(pads)
    if win.nchw:
        n, c = x.shape[:2]
        if pointwise:
            cols = x[:, :, ::sh, ::sw].reshape(n, c, oh * ow)
        else:
            xp = _pad(x, pads, True)
            s0, s1, s2, s3 = xp.strides
            patches = _window_view(xp, (n, kh, kw, c, oh, ow), (s0, s2 * dh, s3 * dw, s1, s2 * sh, s3 * sw))
            cols = patches.reshape(n, kh * kw * c, oh * ow)
        y = _matmul(w.reshape(kh * kw * c, o).T, cols).reshape(n, o, oh, ow)
        if epilogue is not None:
            epilogue(y)
        return y
    n, c = x.shape[0], x.shape[3]
    rows = n * oh * ow
    if groups == 1 and c == 1 and not pointwise:
        return _conv2d_tap_planes(x, w, win, oh, ow, pads, epilogue)
    if groups == 1 and _on_row_taps(win, kh, c, ow):
        return _conv2d_row_taps(x, w, win, oh, ow, pads, epilogue)
    if groups == 1 and (rows * o >= 2 * _CHUNK or rows * kh * kw * c >= _BAND_COLS):
        return _conv2d_chunked(x, w, win, oh, ow, pads, epilogue)
    if pointwise:
        cols = x[:, ::sh, ::sw, :].reshape(rows, c)
    else:
        xp = _pad(x, pads, False)
        s0, s1, s2, s3 = xp.strides
        patches = _window_view(xp, (n, oh, ow, kh, kw, c), (s0, s1 * sh, s2 * sw, s1 * dh, s2 * dw, s3))
        cols = patches.reshape(rows, kh * kw * c)
    if groups == 1:
        y = _matmul(cols, w.reshape(kh * kw * cf, o))
    else:
        og = o // groups
        gcols = (
            cols.reshape(rows, kh * kw, groups, cf).transpose(2, 0, 1, 3).reshape(groups, rows, kh * kw * cf)
        )
        gw = w.reshape(kh * kw * cf, groups, og).transpose(1, 0, 2)
        y = np.matmul(gcols, gw).transpose(1, 0, 2).reshape(rows, o)
    y = y.reshape(n, oh, ow, o)
    if epilogue is not None:
        epilogue(y)
    return y


# NHWC convolutions of unit row stride, a kernel more than one row tall, at least this many input channels
# and this many output columns run on row taps (``_conv2d_row_taps``). Fused 3x3 (bias, Relu), best of 3 x 12,
# interleaved, im2col bands against row taps, us, one BLAS thread | two:
#
#   (8, 32, 32, 32) -> 32     2381 / 2153 | 2353 / 1975      (1, 96, 96, 16) -> 16    1147 / 822 | 1277 / 828
#   (8, 16, 16, 64) -> 64     1617 / 1566 | 1598 / 1417      (8, 32, 32, 16) -> 16     954 / 697 | 1051 / 697
#   (1, 56, 56, 64) -> 64     2645 / 2376 | 2428 / 2154      (8, 32, 32, 8) -> 16      581 / 484 |  683 / 497
#   (8, 56, 56, 32) -> 32     7809 / 6894 | 7369 / 6338      (8, 16, 16, 32) -> 32     720 / 513 |  614 / 461
#   (1, 28, 28, 128) -> 128   2168 / 2011 | 1826 / 1678      (1, 32, 32, 32) -> 32     272 / 255 |  285 / 237
#
# Kept on im2col: 8 columns ((8, 8, 8, 128) -> 128: 1397 / 1502 | 1233 / 1706) and 3 channels ((8, 32, 32, 3)
# -> 32: 475 / 514 | 485 / 507; (1, 224, 224, 3) -> 32: 4302 / 4112 | 3154 / 3425). A band holds at least
# ``_ROW_TAPS_MIN_BAND`` times the extra input rows it reads: in bands of one row, VGG16's wide layers copied
# as much as im2col and lost ((1, 224, 224, 64) -> 64 1.38x, (1, 56, 56, 256) -> 256 1.62x). Per layer in the
# models (minimum over 8 calls each way, one BLAS thread, in turns in one process): VGG16's 3x3 layers
# 0.89-1.00x, ResNet50's (1, 56, 56, 64) -> 64 0.79x and (1, 28, 28, 128) -> 128 0.60x, DenseNet121's
# (1, 56, 56, 128) -> 32 0.74x; all of them, summed: VGG16 0.95x, ResNet50 0.94x, DenseNet121 0.85x,
# InceptionV3 1.01x, the residual CNN 1.00x (the same layers vary by up to 20% from call to call).
_ROW_TAPS_MIN_CHANNELS = 8
_ROW_TAPS_MIN_WIDTH = 16
_ROW_TAPS_MIN_BAND = 2


def _on_row_taps(win: _Window, kh: int, c: int, ow: int) -> bool:
    return (
        not win.nchw and win.sh == 1 and kh > 1 and c >= _ROW_TAPS_MIN_CHANNELS and ow >= _ROW_TAPS_MIN_WIDTH
    )


def _conv2d_row_taps(
    x: Any, w: Any, win: _Window, oh: int, ow: int, pads: tuple[int, int, int, int], epilogue: Epilogue | None
) -> Any:
    """An NHWC convolution of unit row stride as ``kh`` products per band of output rows, one per kernel
    row: a band copies only the column taps of its input rows ([input rows x ow, kw * c], kw values per
    input value where im2col copies kh * kw), and kernel row i reads that matrix from input row ``i * dh``
    on, a contiguous slice, times its [kw * c, o] filter rows; the products are summed, then ``epilogue``
    runs on the band while it is in cache."""
    kh, kw, c, o = w.shape
    n = x.shape[0]
    xp = _pad(x, pads, False)
    s0, s1, s2, s3 = xp.strides
    taps = _window_view(xp, (n, xp.shape[1], ow, kw, c), (s0, s1, s2 * win.sw, s2 * win.dw, s3))
    filters = [w[i].reshape(kw * c, o) for i in range(kh)]
    reach = (kh - 1) * win.dh  # input rows a band needs past its own
    y = np.empty((n, oh, ow, o), np.result_type(x, w))
    step = max(1, min(oh, max(_ROW_TAPS_MIN_BAND * reach, _CHUNK // (max(o, kw * c) * ow))))
    tmp = np.empty((step * ow, o), y.dtype)
    for b in range(n):
        for r0 in range(0, oh, step):
            r1 = min(oh, r0 + step)
            size = (r1 - r0) * ow
            cols = taps[b, r0 : r1 + reach].reshape(-1, kw * c)
            block = y[b, r0:r1].reshape(size, o)
            _matmul(cols[:size], filters[0], out=block)
            part = tmp[:size]
            for i in range(1, kh):
                start = i * win.dh * ow
                _matmul(cols[start : start + size], filters[i], out=part)
                block += part
            if epilogue is not None:
                epilogue(y[b, r0:r1])
    return y


def _conv2d_tap_planes(
    x: Any, w: Any, win: _Window, oh: int, ow: int, pads: tuple[int, int, int, int], epilogue: Epilogue | None
) -> Any:
    """An NHWC convolution of one input channel (a grayscale image, a spectrogram) as im2col transposed:
    the patches of a band are ``kh * kw`` planes [tap, pixels], each copied from a strided slice of the
    padded input (runs of ``ow`` values), and the product reads them transposed, as BLAS allows. im2col's
    rows ([pixels, taps]) were copied ``kw`` values at a time. A band is a group of whole images when one
    image's output is under ``_CHUNK`` values (a band per image row group paid the copies' and the
    product's call overhead per image), else rows of one image (``_lines``). Fused 3x3 (bias, Relu), one
    BLAS thread, the two ways in paired rounds in one process (9), median ratio: (32, 28, 28, 1) -> 16
    0.51x (1144 -> 692 us at best), (8, 64, 64, 1) -> 16 0.59x, (8, 28, 28, 1) -> 32 0.70x, (1, 128, 128, 1)
    -> 32 stride 2 0.75x, (1, 28, 28, 1) -> 16 0.96x.

    Three channels (an RGB image) lost on tap planes (1.13-1.50x at stride 1: each plane is a gather of
    every third value, where im2col copies runs of ``kw * 3``), so they keep im2col."""
    kh, kw, _, o = w.shape
    n = x.shape[0]
    sh, sw, dh, dw = win.sh, win.sw, win.dh, win.dw
    xp = _pad(x, pads, False)[..., 0]
    wm = w.reshape(kh * kw, o)
    y = np.empty((n, oh, ow, o), np.result_type(x, w))
    if y.size == 0 or kh * kw == 0:
        y[...] = 0
        return _after(y, epilogue)
    per_image = oh * ow * o
    if per_image >= _CHUNK:
        bands = [(b, b + 1, r0, r1) for b, r0, r1 in _lines(n, oh, ow * o)]
    else:
        group = max(1, _CHUNK // per_image)
        bands = [(b, min(n, b + group), 0, oh) for b in range(0, n, group)]
    most = max((b1 - b0) * (r1 - r0) for b0, b1, r0, r1 in bands) * ow
    planes = np.empty((kh * kw, most), xp.dtype)
    for b0, b1, r0, r1 in bands:
        rows = r1 - r0
        size = (b1 - b0) * rows * ow
        band = planes[:, :size]
        taps = band.reshape(kh * kw, b1 - b0, rows, ow)
        for i in range(kh):
            top = r0 * sh + i * dh
            for j in range(kw):
                left = j * dw
                taps[i * kw + j] = xp[
                    b0:b1, top : top + (rows - 1) * sh + 1 : sh, left : left + (ow - 1) * sw + 1 : sw
                ]
        out = y[b0:b1, r0:r1]
        _matmul(band.T, wm, out=out.reshape(size, o))
        if epilogue is not None:
            epilogue(out)
    return y


def _lines(n: int, oh: int, per_line: int) -> Iterator[tuple[int, int, int]]:
    """(image, first row, end row) blocks of output rows of about ``_CHUNK`` values each."""
    step = max(1, _CHUNK // max(1, per_line))
    for b in range(n):
        for r in range(0, oh, step):
            yield b, r, min(oh, r + step)


# A convolution whose im2col matrix holds this many values or more runs in bands too (a deep, narrow one:
# DenseNet's 3x3 convolutions of 128 channels into 32 on 56x56 wrote a 14 MB matrix for a 0.4 MB output,
# then read it once per 384-deep slice of the product). A band's matrix holds at most 16 * _CHUNK values.
# The old rule and this one in turns, ten rounds, best of 3 each: that layer 0.67-0.69x (one BLAS thread or
# two), at batch 8 0.67-0.70x; convolutions the output rule banded already (ResNet-style [8, 32, 32, 32],
# [1, 112, 112, 32] into 64) 0.97-1.00x, the same bands.
_BAND_COLS = 1 << 21


# Output values a band of a 1x1 convolution holds (it copies no patches). Products with their bias and
# Relu6, [rows, k] @ [k, n], one BLAS thread, best of 7 x 5, in bands of 64K / 256K / 1M values / whole:
# [12544, 16] @ [16, 96] 2051 / 1742 / 1650 / 1552 us, [3136, 24] @ [24, 144] 820 / 699 / 701 / 686,
# [12544, 32] @ [32, 16] 603 / 555 / 503 / 515, [3136, 64] @ [64, 256] 1822 / 1738 / 2284 / 2321: small
# bands cost BLAS calls, whole tensors the cache. As fused 1x1 convolutions (MobileNetV2's and ResNet's at
# 224 px, 12 rounds in turns with 64K bands): 0.79-0.92x with one BLAS thread, 0.80-0.93x with two, and
# [8, 32, 32, 32] into 64 0.90x and 1.02x.
_POINTWISE_BAND = 1 << 18


def _conv2d_chunked(
    x: Any, w: Any, win: _Window, oh: int, ow: int, pads: tuple[int, int, int, int], epilogue: Epilogue | None
) -> Any:
    """An NHWC convolution with a large output or im2col matrix, a band of output rows at a time: the
    band's patch rows, its product and the epilogue (bias, activation) stay in the core's cache, where the
    whole-tensor passes went to memory and back three times. A band has about ``_CHUNK`` output values,
    fewer when its patch rows would pass ``16 * _CHUNK`` values."""
    kh, kw, c, o = w.shape
    n = x.shape[0]
    xp = _pad(x, pads, False)
    s0, s1, s2, s3 = xp.strides
    patches = _window_view(
        xp, (n, oh, ow, kh, kw, c), (s0, s1 * win.sh, s2 * win.sw, s1 * win.dh, s2 * win.dw, s3)
    )
    wm = w.reshape(kh * kw * c, o)
    y = np.empty((n, oh, ow, o), np.result_type(x, w))
    if kh == kw == 1 and win.sh == win.sw == 1:  # no patches to copy: a band is a product and its epilogue
        per_line = ow * o * _CHUNK // _POINTWISE_BAND
    else:
        per_line = max(ow * o, ow * kh * kw * c // 16)
    for b, r0, r1 in _lines(n, oh, per_line):
        block = y[b, r0:r1]
        _matmul(patches[b, r0:r1].reshape(-1, kh * kw * c), wm, out=block.reshape(-1, o))
        if epilogue is not None:
            epilogue(block)
    return y


@kernel("Conv2D", expensive=True)
def conv2d(node: Node) -> Compute:
    compute = conv2d_with_epilogue(node)
    return lambda ctx, inputs: (compute(inputs, None),)


def conv2d_with_epilogue(node: Node) -> Callable[[list[Any], Epilogue | None], Any]:
    """Conv2D's kernel, returning its output after ``epilogue`` ran on it in place, block by block when
    the output is large (``_FusedConv2D``)."""
    win = _window_attrs(node)
    geometry = _geometry_cache(win)
    # per (input shape, filter shape, dtypes) seen and checked: the 1x1 convolution's matrix shapes, or
    # None for the general path. A small convolution's BLAS call is ~12 us; the checks, views and calls
    # around it cost as much again (MobileNetV2 runs 35 convolutions, most of them small 1x1).
    pointwise: dict[tuple[Any, ...], tuple[int, int, int, tuple[int, ...]] | None] = {}

    def compute(inputs: list[Any], epilogue: Epilogue | None) -> Any:
        x, w = inputs
        key = (x.shape, w.shape, x.dtype, w.dtype)
        if key not in pointwise:
            y = checked(x, w, epilogue)  # raises on bad shapes: nothing is remembered
            if len(pointwise) >= _PLAN_CACHE_SIZE:
                pointwise.clear()
            pointwise[key] = _pointwise_plan(x, w, win)
            return y
        fast = pointwise.get(key)
        if fast is None:
            return checked(x, w, epilogue)
        rows, c, o, out_shape = fast
        y = np.matmul(x.reshape(rows, c), w.reshape(c, o))
        if epilogue is not None:
            epilogue(y)
        return y.reshape(out_shape)

    def checked(x: Any, w: Any, epilogue: Epilogue | None) -> Any:
        _check_rank4(x, "convolution input")
        _check_rank4(w, "convolution filter")
        h, wd, c = (x.shape[2], x.shape[3], x.shape[1]) if win.nchw else x.shape[1:]
        kh, kw, cf, o = w.shape
        if cf == 0:
            raise InvalidArgumentError(f"filter depth must be strictly positive, got {cf}")
        if c % cf:
            raise InvalidArgumentError(f"input depth must be evenly divisible by filter depth: {c} vs {cf}")
        groups = c // cf
        if o % groups:
            raise InvalidArgumentError(
                f"output depth must be evenly divisible by number of groups: {o} vs {groups}"
            )
        oh, ow, pads = geometry(h, wd, kh, kw)
        half, (x, w) = _widen(x, w)
        if half:  # the epilogue runs on the rounded half values, as it would after the plain op
            return _after(_conv2d(x, w, win, oh, ow, pads, groups).astype(_F16), epilogue)
        return _conv2d(x, w, win, oh, ow, pads, groups, epilogue)

    return compute


def _pointwise_plan(x: Any, w: Any, win: _Window) -> tuple[int, int, int, tuple[int, ...]] | None:
    """(rows, input channels, output channels, output shape) when the checked convolution of ``x`` by
    ``w`` is one small matrix product: NHWC, 1x1, unit strides, no padding, one group, float32 or float64
    on both sides, an output below the banded size and a depth BLAS takes in one call."""
    kh, kw, c, o = w.shape
    n, h, wd = x.shape[:3]
    if (
        win.nchw
        or kh != 1
        or kw != 1
        or win.sh != 1
        or win.sw != 1
        or any(win.pads)
        or x.shape[3] != c
        or x.dtype != w.dtype
        or x.dtype not in (_F32, np.dtype(np.float64))
        or n * h * wd * o >= 2 * _CHUNK
        or c > _MAX_INNER
    ):
        return None
    return n * h * wd, c, o, (n, h, wd, o)


def _after(y: Any, epilogue: Epilogue | None) -> Any:
    if epilogue is not None:
        epilogue(y)
    return y


@kernel("Conv2DBackpropInput", expensive=True)
def conv2d_backprop_input(node: Node) -> Compute:
    win = _window_attrs(node)
    op = "Conv2DCustomBackpropInput"

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        sizes, w, dy = inputs
        _check_rank4(w, "filter")
        _check_rank4(dy, "out_backprop")
        sizes = np.asarray(sizes).reshape(-1).tolist()
        kh, kw, cf, o = w.shape
        if win.nchw:
            dy = dy.transpose(0, 2, 3, 1)
        if len(sizes) == 2:
            n, h, wd, c = dy.shape[0], sizes[0], sizes[1], cf
        elif len(sizes) == 4:
            n, h, wd, c = (sizes[0], sizes[2], sizes[3], sizes[1]) if win.nchw else sizes
        else:
            raise InvalidArgumentError(
                "Conv2DBackpropInput requires input_sizes to contain 4 values or 2 values, "
                f"but got: {len(sizes)}"
            )
        if min(n, h, wd, c) < 0:
            raise InvalidArgumentError(f"{op}: input_sizes must be non-negative, got {_dims(tuple(sizes))}")
        if cf == 0 or c % cf:
            raise InvalidArgumentError(f"{op}: input depth must be evenly divisible by filter depth")
        if c != cf:
            raise InvalidArgumentError(
                f"{op}: gradients for grouped convolutions are not supported: input depth {c} vs filter "
                f"input depth {cf}"
            )
        if dy.shape[3] != o:
            raise InvalidArgumentError(f"{op}: filter and out_backprop must have the same out_depth")
        if dy.shape[0] != n:
            raise InvalidArgumentError(
                f"{op}: input and out_backprop must have the same batch size. Input batch: {n}, "
                f"outbackprop batch: {dy.shape[0]}, batch_dim: 0"
            )
        oh, ow, pads = _geometry(win, h, wd, kh, kw)
        for dim, (size, k, s, d, got, want) in enumerate(
            ((h, kh, win.sh, win.dh, dy.shape[1], oh), (wd, kw, win.sw, win.dw, dy.shape[2], ow)), start=1
        ):
            if got != want:
                raise InvalidArgumentError(
                    f"{op}: Size of out_backprop doesn't match computed: actual = {got}, computed = {want} "
                    f"spatial_dim: {dim} input: {size} filter: {k} output: {got} stride: {s} dilation: {d}"
                )
        half, (w, dy) = _widen(w, dy)
        dx = _conv2d_transpose(dy, w, win, (n, h, wd, c), pads)
        if win.nchw:
            dx = dx.transpose(0, 3, 1, 2)
        return (dx.astype(_F16) if half else dx,)

    return compute


def _conv2d_transpose(
    dy: Any, w: Any, win: _Window, shape: tuple[int, int, int, int], pads: tuple[int, int, int, int]
) -> Any:
    """The input gradient of an NHWC convolution: one matmul to per-tap columns, a scatter-add per tap."""
    n, h, wd, c = shape
    kh, kw, _, o = w.shape
    _, oh, ow, _ = dy.shape
    pt, pb, pl, pr = pads
    if n * oh * ow * kh * kw == 0:
        return np.zeros(shape, np.result_type(dy, w))
    cols = (dy.reshape(-1, o) @ w.reshape(kh * kw * c, o).T).reshape(n, oh, ow, kh, kw, c)
    hp = max(h + pt + pb, (oh - 1) * win.sh + (kh - 1) * win.dh + 1)
    wp = max(wd + pl + pr, (ow - 1) * win.sw + (kw - 1) * win.dw + 1)
    dxp = np.zeros((n, hp, wp, c), cols.dtype)
    for i in range(kh):
        rows = _taps(i * win.dh, oh, win.sh)
        for j in range(kw):
            dxp[:, rows, _taps(j * win.dw, ow, win.sw), :] += cols[:, :, :, i, j, :]
    return dxp[:, pt : pt + h, pl : pl + wd, :]


# --- pooling -----------------------------------------------------------------------------------------------


def _pool_window(ksize: list[int], strides: list[int], nchw: bool, op: str) -> tuple[int, int, int, int, int]:
    """Checks ksize/strides; returns (kh, kw, sh, sw, depth window)."""
    if len(ksize) != 4:
        raise InvalidArgumentError("Sliding window ksize field must specify 4 dimensions")
    if len(strides) != 4:
        raise InvalidArgumentError("Sliding window stride field must specify 4 dimensions")
    if min(ksize) < 1:
        raise InvalidArgumentError(
            "Sliding window ksize must be positive. The specified or inferred ksize is: "
            + ",".join(map(str, ksize))
        )
    if min(strides) < 1:
        raise InvalidArgumentError(f"Stride must be > 0, but got {min(strides)}")
    h, w, c = (2, 3, 1) if nchw else (1, 2, 3)
    if ksize[0] != 1 or strides[0] != 1:
        raise UnimplementedError("Pooling is not yet supported on the batch dimension.")
    kd = ksize[c]
    if kd != 1 or strides[c] != 1:
        if op != "max":
            raise UnimplementedError("Non-spatial pooling is not yet supported.")
        if ksize[h] != 1 or ksize[w] != 1 or strides[h] != 1 or strides[w] != 1:
            raise UnimplementedError(
                "MaxPooling supports exactly one of pooling across depth or pooling across width/height."
            )
        if kd != strides[c]:
            raise UnimplementedError(
                "Depthwise max pooling requires the depth window to equal the depth stride"
            )
    return ksize[h], ksize[w], strides[h], strides[w], kd


def _pool_taps(xp: Any, kh: int, kw: int, oh: int, ow: int, win: _Window, fn: Any) -> Any:
    """Separable window reduction. Rows first: their taps are long contiguous runs, and the column pass,
    whose strided taps are slow to iterate, then works on ``sh`` times fewer elements."""
    hx = 2 if win.nchw else 1
    rows = _reduce_taps(xp, hx, kh, oh, win.sh, fn)
    return _reduce_taps(rows, hx + 1, kw, ow, win.sw, fn)


def _max_pool(x: Any, kh: int, kw: int, kd: int, win: _Window, half_from_inf: bool = False) -> Any:
    if x.ndim != 4:
        raise InvalidArgumentError(f"input must be 4-dimensional: {_dims(x.shape)}")
    if kd != 1:
        c = x.shape[1 if win.nchw else 3]
        if c % kd:
            raise UnimplementedError(
                "Depthwise max pooling requires the depth window to evenly divide the input depth"
            )
        groups = (
            x.reshape(x.shape[0], c // kd, kd, *x.shape[2:])
            if win.nchw
            else x.reshape(*x.shape[:3], c // kd, kd)
        )
        axis = 2 if win.nchw else 4
        # TensorFlow keeps the first value of a group unless a later one is greater: NaN is kept only first
        out = _along(groups, axis, slice(0, 1))
        for t in range(1, kd):
            value = _along(groups, axis, slice(t, t + 1))
            out = np.where(out < value, value, out)
        return out.reshape(out.shape[:axis] + out.shape[axis + 1 :])
    h, w = x.shape[2:] if win.nchw else x.shape[1:3]
    oh, ow, pads = _geometry(win, h, w, kh, kw)
    shape = (x.shape[0], x.shape[1], oh, ow) if win.nchw else (x.shape[0], oh, ow, x.shape[3])
    if oh == 0 or ow == 0:
        return np.empty(shape, x.dtype)
    fn = np.fmax if x.dtype.kind == "f" else np.maximum
    lowest = -np.inf if half_from_inf and x.dtype == _F16 else _max_pool_start(x.dtype)
    hx = 2 if win.nchw else 1
    rows = _max_taps(x, hx, kh, oh, win.sh, pads[0], fn, None, lowest)
    return _max_taps(rows, hx + 1, kw, ow, win.sw, pads[2], fn, lowest, lowest)


def _max_pool_start(dtype: Any) -> Any:
    """The value TensorFlow's max pool starts from (and skips NaN): the lowest finite value, the type's
    minimum for integers. -inf and all-NaN windows give it. (MaxPool's half kernel for SAME and VALID
    padding, oneDNN's, starts from -inf: ``_max_pool``'s ``half_from_inf``.)"""
    return np.finfo(dtype).min if dtype.kind == "f" else np.iinfo(dtype).min


def _max_taps(
    x: Any, axis: int, k: int, count: int, step: int, before: int, fn: Any, lowest: Any, fill: Any
) -> Any:
    """The max pool's reduction along ``axis`` as ``_reduce_taps`` makes it over input padded with
    ``before`` values in front (and what the window needs behind), without the padded copy: each tap
    reduces into the outputs whose window holds it in the input (a padded value loses to any other).
    With ``lowest``, the result starts from it: TensorFlow's max starts from the lowest finite value, so
    -inf and all-NaN windows give it (``fn`` skips NaN); outputs no tap reaches in every window start
    from ``fill``. A new array.

    The padded copy of Xception's [1, 147, 147, 128] (3x3, stride 2, SAME) cost 1.9 ms, more than both
    passes (1.5 ms), and a last pass for the lowest value 0.35 ms more. The padded way and this one in
    turns, 30 calls each, in one process: that layer 3.8 / 6.4 ms (least / median) against 8.6 / 11.3,
    [1, 35, 35, 256] 3x3 SAME 0.85-0.88x, VALID windows (no padding: the same passes) unchanged."""
    size = x.shape[axis]
    whole: list[Any] = []  # the taps every output's window holds
    partial: list[tuple[int, int, Any]] = []
    for t in range(k):
        lo = max(0, -((t - before) // step))  # the first output whose window holds input t - before
        hi = min(count - 1, (size - 1 + before - t) // step)
        if lo > hi:
            continue
        first = lo * step + t - before
        src = _along(x, axis, slice(first, first + (hi - lo) * step + 1, step))
        if lo == 0 and hi == count - 1:
            whole.append(src)
        else:
            partial.append((lo, hi, src))
    if whole and lowest is not None:
        out = fn(whole.pop(), lowest)
    elif len(whole) >= 2:
        out = fn(whole.pop(), whole.pop())
    elif whole:
        out = whole.pop().copy()
    else:
        shape = list(x.shape)
        shape[axis] = count
        out = np.full(shape, fill, x.dtype)
    for src in whole:
        fn(out, src, out=out)
    for lo, hi, src in partial:
        dst = _along(out, axis, slice(lo, hi + 1))
        fn(dst, src, out=dst)
    return out


def _along(x: Any, axis: int, index: slice) -> Any:
    where = [slice(None)] * x.ndim
    where[axis] = index
    return x[tuple(where)]


@kernel("MaxPool", expensive=True)
def max_pool(node: Node) -> Compute:
    ksize, strides = node.attr_ints("ksize"), node.attr_ints("strides")
    win = _window_attrs_pool(node, strides)
    with _attrs_of(node):
        kh, kw, _, _, kd = _pool_window(ksize, strides, win.nchw, "max")
        for side, pad, k in zip(("Top", "Bottom", "Left", "Right"), win.pads, (kh, kh, kw, kw), strict=True):
            if pad >= k:
                raise InvalidArgumentError(
                    f"{side} padding {pad} needs to be smaller than the window size {k}"
                )

    from_inf = win.padding != "EXPLICIT"

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_max_pool(inputs[0], kh, kw, kd, win, from_inf),)

    return compute


@kernel("MaxPoolV2", expensive=True)
def max_pool_v2(node: Node) -> Compute:
    nchw = node.attr_str("data_format", "NHWC", choices=("NHWC", "NCHW")) == "NCHW"
    padding = node.attr_str("padding", choices=("SAME", "VALID"))

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, ksize, strides = inputs
        ksize, strides = np.asarray(ksize).reshape(-1).tolist(), np.asarray(strides).reshape(-1).tolist()
        kh, kw, sh, sw, kd = _pool_window(ksize, strides, nchw, "max")
        return (_max_pool(x, kh, kw, kd, _Window(sh, sw, 1, 1, padding, (0, 0, 0, 0), nchw)),)

    return compute


def _window_attrs_pool(node: Node, strides: list[int]) -> _Window:
    nchw = node.attr_str("data_format", "NHWC", choices=("NHWC", "NCHW")) == "NCHW"
    choices = ("SAME", "VALID", "EXPLICIT") if node.op == "MaxPool" else ("SAME", "VALID")
    padding = node.attr_str("padding", choices=choices)
    explicit = node.attr_ints("explicit_paddings", [])
    h, w = (2, 3) if nchw else (1, 2)
    pads = (0, 0, 0, 0)
    with _attrs_of(node):
        if padding == "EXPLICIT":
            if len(explicit) != 8 or min(explicit) < 0:
                raise InvalidArgumentError("explicit_paddings attribute must contain 8 nonnegative values")
            pads = (explicit[2 * h], explicit[2 * h + 1], explicit[2 * w], explicit[2 * w + 1])
        elif explicit:
            raise InvalidArgumentError(
                "explicit_paddings attribute must be empty if the padding attribute is not EXPLICIT"
            )
    sh, sw = (strides[h], strides[w]) if len(strides) == 4 else (1, 1)
    return _Window(sh, sw, 1, 1, padding, pads, nchw)


@kernel("AvgPool", expensive=True)
def avg_pool(node: Node) -> Compute:
    ksize, strides = node.attr_ints("ksize"), node.attr_ints("strides")
    win = _window_attrs_pool(node, strides)
    with _attrs_of(node):
        kh, kw, _, _, _ = _pool_window(ksize, strides, win.nchw, "avg")
    divisors: dict[tuple[int, int], Any] = {}

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        if x.ndim != 4:
            raise InvalidArgumentError(f"input must be 4-dimensional: {_dims(x.shape)}")
        h, w = x.shape[2:] if win.nchw else x.shape[1:3]
        oh, ow, pads = _geometry(win, h, w, kh, kw)
        shape = (x.shape[0], x.shape[1], oh, ow) if win.nchw else (x.shape[0], oh, ow, x.shape[3])
        if oh == 0 or ow == 0 or x.size == 0:
            return (np.empty(shape, x.dtype),)
        half, (xs,) = _widen(x)
        total = _pool_taps(_pad(xs, pads, win.nchw), kh, kw, oh, ow, win, np.add)
        div = divisors.get((h, w))
        if div is None:
            div = _avg_divisor(h, w, kh, kw, win, oh, ow, pads, xs.dtype)
            if len(divisors) >= _PLAN_CACHE_SIZE:
                divisors.clear()
            divisors[(h, w)] = div
        fresh = kh > 1 or kw > 1 or any(pads) or half  # else ``total`` is a view of the input
        out = np.divide(total, div, out=total) if fresh else np.divide(total, div)
        return (out.astype(_F16) if half else out,)

    return compute


def _avg_divisor(
    h: int,
    w: int,
    kh: int,
    kw: int,
    win: _Window,
    oh: int,
    ow: int,
    pads: tuple[int, int, int, int],
    dtype: Any,
) -> Any:
    """How many input (not padding) elements each output window covers."""
    start_h = np.arange(oh) * win.sh
    start_w = np.arange(ow) * win.sw
    rows = np.minimum(start_h + kh, pads[0] + h) - np.maximum(start_h, pads[0])
    cols = np.minimum(start_w + kw, pads[2] + w) - np.maximum(start_w, pads[2])
    div = (rows[:, None] * cols[None, :]).astype(dtype)
    return div if win.nchw else div[:, :, None]
