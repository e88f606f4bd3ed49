"""Ragged tensors made dense: RaggedTensorToTensor, what ``RaggedTensor.to_tensor`` leaves in a serving
graph (Keras' TextVectorization pads its token ids with it).

A ragged tensor is its flat ``values`` and one row partition per ragged dimension, outermost first: row
splits (``ROW_SPLITS``), or the number of rows and each value's row (``FIRST_DIM_SIZE``, then
``VALUE_ROWIDS``). Each value's place in the dense result is its row at every level and its position
within that row; values past the requested shape are dropped, missing places take ``default_value``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _bad_attr, _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_KINDS = ("ROW_SPLITS", "VALUE_ROWIDS", "FIRST_DIM_SIZE")


def _levels(types: list[str], partitions: list[Any]) -> list[tuple[Any, Any, int]]:
    """Per ragged level, outermost first: (each item's row, its position in that row, the level's rows)."""
    levels: list[tuple[Any, Any, int]] = []
    if types[0] == "FIRST_DIM_SIZE":
        nrows = int(partitions[0])
        for ids in partitions[1:]:
            ids = np.asarray(ids, dtype=np.int64).ravel()
            if ids.size and (np.any(ids[1:] < ids[:-1]) or ids[0] < 0 or ids[-1] >= nrows):
                raise InvalidArgumentError(f"value_rowids must be sorted, in [0, {nrows})")
            pos = np.arange(ids.size, dtype=np.int64) - np.searchsorted(ids, ids, side="left")
            levels.append((ids, pos, nrows))
            nrows = ids.size
        return levels
    for splits in partitions:
        splits = np.asarray(splits, dtype=np.int64).ravel()
        if splits.size == 0 or splits[0] != 0 or np.any(np.diff(splits) < 0):
            raise InvalidArgumentError("row_splits must start at 0 and not decrease")
        lengths = np.diff(splits)
        rows = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
        levels.append((rows, np.arange(rows.size, dtype=np.int64) - splits[rows], lengths.size))
    return levels


@kernel("RaggedTensorToTensor")
def ragged_tensor_to_tensor(node: Node) -> Compute:
    types = [t.decode() if isinstance(t, bytes) else str(t) for t in node.attr("row_partition_types")]
    if not types or any(t not in _KINDS for t in types):
        raise _bad_attr(
            node,
            "row_partition_types",
            f"must be ROW_SPLITS, or FIRST_DIM_SIZE then VALUE_ROWIDS; got {types}",
        )
    if types[0] == "FIRST_DIM_SIZE":
        if any(t != "VALUE_ROWIDS" for t in types[1:]) or len(types) < 2:
            raise _bad_attr(
                node, "row_partition_types", f"FIRST_DIM_SIZE must be followed by VALUE_ROWIDS: {types}"
            )
    elif any(t != "ROW_SPLITS" for t in types):
        raise _bad_attr(node, "row_partition_types", f"cannot mix ROW_SPLITS with other kinds: {types}")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        shape_t, values, default = inputs[0], inputs[1], inputs[2]
        levels = _levels(types, inputs[3:])
        ragged = len(levels)
        if values.ndim < 1:
            raise InvalidArgumentError(
                f"values must have rank 1 or more, got shape {_shape_str(values.shape)}"
            )
        count = values.shape[0]
        for depth, (rows, _, _) in enumerate(levels):
            want = levels[depth + 1][2] if depth + 1 < ragged else count
            if rows.size != want:
                raise InvalidArgumentError(
                    f"the partition of ragged dimension {depth + 1} holds {rows.size} items, the next "
                    f"dimension {want}"
                )
        # the dense shape: rows, each ragged dimension's longest row, the values' inner dimensions
        dims = [levels[0][2]] + [int(pos.max()) + 1 if pos.size else 0 for _, pos, _ in levels]
        dims += list(values.shape[1:])
        if shape_t.ndim == 1 and shape_t.size:
            if shape_t.size != len(dims):
                raise InvalidArgumentError(
                    f"shape has {shape_t.size} dimensions, the ragged tensor {len(dims)}"
                )
            for i, want in enumerate(shape_t.tolist()):
                if want >= 0:
                    if i > ragged and want != dims[i]:
                        raise InvalidArgumentError(
                            f"shape[{i}] = {want} does not match the values' dimension {dims[i]}"
                        )
                    dims[i] = int(want)
        inner = values.shape[1:]
        if default.shape != () and default.shape != inner[len(inner) - default.ndim :]:
            raise InvalidArgumentError(
                f"default_value of shape {_shape_str(default.shape)} does not broadcast to "
                f"{_shape_str(inner)}"
            )
        out = np.empty(dims, dtype=values.dtype)
        out[...] = default
        # each value's index: its place in every level, walking from the innermost level out
        item = np.arange(count, dtype=np.int64)
        coords = []
        for rows, pos, _ in reversed(levels):
            coords.append(pos[item])
            item = rows[item]
        coords.append(item)
        coords.reverse()
        keep = np.ones(count, dtype=bool)
        for c, d in zip(coords, dims, strict=False):
            keep &= c < d
        out[tuple(c[keep] for c in coords)] = values[keep]
        return (out,)

    return compute
