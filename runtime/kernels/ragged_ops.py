"""Ragged tensors: RaggedTensorToTensor, what ``RaggedTensor.to_tensor`` leaves in a serving graph (Keras'
TextVectorization pads its token ids with it), RaggedTensorToSparse (``to_sparse``), RaggedRange
(``tf.ragged.range``), RaggedGather (``tf.gather`` on a ragged tensor), and RaggedTensorToVariant and
RaggedTensorFromVariant (``tf.map_fn`` over a ragged tensor).

A ragged tensor is its flat ``values`` and one row partition per ragged dimension, outermost first: row
splits (``ROW_SPLITS``), or the number of rows and each value's row (``FIRST_DIM_SIZE``, then
``VALUE_ROWIDS``). Each value's place in the dense result is its row at every level and its position
within that row; values past the requested shape are dropped, missing places take ``default_value``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _bad_attr, _index_type, _shape_str, _type_name
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_KINDS = ("ROW_SPLITS", "VALUE_ROWIDS", "FIRST_DIM_SIZE")


def _coordinates(levels: list[Any], count: int) -> list[Any]:
    """Each of ``count`` values' index in every dimension (outermost first): its place in every level of
    ``levels`` (``_levels``), walking from the innermost level out."""
    item = np.arange(count, dtype=np.int64)
    coords = []
    for rows, pos, _ in reversed(levels):
        coords.append(pos[item])
        item = rows[item]
    coords.append(item)
    coords.reverse()
    return coords


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
        coords = _coordinates(levels, count)
        keep = np.ones(count, dtype=bool)
        for c, d in zip(coords, dims, strict=False):
            keep &= c < d
        out[tuple(c[keep] for c in coords)] = values[keep]
        return (out,)

    return compute


# --- RaggedTensorToSparse, RaggedRange, RaggedGather -------------------------------------------------------


def _check_splits(all_splits: list[Any], count: int) -> None:
    """TensorFlow's checks of nested row splits over ``count`` values, in its order."""
    for depth, splits in enumerate(all_splits):
        if splits.size == 0:
            raise InvalidArgumentError("ragged splits may not be empty.")
        if splits[0] != 0:
            raise InvalidArgumentError("First value of ragged splits must be 0.")
        drops = np.flatnonzero(splits[1:] < splits[:-1])
        if drops.size:
            i = int(drops[0])
            raise InvalidArgumentError(
                f"Ragged splits should be non decreasing, but we got {splits[i]} followed by {splits[i + 1]}"
            )
        want = all_splits[depth + 1].size - 1 if depth + 1 < len(all_splits) else count
        if splits[-1] != want:
            raise InvalidArgumentError(
                "Final value of ragged splits must match the length the corresponding ragged values."
            )


def _ranges(starts: Any, ends: Any) -> Any:
    """The positions ``starts[i] .. ends[i] - 1`` of every i, concatenated."""
    lengths = ends - starts
    total = int(lengths.sum())
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)


