"""Arithmetic on SparseTensors: SparseReduceSum/Max (dense result) and their ``Sparse`` forms, SparseAdd,
SparseSparseMaximum/Minimum, SparseConcat, SparseSlice and SparseSoftmax (``tf.sparse.reduce_sum``,
``tf.sparse.add``, ``maximum``, ``minimum``, ``concat``, ``slice``, ``softmax``).

A SparseTensor travels as int64 ``indices`` [N, rank], ``values`` [N] and ``dense_shape`` [rank]. As in
TensorFlow: reductions group the values by their index outside the reduced axes (an index with no value
gives 0 in the dense result, for the max too); SparseAdd merges two operands in index order, adding the
values of indices both hold and dropping such sums smaller in magnitude than ``thresh`` (values only one
operand holds are kept whatever their size; operands out of order merge as TensorFlow's two cursors
merge them); SparseConcat and SparseSoftmax sort their output by index;
SparseSlice keeps the input's order. The Sparse forms of the reductions list only the groups that hold a
value, in index order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _dims, _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_I64 = np.dtype(np.int64)


def _sort(indices: Any) -> Any:
    """The stable order of an index matrix's rows, first column first."""
    if indices.shape[0] < 2 or indices.shape[1] == 0:
        return np.arange(indices.shape[0])
    return np.lexsort(indices.T[::-1])


def _same_dims(a_shape: np.ndarray, b_shape: np.ndarray) -> None:
    """Two sparse operands' dense shapes, of one rank, dimension by dimension (TensorFlow's message)."""
    for d, (x, y) in enumerate(zip(a_shape.tolist(), b_shape.tolist(), strict=True)):
        if x != y:
            raise InvalidArgumentError(f"Operands' shapes do not match: got {x} and {y} for dimension {d}")


def _check_sparse(indices: Any, values: Any, shape: Any, prefix: str = "input_") -> None:
    if indices.ndim != 2:
        raise InvalidArgumentError(
            f"Expected {prefix}indices to be a matrix; got shape: {_shape_str(indices.shape)}"
        )
    if values.ndim != 1:
        raise InvalidArgumentError(
            f"Expected {prefix}values to be a vector; got shape: {_shape_str(values.shape)}"
        )
    if shape.ndim != 1:
        raise InvalidArgumentError(
            f"Expected {prefix}shape to be a vector; got shape: {_shape_str(shape.shape)}"
        )
    if indices.shape[0] != values.shape[0] or indices.shape[1] != shape.shape[0]:
        raise InvalidArgumentError(
            f"{prefix}indices {_dims(indices.shape)}, {prefix}values {_dims(values.shape)} and "
            f"{prefix}shape {_dims(shape.shape)} do not make one SparseTensor"
        )


def _spaced(shape: Any) -> str:
    """A shape tensor's values as TensorFlow prints them in these messages: \"4 4 1\"."""
    return " ".join(str(d) for d in shape.reshape(-1).tolist())


# --- reductions --------------------------------------------------------------------------------------------


