"""Pooling that also says where each maximum came from: ``MaxPoolWithArgmax`` (``tf.nn.max_pool_with_argmax``,
the encoder half of SegNet-style unpooling models, which feed the indices to a scatter).

Each index is the flattened position of the maximum in the NHWC input, ``((b * h + y) * w + x) * c + ch``,
without the batch term unless ``include_batch_in_index``. Windows are searched row by row, column by
column, and the first of equal maxima wins, as TensorFlow does. TensorFlow's NaN answer depends on where in
the window a NaN sits (one first in its window is kept, a later one is skipped); poolserve skips NaN
wherever it is, and a window of NaN only gives its first. A depth window or stride other than 1 is refused
(TensorFlow checks them, then ignores them). Plain max pooling is in ``conv_ops``.

Also ``Dilation2D``, max pooling with a structuring element added to each window (morphological dilation
and erosion).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.runtime.kernels._common import _attrs_of, _dims, _index_type
from poolserve.runtime.kernels.conv_ops import _geometry, _out_dim, _pool_window, _Window
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node


@kernel("MaxPoolWithArgmax", expensive=True, outputs=2)
def max_pool_with_argmax(node: Node) -> Compute:
    ksize, strides = node.attr_ints("ksize"), node.attr_ints("strides")
    padding = node.attr_str("padding", choices=("SAME", "VALID"))
    index_dtype = _index_type(node, "Targmax")
    with_batch = node.attr_bool("include_batch_in_index", False)
    with _attrs_of(node):
        kh, kw, sh, sw, kd = _pool_window(ksize, strides, False, "max")
        if kd != 1:
            raise UnimplementedError(
                "MaxPoolWithArgmax pools across width/height only: depth window must be 1"
            )
    win = _Window(sh, sw, 1, 1, padding, (0, 0, 0, 0), False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        if x.ndim != 4:
            raise InvalidArgumentError(f"tensor_in must be 4-dimensional{_dims(x.shape)}")
        if x.size == 0:
            raise InvalidArgumentError("tensor_in must not be empty (2)")  # TensorFlow's words, "(2)" too
        n, h, w, c = x.shape
        oh, ow, (pt, _, pl, _) = _geometry(win, h, w, kh, kw)
        out = np.empty((n, oh, ow, c), x.dtype)
        arg = np.full((n, oh, ow, c), -1, np.int64)
        if out.size:
            _search(x, out, arg, kh, kw, sh, sw, pt, pl)
            # the position in the input, one image's worth per batch entry when the batch counts
            if with_batch:
                arg += (np.arange(n, dtype=np.int64) * (h * w * c))[:, None, None, None]
        return out, arg.astype(index_dtype, copy=False)

    return compute


def _search(x: Any, out: Any, arg: Any, kh: int, kw: int, sh: int, sw: int, pt: int, pl: int) -> None:
    """Fills ``out`` and ``arg`` (index within an image) tap by tap, in TensorFlow's window order."""
    _, h, w, c = x.shape
    _, oh, ow, _ = out.shape
    nan_aware = x.dtype.kind == "f"
    channel = np.arange(c, dtype=np.int64)
    for i in range(kh):
        rows = np.arange(oh) * sh - pt + i
        row_ok = (rows >= 0) & (rows < h)
        for j in range(kw):
            cols = np.arange(ow) * sw - pl + j
            col_ok = (cols >= 0) & (cols < w)
            if not row_ok.any() or not col_ok.any():
                continue
            r, q = np.clip(rows, 0, h - 1), np.clip(cols, 0, w - 1)
            tap = x[:, r][:, :, q]
            ok = (row_ok[:, None] & col_ok[None, :])[None, :, :, None]
            unset = arg < 0
            take = ok & (unset | (tap > out))
            if nan_aware:  # a NaN held so far gives way to any number
                take |= ok & np.isnan(out) & ~np.isnan(tap) & ~unset
            np.copyto(out, tap, where=take)
            where = ((r[:, None] * w + q[None, :]) * c)[None, :, :, None] + channel
            np.copyto(arg, np.broadcast_to(where, arg.shape), where=take)


@kernel("Dilation2D")
def dilation2d(node: Node) -> Compute:
    """Grayscale morphological dilation (``tf.nn.dilation2d``; ``erosion2d`` is its negation on the negated
    input and reversed filter): ``max over taps of input + filter``, each tap ``rates`` apart, outputs
    ``strides`` apart. Taps outside the input are skipped, and NaN never wins, as in TensorFlow's loop from
    the type's lowest value."""
    strides = node.attr_ints("strides", length=4)
    rates = node.attr_ints("rates", length=4)
    padding = node.attr_str("padding", choices=("SAME", "VALID"))
    if strides[0] != 1 or strides[3] != 1 or rates[0] != 1 or rates[3] != 1:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op 'Dilation2D'): current implementation does not yet support strides or "
            "rates in the batch and depth dimensions.",
            node.name,
        )
    sh, sw, rh, rw = strides[1], strides[2], rates[1], rates[2]

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, f = inputs
        if x.ndim != 4:
            raise InvalidArgumentError(f"input must be 4-dimensional{_dims(x.shape)}")
        if f.ndim != 3:
            raise InvalidArgumentError(f"filter must be 3-dimensional: {_dims(f.shape)}")
        if f.shape[2] != x.shape[3]:
            raise InvalidArgumentError(
                f"input and filter must have the same depth: {x.shape[3]} vs {f.shape[2]}"
            )
        n, h, w, c = x.shape
        kh, kw = f.shape[0], f.shape[1]
        oh, pt, pb = _out_dim(h, kh, sh, rh, padding, 0, 0)
        ow, pl, pr = _out_dim(w, kw, sw, rw, padding, 0, 0)
        work = np.float64 if x.dtype.kind in "iu" else x.dtype
        low = np.iinfo(x.dtype).min if x.dtype.kind in "iu" else np.finfo(x.dtype).min
        padded = np.pad(x.astype(work), ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=-np.inf)
        out = np.full((n, oh, ow, c), low, work)
        for dy in range(kh):
            for dx in range(kw):
                y0, x0 = dy * rh, dx * rw
                tap = padded[:, y0 : y0 + (oh - 1) * sh + 1 : sh, x0 : x0 + (ow - 1) * sw + 1 : sw, :]
                np.fmax(out, tap + f[dy, dx].astype(work), out=out)
        return (out.astype(x.dtype),)

    return compute