@kernel("RaggedTensorToSparse", outputs=3)
def ragged_tensor_to_sparse(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        *splits_in, values = inputs
        all_splits = [np.asarray(s, dtype=np.int64).reshape(-1) for s in splits_in]
        _check_splits(all_splits, values.shape[0])
        levels = _levels(["ROW_SPLITS"] * len(all_splits), all_splits)
        coords = _coordinates(levels, values.shape[0])
        inner = values.shape[1:]
        per_value = int(np.prod(inner, dtype=np.int64))
        ragged = np.stack(coords, axis=1) if coords else np.zeros((values.shape[0], 0), np.int64)
        indices = np.repeat(ragged, per_value, axis=0)
        if inner:
            dense = np.indices(inner).reshape(len(inner), -1).T
            indices = np.concatenate([indices, np.tile(dense, (values.shape[0], 1))], axis=1)
        shape = [all_splits[0].size - 1] + [int(np.diff(s).max(initial=0)) for s in all_splits] + list(inner)
        return indices.astype(np.int64), values.reshape(-1), np.array(shape, np.int64)

    return compute


@kernel("RaggedRange", outputs=2)
def ragged_range(node: Node) -> Compute:
    splits_type = _index_type(node, "Tsplits") if "Tsplits" in node.attrs else np.dtype(np.int64)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        starts, limits, deltas = inputs
        for name, t in (("starts", starts), ("limits", limits), ("deltas", deltas)):
            if t.ndim > 1:
                raise InvalidArgumentError(f"{name} must be a scalar or vector")
        vectors = [t.shape[0] for t in (starts, limits, deltas) if t.ndim == 1]
        if any(n != vectors[0] for n in vectors):
            raise InvalidArgumentError("starts, limits, and deltas must have the same shape")
        nrows = vectors[0] if vectors else 1
        start, limit, delta = (np.broadcast_to(t.reshape(-1), (nrows,)) for t in (starts, limits, deltas))
        if (delta == 0).any():
            raise InvalidArgumentError("Requires delta != 0")
        empty = ((delta > 0) & (limit < start)) | ((delta < 0) & (limit > start))
        if starts.dtype.kind in "iu":
            span, step = np.abs(limit.astype(np.int64) - start), np.abs(delta.astype(np.int64))
            sizes = (span + step - 1) // step
        else:
            sizes = np.ceil(np.abs((limit - start) / delta)).astype(np.int64)
        sizes[empty] = 0
        splits = np.zeros(nrows + 1, dtype=np.int64)
        np.cumsum(sizes, out=splits[1:])
        rows = np.repeat(np.arange(nrows), sizes)
        if starts.dtype.kind in "iu":
            values = (start[rows] + (np.arange(splits[-1]) - splits[rows]) * delta[rows]).astype(starts.dtype)
        else:  # TensorFlow adds delta to a running value, in the input's precision
            values = np.empty(int(splits[-1]), dtype=starts.dtype)
            for r in np.flatnonzero(sizes).tolist():
                steps = np.full(int(sizes[r]), delta[r], dtype=starts.dtype)
                steps[0] = start[r]
                np.cumsum(steps, out=values[splits[r] : splits[r + 1]])
        return splits.astype(splits_type), values

    return compute


@kernel("RaggedGather", outputs=lambda node: node.attr_int("OUTPUT_RAGGED_RANK") + 1)
def ragged_gather(node: Node) -> Compute:
    ragged_rank = node.attr_int("PARAMS_RAGGED_RANK", 1)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        splits_in, values, indices = inputs[:ragged_rank], inputs[ragged_rank], inputs[ragged_rank + 1]
        splits_type = splits_in[0].dtype
        all_splits = [np.asarray(s, dtype=np.int64).reshape(-1) for s in splits_in]
        nrows = all_splits[0].size - 1
        flat = indices.reshape(-1).astype(np.int64)
        bad = np.flatnonzero((flat < 0) | (flat >= nrows))
        if bad.size:
            i = int(bad[0])
            raise InvalidArgumentError(f"indices[{i}] = {flat[i]} is not in [0, {nrows})")
        out = []
        # the indices' own dimensions become uniform row partitions
        for d in range(1, indices.ndim):
            width = indices.shape[d]
            count = int(np.prod(indices.shape[:d], dtype=np.int64))
            out.append(np.arange(count + 1, dtype=np.int64) * width)
        rows = flat  # the rows picked at each level, outermost first
        for splits in all_splits:
            lo, hi = splits[rows], splits[rows + 1]
            out.append(np.concatenate([[0], np.cumsum(hi - lo)]).astype(np.int64))
            rows = _ranges(lo, hi)
        picked = values[rows]
        return (*(s.astype(splits_type) for s in out), picked)

    return compute


# --- RaggedTensorToVariant, RaggedTensorFromVariant ---------------------------------------------------------
#
# What ``tf.map_fn`` over a ragged tensor writes: the ragged input cut into one variant per row
# (``batched_input``), fed through a TensorList to the loop body, which decodes its row, encodes its ragged
# result as one variant, and after the loop the stacked variants decoded into one ragged tensor again.


class RaggedComponent:
    """What a DT_VARIANT element made by RaggedTensorToVariant holds: one ragged tensor."""

    __slots__ = ("splits", "values")

    def __init__(self, splits: list[Any], values: Any) -> None:
        self.splits = splits
        self.values = values

    def __repr__(self) -> str:
        return (
            f"RaggedComponent(ragged_rank={len(self.splits)}, values {self.values.dtype}{self.values.shape})"
        )


def _variant(component: RaggedComponent) -> Any:
    out = np.empty((), dtype=object)
    out[()] = component
    return out


def _check_variant_splits(splits: list[Any], values: Any) -> None:
    """RaggedTensorToVariant's checks, in TensorFlow's words."""
    for depth, s in enumerate(splits):
        if s.size == 0:
            raise InvalidArgumentError(
                "Invalid ragged splits: ragged splits must have at least one splits, but is empty"
            )
        if s[0] != 0:
            raise InvalidArgumentError(
                f"Invalid ragged splits: first element of ragged splits  must be 0 but is {s[0]}"
            )
        drops = np.flatnonzero(s[1:] < s[:-1])
        if drops.size:
            raise InvalidArgumentError(
                "Invalid ragged splits: ragged splits must be sorted in ascending order"
            )
        count = splits[depth + 1].size - 1 if depth + 1 < len(splits) else values.shape[0]
        if s[-1] != count:
            raise InvalidArgumentError(
                "Invalid ragged splits: last element of ragged splits must be the number of ragged "
                f"values({count}) but is {s[-1]}"
            )


@kernel("RaggedTensorToVariant")
def ragged_tensor_to_variant(node: Node) -> Compute:
    rank = node.attr_int("RAGGED_RANK")
    batched = node.attr_bool("batched_input")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        splits, values = list(inputs[:rank]), inputs[rank]
        if values.ndim == 0 and (rank or batched):
            raise InvalidArgumentError("rt_dense_values must be at least a vector")
        _check_variant_splits(splits, values)
        if not batched:
            return (_variant(RaggedComponent(splits, values)),)
        if not splits:  # a dense tensor: one component per row
            rows = [RaggedComponent([], values[i]) for i in range(values.shape[0])]
        else:
            rows = []
            outer = splits[0].tolist()
            for i in range(len(outer) - 1):
                start, end = outer[i], outer[i + 1]
                inner = []
                for s in splits[1:]:
                    piece = s[start : end + 1]
                    inner.append(piece - piece[0])
                    start, end = int(piece[0]), int(piece[-1])
                rows.append(RaggedComponent(inner, values[start:end]))
        out = np.empty(len(rows), dtype=object)
        out[:] = rows
        return (out,)

    return compute


def _ragged_outputs(node: Node) -> int:
    return node.attr_int("output_ragged_rank") + 1


@kernel("RaggedTensorFromVariant", outputs=_ragged_outputs)
def ragged_tensor_from_variant(node: Node) -> Compute:
    input_attr = node.attr_int("input_ragged_rank")
    output_rank = node.attr_int("output_ragged_rank")
    values_dtype = node.attr_dtype("Tvalues")
    splits_dtype = _index_type(node, "Tsplits")

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        encoded = inputs[0]
        input_rank = input_attr if input_attr >= 0 else output_rank - encoded.ndim
        if output_rank != input_rank + encoded.ndim:
            raise InvalidArgumentError(
                "output_ragged_rank must be equal to input_ragged_rank + encoded_ragged.dims(); "
                f"output_ragged_rank: {output_rank}, input_ragged_rank: {input_rank}, "
                f"encoded_variant.dims(): {encoded.ndim}."
            )
        components = encoded.ravel().tolist()
        for c in components:
            if not isinstance(c, RaggedComponent):
                raise InvalidArgumentError(f"Input Variant element is not a ragged tensor: {c!r}")
            if c.values.dtype != values_dtype:
                raise InvalidArgumentError(
                    f"Expected values Tensor dtype: {_type_name(values_dtype)}, found: "
                    f"{_type_name(c.values.dtype)}"
                )
            if len(c.splits) != input_rank:
                raise InvalidArgumentError(
                    f"Encoded input RaggedTensorVariant has ragged_rank={len(c.splits)}.  Expected "
                    f"ragged_rank={input_rank}."
                )
            for s in c.splits:
                if s.dtype != splits_dtype:
                    raise InvalidArgumentError(
                        f"Expected row_splits Tensor dtype: {_type_name(splits_dtype)}, found: "
                        f"{_type_name(s.dtype)}"
                    )
        if encoded.ndim == 0:
            c = components[0]
            return [*c.splits, c.values]
        for i, c in enumerate(components[1:], 1):
            if c.values.ndim != components[0].values.ndim:
                raise InvalidArgumentError(
                    "Rank of values must match for all components; values shape at index 0: "
                    f"{_shape_str(components[0].values.shape)}, values shape at index {i}: "
                    f"{_shape_str(c.values.shape)}"
                )
        # the encoded dimensions become uniform row splits, the components' rows the last of them
        dims = encoded.shape
        splits: list[Any] = []
        rows = 1
        for d in dims[:-1]:
            rows *= d
        for j in range(len(dims) - 1):
            outer = int(np.prod(dims[: j + 1]))
            splits.append(np.arange(outer + 1, dtype=splits_dtype) * dims[j + 1])
        sizes = [c.splits[0].size - 1 if c.splits else c.values.shape[0] for c in components]
        splits.append(np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(splits_dtype))
        for level in range(input_rank):
            parts, offset = [np.zeros(1, splits_dtype)], 0
            for c in components:
                s = c.splits[level]
                parts.append((s[1:] + offset).astype(splits_dtype))
                offset += int(s[-1])
            splits.append(np.concatenate(parts))
        if components:
            values = np.concatenate([c.values for c in components]).astype(values_dtype, copy=False)
        else:
            values = np.zeros((0,), values_dtype)
        return [*splits, values]

    return compute
