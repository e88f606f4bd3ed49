"""DepthwiseConv2dNative: one filter per input channel (channel multiplier m), as MobileNet's and
EfficientNet's separable convolutions use it, NHWC and NCHW.

numpy has no kernel for a per-channel window sum, so each layout and shape takes the cheapest way measured
below: one einsum over the rows of the padded input flattened (unit column stride), the same over the
input's two column-parity planes (column stride 2), an einsum over a strided patch view or over copied
patches, and for small tensors a plan that keeps its padded buffers (``_SmallDepthwise``). Bias and
activation (``_FusedDepthwiseConv2dNative``) run on each band of output rows while it is in cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _F16, _F32, _taps, _widen
from poolserve.runtime.kernels.conv_ops import (
    _CHUNK,
    Epilogue,
    _after,
    _check_rank4,
    _geometry_cache,
    _lines,
    _pad,
    _spatial,
    _Window,
    _window_attrs,
    _window_view,
)
from poolserve.runtime.kernels.registry import Compute, kernel
from poolserve.runtime.node import Node

_F64 = np.dtype(np.float64)
# numpy's einsum without its Python wrapper (dispatch and argument checks, ~2 us a call)
_C_EINSUM: Any = np._core.multiarray.c_einsum if hasattr(np, "_core") else np.core.multiarray.c_einsum  # type: ignore[attr-defined]


@kernel("DepthwiseConv2dNative", expensive=True)
def depthwise_conv2d(node: Node) -> Compute:
    compute = depthwise_conv2d_with_epilogue(node)
    return lambda ctx, inputs: (compute(inputs, None),)


def depthwise_conv2d_with_epilogue(node: Node) -> Callable[[list[Any], Epilogue | None], Any]:
    """DepthwiseConv2dNative's kernel with an epilogue, as ``conv2d_with_epilogue``."""
    win = _window_attrs(node)
    geometry = _geometry_cache(win)
    # the filter of the last step, its output width and its row tile (``_depthwise_rows``): a node's filter
    # is usually a constant, the same read-only array step after step, and np.tile costs ~15 us a call. It
    # is held, so its id cannot be reused while remembered; a writeable (fed) filter may change in place
    # between steps and is tiled afresh.
    tiled: list[tuple[Any, int, Any]] = []
    parity: list[tuple[Any, int, Any]] = []  # the same for _depthwise_parity's sub-filters
    # per (input shape and dtype, filter shape and dtype) checked once: a small convolution's padded input
    # buffers (``_SmallDepthwise``), or None
    small: dict[tuple[Any, ...], _SmallDepthwise | None] = {}

    def compute(inputs: list[Any], epilogue: Epilogue | None) -> Any:
        x, w = inputs
        key = (x.shape, x.dtype, w.shape, w.dtype)
        plan = small.get(key)
        if plan is not None:
            return plan.run(x, w, tiled, epilogue)
        y = checked(x, w, epilogue)  # raises on bad shapes: nothing is remembered
        if key not in small:
            if len(small) >= _SMALL_PLANS:
                small.clear()
            small[key] = _SmallDepthwise.plan(x, w, win, geometry)
        return y

    def checked(x: Any, w: Any, epilogue: Epilogue | None) -> Any:
        _check_rank4(x, "input")
        _check_rank4(w, "filter")
        n, h, wd, c = (x.shape[0], x.shape[2], x.shape[3], x.shape[1]) if win.nchw else x.shape
        kh, kw, cw, m = w.shape
        if c != cw:
            raise InvalidArgumentError(f"input and filter must have the same depth: {c} vs {cw}")
        oh, ow, pads = geometry(h, wd, kh, kw)
        half, (x, w) = _widen(x, w)
        out_shape = (n, c * m, oh, ow) if win.nchw else (n, oh, ow, c * m)
        if oh == 0 or ow == 0 or kh * kw == 0:
            return _after(np.zeros(out_shape, _F16 if half else x.dtype), epilogue)
        if not win.nchw and m == 1 and not half:
            if x.dtype == w.dtype and _on_parity_planes(win, n * oh * ow, kh, kw, c):
                tiles = _kept(parity, w, ow, _parity_tiles)
                planes = _parity_planes(x, pads, ow, [t.shape[1] for t in tiles])
                return _depthwise_parity(planes, tiles, win, oh, ow, epilogue)
            xp = _pad(x, pads, False)
            if x.dtype == w.dtype and _on_rows(win, ow, c):
                tile = _kept(tiled, w, ow, _row_tile)
                return _depthwise_rows(np.ascontiguousarray(xp), tile, win, oh, ow, epilogue)
            return _depthwise_nhwc(xp, w, win, oh, ow, epilogue)
        y = _depthwise(_pad(x, pads, win.nchw), w, win, oh, ow).reshape(out_shape)
        return _after(y.astype(_F16) if half else y, epilogue)

    return compute


