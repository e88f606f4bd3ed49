"""Indexing by value: Gather, GatherV2, GatherNd, OneHot, TopKV2, InTopK(V2), Where, Unique (V2, WithCounts),
ListDiff, and the sorted searches LowerBound and UpperBound (``tf.searchsorted``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from poolserve.proto import types_pb2
from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.runtime.kernels._common import _bad_attr, _index_type, _scalar, _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node


def _tensor(value: Any, dtype: np.dtype[Any]) -> Any:
    """numpy hands back a bare scalar for some 0-d results (a Python ``bytes`` for strings): re-wrap it."""
    return value if isinstance(value, np.ndarray) else np.array(value, dtype=dtype)


# GatherV2's private attr (``runtime/gather_fusion.py``): the negative-index wrap the graph computed before it
WRAP_ATTR = "_wrap_negative_indices"

# Up to this many indices are checked as Python ints: two numpy reductions cost ~9 us on a loaded machine
# against ~3 for the list (an embedding lookup of one request, a shape vector's GatherV2)
_FEW_INDICES = 64


def _check_indices(indices: Any, limit: int, wrap: int = 0) -> None:
    """Raises TensorFlow's error for the first index outside [0, limit); with ``wrap`` (the graph's
    negative-index wrap, ``gather_fusion``), for the first index outside [-wrap, limit), the error naming
    the value the wrap made of it."""
    low = -wrap
    if indices.size <= _FEW_INDICES:
        few = indices.ravel().tolist()
        if min(few) >= low and max(few) < limit:
            return
    elif indices.min() >= low and indices.max() < limit:
        return
    if wrap:
        indices = _wrapped(indices, wrap)
    first = np.flatnonzero((indices < 0) | (indices >= limit))[0]
    pos = np.unravel_index(first, indices.shape)
    where = "[" + ",".join(str(int(p)) for p in pos) + "]" if indices.ndim else ""
    raise InvalidArgumentError(f"indices{where} = {indices[pos]} is not in [0, {limit})")


def _wrapped(indices: Any, wrap: int) -> Any:
    """``where(indices < 0, indices + wrap, indices)``, as the graph wrote it before ``gather_fusion``."""
    return np.where(indices < 0, indices + indices.dtype.type(wrap), indices)


def _gather(params: Any, indices: Any, axis: int, batch_dims: int, wrap: int = 0) -> Any:
    """``params`` gathered along ``axis`` at ``indices``; with ``wrap``, negative indices first count from
    ``wrap`` (numpy's ``take`` does that itself when ``wrap`` is the axis's size)."""
    out_shape = params.shape[:axis] + indices.shape[batch_dims:] + params.shape[axis + 1 :]
    if math.prod(out_shape) == 0:  # TensorFlow checks no index when there is nothing to copy
        return np.empty(out_shape, dtype=params.dtype)
    if wrap and (wrap != params.shape[axis] or batch_dims):
        indices, wrap = _wrapped(indices, wrap), 0
    _check_indices(indices, params.shape[axis], wrap)
    if batch_dims == 0:
        return _tensor(params.take(indices, axis=axis), params.dtype)
    # [batch, outer, gathered, inner] x [batch, 1, n, 1] -> [batch, outer, n, inner]
    batch = math.prod(params.shape[:batch_dims])
    outer = math.prod(params.shape[batch_dims:axis])
    inner = math.prod(params.shape[axis + 1 :])
    p = params.reshape(batch, outer, params.shape[axis], inner)
    idx = indices.reshape(batch, 1, -1, 1)
    return np.take_along_axis(p, idx, axis=2).reshape(out_shape)


@kernel("Gather", expensive=True)
def gather(node: Node) -> Compute:
    node.attr_bool("validate_indices", True)  # indices are always validated, as on TensorFlow's CPU

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        params, indices = inputs
        if params.ndim < 1:
            raise InvalidArgumentError("params must be at least 1 dimensional")
        return (_gather(params, indices, 0, 0),)

    return compute


@kernel("GatherV2", expensive=True)
def gather_v2(node: Node) -> Compute:
    batch_dims_attr = node.attr_int("batch_dims", 0)
    wrap = node.attr_int(WRAP_ATTR, 0)  # gather_fusion's: the negative-index wrap it took over

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        params, indices, axis_t = inputs
        rank = params.ndim
        if rank < 1:
            raise InvalidArgumentError("params must be at least 1 dimensional")
        if axis_t.ndim != 0:
            raise InvalidArgumentError("axis must be scalar")
        axis = _scalar(axis_t)
        a = axis + rank if axis < 0 else axis
        if not 0 <= a < rank:
            raise InvalidArgumentError(f"Expected axis in the range [{-rank}, {rank}), but got {axis}")
        batch_dims = batch_dims_attr
        if batch_dims != 0:
            n = indices.ndim
            if not -n <= batch_dims <= n:
                raise InvalidArgumentError(
                    f"Expected batch_dims in the range [{-n}, {n}], but got {batch_dims}"
                )
            if batch_dims < 0:
                batch_dims += n
            if batch_dims >= rank:
                raise InvalidArgumentError(
                    f"batch_dims ({batch_dims}) must be less than rank(params) ({rank})."
                )
            if a < batch_dims:
                raise InvalidArgumentError(
                    f"batch_dims ({batch_dims}) must be less than or equal to axis ({a})."
                )
            for i in range(batch_dims):
                if params.shape[i] != indices.shape[i]:
                    raise InvalidArgumentError(
                        f"params.shape[{i}]: {params.shape[i]} should be equal to indices.shape[{i}]: "
                        f"{indices.shape[i]}"
                    )
        return (_gather(params, indices, a, batch_dims, wrap),)

    return compute


@kernel("GatherNd", expensive=True)
def gather_nd(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        params, indices = inputs
        if params.ndim < 1:
            raise InvalidArgumentError("params must be at least a vector")
        if indices.ndim < 1:
            raise InvalidArgumentError("indices must be at least a vector")
        k = indices.shape[-1]
        if k > params.ndim:
            raise InvalidArgumentError(
                f"index innermost dimension length must be <= params rank; saw: {k} vs. {params.ndim}"
            )
        lead = indices.shape[:-1]
        out_shape = lead + params.shape[k:]
        n = math.prod(lead)
        if n > 0 and params.size == 0:
            raise InvalidArgumentError(
                "Requested more than 0 entries, but params is empty.  Params shape: "
                f"{_shape_str(params.shape)}"
            )
        if n == 0:
            return (np.empty(out_shape, dtype=params.dtype),)
        if k == 0:
            return (np.broadcast_to(params, out_shape),)
        limits = np.array(params.shape[:k])
        bad = (indices < 0) | (indices >= limits)
        if bad.any():
            # TensorFlow names the last bad index it meets.
            last = np.flatnonzero(bad.any(axis=-1))[-1]
            pos = np.unravel_index(last, lead)
            where = "[" + ",".join(str(int(p)) for p in pos) + "]" if lead else ""
            values = ", ".join(str(v) for v in indices[pos].tolist())
            raise InvalidArgumentError(
                f"indices{where} = [{values}] does not index into param shape {_shape_str(params.shape)}, "
                f"node name: {node.name}"
            )
        return (_tensor(params[tuple(np.moveaxis(indices, -1, 0))], params.dtype),)

    return compute


@kernel("OneHot")
def one_hot(node: Node) -> Compute:
    axis = node.attr_int("axis", -1)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        indices, depth_t, on_value, off_value = inputs
        for name, t in (("depth", depth_t), ("on_value", on_value), ("off_value", off_value)):
            if t.ndim != 0:
                raise InvalidArgumentError(f"{name} must be a scalar, but got: {_shape_str(t.shape)}")
        rank = indices.ndim
        if not (axis == -1 or 0 <= axis <= rank):
            raise InvalidArgumentError(
                f"Expected axis to be -1 or between [0, {rank + 1}).  But received: {axis}"
            )
        depth = _scalar(depth_t)
        if depth < 0:
            raise InvalidArgumentError(f"depth must be non-negative, got: {depth}")
        a = rank if axis == -1 else axis
        # Compare each index with 0..depth-1 laid along the new axis; out-of-range indices match nothing.
        positions = np.arange(depth).reshape((depth,) + (1,) * (rank - a))
        hot = np.expand_dims(indices, a) == positions
        return (np.where(hot, on_value, off_value).astype(on_value.dtype, copy=False),)

    return compute


@kernel("TopKV2", outputs=2)
def top_k_v2(node: Node) -> Compute:
    # sorted=False leaves the order to the implementation; this one always sorts. NaNs are the largest
    # values here; TensorFlow's place for them follows its algorithm (k == 1: a vectorized max reduction,
    # whose NaN handling depends on the row length and the CPU's vector width; otherwise sort or heap
    # comparisons that take a NaN as equal to everything). Subnormals are not flushed (as TensorFlow's
    # FTZ/DAZ threads do, making them ties of 0): that would cost a pass over every input for an order
    # among values TensorFlow takes as equal.
    node.attr_bool("sorted", True)
    index_type = node.attr_dtype("index_type", types_pb2.DT_INT32)
    if index_type not in (np.int16, np.int32, np.int64):
        raise _bad_attr(node, "index_type", f"must be int16, int32 or int64, got {index_type}")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, k_t = inputs
        if k_t.ndim != 0:
            raise InvalidArgumentError(f"k must be scalar, got shape {_shape_str(k_t.shape)}")
        k = _scalar(k_t)
        if not -(2**31) <= k < 2**31:
            k = int(k_t.astype(np.int32))  # TensorFlow reads k as an int32
        if k < 0:
            raise InvalidArgumentError(f"Need k >= 0, got {k}")
        if x.ndim < 1:
            raise InvalidArgumentError(f"input must be >= 1-D, got shape {_shape_str(x.shape)}")
        values, indices = _top_k(x, k)
        return values, indices.astype(index_type, copy=False)

    return compute


def _top_k(x: Any, k: int) -> tuple[Any, Any]:
    """The ``k`` largest of each last-axis row of ``x`` (at least 1-D) and their indices (int64), largest
    first, equal values in increasing index order."""
    n = x.shape[-1]
    if n < k:
        raise InvalidArgumentError(f"input must have at least k columns. Had {n}, needed {k}")
    # A stable ascending sort of the reversed rows, read backwards, is descending with ties in
    # increasing index order (TensorFlow's order) and works for every orderable dtype.
    order = np.argsort(x[..., ::-1], axis=-1, kind="stable")[..., ::-1][..., :k]
    indices = (n - 1) - order
    return np.take_along_axis(x, indices, axis=-1), indices


@kernel("ApproxTopK", outputs=2)
def approx_top_k(node: Node) -> Compute:
    """``tf.math.approx_max_k``. TensorFlow's CPU kernel is its TopK kernel (exact, sorted, int32 indices)
    registered for ``is_max_k`` true along the last axis only; recall_target, aggregate_to_topk and
    reduction_input_size_override tune the approximation of TPUs and are unused. Min-k and other axes have
    only XLA kernels in TensorFlow, whose ties come in an order of their algorithm: not served here."""
    k = node.attr_int("k")
    if k < 0:
        raise _bad_attr(node, "k", f"must be at least 0, got {k}")
    for attr, value, cpu in (
        ("is_max_k", node.attr_bool("is_max_k", True), True),
        ("reduction_dimension", node.attr_int("reduction_dimension", -1), -1),
    ):
        if value != cpu:
            raise UnimplementedError(
                f"Node '{node.name}' (op 'ApproxTopK'): {attr}={str(value).lower()} has no CPU kernel in "
                "TensorFlow (only XLA's, its ties in the order of its approximation); "
                f"{attr}={str(cpu).lower()} only",
                node.name,
            )

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        if x.ndim < 1:
            raise InvalidArgumentError(f"input must be >= 1-D, got shape {_shape_str(x.shape)}")
        values, indices = _top_k(x, k)
        return values, indices.astype(np.int32)

    return compute


@kernel("Where")
def where(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        if x.ndim == 0:
            raise InvalidArgumentError("WhereOp : Unhandled input dimensions: 0")
        return (np.argwhere(x).astype(np.int64, copy=False),)

    return compute


@kernel("Unique", outputs=2)
def unique(node: Node) -> Compute:
    out_idx = _index_type(node, "out_idx")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        if x.ndim != 1:
            raise InvalidArgumentError("unique expects a 1D vector.")
        if x.size == 0:
            return x, np.zeros(0, dtype=out_idx)
        # np.unique sorts; TensorFlow numbers values by first appearance (NaNs never equal each other).
        # Subnormals stay values of their own (TensorFlow's FTZ/DAZ threads take them as 0), as everywhere in
        # poolserve's kernels.
        key = x
        if x.dtype == np.float16:
            # TensorFlow hashes halves by their bits: 0.0 and -0.0 are two values. Every NaN gets a key
            # of its own.
            key = x.view(np.uint16).astype(np.int64)
            nan = np.isnan(x)
            if nan.any():
                key[nan] = (1 << 16) + np.flatnonzero(nan)
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True, equal_nan=False)
        order = np.argsort(first, kind="stable")
        rank_of = np.empty_like(order)
        rank_of[order] = np.arange(order.size)
        return x[first[order]], rank_of[inverse].astype(out_idx, copy=False)

    return compute


def _element_ids(x: Any) -> Any:
    """An int64 id per element of a flat array, equal exactly where TensorFlow's hash tables take two
    elements as one: by value (0.0 and -0.0 alike), halves by their bits, NaNs never."""
    if x.dtype == np.float16:
        ids = x.view(np.uint16).astype(np.int64)
    else:
        key = x + x.dtype.type(0) if x.dtype.kind == "f" else x  # -0.0 + 0.0 is 0.0
        _, ids = np.unique(key, return_inverse=True)
        ids = ids.reshape(-1).astype(np.int64)
    if x.dtype.kind == "f":
        nan = np.isnan(x)
        if nan.any():
            ids[nan] = (1 << 32) + np.flatnonzero(nan)
    return ids


def _unique_rows(rows: Any) -> tuple[Any, Any, Any]:
    """(first row of each group, group of each row, group sizes) of an [n, k] id matrix, groups numbered by
    first appearance (TensorFlow's order)."""
    n = rows.shape[0]
    if n == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    if rows.shape[1] == 0:  # empty slices are all equal
        return np.zeros(1, np.int64), np.zeros(n, np.int64), np.array([n])
    key = rows[:, 0] if rows.shape[1] == 1 else rows
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True, axis=0)
    inverse = inverse.reshape(-1)
    order = np.argsort(first, kind="stable")
    rank_of = np.empty_like(order)
    rank_of[order] = np.arange(order.size)
    group = rank_of[inverse]
    return first[order], group, np.bincount(group, minlength=order.size)


