"""Sparse tensors and scatters: SparseToDense, SparseTensorDenseMatMul, SparseFillEmptyRows, SparseReshape,
SparseReorder, ScatterNd and TensorScatterUpdate/Add/Sub/Max/Min.

A SparseTensor travels as three tensors: ``indices`` (int64 [N, rank]), ``values`` ([N]) and
``dense_shape`` (int64 [rank]). ``tf.io.parse_example`` with a VarLenFeature makes them;
``tf.nn.safe_embedding_lookup_sparse`` (feature columns' embedding columns) runs SparseFillEmptyRows and
SparseReshape on them before its SparseSegment op (segment_ops.py), ``tf.sparse.to_dense`` and indicator
columns run SparseToDense, ``tf.sparse.sparse_dense_matmul`` (wide linear models over sparse features)
SparseTensorDenseMatMul. ``tf.scatter_nd`` and ``tf.tensor_scatter_nd_*`` (box decoding, top-k masks) give
the scatters.

As TensorFlow's CPU kernels do: ScatterNd sums updates to the same index (strings concatenate, booleans
or); TensorScatterUpdate with repeated indices keeps the last update here, an order TensorFlow does not
promise; ``bad_indices_policy`` "IGNORE" drops out-of-range indices, otherwise they are an error.
SparseReshape checks no index against the shape (nor does TensorFlow: an out-of-range index gives an
unspecified answer). SparseReorder sorts stably (TensorFlow's sort is not: values of repeated indices may
come out in another order there).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _bad_attr, _dims, _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_I64 = np.dtype(np.int64)


def _index_str(row: Any, sep: str = ",") -> str:
    return "[" + sep.join(str(int(v)) for v in row) + "]"


def _out_of_bounds(idx: Any, dims: Any) -> Any:
    """Per row of an index matrix, whether it falls outside ``dims``."""
    return ((idx < 0) | (idx >= np.asarray(dims, dtype=_I64))).any(axis=1)


def _new_shape(dims: list[int]) -> tuple[int, ...]:
    for d in dims:
        if d < 0:
            raise InvalidArgumentError(f"Dimension {d} must be >= 0")
    return tuple(dims)


def _filled(shape: tuple[int, ...], value: Any, dtype: np.dtype[Any]) -> Any:
    out = np.empty(shape, dtype=dtype)
    out[...] = value
    return out


# --- SparseToDense ---------------------------------------------------------------------------------------


def _check_valid(idx: Any, dims: tuple[int, ...]) -> None:
    """TensorFlow's ``SparseTensor::IndicesValid``: the first index out of bounds, out of order or
    repeated (each index checked against its bounds, then against the one before it)."""
    n = idx.shape[0]
    bounds = _out_of_bounds(idx, dims)
    order = np.zeros(n, bool)
    repeat = np.zeros(n, bool)
    if n > 1 and idx.shape[1] == 0:  # indices of a scalar: all the same
        repeat[1:] = True
    elif n > 1:
        neq = idx[1:] != idx[:-1]
        differs = neq.any(axis=1)
        col = neq.argmax(axis=1)
        rows = np.arange(n - 1)
        repeat[1:] = ~differs
        order[1:] = differs & (idx[1:][rows, col] < idx[:-1][rows, col])
    flagged = bounds | order | repeat
    if not flagged.any():
        return
    i = int(np.flatnonzero(flagged)[0])
    where = f"indices[{i}] = {_index_str(idx[i])}"
    if bounds[i]:
        raise InvalidArgumentError(f"{where} is out of bounds: need 0 <= index < {_dims(dims)}")
    if order[i]:
        raise InvalidArgumentError(
            f"{where} is out of order. Many sparse ops require sorted indices.\n"
            "    Use `tf.sparse.reorder` to create a correctly ordered copy.\n\n"
        )
    raise InvalidArgumentError(f"{where} is repeated")


@kernel("SparseToDense", expensive=True)
def sparse_to_dense(node: Node) -> Compute:
    validate = node.attr_bool("validate_indices", True)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        indices, shape_t, values, default = inputs
        if indices.ndim > 2:
            raise InvalidArgumentError(
                f"sparse_indices should be a scalar, vector, or matrix, got shape {_shape_str(indices.shape)}"
            )
        n = indices.shape[0] if indices.ndim > 0 else 1
        rank = indices.shape[1] if indices.ndim > 1 else 1
        if shape_t.ndim > 1:
            raise InvalidArgumentError(
                f"output_shape should be a scalar or vector, got shape {_shape_str(shape_t.shape)}"
            )
        if shape_t.size != rank:
            raise InvalidArgumentError(
                f"output_shape has incorrect number of elements: {shape_t.size} should be: {rank}"
            )
        if not (values.ndim == 0 or (values.ndim == 1 and values.shape[0] == n)):
            raise InvalidArgumentError(
                f"sparse_values has incorrect shape {_shape_str(values.shape)}, should be [] or [{n}]"
            )
        if default.ndim != 0:
            raise InvalidArgumentError("default_value should be a scalar.")
        dims = _new_shape([int(d) for d in shape_t.reshape(-1).tolist()])
        idx = indices.reshape(n, rank).astype(_I64, copy=False)
        if validate:
            _check_valid(idx, dims)
        out = _filled(dims, default, values.dtype)
        if n == 0:
            return (out,)
        if not validate and _out_of_bounds(idx, dims).any():
            raise InvalidArgumentError(f"Indices are not valid (out of bounds).  Shape: {_dims(dims)}")
        if rank == 0:  # a scalar: the last value written wins
            out[()] = values.reshape(-1)[-1]
        else:
            out[tuple(idx.T)] = values  # repeated indices (unvalidated): the last wins, as TF writes in order
        return (out,)

    return compute


# --- SparseTensorDenseMatMul -----------------------------------------------------------------------------


@kernel("SparseTensorDenseMatMul", expensive=True)
def sparse_tensor_dense_matmul(node: Node) -> Compute:
    adj_a = node.attr_bool("adjoint_a", False)
    adj_b = node.attr_bool("adjoint_b", False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        a_indices, a_values, a_shape, b = inputs
        if a_shape.ndim != 1:
            raise InvalidArgumentError("Tensor 'a_shape' is not a vector")
        if a_shape.shape[0] != 2:
            raise InvalidArgumentError("Tensor 'a_shape' must have 2 elements")
        if a_values.ndim != 1:
            raise InvalidArgumentError("Tensor 'a_values' is not a vector")
        if a_indices.ndim != 2:
            raise InvalidArgumentError("Tensor 'a_indices' is not a matrix")
        if b.ndim != 2:
            raise InvalidArgumentError("Tensor 'b' is not a matrix")
        rows_a, cols_a = (int(d) for d in a_shape.tolist())
        outer_left, inner_left = (cols_a, rows_a) if adj_a else (rows_a, cols_a)
        inner_right, outer_right = (b.shape[1], b.shape[0]) if adj_b else b.shape
        if inner_left != inner_right:
            raise InvalidArgumentError(
                f"Cannot multiply A and B because inner dimension does not match: {inner_left} vs. "
                f"{inner_right}.  Did you forget a transpose?  Dimensions of A: [{rows_a}, {cols_a}).  "
                f"Dimensions of B: {_dims(b.shape)}"
            )
        nnz = a_indices.shape[0]
        if nnz != a_values.shape[0]:
            raise InvalidArgumentError(
                "Number of rows of a_indices does not match number of entries in a_values"
            )
        if a_indices.shape[1] != 2:
            raise InvalidArgumentError(
                "Number of columns of a_indices does not match number of entries in a_shape"
            )
        if outer_left < 0:  # TensorFlow aborts the process here
            raise InvalidArgumentError(
                f"Expected shape dimensions to be non-negative, got {outer_left} "
                f"(a_shape {_dims((rows_a, cols_a))})"
            )
        out = np.zeros((outer_left, outer_right), dtype=b.dtype)
        if out.size == 0 or nnz == 0 or b.size == 0:
            return (out,)
        m_col, k_col = (1, 0) if adj_a else (0, 1)
        m, k = a_indices[:, m_col], a_indices[:, k_col]
        bad_k, bad_m = (k < 0) | (k >= inner_left), (m < 0) | (m >= outer_left)
        if bad_k.any() or bad_m.any():
            i = int(np.flatnonzero(bad_k | bad_m)[0])
            name, col, value, limit = (
                ("k", k_col, k[i], inner_left) if bad_k[i] else ("m", m_col, m[i], outer_left)
            )
            raise InvalidArgumentError(f"{name} ({value}) from index[{i},{col}] out of bounds (>={limit})")
        values = a_values.conj() if adj_a and a_values.dtype.kind == "c" else a_values
        rhs = b.conj().T if adj_b else b
        np.add.at(out, m, values[:, None] * rhs[k])  # in the order of the entries, as TensorFlow adds them
        return (out,)

    return compute


# --- SparseFillEmptyRows ---------------------------------------------------------------------------------


@kernel("SparseFillEmptyRows", outputs=4, expensive=True)
def sparse_fill_empty_rows(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        indices, values, dense_shape, default = inputs
        for t, what, rank in (
            (dense_shape, "dense_shape must be a vector", 1),
            (indices, "indices must be a matrix", 2),
            (values, "values must be a vector", 1),
            (default, "default_value must be a scalar", 0),
        ):
            if t.ndim != rank:
                raise InvalidArgumentError(f"{what}, saw: {_shape_str(t.shape)}")
        n, rank_i = indices.shape
        if values.shape[0] != n:
            raise InvalidArgumentError(
                f"The length of `values` ({values.shape[0]}) must match the first dimension of `indices` "
                f"({n})."
            )
        if dense_shape.shape[0] != rank_i:
            raise InvalidArgumentError(
                f"The length of `dense_shape` ({dense_shape.shape[0]}) must match the second dimension of "
                f"`indices` ({rank_i})."
            )
        if dense_shape.shape[0] == 0:
            raise InvalidArgumentError("Dense shape cannot be empty.")
        dense_rows = int(dense_shape[0])
        if dense_rows < 0:
            raise InvalidArgumentError(f"Expected shape dimensions to be non-negative, got {dense_rows}")
        if dense_rows == 0:
            if n:
                raise InvalidArgumentError(
                    f"Received SparseTensor with dense_shape[0] = 0 but indices.shape[0] = {n}"
                )
            empty = np.zeros(0, _I64)
            return (np.zeros((0, rank_i), _I64), values[:0].copy(), np.zeros(0, bool), empty)
        rows = indices[:, 0]
        bad = (rows < 0) | (rows >= dense_rows)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidArgumentError(f"indices({i}, 0) is invalid: {rows[i]} >= {dense_rows}")
        counts = np.bincount(rows, minlength=dense_rows)
        empty_rows = counts == 0
        filled = np.maximum(counts, 1)
        starts = np.cumsum(filled) - filled  # each row's first slot in the output
        # within a row the entries keep their order: slot = the row's start + the entry's rank in its row
        order = np.argsort(rows, kind="stable")
        rank_in_row = np.arange(n) - (np.cumsum(counts) - counts)[rows[order]]
        reverse = np.empty(n, _I64)
        reverse[order] = starts[rows[order]] + rank_in_row
        total = int(starts[-1] + filled[-1])
        out_indices = np.zeros((total, rank_i), _I64)
        out_indices[reverse] = indices
        out_values = _filled((total,), default, values.dtype)
        out_values[reverse] = values
        missing = np.flatnonzero(empty_rows)
        out_indices[starts[missing], 0] = missing
        return (out_indices, out_values, empty_rows, reverse)

    return compute


# --- SparseReshape, SparseReorder ------------------------------------------------------------------------


def _sparse_shape(t: Any) -> tuple[int, ...]:
    dims = tuple(int(d) for d in t.tolist())
    for d in dims:
        if d < 0:
            raise InvalidArgumentError(f"Expected shape dimensions to be non-negative, got {d}")
    return dims


@kernel("SparseReshape", outputs=2, expensive=True)
def sparse_reshape(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        indices, shape_t, target_t = inputs
        if indices.ndim != 2:
            raise InvalidArgumentError(
                f"Input indices should be a matrix but received shape {_shape_str(indices.shape)}"
            )
        if shape_t.ndim != 1:
            raise InvalidArgumentError(
                f"Input shape should be a vector but received shape {_shape_str(shape_t.shape)}"
            )
        if target_t.ndim != 1:
            raise InvalidArgumentError(
                f"Target shape should be a vector but received shape {_shape_str(target_t.shape)}"
            )
        in_dims = _sparse_shape(shape_t)
        dense_size = math.prod(in_dims)
        target = [int(d) for d in target_t.tolist()]
        unknown, product = -1, 1
        for d, size in enumerate(target):
            if size == -1:
                if unknown != -1:
                    raise InvalidArgumentError(
                        f"only one output dimension may be -1, not both {unknown} and {d}"
                    )
                unknown = d
            elif size < 0:
                raise InvalidArgumentError(f"size {d} must be non-negative, not {size}")
            else:
                product *= size
        out_dims = [1 if s == -1 else s for s in target]
        if unknown != -1:
            if product <= 0:
                raise InvalidArgumentError(
                    "reshape cannot infer the missing input size for an empty tensor unless all specified "
                    "input sizes are non-zero"
                )
            missing = dense_size // product
            if missing * product != dense_size:
                raise InvalidArgumentError(
                    f"Input to reshape is a SparseTensor with {dense_size} dense values, but the requested "
                    f"shape requires a multiple of {product}. input_shape={_dims(in_dims)} "
                    f"output_shape={_dims(tuple(out_dims))}"
                )
            out_dims[unknown] = missing
        if math.prod(out_dims) != dense_size:
            raise InvalidArgumentError(
                f"Input to reshape is a tensor with {dense_size} dense values, but the requested shape has "
                f"{math.prod(out_dims)}. input_shape={_dims(in_dims)} output_shape={_dims(tuple(out_dims))}"
            )
        if indices.shape[1] != len(in_dims):
            raise InvalidArgumentError("Input tensor rank must match input shape length.")
        out_shape = np.array(out_dims, dtype=_I64)
        if tuple(out_dims) == in_dims:
            return (indices, out_shape)
        n = indices.shape[0]
        if not out_dims:  # every index of a one-value tensor is the empty index
            return (np.zeros((n, 0), _I64), out_shape)
        linear = indices @ _strides(in_dims) if in_dims else np.zeros(n, _I64)
        strides = _strides(tuple(out_dims))
        out = np.empty((n, len(out_dims)), _I64)
        for j, s in enumerate(strides.tolist()):
            out[:, j], linear = np.divmod(linear, s) if s else (0, linear)
        return (out, out_shape)

    return compute


def _strides(dims: tuple[int, ...]) -> Any:
    """Row-major strides of a shape, as int64."""
    out = np.ones(len(dims), _I64)
    for j in range(len(dims) - 2, -1, -1):
        out[j] = out[j + 1] * dims[j + 1]
    return out


@kernel("SparseReorder", outputs=2, expensive=True)
def sparse_reorder(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        indices, values, shape_t = inputs
        for t, rank, what in ((indices, 2, "indices"), (values, 1, "values"), (shape_t, 1, "shape")):
            if t.ndim != rank:
                kind = "matrix" if rank == 2 else "vector"
                raise InvalidArgumentError(
                    f"Input {what} should be a {kind} but received shape {_shape_str(t.shape)}"
                )
        if indices.shape[0] != values.shape[0]:
            raise InvalidArgumentError(
                f"Number of elements in indices ({indices.shape[0]}) and values ({values.shape[0]}) do not "
                "match"
            )
        if indices.shape[1] != shape_t.shape[0]:
            raise InvalidArgumentError(
                f"Index rank ({indices.shape[1]}) and shape rank ({shape_t.shape[0]}) do not match"
            )
        if indices.shape[0] < 2 or indices.shape[1] == 0:
            return (indices, values)
        order = np.lexsort(indices.T[::-1])  # stable: by the first column, then the next, ...
        return (indices[order], values[order])

    return compute


# --- ScatterNd and TensorScatter* ------------------------------------------------------------------------

# TensorFlow 2.21's CPU kernels take indices.shape[-1] of 1 to 7 (their message for 8 still says 5)
_MAX_INDEX_DEPTH = 7


def _valid_empty(params: int, indices: int, updates: int) -> bool:
    """TensorFlow's ``ValidEmptyOutputShape``: no indices and no updates, or all three non-empty."""
    return (indices == 0 and updates == 0) or (params != 0 and indices != 0 and updates != 0)


