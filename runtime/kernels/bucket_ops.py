"""Bucketing and counting: Bucketize, Bincount, DenseBincount, RaggedBincount and the CountSparseOutput ops
(``tf.sparse.bincount``), what Keras' Discretization, CategoryEncoding and TextVectorization layers (and
feature columns) leave in a serving graph, and HistogramFixedWidth (``tf.histogram_fixed_width``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.proto import types_pb2
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _bad_attr, _dims
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


def _size(size_t: Any) -> int:
    if size_t.ndim != 0:
        raise InvalidArgumentError(f"Shape must be rank 0 but is rank {size_t.ndim}")
    size = int(size_t)
    if size < 0:
        raise InvalidArgumentError(f"size ({size}) must be non-negative")
    return size


def _accumulate(rows: Any, bins: Any, weights: Any, shape: tuple[int, int], binary: bool, dtype: Any) -> Any:
    """Counts (or sums of weights) per (row, bin), values at or past the last bin dropped, as TensorFlow's
    CPU kernels add them: one value after the other, in the output's dtype (a float32 sum is float32's)."""
    keep = bins < shape[1]
    out = np.zeros(shape, dtype=dtype)
    if binary:
        out[rows[keep], bins[keep]] = 1
    elif weights is None:
        np.add.at(out, (rows[keep], bins[keep]), 1)
    else:
        np.add.at(out, (rows[keep], bins[keep]), weights.reshape(-1)[keep].astype(dtype, copy=False))
    return out


def _counts(arr: Any, size_t: Any, weights: Any, binary: bool, out_dtype: np.dtype[Any], v1: bool) -> Any:
    size = _size(size_t)
    if arr.ndim not in (1, 2):
        raise InvalidArgumentError(f"Shape must be at most rank 2 but is rank {arr.ndim}")
    if weights is not None and weights.size and weights.shape != arr.shape:
        if v1:
            raise InvalidArgumentError("Input indices and weights must have the same size.")
        raise InvalidArgumentError(
            "`weights` must be the same shape as `arr` or a length-0 `Tensor`, in which case it acts as all "
            f"weights equal to 1. Received {_dims(weights.shape)}"
        )
    if arr.size and arr.min() < 0:
        raise InvalidArgumentError("Input arr must be non-negative!")
    values = arr if arr.ndim == 2 else arr.reshape(1, arr.shape[0])
    rows = np.repeat(np.arange(values.shape[0]), values.shape[1])
    used = weights if weights is not None and weights.size else None
    out = _accumulate(rows, values.reshape(-1), used, (values.shape[0], size), binary, out_dtype)
    return out if arr.ndim == 2 else out.reshape(size)


@kernel("DenseBincount")
def dense_bincount(node: Node) -> Compute:
    binary = node.attr_bool("binary_output", False)
    out_dtype = node.attr_dtype("T")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        arr, size_t, weights = inputs
        return (_counts(arr, size_t, weights, binary, out_dtype, v1=False),)

    return compute


@kernel("Bincount")
def bincount(node: Node) -> Compute:
    out_dtype = node.attr_dtype("T")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        arr, size_t, weights = inputs
        # v1 counts the values of any shape, as one list
        flat_weights = weights.reshape(-1) if weights.size else weights
        return (_counts(arr.reshape(-1), size_t, flat_weights, False, out_dtype, v1=True),)

    return compute


@kernel("RaggedBincount")
def ragged_bincount(node: Node) -> Compute:
    """Counts per row of a ragged tensor (its row splits and flat values): ``tf.math.bincount`` of a
    RaggedTensor, Keras' TextVectorization in multi_hot, count and tf_idf modes."""
    binary = node.attr_bool("binary_output", False)
    out_dtype = node.attr_dtype("T")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        splits_t, values_t, size_t, weights = inputs
        size = _size(size_t)
        splits = splits_t.reshape(-1).astype(np.int64)
        values = values_t.reshape(-1)
        if not splits.size:
            raise InvalidArgumentError("Splits must be non-empty")
        if splits[0] != 0:
            raise InvalidArgumentError(f"Splits must start with 0, not with {splits[0]}")
        if splits[-1] != values.size:
            raise InvalidArgumentError(
                f"Splits must end with the number of values, got {splits[-1]} instead of {values.size}"
            )
        if weights.size and weights.size != values.size:
            # TensorFlow reads past the weights' end here
            raise InvalidArgumentError(
                f"weights must be empty or have one weight per value: {weights.size} weights for "
                f"{values.size} values"
            )
        if values.size and values.min() < 0:
            raise InvalidArgumentError("Input must be non-negative")
        # a value's row: the first split past its index (TensorFlow walks the splits; a split smaller
        # than one before it changes nothing), so the running maximum of the splits, searched
        rows = np.searchsorted(np.maximum.accumulate(splits), np.arange(values.size), side="right") - 1
        used = weights if weights.size else None
        return (_accumulate(rows, values, used, (splits.size - 1, size), binary, out_dtype),)

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