def _unique_axis(x: Any, axis_t: Any | None) -> tuple[Any, Any, Any]:
    """UniqueV2 and UniqueWithCounts(V2): unique slices of ``x`` along the axis (1-D ``x`` without one)."""
    if axis_t is not None:
        if axis_t.ndim != 1:
            raise InvalidArgumentError("axis expects a 1D vector.")
        if axis_t.size > 1:
            raise InvalidArgumentError("axis does not support input tensors larger than 1 elements")
    if axis_t is None or axis_t.size == 0:
        if x.ndim != 1:
            raise InvalidArgumentError("unique expects a 1D vector.")
        axis = 0
    else:
        axis = int(axis_t[0])
        if axis < 0:
            axis += x.ndim
        if not 0 <= axis < x.ndim:
            raise InvalidArgumentError(f"axis has to be between [0, {x.ndim})")
    moved = np.moveaxis(x, axis, 0)
    ids = _element_ids(moved.reshape(-1)).reshape(moved.shape[0], math.prod(moved.shape[1:]))
    first, group, counts = _unique_rows(ids)
    return np.take(x, first, axis=axis), group, counts


@kernel("UniqueV2", outputs=2)
def unique_v2(node: Node) -> Compute:
    out_idx = _index_type(node, "out_idx")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, axis_t = inputs
        y, idx, _ = _unique_axis(x, axis_t)
        return y, idx.astype(out_idx)

    return compute


