"""Set operations: DenseToDenseSetOperation and DenseToSparseSetOperation (``tf.sets.intersection``,
``union`` and ``difference``), and SetSize (``tf.sets.size``).

Each set is the last dimension of a group: a dense [..., n] operand holds every one of its n values (repeats
count once), a sparse one the values of the indices under the group. The result is a SparseTensor
[groups..., largest result], each group's values sorted ascending (strings bytewise), as TensorFlow's
``std::set`` orders them. Sets are small (a row of labels or tokens): each group's set is a Python set.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _dims
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.kernels.sparse_ops import _check_valid
from poolserve.runtime.node import Node

_I64 = np.dtype(np.int64)
_OPS = ("intersection", "union", "a-b", "b-a")


def _apply(op: str, a: set[Any], b: set[Any]) -> list[Any]:
    if op == "intersection":
        out = a & b
    elif op == "union":
        out = a | b
    elif op == "a-b":
        out = a - b
    else:
        out = b - a
    return sorted(out)


def _check_rank(shape: tuple[int, ...]) -> None:
    if len(shape) < 2:
        raise InvalidArgumentError(f"Shape {_dims(shape)} has rank {len(shape)} < 2")


def _sparse_dims(what: str, indices: Any, values: Any, shape_t: Any) -> tuple[int, ...]:
    """The dense shape of a set operand given as a SparseTensor (``what`` names it in errors), checked: of
    rank 2 or more, with indices and values that belong to it."""
    dims = tuple(int(d) for d in shape_t.reshape(-1).tolist())
    _check_rank(dims)
    if indices.ndim != 2 or values.ndim != 1 or indices.shape != (values.shape[0], len(dims)):
        raise InvalidArgumentError(
            f"{what} indices {_dims(indices.shape)}, values {_dims(values.shape)} and shape "
            f"{_dims(shape_t.shape)} do not make one SparseTensor"
        )
    return dims


def _sparse_sets(indices: Any, values: Any, group_shape: tuple[int, ...]) -> list[set[Any]]:
    """The set of each group (all dimensions but the last) of a checked SparseTensor, in row-major order."""
    sets: list[set[Any]] = [set() for _ in range(_groups(group_shape))]
    if values.size:
        groups = np.ravel_multi_index(tuple(indices[:, :-1].T), group_shape)
        for g, v in zip(groups.tolist(), values.tolist(), strict=True):
            sets[g].add(v)
    return sets


def _result(
    op: str, group_shape: tuple[int, ...], set1: list[set[Any]], set2: list[set[Any]], dtype: Any
) -> tuple[Any, Any, Any]:
    if op not in _OPS:  # refused when run, as TensorFlow does: a graph may hold a node no step runs
        raise InvalidArgumentError(f"Invalid set_operation {op}.")
    results = [_apply(op, a, b) for a, b in zip(set1, set2, strict=True)]
    sizes = np.array([len(r) for r in results], _I64)
    total = int(sizes.sum())
    groups = np.repeat(np.arange(len(results)), sizes)
    within = np.arange(total, dtype=_I64) - (np.cumsum(sizes) - sizes)[groups]
    coords = np.unravel_index(groups, group_shape) if group_shape else ()
    indices = (
        np.stack([*coords, within], axis=1).astype(_I64)
        if total
        else np.zeros((0, len(group_shape) + 1), _I64)
    )
    values = np.empty(total, dtype=dtype)
    values[:] = [v for r in results for v in r]
    shape = np.array([*group_shape, int(sizes.max(initial=0))], _I64)
    return indices, values, shape


def _dense_sets(x: Any) -> list[set[Any]]:
    return (
        [set(row) for row in x.reshape(-1, x.shape[-1]).tolist()]
        if x.size
        else [set()] * _groups(x.shape[:-1])
    )


def _groups(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


@kernel("DenseToDenseSetOperation", outputs=3, expensive=True)
def dense_to_dense_set_operation(node: Node) -> Compute:
    op = node.attr_str("set_operation")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        set1, set2 = inputs
        _check_rank(set1.shape)
        _check_rank(set2.shape)
        if set1.shape[:-1] != set2.shape[:-1]:
            raise InvalidArgumentError(
                f"Mismatched shapes {_dims(set1.shape[:-1])} vs {_dims(set2.shape[:-1])}"
            )
        return _result(op, set1.shape[:-1], _dense_sets(set1), _dense_sets(set2), set1.dtype)

    return compute


@kernel("DenseToSparseSetOperation", outputs=3, expensive=True)
def dense_to_sparse_set_operation(node: Node) -> Compute:
    op = node.attr_str("set_operation")
    validate = node.attr_bool("validate_indices", True)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        set1, indices, values, shape_t = inputs
        _check_rank(set1.shape)
        dims = _sparse_dims("set2", indices, values, shape_t)
        group_shape = set1.shape[:-1]
        if tuple(dims[:-1]) != group_shape:
            raise InvalidArgumentError(f"Mismatched shapes {_dims(group_shape)} vs {_dims(tuple(dims[:-1]))}")
        if validate:
            _check_valid(indices.astype(_I64, copy=False), dims)
        set2 = _sparse_sets(indices, values, group_shape)
        return _result(op, group_shape, _dense_sets(set1), set2, set1.dtype)

    return compute


@kernel("SetSize")
def set_size(node: Node) -> Compute:
    """``tf.sets.size``: the number of distinct values in each set of a SparseTensor (its last dimension),
    int32, of the shape of its groups."""
    validate = node.attr_bool("validate_indices", True)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        indices, values, shape_t = inputs
        dims = _sparse_dims("set", indices, values, shape_t)
        if validate:
            _check_valid(indices.astype(_I64, copy=False), dims)
        group_shape = dims[:-1]
        sets = _sparse_sets(indices, values, group_shape)
        return (np.array([len(s) for s in sets], np.int32).reshape(group_shape),)

    return compute