# input shapes a depthwise node keeps ``_SmallDepthwise`` buffers for (each up to 2 * _CHUNK values and
# padding, times the steps that ran it at once)
_SMALL_PLANS = 8


_SMALL_SUBSCRIPTS = {"rows": "nrijq,ijq->nrq", "patches": "nhwijc,ijc->nhwc", "copied": "ptc,tc->pc"}


class _SmallDepthwise:
    """A depthwise convolution small enough for one einsum over a view of its padded input (the rows of
    ``_depthwise_rows``, the patches of ``_depthwise_nhwc``'s strided einsum, or those patches copied to a
    block first, as ``_depthwise_nhwc`` does below 96 channels), run with that input and block kept:
    padding (a zeroed array each call), views, checks and numpy's einsum wrapper cost more than the einsum
    itself on MobileNetV2's layers of 3x3 to 24x24 pixels. The padded buffers are zeroed once and only their
    interior is written; each call takes one from ``free`` (another is made when concurrent steps hold them
    all) and gives it back, with its view, before it returns. Fused kernels, the old path and this one in
    turns in one process, best of 9 x 1000, three rounds, us:

        (n, h, w, c), stride   before   after          (n, h, w, c), stride   before   after
        (1, 48, 48, 16), 1     159-169  131-139        (1, 6, 6, 144), 1      33       20-21
        (1, 24, 24, 48), 1     85-91    71-93          (1, 6, 6, 192), 1      38-39    25-39
        (1, 12, 12, 96), 1     53-60    41-57          (1, 3, 3, 336), 1      42-50    22-23
    """

    def __init__(
        self, x: Any, win: _Window, kh: int, kw: int, oh: int, ow: int, pads: tuple[int, ...], kind: str
    ) -> None:
        n, h, wd, c = x.shape
        pt, pb, pl, pr = pads
        self.padded = (n, h + pt + pb, wd + pl + pr, c)
        self.interior = (slice(None), slice(pt, pt + h), slice(pl, pl + wd))
        self.dtype = x.dtype
        self.win, self.ow = win, ow
        # "rows": the rows view by a row tile of the filter (_depthwise_rows); "patches": the patches view
        # by the filter (the strided einsum); "copied": the patches copied to a block first (_depthwise_nhwc)
        self.kind = kind
        self.out = (n, oh, ow, c)
        self.view = (n, oh, kh, kw, ow * c) if kind == "rows" else (n, oh, ow, kh, kw, c)
        self.operand = (n * oh * ow, kh * kw, c)  # the copied patches, as the einsum reads them
        self.product = {"rows": (n, oh, ow * c), "patches": self.out, "copied": (n * oh * ow, c)}[kind]
        self.subscripts = _SMALL_SUBSCRIPTS[kind]
        self.free: list[tuple[Any, Any, Any]] = []

    @staticmethod
    def plan(x: Any, w: Any, win: _Window, geometry: Callable[..., Any]) -> _SmallDepthwise | None:
        """A plan for checked ``x`` and ``w`` when their convolution is one einsum (the paths
        ``depthwise_conv2d_with_epilogue`` chooses), small and of float32 or float64; else None."""
        kh, kw, c, m = w.shape
        if win.nchw or m != 1 or x.dtype != w.dtype or x.dtype not in (_F32, _F64):
            return None
        n, h, wd = x.shape[:3]
        oh, ow, pads = geometry(h, wd, kh, kw)
        if not (oh and ow and kh and kw) or n * oh * ow * c >= 2 * _CHUNK:
            return None
        if _on_rows(win, ow, c):
            return _SmallDepthwise(x, win, kh, kw, oh, ow, pads, "rows")
        if c >= _STRIDED_EINSUM_CHANNELS:
            return _SmallDepthwise(x, win, kh, kw, oh, ow, pads, "patches")
        if not _on_parity_planes(win, n * oh * ow, kh, kw, c):
            return _SmallDepthwise(x, win, kh, kw, oh, ow, pads, "copied")
        return None

    def _buffer(self) -> tuple[Any, Any, Any]:
        """A zeroed padded input's interior, the view the einsum reads, and for "copied" the block the
        patches are copied to (else None)."""
        xp = np.zeros(self.padded, self.dtype)
        s0, s1, s2, s3 = xp.strides
        win = self.win
        if self.kind == "rows":
            strides: tuple[int, ...] = (s0, s1 * win.sh, s1 * win.dh, s2 * win.dw, s3)
        else:
            strides = (s0, s1 * win.sh, s2 * win.sw, s1 * win.dh, s2 * win.dw, s3)
        view = np.ndarray(self.view, self.dtype, xp, 0, strides)
        cols = np.empty(self.view, self.dtype) if self.kind == "copied" else None
        return xp[self.interior], view, cols

    def run(self, x: Any, w: Any, tiled: list[tuple[Any, int, Any]], epilogue: Epilogue | None) -> Any:
        kind = self.kind
        if kind == "rows":
            filt = _kept(tiled, w, self.ow, _row_tile)
        else:
            filt = w.reshape(w.shape[:3] if kind == "patches" else (-1, w.shape[2]))
        free = self.free
        buffers = free.pop() if free else self._buffer()
        interior, view, cols = buffers
        try:
            interior[...] = x
            if cols is not None:
                cols[...] = view
                view = cols.reshape(self.operand)
            y = np.empty(self.out, self.dtype)
            _C_EINSUM(self.subscripts, view, filt, out=y.reshape(self.product))
        finally:
            free.append(buffers)
        return _after(y, epilogue)


