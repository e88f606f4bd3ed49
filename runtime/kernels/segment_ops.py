"""Segment reductions: SegmentSum/Mean/Max/Min/Prod (sorted ids), UnsortedSegmentSum/Max/Min/Prod, and
SparseSegmentSum/Mean/SqrtN with their WithNumSegments forms.

``tf.nn.embedding_lookup_sparse`` and the embedding columns of feature columns (``combiner`` "sum",
"mean", "sqrtn") end in a SparseSegment op over the looked-up rows; ``tf.math.segment_*`` and
``tf.math.unsorted_segment_*`` (GNN message passing, per-example pooling) give the others.

What is not obvious, all as TensorFlow's CPU kernels do:

- Empty segments: the sorted ops give 0 (1 for Prod, 0 even for Max and Min); the unsorted ops their
  reduction's identity (the dtype's lowest value for Max, its highest for Min); the sparse ops 0.
- Unsorted ops drop negative ids; an id past ``num_segments`` is an error.
- Sums and products accumulate in the data's dtype (integers wrap, integer means truncate), except the
  sparse ops on half, which accumulate in float32. Half sums of the other ops are done in order, one
  rounding per term (``ufunc.at``), as TensorFlow's half arithmetic does; the rest use ``reduceat``.
- Max and Min over NaN: TensorFlow's answer depends on the order of the operands (``cwiseMax``), which is
  not emulated; numpy's NaN propagates (op_fuzz_sparse keeps NaN out of those cases).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _dims, _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)

# reduction -> its ufunc; "mean" and "sqrtn" are sums divided afterwards
_UFUNC: dict[str, np.ufunc] = {
    "sum": np.add,
    "mean": np.add,
    "sqrtn": np.add,
    "prod": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def _unsorted_init(reduction: str, dtype: np.dtype[Any]) -> Any:
    """What an unsorted op leaves in an empty segment: its reduction's identity."""
    if reduction == "sum":
        return 0
    if reduction == "prod":
        return 1
    info: Any = np.finfo(dtype) if dtype.kind == "f" else np.iinfo(dtype)
    return info.min if reduction == "max" else info.max


def _check_sorted(
    ids: Any, rows: int, bad: Any = None, bad_message: Callable[[int], str] | None = None
) -> Any:
    """The start of each run of equal ids (a non-empty vector), raising TensorFlow's error for the first bad
    segment in the order its kernel walks them: at a segment's end, the ids must grow; then its id must lie
    in [0, rows); then (the sparse ops) none of its rows may be ``bad`` (``bad_message(i)`` for the first)."""
    change = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    starts = np.concatenate(([0], change))
    seg = ids[starts]
    decreasing = np.zeros(seg.shape[0], bool)
    decreasing[:-1] = seg[1:] < seg[:-1]
    out = (seg < 0) | (seg >= rows)
    flagged = decreasing | out
    if bad is not None:
        flagged |= np.logical_or.reduceat(bad, starts)
    if not flagged.any():
        return starts
    s = int(np.flatnonzero(flagged)[0])
    if decreasing[s]:
        raise InvalidArgumentError("segment ids are not increasing")
    if out[s]:
        raise InvalidArgumentError(
            f"Segment id {seg[s]} out of range [0, {rows}), possibly because 'segment_ids' input is not "
            "sorted."
        )
    assert bad_message is not None
    raise InvalidArgumentError(bad_message(int(starts[s]) + int(np.flatnonzero(bad[starts[s] :])[0])))


def _divide(total: Any, counts: Any) -> Any:
    """``total / counts`` per segment (counts >= 1) broadcast over the trailing axes; integers truncate."""
    c = counts.reshape(-1, *(1,) * (total.ndim - 1))
    if total.dtype.kind in "fc":
        return (total / c.astype(total.dtype)).astype(total.dtype, copy=False)
    c = c.astype(total.dtype)
    q = total // c
    if total.dtype.kind == "i":  # C++ division truncates toward zero
        q += ((q < 0) & (q * c != total)).astype(total.dtype)
    return q


# --- sorted segment ids ----------------------------------------------------------------------------------


def _segment(data: Any, ids: Any, reduction: str) -> Any:
    if ids.ndim != 1:
        raise InvalidArgumentError("segment_ids should be a vector.")
    if data.ndim == 0 or ids.shape[0] != data.shape[0]:
        raise InvalidArgumentError("segment_ids should be the same size as dimension 0 of input.")
    n = ids.shape[0]
    rows = int(ids[-1]) + 1 if n else 0
    if n and rows <= 0:
        raise InvalidArgumentError("segment ids must be >= 0")
    default = 1 if reduction == "prod" else 0
    out = np.full((rows, *data.shape[1:]), default, dtype=data.dtype)
    if n == 0:
        return out
    starts = _check_sorted(ids, rows)
    seg = ids[starts]
    ufunc = _UFUNC[reduction]
    if data.dtype == _F16 and reduction in ("sum", "mean", "prod"):
        total = np.full((len(starts), *data.shape[1:]), default, dtype=data.dtype)
        run = np.cumsum(np.concatenate(([0], (ids[1:] != ids[:-1]).astype(np.intp))))
        ufunc.at(total, run, data)  # in order, rounding to half after each term
    else:
        total = ufunc.reduceat(data, starts, axis=0, dtype=data.dtype)  # small ints: no upcast
    if reduction == "mean":
        total = _divide(total, np.diff(np.concatenate((starts, [n]))))
    out[seg] = total
    return out