def _check_update_shape(shape: tuple[int, ...], indices: Any, updates: Any) -> None:
    slice_dim = indices.shape[-1] if indices.ndim > 1 else 1
    batch_dim = indices.ndim - 1 if indices.ndim > 1 else 1
    prefix = InvalidArgumentError(
        f"Dimensions [0,{batch_dim}) of indices[shape={_dims(indices.shape)}] must match dimensions "
        f"[0,{batch_dim}) of updates[shape={_dims(updates.shape)}]"
    )
    suffix = InvalidArgumentError(
        f"Dimensions [{slice_dim},{len(shape)}) of input[shape={_dims(shape)}] must match dimensions "
        f"[{batch_dim},{updates.ndim}) of updates[shape={_dims(updates.shape)}]"
    )
    if updates.ndim < batch_dim:
        raise prefix
    if updates.ndim != batch_dim + len(shape) - slice_dim:
        raise suffix
    if updates.shape[:batch_dim] != indices.shape[:batch_dim]:
        raise prefix
    if updates.shape[batch_dim:] != shape[slice_dim:]:
        raise suffix


def _scatter(
    out: Any, indices: Any, updates: Any, apply: Callable[[Any, Any, Any], None], ignore_bad: bool
) -> Any:
    """TensorFlow's ``DoScatterNd`` into ``out`` (a fresh array): checks, then ``apply(out_slices, rows,
    update_slices)`` over the in-range indices."""
    shape = out.shape
    if not shape:
        raise InvalidArgumentError("Output must be at least 1-D, got shape: []")
    if not _valid_empty(out.size, indices.size, updates.size):
        raise InvalidArgumentError(
            f"Indices and updates specified for empty output.  indices shape: {_dims(indices.shape)}"
        )
    if updates.shape[0] != indices.shape[0]:
        raise InvalidArgumentError(
            f"Dimensions [0,1) of indices[shape={_dims(indices.shape)}] = {indices.shape[0]} must match "
            f"dimensions [0,1) of updates[shape={_dims(updates.shape)}] = {updates.shape[0]}"
        )
    _check_update_shape(shape, indices, updates)
    if out.size == 0:
        return out
    slice_dim = indices.shape[-1] if indices.ndim > 1 else 1
    if not 1 <= slice_dim <= _MAX_INDEX_DEPTH:
        raise InvalidArgumentError(
            "Only indices.shape[-1] values between 1 and 5 are currently supported.  "
            f"Requested rank: {slice_dim}"
        )
    idx = indices.reshape(-1, slice_dim).astype(_I64, copy=False)
    if idx.shape[0] == 0:
        return out
    rows = updates.reshape(idx.shape[0], math.prod(shape[slice_dim:]))
    bad = _out_of_bounds(idx, shape[:slice_dim])
    if bad.any():
        if not ignore_bad:
            i = int(np.flatnonzero(bad)[0])
            batch = indices.shape[:-1] if indices.ndim > 1 else indices.shape
            where = ",".join(str(int(p)) for p in np.unravel_index(i, batch))
            raise InvalidArgumentError(
                f"indices[{where}] = {_index_str(idx[i], ', ')} does not index into shape {_dims(shape)}"
            )
        idx, rows = idx[~bad], rows[~bad]
    flat = out.reshape(math.prod(shape[:slice_dim]), -1)  # a view: out is contiguous
    apply(flat, np.ravel_multi_index(tuple(idx.T), shape[:slice_dim]), rows)
    return out