def _kept(cache: list[tuple[Any, int, Any]], w: Any, ow: int, make: Callable[[Any, int], Any]) -> Any:
    """``make(w, ow)``, remembered in ``cache`` for a read-only ``w`` (see
    ``depthwise_conv2d_with_epilogue``'s ``tiled``)."""
    seen = cache[0] if cache else None
    if seen is not None and seen[0] is w and seen[1] == ow:
        return seen[2]
    value = make(w, ow)
    if not w.flags.writeable:
        cache[:] = [(w, ow, value)]
    return value


def _row_tile(w: Any, ow: int) -> Any:
    """``_depthwise_rows``'s filter: [kh, kw, c] tiled ``ow`` times along the channels."""
    kh, kw, c, _ = w.shape
    return np.tile(w.reshape(kh, kw, c), (1, 1, ow))


# ``_depthwise_rows`` from this many output columns, or on narrower outputs below _ROWS_NARROW_CHANNELS
# channels. Narrow outputs against the strided einsum (``_depthwise_nhwc``), fused bias and Relu6, one BLAS
# thread, quiet machine, best of 3 x 9, two runs: (1, 6, 6, 144) 0.81-0.83x, (1, 6, 6, 192) 0.84-0.86x,
# (1, 3, 3, 336) 0.67-0.99x, (8, 6, 6, 144) 0.69-0.70x, (8, 6, 6, 192) 0.75x, (8, 3, 3, 336) 0.89x (all of
# MobileNetV2 0.35's narrow stride-1 layers); from 384 channels no gain, and a loss at batch 8: (1, 7, 7,
# 384) 0.90-0.92x, (1, 3, 3, 384) 1.00-1.16x, (8, 7, 7, 384) 1.09-1.11x, (8, 7, 7, 576) 1.19-1.25x.
_ROWS_MIN_WIDTH = 8
_ROWS_NARROW_CHANNELS = 384


def _on_rows(win: _Window, ow: int, c: int) -> bool:
    """Whether a depthwise convolution (multiplier 1, NHWC) of ``ow`` output columns runs on flattened rows
    (the rule above)."""
    return win.sw == 1 and (ow >= _ROWS_MIN_WIDTH or c < _ROWS_NARROW_CHANNELS)