def _sorted_kernel(reduction: str) -> Callable[[Node], Compute]:
    def factory(node: Node) -> Compute:
        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            data, ids = inputs
            return (_segment(data, ids, reduction),)

        return compute

    return factory


for _op, _reduction in (
    ("SegmentSum", "sum"),
    ("SegmentMean", "mean"),
    ("SegmentProd", "prod"),
    ("SegmentMax", "max"),
    ("SegmentMin", "min"),
):
    kernel(_op, expensive=True)(_sorted_kernel(_reduction))


# --- unsorted segment ids --------------------------------------------------------------------------------


def _unsorted(data: Any, ids: Any, num_t: Any, reduction: str) -> Any:
    if num_t.ndim != 0:
        raise InvalidArgumentError(f"num_segments should be a scalar, not shape {_shape_str(num_t.shape)}")
    num = int(num_t)
    if num < 0:
        raise InvalidArgumentError(f"Input num_segments == {num} must not be negative.")
    if data.shape[: ids.ndim] != ids.shape:
        raise InvalidArgumentError(
            f"data.shape = {_dims(data.shape)} does not start with segment_ids.shape = {_dims(ids.shape)}"
        )
    rest = data.shape[ids.ndim :]
    out = np.full((num, *rest), _unsorted_init(reduction, data.dtype), dtype=data.dtype)
    if not data.size:  # TensorFlow checks no id when there is nothing to reduce
        return out
    flat = ids.reshape(-1)
    past = flat >= num
    if past.any():
        i = int(np.flatnonzero(past)[0])
        where = ",".join(str(int(p)) for p in np.unravel_index(i, ids.shape))
        where = f"[{where}]" if ids.ndim else ""
        raise InvalidArgumentError(f"segment_ids{where} = {flat[i]} is out of range [0, {num})")
    rows = data.reshape(flat.shape[0], *rest)
    keep = flat >= 0  # negative ids are dropped
    if not keep.all():
        flat, rows = flat[keep], rows[keep]
    _UFUNC[reduction].at(out, flat, rows)  # in order, as TensorFlow's loop over the data
    return out


def _unsorted_kernel(reduction: str) -> Callable[[Node], Compute]:
    def factory(node: Node) -> Compute:
        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            data, ids, num_t = inputs
            return (_unsorted(data, ids, num_t, reduction),)

        return compute

    return factory


for _op, _reduction in (
    ("UnsortedSegmentSum", "sum"),
    ("UnsortedSegmentProd", "prod"),
    ("UnsortedSegmentMax", "max"),
    ("UnsortedSegmentMin", "min"),
):
    kernel(_op, expensive=True)(_unsorted_kernel(_reduction))


# --- sparse segments: rows of data picked by indices, reduced by sorted segment ids -------------------------


def _sparse_segment(data: Any, indices: Any, ids: Any, num_t: Any, reduction: str) -> Any:
    if indices.ndim != 1:
        raise InvalidArgumentError("indices should be a vector.")
    if ids.ndim != 1:
        raise InvalidArgumentError("segment_ids should be a vector.")
    n = indices.shape[0]
    if n != ids.shape[0]:
        raise InvalidArgumentError("segment_ids and indices should have same size.")
    if data.ndim == 0:
        raise InvalidArgumentError("data must be at least 1-D, got shape []")
    if num_t is not None:
        if num_t.ndim != 0:
            raise InvalidArgumentError(
                f"num_segments should be a scalar, not shape {_shape_str(num_t.shape)}"
            )
        rows = int(num_t)
        if rows < 0:
            raise InvalidArgumentError("segment ids must be >= 0")
        if n and int(ids[-1]) >= rows:
            raise InvalidArgumentError("segment ids must be < num_segments")
    else:
        rows = int(ids[-1]) + 1 if n else 0
    if rows < 0 or (n and rows == 0):
        raise InvalidArgumentError("segment ids must be >= 0")
    out = np.zeros((rows, *data.shape[1:]), dtype=data.dtype)
    if n == 0:
        return out
    limit = data.shape[0]
    bad = (indices < 0) | (indices >= limit)
    starts = _check_sorted(
        ids,
        rows,
        bad if bad.any() else None,
        lambda i: f"Bad: indices[{i}] == {indices[i]} out of range [0, {limit})",
    )
    picked = data[indices]
    if picked.dtype == _F16:  # TensorFlow sums half rows in float32
        picked = picked.astype(_F32)
    total = np.add.reduceat(picked, starts, axis=0, dtype=picked.dtype)
    if reduction != "sum":
        counts = np.diff(np.concatenate((starts, [n])))
        if reduction == "sqrtn":
            counts = np.sqrt(counts.astype(total.dtype))
        total = _divide(total, counts)
    out[ids[starts]] = total
    return out


def _sparse_kernel(reduction: str, with_num: bool) -> Callable[[Node], Compute]:
    def factory(node: Node) -> Compute:
        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            data, indices, ids = inputs[:3]
            return (_sparse_segment(data, indices, ids, inputs[3] if with_num else None, reduction),)

        return compute

    return factory


for _op, _reduction in (
    ("SparseSegmentSum", "sum"),
    ("SparseSegmentMean", "mean"),
    ("SparseSegmentSqrtN", "sqrtn"),
):
    kernel(_op, expensive=True)(_sparse_kernel(_reduction, False))
    kernel(_op + "WithNumSegments", expensive=True)(_sparse_kernel(_reduction, True))