def _assign(flat: Any, at: Any, rows: Any) -> None:
    flat[at] = rows  # repeated indices: the last update wins


def _ufunc_at(ufunc: np.ufunc) -> Callable[[Any, Any, Any], None]:
    def apply(flat: Any, at: Any, rows: Any) -> None:
        ufunc.at(flat, at, rows)

    return apply


def _policy(node: Node) -> bool:
    """Whether ``bad_indices_policy`` drops out-of-range indices ("IGNORE") instead of refusing them."""
    policy = node.attr_str("bad_indices_policy", "")
    if policy not in ("", "DEFAULT", "ERROR", "IGNORE"):
        raise _bad_attr(node, "bad_indices_policy", f"is not one of DEFAULT, ERROR, IGNORE: {policy!r}")
    return policy == "IGNORE"


def _check_scatter_ranks(indices: Any, updates: Any) -> None:
    if indices.ndim < 1:
        raise InvalidArgumentError(f"Indices shape must have rank at least one. Found:{_dims(indices.shape)}")
    if updates.ndim < 1:
        raise InvalidArgumentError(f"Updates shape must have rank at least one. Found:{_dims(updates.shape)}")


@kernel("ScatterNd", expensive=True)
def scatter_nd(node: Node) -> Compute:
    ignore_bad = _policy(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        indices, updates, shape_t = inputs
        if shape_t.ndim != 1:
            raise InvalidArgumentError(f"Shape must be a vector, got shape {_shape_str(shape_t.shape)}")
        _check_scatter_ranks(indices, updates)
        dims = _new_shape([int(d) for d in shape_t.tolist()])
        if not _valid_empty(shape_t.size, indices.size, updates.size):
            raise InvalidArgumentError("Indices and updates specified for empty output shape")
        out = _filled(dims, b"" if updates.dtype == object else 0, updates.dtype)
        return (_scatter(out, indices, updates, _ufunc_at(np.add), ignore_bad),)

    return compute


def _tensor_scatter(apply: Callable[[Any, Any, Any], None]) -> Callable[[Node], Compute]:
    def factory(node: Node) -> Compute:
        ignore_bad = _policy(node)

        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            tensor, indices, updates = inputs
            _check_scatter_ranks(indices, updates)
            if not _valid_empty(tensor.size, indices.size, updates.size):
                raise InvalidArgumentError("Indices and updates specified for empty output shape")
            return (_scatter(tensor.copy(), indices, updates, apply, ignore_bad),)

        return compute

    return factory


for _op, _apply in (
    ("TensorScatterUpdate", _assign),
    ("TensorScatterAdd", _ufunc_at(np.add)),
    ("TensorScatterSub", _ufunc_at(np.subtract)),
    ("TensorScatterMax", _ufunc_at(np.maximum)),
    ("TensorScatterMin", _ufunc_at(np.minimum)),
):
    kernel(_op, expensive=True)(_tensor_scatter(_apply))