def _depthwise_rows(xp: Any, tile: Any, win: _Window, oh: int, ow: int, epilogue: Epilogue | None) -> Any:
    """A depthwise convolution of channel multiplier 1 and unit column stride on padded NHWC input, as one
    einsum over the input's rows flattened: output row r is the sum over the taps (i, j) of input row
    ``r * sh + i * dh`` from value ``j * dw * c`` on, ``ow * c`` values long, times tap (i, j)'s weights
    tiled ``ow`` times (``tile``, [kh, kw, ow * c], made once per node). Every product is then a
    multiply-add over a contiguous run, in one call; large outputs go a band of rows at a time, each band
    followed by ``epilogue`` while it is in cache.

    Measured against what it replaces (a multiply-add per tap below 48 channels, copied patches below 96,
    the strided einsum from 96 on), as whole fused kernels (bias and Relu6 in the epilogue), on every
    stride-1 depthwise shape of MobileNetV2 at width 0.35 and 1.0, 96 and 224 pixels, one BLAS thread, best
    of 2 x 3, loaded 2-core machine, two runs, us:

        (n, h, w, c)        before      after         (n, h, w, c)       before       after
        (1, 112, 112, 16)   1806-2210   832-997       (8, 112, 112, 16)  13277-26443  7786-14395
        (1, 56, 56, 144)    2648-7771   1733-3998     (8, 56, 56, 48)    8066-12683   4831-7330
        (1, 48, 48, 16)     357-494     179-235       (8, 48, 48, 16)    2269-4431    1097-1794
        (1, 24, 24, 48)     196-259     136-155       (8, 24, 24, 48)    1578-1792    921-1059
        (1, 12, 12, 96)     117-260     90-102        (8, 12, 12, 96)    545-852      330-407
        (1, 14, 14, 576)    406-536     399-452       (8, 6, 6, 144)     183-250      145-176
        (1, 6, 6, 576)      100-126     114-115       (8, 7, 7, 960)     1039-1361    1154-1560
        (1, 3, 3, 960)      44-76       62-96         (8, 3, 3, 960)     228-370      237-327

    It wins wherever the rows are long (0.4-0.9x from 8 output columns on). On narrower outputs it still
    wins below 384 channels; from there the strided einsum's runs of c values are as long and it is no
    slower, so those keep it (``_ROWS_MIN_WIDTH``, ``_ROWS_NARROW_CHANNELS``). With a column stride of 2
    the runs are not contiguous: ``_depthwise_parity`` runs the same einsum on the two column-parity planes.
    """
    kh, kw, q = tile.shape
    n = xp.shape[0]
    y = np.empty((n, oh, ow, q // ow), np.result_type(xp, tile))
    s0, s1, s2, s3 = xp.strides
    strides = (s1 * win.sh, s1 * win.dh, s2 * win.dw, s3)
    if y.size < 2 * _CHUNK:
        rows = _window_view(xp, (n, oh, kh, kw, q), (s0, *strides))
        _C_EINSUM("nrijq,ijq->nrq", rows, tile, out=y.reshape(n, oh, q))
        return _after(y, epilogue)
    for b, r0, r1 in _lines(n, oh, q):
        band = np.ndarray((r1 - r0, kh, kw, q), xp.dtype, xp, b * s0 + r0 * strides[0], strides)
        block = y[b, r0:r1]
        _C_EINSUM("rijq,ijq->rq", band, tile, out=block.reshape(r1 - r0, q))
        if epilogue is not None:
            epilogue(block)
    return y


# Depthwise convolutions of column stride 2 below _STRIDED_EINSUM_CHANNELS go to ``_depthwise_parity``, but
# for small 3x3 ones (under 2 * _CHUNK patch values) of _PARITY_NARROW_CHANNELS channels or more, which keep
# the copied patches (``_depthwise_nhwc``). Fused (bias, Relu6), float32, one BLAS thread, best of 5, two
# rounds, parity over what ran before (copied patches, or from 786K patch values four phase planes), SAME:
#
#   (n, h, w, c), kernel       ratio        (n, h, w, c), kernel      ratio
#   (1, 112, 112, 16), 3x3     0.65-0.68    (1, 24, 24, 72), 3x3      1.09-1.10 (kept)
#   (1, 112, 112, 48), 3x3     0.85-0.86    (1, 24, 24, 88), 3x3      1.04-1.06 (kept)
#   (1, 48, 48, 48), 3x3       0.89-0.90    (1, 24, 24, 48), 3x3      0.94-1.13 (kept)
#   (1, 48, 48, 16), 3x3       0.90         (1, 14, 14, 72), 5x5      0.91-0.94
#   (1, 56, 56, 24), 5x5       0.60-0.62    (8, 24, 24, 48), 3x3      0.86-0.87
#   (1, 28, 28, 88), 5x5       0.72-0.75    (8, 48, 48, 72), 3x3      0.84-0.86
#   (1, 111, 111, 11), 5x5     0.75-0.86    (8, 56, 56, 24), 5x5      0.83-0.94
#   (1, 111, 111, 32), 7x7     0.90-0.99    (8, 28, 28, 88), 7x7      0.86-0.93
#
# (MobileNetV2's, MobileNetV3's, EfficientNet's and NASNetMobile's stride-2 layers, at batch 1 and 8.)
_PARITY_NARROW_CHANNELS = 48


def _on_parity_planes(win: _Window, pixels: int, kh: int, kw: int, c: int) -> bool:
    """Whether a depthwise convolution (multiplier 1, NHWC) of ``pixels`` output pixels runs on parity planes
    (the rule above)."""
    return (
        win.sw == 2
        and win.dw == 1
        and c < _STRIDED_EINSUM_CHANNELS
        and (kh * kw > 9 or c < _PARITY_NARROW_CHANNELS or pixels * kh * kw * c >= 2 * _CHUNK)
    )


def _parity_tiles(w: Any, ow: int) -> list[Any]:
    """``_depthwise_parity``'s sub-filters of ``w``: the taps of even and of odd columns, each tiled ``ow``
    times along the channels."""
    return [np.tile(w[:, b::2, :, 0], (1, 1, ow)) for b in range(2)]


def _parity_planes(x: Any, pads: tuple[int, int, int, int], ow: int, widths: list[int]) -> list[Any]:
    """The column-parity planes ``_depthwise_parity`` reads, straight from unpadded NHWC ``x``: plane b
    holds the padded input's columns b, b + 2, ... (``ow + widths[b] - 1`` of them; none for a width of 0),
    every padded row, with zeros where the padding is. One copy of the input in all: padding first, then
    splitting the padded copy, copied it twice and wrote the zeros in between (MobileNetV2's [8, 48, 48,
    48] stride-2 layer: 0.48 ms to pad and 0.52 ms to split, beside 0.47 ms of products). Whole fused
    kernels (bias, Relu6), stride 2, one BLAS thread, the two ways in paired rounds (9), median ratio:
    [1, 48, 48, 48] 3x3 0.82x, [8, 48, 48, 48] 3x3 0.75x, [8, 24, 24, 48] 3x3 0.81x, [1, 112, 112, 16]
    3x3 0.86x, [1, 96, 96, 16] 3x3 0.88x, [8, 28, 28, 40] 5x5 0.88x, [1, 56, 56, 24] 5x5 0.97x."""
    n, h, w, c = x.shape
    pt, pb, pl, _ = pads
    rows = h + pt + pb
    planes: list[Any] = []
    for b, width in enumerate(widths):
        if width == 0:
            planes.append(None)
            continue
        count = ow + width - 1
        plane = np.empty((n, rows, count, c), x.dtype)
        first = max(0, -(-(pl - b) // 2))  # the first column that is an input column, b + 2q - pl >= 0
        last = min(count - 1, (w - 1 + pl - b) // 2)
        plane[:, :pt] = 0
        plane[:, pt + h :] = 0
        plane[:, pt : pt + h, :first] = 0
        if last >= first:
            plane[:, pt : pt + h, last + 1 :] = 0
            start = b + 2 * first - pl
            plane[:, pt : pt + h, first : last + 1] = x[:, :, start : start + 2 * (last - first) + 1 : 2]
        else:
            plane[:, pt : pt + h, first:] = 0
        planes.append(plane)
    return planes


def _depthwise_parity(
    planes: list[Any], tiles: list[Any], win: _Window, oh: int, ow: int, epilogue: Epilogue | None
) -> Any:
    """A depthwise convolution of channel multiplier 1, column stride 2 and no column dilation on NHWC
    input, as ``_depthwise_rows`` over the input's two column-parity planes (``_parity_planes``): padded
    input column 2q + j is column q + j // 2 of the plane of parity j % 2, so output row r sums, over both
    planes, the plane's rows ``r * sh + i * dh`` from value ``(j // 2) * c`` on, ``ow * c`` values long,
    times the taps of that parity (``tiles``, made once per node by ``_parity_tiles``). The row stride stays
    in the view. Large outputs go a band of rows at a time, each band followed by ``epilogue`` while it is
    in cache."""
    first = planes[0]
    n, c = first.shape[0], first.shape[3]
    q = ow * c
    y = np.empty((n, oh, ow, c), np.result_type(first, tiles[0]))
    views = []
    for plane, tile in zip(planes, tiles, strict=True):
        if plane is None:
            continue  # a 1-wide kernel has no odd-column taps
        s0, s1, s2, s3 = plane.strides
        views.append((plane, tile, (s0, s1 * win.sh, s1 * win.dh, s2, s3)))
    if y.size < 2 * _CHUNK:
        bands: Iterable[tuple[int, int, int]] = [(-1, 0, oh)]
    else:
        bands = _lines(n, oh, q)
    tmp: Any = None
    for b, r0, r1 in bands:
        block = y.reshape(n * oh, q) if b < 0 else y[b, r0:r1].reshape(r1 - r0, q)
        for k, (plane, tile, (s0, *strides)) in enumerate(views):
            kh, kwb = tile.shape[:2]
            out: Any
            if b < 0:
                band = np.ndarray((n, oh, kh, kwb, q), plane.dtype, plane, 0, (s0, *strides))
                out = block.reshape(n, oh, q)
                spec = "nrijq,ijq->nrq"
            else:
                band = np.ndarray(
                    (r1 - r0, kh, kwb, q), plane.dtype, plane, b * s0 + r0 * strides[0], strides
                )
                out = block
                spec = "rijq,ijq->rq"
            if k == 0:
                _C_EINSUM(spec, band, tile, out=out)
            else:
                if tmp is None or tmp.size < block.size:
                    tmp = np.empty(block.size, y.dtype)
                part = tmp[: block.size].reshape(out.shape)
                _C_EINSUM(spec, band, tile, out=part)
                out += part
        if epilogue is not None:
            epilogue(y if b < 0 else y[b, r0:r1])
    return y


# Depthwise convolutions of channel multiplier 1, NHWC, with a column stride (``_depthwise_rows`` takes
# the others): each output value sums kh * kw products, which numpy has no kernel for. Three ways, measured
# as whole fused kernels (bias and Relu6 included) on MobileNetV2's 3x3 shapes, one BLAS thread, loaded
# 2-core machine, interleaved, best of 3 x 5, us:
#
#   output (n, oh, ow, c), stride     einsum, strided view   copied patches   multiply-add per tap
#   (1, 24, 24, 48), 1                313                    248              -
#   (1, 24, 24, 48), 2                339                    270              -
#   (8, 24, 24, 48), 1                1977                   1701             -
#   (1, 12, 12, 144), 2               171                    172              -
#   (8, 6, 6, 144), 1                 262                    277              -
#   (1, 48, 48, 16), 1                -                      458              390
#   (1, 96, 96, 16), 1                -                      2064             1399
#   (1, 16, 16, 8), 1                 -                      83               132
#   (4, 16, 16, 8), 2                 -                      200              304
#
# einsum's inner loop over a strided 6-D view is short when the channels are few; copying a band of
# patches to a contiguous [rows, kh * kw, c] block first (one more pass) lets it run over whole patch
# rows. From 96 channels on the copy does not pay.
_STRIDED_EINSUM_CHANNELS = 96


def _depthwise_nhwc(xp: Any, w: Any, win: _Window, oh: int, ow: int, epilogue: Epilogue | None) -> Any:
    """A depthwise convolution of channel multiplier 1 on padded NHWC input, a band of output rows at a
    time (one band when the output is small), each band followed by ``epilogue`` while it is in cache."""
    kh, kw, c, _ = w.shape
    n = xp.shape[0]
    y = np.empty((n, oh, ow, c), np.result_type(xp, w))
    values = n * oh * ow * c
    s0, s1, s2, s3 = xp.strides
    patches = _window_view(
        xp, (n, oh, ow, kh, kw, c), (s0, s1 * win.sh, s2 * win.sw, s1 * win.dh, s2 * win.dw, s3)
    )
    if c >= _STRIDED_EINSUM_CHANNELS:
        # one pass over the strided view, no temporaries (in bands it lost: each einsum call parses its
        # subscripts again)
        _C_EINSUM("nhwijc,ijc->nhwc", patches, w.reshape(kh, kw, c), out=y)
        return _after(y, epilogue)
    taps = kh * kw
    w2 = w.reshape(taps, c)
    if values < 2 * _CHUNK:
        cols = np.empty((n, oh, ow, kh, kw, c), y.dtype)
        cols[...] = patches
        _C_EINSUM("ptc,tc->pc", cols.reshape(-1, taps, c), w2, out=y.reshape(-1, c))
        return _after(y, epilogue)
    buf = np.empty((max(1, _CHUNK // (ow * c)), ow, kh, kw, c), y.dtype)
    for b, r0, r1 in _lines(n, oh, ow * c):
        block = y[b, r0:r1]
        band = buf[: r1 - r0]
        band[...] = patches[b, r0:r1]
        _C_EINSUM("ptc,tc->pc", band.reshape(-1, taps, c), w2, out=block.reshape(-1, c))
        if epilogue is not None:
            epilogue(block)
    return y


# the other depthwise layouts (NCHW, channel multipliers): one einsum over a strided view from this many
# output channels on, a multiply-add per tap below
_EINSUM_DEPTHWISE_CHANNELS = 48


def _depthwise(xp: Any, w: Any, win: _Window, oh: int, ow: int) -> Any:
    """Multiply-accumulate over the kernel taps; the result is [N, OH, OW, C(, M)] or [N, C(, M), OH, OW]."""
    kh, kw, c, m = w.shape
    if not win.nchw and c * m >= _EINSUM_DEPTHWISE_CHANNELS:
        # one pass over a strided patch view, no temporaries
        n = xp.shape[0]
        s0, s1, s2, s3 = xp.strides
        patches = _window_view(
            xp, (n, oh, ow, kh, kw, c), (s0, s1 * win.sh, s2 * win.sw, s1 * win.dh, s2 * win.dw, s3)
        )
        if m == 1:
            return _C_EINSUM("nhwijc,ijc->nhwc", patches, w.reshape(kh, kw, c))
        return _C_EINSUM("nhwijc,ijcm->nhwcm", patches, w)
    if not win.nchw and m == 1 and win.sw == win.dw == 1:
        # Few channels: a tap's window is a run of ow * c contiguous values per output row, so each
        # multiply-add loops over whole rows, not over c values at a time (48x48x16: 0.37 ms against 0.53).
        n = xp.shape[0]
        row_acc = np.zeros((n, oh, ow * c), np.result_type(xp, w))
        row_tmp = np.empty_like(row_acc)
        row_w = np.tile(w[:, :, :, 0], (1, 1, ow))  # one call: np.tile costs ~15 us a call
        for i in range(kh):
            rows = _taps(i * win.dh, oh, win.sh)
            for j in range(kw):
                v = xp[:, rows, j : j + ow, :].reshape(n, oh, ow * c)
                row_acc += np.multiply(v, row_w[i, j], out=row_tmp)
        return row_acc.reshape(n, oh, ow, c)
    # The weights of one tap, shaped to broadcast against the input window (with a multiplier axis if m > 1).
    if win.nchw:
        wts = w.reshape(kh, kw, c, m, 1, 1) if m > 1 else w.reshape(kh, kw, c, 1, 1)
    else:
        wts = w if m > 1 else w.reshape(kh, kw, c)
    acc: Any = None
    tmp: Any = None
    for i in range(kh):
        rows = _taps(i * win.dh, oh, win.sh)
        for j in range(kw):
            v = xp[_spatial(win.nchw, rows, _taps(j * win.dw, ow, win.sw))]
            if m > 1:
                v = v[:, :, None] if win.nchw else v[..., None]
            if acc is None:
                acc = v * wts[i, j]
                tmp = np.empty_like(acc)
            else:
                np.multiply(v, wts[i, j], out=tmp)
                acc += tmp
    return acc