@kernel("UniqueWithCounts", "UniqueWithCountsV2", outputs=3)
def unique_with_counts(node: Node) -> Compute:
    out_idx = _index_type(node, "out_idx")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        y, idx, counts = _unique_axis(inputs[0], inputs[1] if len(inputs) > 1 else None)
        return y, idx.astype(out_idx), counts.astype(out_idx)

    return compute


@kernel("ListDiff", outputs=2)
def list_diff(node: Node) -> Compute:
    """The values of ``x`` not in ``y``, in ``x``'s order, and their positions (``setdiff1d``)."""
    out_idx = _index_type(node, "out_idx")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, y = inputs
        if x.ndim != 1:
            raise InvalidArgumentError("x should be a 1D vector.")
        if y.ndim != 1:
            raise InvalidArgumentError("y should be a 1D vector.")
        ids = _element_ids(np.concatenate([x, y]))
        keep = np.flatnonzero(~np.isin(ids[: x.size], ids[x.size :]))
        return x[keep], keep.astype(out_idx)

    return compute


def _search_sorted(node: Node, upper: bool) -> Compute:
    out_type = _index_type(node, "out_type")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        sorted_t, values_t = inputs
        if sorted_t.ndim != 2 or values_t.ndim != 2:
            raise InvalidArgumentError(
                f"sorted input argument must be a matrix, got shapes {_shape_str(sorted_t.shape)} and "
                f"{_shape_str(values_t.shape)}"
            )
        if sorted_t.shape[0] != values_t.shape[0]:
            raise InvalidArgumentError("Leading dim_size of both tensors must match.")
        return (_bounds(sorted_t, values_t, upper).astype(out_type),)

    return compute