def _count_sparse(
    node: Node, batches: Any, values: Any, weights: Any, num_batches: int, is_1d: bool
) -> tuple[Any, ...]:
    """The CountSparseOutput ops' counts per (batch, value) as a sparse tensor: values at or past
    ``maxlength`` dropped, indices sorted, the width ``maxlength`` if set else max(largest value + 1,
    ``minlength``) (TensorFlow's count_ops.cc)."""
    minlength = node.attr_int("minlength", -1)
    maxlength = node.attr_int("maxlength", -1)
    binary = node.attr_bool("binary_output", False)
    out_dtype = node.attr_dtype("output_type")
    values = values.reshape(-1).astype(np.int64, copy=False)
    if values.size and values.min() < 0:
        raise InvalidArgumentError(f"Node '{node.name}': Input values must all be non-negative integers")
    keep = values < maxlength if maxlength >= 0 else np.ones(values.shape, bool)
    batches, kept = batches[keep], values[keep]
    largest = int(kept.max()) if kept.size else 0
    width = maxlength if maxlength > 0 else max(largest + 1, minlength)
    # one entry per distinct (batch, value), in sorted order
    keys, where = np.unique(batches * (largest + 1) + kept, return_inverse=True)
    if binary:
        counts = np.ones(keys.shape, out_dtype)
    elif weights.size:
        counts = np.zeros(keys.shape, out_dtype)
        np.add.at(counts, where, weights.reshape(-1)[keep].astype(out_dtype, copy=False))
    else:
        counts = np.bincount(where, minlength=keys.size).astype(out_dtype)
    rows, cols = np.divmod(keys, largest + 1)
    if is_1d:
        return cols.reshape(-1, 1), counts, np.array([width], np.int64)
    return np.stack([rows, cols], 1).astype(np.int64), counts, np.array([num_batches, width], np.int64)


def _check_weights(node: Node, weights: Any, values: Any) -> None:
    if weights.size and weights.shape != values.shape:
        raise InvalidArgumentError(
            f"Node '{node.name}': Weights and values must have the same shape. Weight shape: "
            f"{_dims(weights.shape)}; values shape: {_dims(values.shape)}"
        )


@kernel("DenseCountSparseOutput", outputs=3)
def dense_count_sparse_output(node: Node) -> Compute:
    """``tf.sparse.bincount`` of a dense tensor: counts per row (of a matrix) or of a vector, sparse."""

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        values, weights = inputs
        if values.ndim not in (1, 2):
            raise InvalidArgumentError(f"Node '{node.name}': Input must be a 1 or 2-dimensional tensor")
        _check_weights(node, weights, values)
        is_1d = values.ndim == 1
        batches = (
            np.zeros(values.size, np.int64)
            if is_1d
            else np.repeat(np.arange(values.shape[0]), values.shape[1])
        )
        return _count_sparse(node, batches, values, weights, 1 if is_1d else values.shape[0], is_1d)

    return compute


@kernel("SparseCountSparseOutput", outputs=3)
def sparse_count_sparse_output(node: Node) -> Compute:
    """``tf.sparse.bincount`` of a SparseTensor (Keras' CategoryEncoding and Hashing on sparse inputs):
    counts per row, by the first index of each value."""

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        indices, values, dense_shape, weights = inputs
        _check_weights(node, weights, values)
        is_1d = dense_shape.size == 1
        num_batches = 1 if is_1d else int(dense_shape[0])
        if indices.ndim != 2 or indices.shape[0] != values.size:
            raise InvalidArgumentError(
                f"Node '{node.name}': indices must be a matrix with one row per value, got shape "
                f"{_dims(indices.shape)} for {values.size} values"
            )
        batches = np.zeros(values.size, np.int64) if is_1d else indices[:, 0].astype(np.int64)
        if batches.size and (batches.max() >= num_batches or batches.min() < 0):
            raise InvalidArgumentError(
                f"Node '{node.name}': Indices value along the first dimension must be lower than the first "
                "index of the shape."
            )
        return _count_sparse(node, batches, values, weights, num_batches, is_1d)

    return compute


@kernel("RaggedCountSparseOutput", outputs=3)
def ragged_count_sparse_output(node: Node) -> Compute:
    """``tf.sparse.bincount`` of a RaggedTensor: counts per row of its splits, sparse."""

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        splits_t, values, weights = inputs
        _check_weights(node, weights, values)
        splits = splits_t.reshape(-1).astype(np.int64)
        if not splits.size or splits[0] != 0 or splits[-1] != values.size:
            raise InvalidArgumentError(
                f"Node '{node.name}': Splits must be non-empty, start with 0 and end with the number of "
                f"values ({values.size}), got {_dims(splits.shape)} splits"
            )
        batches = np.searchsorted(np.maximum.accumulate(splits), np.arange(values.size), side="right") - 1
        return _count_sparse(node, batches, values, weights, splits.size - 1, False)

    return compute
