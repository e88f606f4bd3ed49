"""Bucketing and counting: Bucketize, Bincount and DenseBincount, what Keras' Discretization and
CategoryEncoding layers (and feature columns) leave in a serving graph, and HistogramFixedWidth
(``tf.histogram_fixed_width``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.proto import types_pb2
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _bad_attr, _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node


@kernel("Bucketize")
def bucketize(node: Node) -> Compute:
    boundaries = np.asarray(node.attr("boundaries"), dtype=np.float64)
    if boundaries.size and np.any(boundaries[1:] < boundaries[:-1]):
        raise _bad_attr(node, "boundaries", "must be sorted in ascending order")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        # the index of the first boundary above each value (std::upper_bound); NaN sorts past them all
        return (np.searchsorted(boundaries, x, side="right").astype(np.int32, copy=False),)

    return compute


def _counts(arr: Any, size_t: Any, weights: Any, binary: bool, out_dtype: np.dtype[Any]) -> Any:
    if size_t.ndim != 0:
        raise InvalidArgumentError(f"Shape must be rank 0 but is rank {size_t.ndim} for size")
    size = int(size_t)
    if size < 0:
        raise InvalidArgumentError(f"size ({size}) must be non-negative")
    if arr.ndim not in (1, 2):
        raise InvalidArgumentError(f"Shape must be at most rank 2 but is rank {arr.ndim} for input")
    if weights is not None and weights.size and weights.shape != arr.shape:
        raise InvalidArgumentError(
            f"Expected weights to be empty or the same shape as arr, got weights of shape "
            f"{_shape_str(weights.shape)} and arr of shape {_shape_str(arr.shape)}"
        )
    if arr.size and arr.min() < 0:
        raise InvalidArgumentError("Input arr must be non-negative!")
    rows = arr if arr.ndim == 2 else arr.reshape(1, arr.shape[0])
    keep = rows < size  # values past the last bin are dropped, as TensorFlow does
    row_ids = np.broadcast_to(np.arange(rows.shape[0])[:, None], rows.shape)[keep]
    flat = row_ids * size + rows[keep]
    counts: Any
    if binary or weights is None or not weights.size:
        counts = np.bincount(flat, minlength=rows.shape[0] * size)
        if binary:
            counts = counts > 0
    else:
        w = weights.reshape(rows.shape)[keep]
        counts = np.bincount(flat, weights=w.astype(np.float64), minlength=rows.shape[0] * size)
    out = counts.astype(out_dtype).reshape(rows.shape[0], size)
    return out if arr.ndim == 2 else out.reshape(size)


@kernel("DenseBincount")
def dense_bincount(node: Node) -> Compute:
    binary = node.attr_bool("binary_output", False)
    out_dtype = node.attr_dtype("T")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        arr, size_t, weights = inputs
        return (_counts(arr, size_t, weights, binary, out_dtype),)

    return compute


@kernel("Bincount")
def bincount(node: Node) -> Compute:
    out_dtype = node.attr_dtype("T")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        arr, size_t, weights = inputs
        if arr.ndim != 1:  # v1 counts the values of any shape, as one list
            arr = arr.reshape(-1)
            weights = weights.reshape(-1) if weights.size else weights
        return (_counts(arr, size_t, weights, False, out_dtype),)

    return compute


@kernel("HistogramFixedWidth")
def histogram_fixed_width(node: Node) -> Compute:
    """``tf.histogram_fixed_width``: ``nbins`` equal bins over ``value_range``, values below it counted in the
    first bin and above it in the last. Arithmetic as TensorFlow's CPU kernel does it, in double: the bin
    width is ``high / nbins - low / nbins`` (so a value on an edge may fall in the bin below it)."""
    out_dtype = node.attr_dtype("dtype", types_pb2.DT_INT32)
    if out_dtype not in (np.int32, np.int64):
        raise _bad_attr(node, "dtype", f"must be int32 or int64, got {out_dtype}")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        values, value_range, nbins_t = inputs
        if value_range.ndim != 1:
            raise InvalidArgumentError("value_range should be a vector.")
        if value_range.shape[0] != 2:
            raise InvalidArgumentError("value_range should be a vector of 2 elements.")
        if nbins_t.ndim != 0:
            raise InvalidArgumentError("nbins should be a scalar.")
        nbins = int(nbins_t)
        low, high = value_range[0], value_range[1]
        if not low < high:
            raise InvalidArgumentError(
                "value_range should satisfy value_range[0] < value_range[1], "
                f"but got '[{_number(low)}, {_number(high)}]'"
            )
        if nbins <= 0:
            raise InvalidArgumentError(f"nbins should be a positive number, but got '{nbins}'")
        flat = values.reshape(-1)
        if nbins == 1:
            return (np.array([flat.size], out_dtype),)
        if flat.dtype.kind == "f" and np.isnan(flat).any():
            raise InvalidArgumentError("Histogram values must not contain NaN")
        lo, hi = float(low), float(high)
        step = hi / nbins - lo / nbins
        offset = np.clip(flat, low, high).astype(np.float64) - lo
        bins = np.minimum(offset / step, nbins - 1).astype(np.int64)
        return (np.bincount(bins, minlength=nbins).astype(out_dtype),)

    return compute


def _number(v: Any) -> str:
    """A range bound as TensorFlow's StrCat prints it: six significant digits for floats."""
    return f"{v:g}" if isinstance(v, np.floating) else str(v)