def _reduction(node: Node, ufunc: np.ufunc, sparse_out: bool) -> Compute:
    keep_dims = node.attr_bool("keep_dims", False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        indices, values, shape_t, axes_t = inputs
        _check_sparse(indices, values, shape_t)
        dims = [int(d) for d in shape_t.tolist()]
        rank = len(dims)
        axes = set()
        for a in axes_t.reshape(-1).tolist():
            if not -rank <= a < rank:
                raise InvalidArgumentError(
                    f"Invalid reduction dimension {a}, for input with {rank} dimensions."
                )
            axes.add(a % rank)
        kept = [d for d in range(rank) if d not in axes]
        out_dims = (
            [1 if d in axes else dims[d] for d in range(rank)] if keep_dims else [dims[d] for d in kept]
        )
        group_dims = [dims[d] for d in kept]
        if kept:
            keys = (
                np.ravel_multi_index(tuple(indices[:, kept].T), group_dims)
                if indices.shape[0]
                else indices[:0, 0]
            )
        else:
            keys = np.zeros(indices.shape[0], _I64)
        order = np.argsort(keys, kind="stable")
        keys, ordered = keys[order], values[order]
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.size else keys[:0]
        reduced = ufunc.reduceat(ordered, starts, dtype=values.dtype) if keys.size else values[:0]
        groups = keys[starts]
        if not sparse_out:
            out = np.zeros(out_dims, dtype=values.dtype)
            out.reshape(-1)[groups] = reduced
            return (out,)
        coords = np.unravel_index(groups, group_dims) if kept else ()
        out_idx = np.zeros((groups.size, len(out_dims)), _I64)
        for j, c in zip(kept if keep_dims else range(len(kept)), coords, strict=True):
            out_idx[:, j] = c
        return out_idx, reduced, np.array(out_dims, _I64)

    return compute


@kernel("SparseReduceSum", expensive=True)
def sparse_reduce_sum(node: Node) -> Compute:
    return _reduction(node, np.add, False)


@kernel("SparseReduceMax", expensive=True)
def sparse_reduce_max(node: Node) -> Compute:
    return _reduction(node, np.maximum, False)


@kernel("SparseReduceSumSparse", outputs=3, expensive=True)
def sparse_reduce_sum_sparse(node: Node) -> Compute:
    return _reduction(node, np.add, True)


@kernel("SparseReduceMaxSparse", outputs=3, expensive=True)
def sparse_reduce_max_sparse(node: Node) -> Compute:
    return _reduction(node, np.maximum, True)


# --- SparseAdd ---------------------------------------------------------------------------------------------


def _strictly_sorted(idx: Any) -> bool:
    """Whether an index matrix's rows increase strictly (in index order, no repeats)."""
    if idx.shape[0] < 2:
        return True
    if idx.shape[1] == 0:
        return False
    neq = idx[1:] != idx[:-1]
    col = neq.argmax(axis=1)
    rows = np.arange(idx.shape[0] - 1)
    return bool((neq.any(axis=1) & (idx[1:][rows, col] > idx[:-1][rows, col])).all())


def _merge(a_idx: Any, a_val: Any, b_idx: Any, b_val: Any, thresh: Any) -> tuple[Any, Any]:
    """TensorFlow's SparseAdd merge, step by step: what unsorted or repeated indices give there (one pass
    of two cursors, comparing rows in index order). Sorted operands take the vectorized path."""
    a_rows, b_rows = a_idx.tolist(), b_idx.tolist()
    rows: list[Any] = []
    values: list[Any] = []
    i = j = 0
    while i < len(a_rows) and j < len(b_rows):
        if a_rows[i] < b_rows[j]:
            rows.append(a_rows[i])
            values.append(a_val[i])
            i += 1
        elif a_rows[i] == b_rows[j]:
            total = a_val[i] + b_val[j]
            if thresh <= abs(total):
                rows.append(a_rows[i])
                values.append(total)
            i += 1
            j += 1
        else:
            rows.append(b_rows[j])
            values.append(b_val[j])
            j += 1
    rows += a_rows[i:] + b_rows[j:]
    values += list(a_val[i:]) + list(b_val[j:])
    out_val = np.empty(len(values), a_val.dtype)
    out_val[:] = values
    return np.array(rows, _I64).reshape(len(rows), a_idx.shape[1]), out_val


@kernel("SparseAdd", outputs=3, expensive=True)
def sparse_add(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        a_idx, a_val, a_shape, b_idx, b_val, b_shape, thresh = inputs
        if thresh.ndim != 0:
            raise InvalidArgumentError(
                f"The magnitude threshold must be a scalar: got shape {_dims(thresh.shape)}"
            )
        if a_shape.ndim != 1 or b_shape.ndim != 1:
            raise InvalidArgumentError(
                f"Input shapes should be a vector but received shapes {_dims(a_shape.shape)} and "
                f"{_dims(b_shape.shape)}"
            )
        if a_shape.shape != b_shape.shape:
            raise InvalidArgumentError(
                f"Operands do not have the same ranks; got shapes: {_spaced(a_shape)} and {_spaced(b_shape)}"
            )
        _same_dims(a_shape, b_shape)
        _check_sparse(a_idx, a_val, a_shape, "a_")
        _check_sparse(b_idx, b_val, b_shape, "b_")
        if not (_strictly_sorted(a_idx) and _strictly_sorted(b_idx)):
            out_idx, out_val = _merge(a_idx, a_val, b_idx, b_val, thresh)
            return out_idx, out_val, a_shape.astype(_I64, copy=False)
        indices = np.concatenate([a_idx, b_idx]).astype(_I64, copy=False)
        values = np.concatenate([a_val, b_val])
        from_a = np.r_[np.ones(a_idx.shape[0], bool), np.zeros(b_idx.shape[0], bool)]
        order = _sort(indices)
        indices, values, from_a = indices[order], values[order], from_a[order]
        # an index both hold: a's entry then b's, adjacent; the pair becomes one summed entry
        pair = np.zeros(indices.shape[0], bool)
        if indices.shape[0] > 1:
            pair[:-1] = (indices[1:] == indices[:-1]).all(axis=1) & from_a[:-1] & ~from_a[1:]
        firsts = np.flatnonzero(pair)
        keep = np.ones(indices.shape[0], bool)
        keep[firsts + 1] = False
        values = values.copy()
        values[firsts] = values[firsts] + values[firsts + 1]
        small = np.abs(values[firsts]) < thresh
        keep[firsts[small]] = False
        return indices[keep], values[keep], a_shape.astype(_I64, copy=False)

    return compute


# --- SparseSparseMaximum, SparseSparseMinimum ---------------------------------------------------------------


def _union(a_idx: Any, a_val: Any, b_idx: Any, b_val: Any) -> tuple[Any, Any, Any]:
    """TensorFlow's UnionSparseIndicesAndValues: the two cursors' merge in index order, each index with
    its value in a and in b, 0 where an operand holds none."""
    a_rows, b_rows = a_idx.tolist(), b_idx.tolist()
    rows: list[Any] = []
    pick_a: list[int] = []  # the position in a, or -1
    pick_b: list[int] = []
    i = j = 0
    while i < len(a_rows) and j < len(b_rows):
        if a_rows[i] == b_rows[j]:
            rows.append(a_rows[i])
            pick_a.append(i)
            pick_b.append(j)
            i, j = i + 1, j + 1
        elif a_rows[i] < b_rows[j]:
            rows.append(a_rows[i])
            pick_a.append(i)
            pick_b.append(-1)
            i += 1
        else:
            rows.append(b_rows[j])
            pick_a.append(-1)
            pick_b.append(j)
            j += 1
    rows += a_rows[i:] + b_rows[j:]
    pick_a += list(range(i, len(a_rows))) + [-1] * (len(b_rows) - j)
    pick_b += [-1] * (len(a_rows) - i) + list(range(j, len(b_rows)))
    ia, ib = np.array(pick_a, np.int64), np.array(pick_b, np.int64)
    zero = np.zeros((), a_val.dtype)
    av = np.where(ia >= 0, a_val[np.maximum(ia, 0)] if a_val.size else zero, zero)
    bv = np.where(ib >= 0, b_val[np.maximum(ib, 0)] if b_val.size else zero, zero)
    return np.array(rows, _I64).reshape(len(rows), a_idx.shape[1]), av, bv


def _sparse_sparse(ufunc: np.ufunc) -> Any:
    def factory(node: Node) -> Compute:
        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            a_idx, a_val, a_shape, b_idx, b_val, b_shape = inputs
            if a_idx.ndim != 2 or b_idx.ndim != 2:
                raise InvalidArgumentError(
                    "Inputs a_indices and b_indices should be matrices but received shapes: "
                    f"{_shape_str(a_idx.shape)}, {_shape_str(b_idx.shape)}"
                )
            _check_sparse(a_idx, a_val, a_shape, "a_")
            _check_sparse(b_idx, b_val, b_shape, "b_")
            if a_shape.shape != b_shape.shape:
                raise InvalidArgumentError(
                    f"Operands' shapes do not match: got {a_shape.size} and {b_shape.size} dimensions"
                )
            _same_dims(a_shape, b_shape)
            indices, av, bv = _union(a_idx, a_val, b_idx, b_val)
            return indices, ufunc(av, bv)

        return compute

    return factory


kernel("SparseSparseMaximum", outputs=2, expensive=True)(_sparse_sparse(np.maximum))
kernel("SparseSparseMinimum", outputs=2, expensive=True)(_sparse_sparse(np.minimum))


# --- SparseConcat ------------------------------------------------------------------------------------------


@kernel("SparseConcat", outputs=3, expensive=True)
def sparse_concat(node: Node) -> Compute:
    n = node.attr_int("N")
    concat_dim = node.attr_int("concat_dim")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        indices, values, shapes = inputs[:n], inputs[n : 2 * n], inputs[2 * n : 3 * n]
        for i, (idx, val, shp) in enumerate(zip(indices, values, shapes, strict=True)):
            if idx.ndim != 2:
                raise InvalidArgumentError(
                    f"Input indices should be a matrix but received shape {_dims(idx.shape)} at position {i}"
                )
            if val.ndim != 1:
                raise InvalidArgumentError(
                    f"Input values should be a vector but received shape {_dims(val.shape)} at position {i}"
                )
            if shp.ndim != 1:
                raise InvalidArgumentError(
                    f"Input shapes should be a vector but received shape {_dims(shp.shape)} at position {i}"
                )
        first = [int(d) for d in shapes[0].tolist()]
        rank = len(first)
        if not -rank <= concat_dim < rank:
            raise InvalidArgumentError(
                f"Concat dimension must be in range [{-rank}, {rank}), got {concat_dim}"
            )
        dim = concat_dim % rank
        for i, shp in enumerate(shapes[1:], start=1):
            if shp.shape[0] != rank:
                raise InvalidArgumentError(
                    f"Ranks of all input tensors must match: expected {rank} but got {shp.shape[0]} at "
                    f"position {i}"
                )
            for d in range(rank):
                if d != dim and int(shp[d]) != first[d]:
                    raise InvalidArgumentError(
                        f"Input shapes must match: expected {first[d]} for dimension {d} but got "
                        f"{int(shp[d])} at position {i}"
                    )
        offsets = np.cumsum([0] + [int(s[dim]) for s in shapes])
        shifted = []
        for idx, off in zip(indices, offsets.tolist(), strict=False):
            moved = idx.astype(_I64, copy=True)
            moved[:, dim] += off
            shifted.append(moved)
        out_idx = np.concatenate(shifted)
        out_val = np.concatenate(values)
        # TensorFlow sorts each input by the concat dimension first, concatenates, then sorts in index order
        order = _sort(out_idx)
        out_shape = np.array(first, _I64)
        out_shape[dim] = offsets[-1]
        return out_idx[order], out_val[order], out_shape

    return compute


# --- SparseSlice -------------------------------------------------------------------------------------------


@kernel("SparseSlice", outputs=3, expensive=True)
def sparse_slice(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        indices, values, shape_t, start, size = inputs
        _check_sparse(indices, values, shape_t, "")
        rank = shape_t.shape[0]
        for name, t in (("start", start), ("size", size)):
            if t.ndim != 1 or t.shape[0] != rank:
                raise InvalidArgumentError(
                    f"Expected {name} to be a vector of length {rank} but got length {t.size}"
                )
        lo = start.astype(_I64)
        hi = np.minimum(lo + size.astype(_I64), shape_t.astype(_I64))
        inside = ((indices >= lo) & (indices < hi)).all(axis=1)
        out_shape = np.maximum(hi - lo, 0)
        return (indices[inside] - lo).astype(_I64), values[inside], out_shape

    return compute


# --- SparseSoftmax -----------------------------------------------------------------------------------------


@kernel("SparseSoftmax", expensive=True)
def sparse_softmax(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        indices, values, shape_t = inputs
        if indices.ndim != 2:
            raise InvalidArgumentError(
                f"Input sp_indices should be a matrix but received shape {_dims(indices.shape)}"
            )
        if values.ndim != 1:
            raise InvalidArgumentError(
                f"Input sp_values should be a vector but received shape {_dims(values.shape)}"
            )
        if shape_t.ndim != 1 or shape_t.shape[0] < 2:
            raise InvalidArgumentError(f"Input should have rank >= 2, but received shape: {_spaced(shape_t)}")
        if indices.shape[0] != values.shape[0]:
            raise InvalidArgumentError(
                f"Number of nonzeros in sp_values ({values.shape[0]}) does not match the number of indices "
                f"({indices.shape[0]})"
            )
        order = _sort(indices)
        x = values[order]
        if x.size == 0:
            return (x.copy(),)
        head = indices[order][:, :-1]
        starts = np.flatnonzero(np.r_[True, (head[1:] != head[:-1]).any(axis=1)])
        group = np.cumsum(np.r_[False, (head[1:] != head[:-1]).any(axis=1)])
        e = np.exp(x - np.maximum.reduceat(x, starts)[group])
        return ((e / np.add.reduceat(e, starts)[group]).astype(values.dtype, copy=False),)

    return compute