def _bounds(sorted_t: Any, values_t: Any, upper: bool) -> Any:
    """libstdc++'s ``std::lower_bound`` / ``std::upper_bound`` of each value in its row, the binary search
    run for all values at once: the same probes, so NaNs (which compare false both ways) land where
    TensorFlow's land."""
    batch, n = sorted_t.shape
    first = np.zeros(values_t.shape, np.int64)
    length = np.full(values_t.shape, n, np.int64)
    rows = np.arange(batch)[:, None]
    while True:
        live = length > 0
        if not live.any():
            return first
        half = length >> 1
        middle = first + half
        probe = sorted_t[rows, np.where(live, middle, 0)]
        # upper_bound goes left when value < probe; lower_bound goes right when probe < value
        right = ~(values_t < probe) if upper else probe < values_t
        first = np.where(live & right, middle + 1, first)
        length = np.where(live, np.where(right, length - half - 1, half), 0)


@kernel("LowerBound")
def lower_bound(node: Node) -> Compute:
    return _search_sorted(node, upper=False)


@kernel("UpperBound")
def upper_bound(node: Node) -> Compute:
    return _search_sorted(node, upper=True)


@kernel("InTopK", "InTopKV2")
def in_top_k(node: Node) -> Compute:
    """Whether each target's prediction is among the ``k`` largest of its row: fewer than ``k`` classes
    predicted strictly higher. An out-of-range target, or a row with a non-finite prediction, is false."""
    k_attr = node.attr_int("k") if node.op == "InTopK" else None

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        predictions, targets = inputs[0], inputs[1]
        if k_attr is None:
            k_t = inputs[2]
            if k_t.ndim != 0:
                raise InvalidArgumentError(f"k must be 0-D, got shape {_shape_str(k_t.shape)}")
            k = int(k_t)
        else:
            k = k_attr
        if predictions.ndim != 2:
            raise InvalidArgumentError("predictions must be 2-dimensional")
        if targets.ndim != 1:
            raise InvalidArgumentError("targets must be 1-dimensional")
        batch, classes = predictions.shape
        if batch != targets.shape[0]:
            raise InvalidArgumentError(
                f"First dimension of predictions {batch} must match length of targets {targets.shape[0]}"
            )
        valid = (targets >= 0) & (targets < classes)
        picked = predictions[np.arange(batch), np.where(valid, targets, 0)] if classes else np.zeros(batch)
        higher = (predictions > picked[:, None]).sum(axis=1)
        finite = np.isfinite(predictions).all(axis=1)
        return (valid & finite & (higher < k),)

    return compute
