"""Splitting a tensor by partition ids and merging parts back by indices: DynamicPartition, DynamicStitch
and ParallelDynamicStitch.

What ``tf.nn.embedding_lookup`` leaves in a graph over a partitioned variable (TF1's ``partitioner=``): the
ids are split by the part that holds them (``mod`` or ``div`` strategy), each part gathers its rows, and
the rows are stitched back in the ids' order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _bad_attr, _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node


@kernel("DynamicPartition", outputs=lambda node: node.attr_int("num_partitions"))
def dynamic_partition(node: Node) -> Compute:
    parts = node.attr_int("num_partitions")
    if parts < 1:
        raise _bad_attr(node, "num_partitions", f"must be at least 1, got {parts}")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        data, ids = inputs
        if data.shape[: ids.ndim] != ids.shape:
            raise InvalidArgumentError(
                f"data.shape must start with partitions.shape, got data.shape = {_shape_str(data.shape)}, "
                f"partitions.shape = {_shape_str(ids.shape)}"
            )
        flat_ids = ids.reshape(-1)
        rows = data.reshape(flat_ids.size, *data.shape[ids.ndim :])
        bad = (flat_ids < 0) | (flat_ids >= parts)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidArgumentError(f"partitions[{i}] = {int(flat_ids[i])} is not in [0, {parts})")
        # one stable sort by part keeps each part's rows in their order
        order = np.argsort(flat_ids, kind="stable")
        bounds = np.searchsorted(flat_ids[order], np.arange(parts + 1))
        return tuple(rows[order[bounds[p] : bounds[p + 1]]] for p in range(parts))

    return compute


def _stitch(node: Node) -> Compute:
    n = node.attr_int("N")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        indices, data = inputs[:n], inputs[n:]
        tail: tuple[int, ...] | None = None
        for i, (idx, d) in enumerate(zip(indices, data, strict=True)):
            if d.shape[: idx.ndim] != idx.shape:
                raise InvalidArgumentError(
                    f"data[{i}].shape = {_shape_str(d.shape)} does not start with indices[{i}].shape = "
                    f"{_shape_str(idx.shape)}"
                )
            rest = d.shape[idx.ndim :]
            if tail is None:
                tail = rest
            elif rest != tail:
                raise InvalidArgumentError(
                    f"Need data[0].shape[1:] = data[{i}].shape[{idx.ndim}:], got {_shape_str(tail)} and "
                    f"{_shape_str(rest)}"
                )
        flat = np.concatenate([idx.reshape(-1) for idx in indices]) if indices else np.zeros(0, np.int32)
        if flat.size and flat.min() < 0:
            raise InvalidArgumentError(f"indices must be non-negative, got {int(flat.min())}")
        size = int(flat.max()) + 1 if flat.size else 0
        tail = tail or ()
        values = np.concatenate([d.reshape(-1, *tail) for d in data]) if data else np.zeros((0, *tail))
        out = np.zeros((size, *tail), dtype=data[0].dtype if data else np.float32)
        out[flat] = values  # numpy assigns in order: a later index wins, as in DynamicStitch
        return (out,)

    return compute


kernel("DynamicStitch")(_stitch)
kernel("ParallelDynamicStitch")(_stitch)
