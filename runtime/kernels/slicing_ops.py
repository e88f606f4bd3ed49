"""Slicing, splitting, stacking, concatenation, padding, tiling and reversal.

Shape-like arguments (begins, sizes, axes, paddings, ...) are input tensors, read per call. Results are numpy
views of the input wherever TensorFlow's result is a re-indexing of it (Slice, StridedSlice, Split, SplitV,
Unpack, Reverse, ...): kernels never write into their inputs, so sharing is safe.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _bad_attr, _scalar, _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node


def _zero(dtype: np.dtype[Any]) -> Any:
    return b"" if dtype.kind == "O" else dtype.type(0)


# --- slicing -----------------------------------------------------------------------------------------------


@kernel("Slice")
def slice_(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, begin_t, size_t = inputs
        rank = x.ndim
        if not (begin_t.ndim == 1 and size_t.ndim == 1 and begin_t.size == rank and size_t.size == rank):
            raise InvalidArgumentError(
                f"Expected begin and size arguments to be 1-D tensors of size {rank}, but got shapes "
                f"{_shape_str(begin_t.shape)} and {_shape_str(size_t.shape)} instead."
            )
        index = []
        for i, (b, s, dim) in enumerate(zip(begin_t.tolist(), size_t.tolist(), x.shape, strict=True)):
            if s == -1:
                s = dim - b
            if dim == 0:
                if b != 0 or s != 0:
                    raise InvalidArgumentError(
                        f"Expected begin[{i}] == 0 (got {b}) and size[{i}] == 0 (got {s}) when "
                        f"input.dim_size({i}) == 0"
                    )
            elif not 0 <= b <= dim:
                raise InvalidArgumentError(f"Expected begin[{i}] in [0, {dim}], but got {b}")
            elif not 0 <= s <= dim - b:
                raise InvalidArgumentError(f"Expected size[{i}] in [0, {dim - b}], but got {s}")
            index.append(slice(b, b + s))
        return (x[(*index, ...)],)

    return compute


# One step of a StridedSlice plan: a full dense dim from an ellipsis, a new axis, or a sliced dim
# (sparse index into begin/end/strides, dense dim, begin masked, end masked, shrink).
_FULL, _NEW, _DIM = 0, 1, 2


@kernel("StridedSlice")
def strided_slice(node: Node) -> Compute:
    begin_mask = node.attr_int("begin_mask", 0)
    end_mask = node.attr_int("end_mask", 0)
    ellipsis_mask = node.attr_int("ellipsis_mask", 0)
    new_axis_mask = node.attr_int("new_axis_mask", 0)
    shrink_mask = node.attr_int("shrink_axis_mask", 0)
    multiple_ellipses = ellipsis_mask & (ellipsis_mask - 1) != 0
    plans: dict[tuple[int, int], list[tuple[int, ...]]] = {}
    everything = slice(None)

    def plan(n: int, rank: int) -> list[tuple[int, ...]]:
        """What each of the ``n`` slice entries means for a rank-``rank`` input: TF's dense spec."""
        ellipsis = ellipsis_mask & ((1 << n) - 1)
        new_after_ellipsis, seen = 0, False
        for i in range(n):
            if seen and new_axis_mask >> i & 1:
                new_after_ellipsis += 1
            if ellipsis >> i & 1:
                seen = True
        total = n
        if not seen:  # an implicit ellipsis at the end covers the dims nobody named
            ellipsis |= 1 << n
            total += 1
        steps: list[tuple[int, ...]] = []
        dense = 0
        for i in range(total):
            if ellipsis >> i & 1:
                stop = min(rank - (total - i) + 1 + new_after_ellipsis, rank)
                steps.extend((_FULL,) for _ in range(dense, stop))
                dense = max(dense, stop)
            elif new_axis_mask >> i & 1:
                steps.append((_NEW,))
            else:
                if dense == rank:
                    if rank == 0:
                        raise InvalidArgumentError("Attempting to slice scalar input.")
                    raise InvalidArgumentError(
                        f"Index out of range using input dim {dense}; input has only {rank} dims"
                    )
                bits = (begin_mask >> i & 1, end_mask >> i & 1, shrink_mask >> i & 1)
                steps.append((_DIM, i, dense, *bits))
                dense += 1
        return steps

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, begin_t, end_t, strides_t = inputs
        if not (begin_t.ndim == end_t.ndim == strides_t.ndim == 1) or not (
            begin_t.shape == end_t.shape == strides_t.shape
        ):
            raise InvalidArgumentError(
                "Expected begin, end, and strides to be 1D equal size tensors, but got shapes "
                f"{_shape_str(begin_t.shape)}, {_shape_str(end_t.shape)}, and {_shape_str(strides_t.shape)} "
                "instead."
            )
        if multiple_ellipses:
            raise InvalidArgumentError("Multiple ellipses in slice spec not allowed")
        key = (begin_t.shape[0], x.ndim)
        steps = plans.get(key)
        if steps is None:
            steps = plans[key] = plan(*key)
        begin, end, strides = begin_t.tolist(), end_t.tolist(), strides_t.tolist()
        in_shape = x.shape
        index: list[Any] = []
        for step in steps:
            if step[0] == _FULL:
                index.append(everything)
                continue
            if step[0] == _NEW:
                index.append(None)
                continue
            _, i, d, begin_masked, end_masked, shrink = step
            stride, dim = strides[i], in_shape[d]
            if stride == 0:
                raise InvalidArgumentError(f"strides[{d}] must be non-zero")
            if shrink:
                if stride < 0:
                    raise InvalidArgumentError("only stride 1 allowed on non-range indexing.")
                b = begin[i] + dim if begin[i] < 0 else begin[i]
                if not 0 <= b < dim:
                    raise InvalidArgumentError(f"slice index {b} of dimension {d} out of bounds.")
                index.append(b)
                continue
            # Clamp as TensorFlow does: into [0, dim] going forwards, [-1, dim - 1] going backwards,
            # where -1 means "before the first element" (a Python stop of None).
            lo, hi = (0, dim) if stride > 0 else (-1, dim - 1)
            if begin_masked:
                b = lo if stride > 0 else hi
            else:
                b = begin[i] + dim if begin[i] < 0 else begin[i]
                b = lo if b < lo else hi if b > hi else b
            if end_masked:
                e = hi if stride > 0 else lo
            else:
                e = end[i] + dim if end[i] < 0 else end[i]
                e = lo if e < lo else hi if e > hi else e
            if stride > 0:
                index.append(slice(b, e, stride))
            elif b < 0:
                index.append(slice(0, 0))
            else:
                index.append(slice(b, None if e < 0 else e, stride))
        index.append(Ellipsis)
        return (x[tuple(index)],)

    return compute


# --- concatenation and splitting ----------------------------------------------------------------------------


def _concat(values: list[Any], axis_t: Any, axis_name: str) -> Any:
    if not (axis_t.ndim == 0 or (axis_t.ndim == 1 and axis_t.size == 1)):
        raise InvalidArgumentError(
            f"{axis_name} tensor should be a scalar integer, but got shape {_shape_str(axis_t.shape)}"
        )
    axis = _scalar(axis_t)
    first = values[0].shape
    rank = len(first)
    if rank == 0:
        raise InvalidArgumentError("ConcatOp : Can't concatenate scalars (use tf.stack instead)")
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank:
        a = (a + 2**31) % 2**32 - 2**31  # TensorFlow keeps the wrapped axis in an int32
    if not 0 <= a < rank:
        raise InvalidArgumentError(
            f"ConcatOp : Expected concatenating dimensions in the range [{-rank}, {rank}), but got {axis}"
        )
    for i, v in enumerate(values):
        s = v.shape
        if len(s) != rank:
            raise InvalidArgumentError(
                f"ConcatOp : Ranks of all input tensors should match: shape[0] = {_shape_str(first)} vs. "
                f"shape[{i}] = {_shape_str(s)}"
            )
        if s[:a] != first[:a] or s[a + 1 :] != first[a + 1 :]:
            j = next(j for j in range(rank) if j != a and s[j] != first[j])
            raise InvalidArgumentError(
                f"ConcatOp : Dimension {j} in both shapes must be equal: shape[0] = {_shape_str(first)} vs. "
                f"shape[{i}] = {_shape_str(s)}"
            )
    return np.concatenate(values, axis=a)


@kernel("ConcatV2", expensive=True)
def concat_v2(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_concat(inputs[:-1], inputs[-1], "axis"),)

    return compute


@kernel("Concat", expensive=True)
def concat(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_concat(inputs[1:], inputs[0], "concat_dim"),)

    return compute


@kernel("Pack")
def pack(node: Node) -> Compute:
    axis = node.attr_int("axis", 0)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        first = inputs[0].shape
        dims = len(first) + 1
        a = axis + dims if axis < 0 else axis
        if not 0 <= a < dims:
            raise InvalidArgumentError(f"axis = {axis} not in [{-dims}, {dims})")
        for i, v in enumerate(inputs):
            if v.shape != first:
                raise InvalidArgumentError(
                    f"Shapes of all inputs must match: values[0].shape = {_shape_str(first)} != "
                    f"values[{i}].shape = {_shape_str(v.shape)}"
                )
        return (np.stack(inputs, axis=a),)

    return compute


@kernel("Unpack", outputs=lambda node: node.attr_int("num"))
def unpack(node: Node) -> Compute:
    num = node.attr_int("num")
    axis = node.attr_int("axis", 0)
    if num < 0:
        raise _bad_attr(node, "num", f"must be non-negative, got {num}")

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        x = inputs[0]
        rank = x.ndim
        a = axis + rank if axis < 0 else axis
        if not 0 <= a < rank:
            raise InvalidArgumentError(f"axis = {axis} not in [{-rank}, {rank})")
        if x.shape[a] != num:
            raise InvalidArgumentError(
                f"Input shape axis {a} must equal {num}, got shape {_shape_str(x.shape)}"
            )
        lead = (slice(None),) * a
        return [x[(*lead, i, ...)] for i in range(num)]

    return compute


def _split_axis(axis: int, rank: int) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank:
        raise InvalidArgumentError(f"-input rank(-{rank}) <= split_dim < input rank ({rank}), but got {axis}")
    return a


def _num_split(node: Node) -> int:
    num = node.attr_int("num_split")
    if num < 1:
        raise _bad_attr(node, "num_split", f"must be at least 1, got {num}")
    return num


@kernel("Split", outputs=lambda node: node.attr_int("num_split"))
def split(node: Node) -> Compute:
    num = _num_split(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        axis_t, x = inputs
        if axis_t.ndim != 0:
            raise InvalidArgumentError(f"split_dim must be a scalar but has rank {axis_t.ndim}")
        a = _split_axis(_scalar(axis_t), x.ndim)
        if num == 1:
            return [x]
        size = x.shape[a]
        if size % num:
            raise InvalidArgumentError(
                "Number of ways to split should evenly divide the split dimension, but got split_dim "
                f"{a} (size = {size}) and num_split {num}"
            )
        step = size // num
        lead = (slice(None),) * a
        return [x[(*lead, slice(i * step, (i + 1) * step))] for i in range(num)]

    return compute


@kernel("SplitV", outputs=lambda node: node.attr_int("num_split"))
def split_v(node: Node) -> Compute:
    num = _num_split(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        x, sizes_t, axis_t = inputs
        if sizes_t.ndim != 1 or sizes_t.size != num:
            raise InvalidArgumentError(
                "size of the split_tensor must be 1-D and have the same elements as outputs got "
                f"{sizes_t.ndim} -D and {sizes_t.size} elements"
            )
        if axis_t.size != 1:
            raise InvalidArgumentError("split_dim_tensor must have exactly one element.")
        a = _split_axis(_scalar(axis_t), x.ndim)
        dim = x.shape[a]
        sizes = sizes_t.tolist()
        if num == 1:
            if sizes[0] != dim:
                raise InvalidArgumentError(
                    "If there is only one output, it must have the same size as the input. Input size: "
                    f"{dim} output size: {sizes[0]}"
                )
            return [x]
        unknown, determined = -1, 0
        for i, s in enumerate(sizes):
            if s == -1:
                if unknown != -1:
                    raise InvalidArgumentError("There can only be one -1 in the input.")
                unknown = i
            else:
                determined += s
        if not ((unknown == -1 and determined == dim) or (unknown >= 0 and determined <= dim)):
            raise InvalidArgumentError(
                "Determined shape must either match input shape along split_dim exactly if fully specified, "
                "or be less than the size of the input along split_dim if not fully specified.  Got: "
                f"{determined}"
            )
        if unknown >= 0:
            sizes[unknown] = dim - determined
        for i, s in enumerate(sizes):
            if s < 0:
                raise InvalidArgumentError(f"Split size at index {i} must be >= 0. Got: {s}")
        lead = (slice(None),) * a
        outputs, start = [], 0
        for s in sizes:
            outputs.append(x[(*lead, slice(start, start + s))])
            start += s
        return outputs

    return compute


# --- padding -----------------------------------------------------------------------------------------------


def _paddings(x: Any, paddings_t: Any, sep: str) -> list[list[int]]:
    if paddings_t.ndim != 2 or paddings_t.shape[1] != 2:
        raise InvalidArgumentError(
            f"paddings must be a matrix with 2 columns: {_shape_str(paddings_t.shape)}"
        )
    if paddings_t.shape[0] != x.ndim:
        raise InvalidArgumentError(
            f"The first dimension of paddings must be the rank of inputs{_shape_str(paddings_t.shape)}{sep}"
            f"{_shape_str(x.shape)}"
        )
    pads: list[list[int]] = paddings_t.tolist()
    return pads


def _pad_constant(x: Any, paddings_t: Any, value: Any) -> Any:
    pads = _paddings(x, paddings_t, " ")
    for before, after in pads:
        if before < 0 or after < 0:
            raise InvalidArgumentError(f"Paddings must be non-negative: {before} {after}")
    if not any(before or after for before, after in pads):
        return x
    out = np.full([b + d + a for (b, a), d in zip(pads, x.shape, strict=True)], value, dtype=x.dtype)
    out[tuple(slice(b, b + d) for (b, _), d in zip(pads, x.shape, strict=True))] = x
    return out


@kernel("Pad", expensive=True)
def pad(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, paddings_t = inputs
        return (_pad_constant(x, paddings_t, _zero(x.dtype)),)

    return compute


@kernel("PadV2", expensive=True)
def pad_v2(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, paddings_t, value = inputs
        _paddings(x, paddings_t, " ")
        if value.ndim != 0:
            raise InvalidArgumentError(f"constant_values must be a scalar. Found: {_shape_str(value.shape)}")
        return (_pad_constant(x, paddings_t, value),)

    return compute


@kernel("MirrorPad", expensive=True)
def mirror_pad(node: Node) -> Compute:
    mode = node.attr_str("mode", choices=("REFLECT", "SYMMETRIC"))
    reflect = mode == "REFLECT"
    np_mode: Literal["reflect", "symmetric"] = "reflect" if reflect else "symmetric"

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, paddings_t = inputs
        pads = _paddings(x, paddings_t, ", ")
        for (before, after), dim in zip(pads, x.shape, strict=True):
            if before < 0 or after < 0:
                raise InvalidArgumentError(f"paddings must be non-negative: {before} {after}")
            if reflect and not (before < dim and after < dim):
                raise InvalidArgumentError(
                    f"paddings must be less than the dimension size: {before}, {after} not less than {dim}"
                )
            if not reflect and not (before <= dim and after <= dim):
                raise InvalidArgumentError(
                    f"paddings must be no greater than the dimension size: {before}, {after} greater than "
                    f"{dim}"
                )
        if not any(before or after for before, after in pads):
            return (x,)
        return (np.pad(x, pads, mode=np_mode),)

    return compute


# --- reversals and tiling ----------------------------------------------------------------------------------


@kernel("ReverseV2")
def reverse_v2(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, axis_t = inputs
        if x.size == 0 or x.ndim == 0:  # TensorFlow looks at no axis then
            return (x,)
        if axis_t.ndim != 1:
            raise InvalidArgumentError(f"'dims' must be 1-dimension, not {axis_t.ndim}")
        rank = x.ndim
        flip = [False] * rank
        for i, a in enumerate(axis_t.tolist()):
            d = a + rank if a < 0 else a
            if not 0 <= d < rank:
                raise InvalidArgumentError(f"'axis'[{i}] = {a} is out of valid range [0, {rank - 1}")
            if flip[d]:
                raise InvalidArgumentError(f"axis {d} specified more than once.")
            flip[d] = True
        return (_reversed(x, flip),)

    return compute


@kernel("Reverse")
def reverse(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, dims_t = inputs
        if x.ndim == 0:
            return (x,)
        if dims_t.ndim != 1:
            raise InvalidArgumentError(f"'dims' must be 1-dimension, not {dims_t.ndim}")
        if dims_t.size != x.ndim:
            raise InvalidArgumentError(
                "'dims' must have the same number of values as 'input' has dimensions. 'input' has "
                f"{x.ndim}'dims' has {dims_t.size} values"
            )
        return (_reversed(x, dims_t.tolist()),)

    return compute


def _reversed(x: Any, flip: list[bool]) -> Any:
    backwards, forwards = slice(None, None, -1), slice(None)
    return x[(*(backwards if f else forwards for f in flip), ...)]


@kernel("Tile", expensive=True)
def tile(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, multiples_t = inputs
        if multiples_t.ndim != 1:
            raise InvalidArgumentError(
                f"Expected multiples to be 1-D, but got shape {_shape_str(multiples_t.shape)}"
            )
        multiples = multiples_t.tolist()
        if len(multiples) != x.ndim:
            raise InvalidArgumentError(
                f"Expected multiples argument to be a vector of length {x.ndim} but got length "
                f"{len(multiples)}"
            )
        for i, m in enumerate(multiples):
            if m < 0:
                raise InvalidArgumentError(f"Expected multiples[{i}] >= 0, but got {m}")
        if all(m == 1 for m in multiples):
            return (x,)
        return (np.tile(x, multiples),)

    return compute


@kernel("Roll")
def roll(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, shift_t, axis_t = inputs
        if x.ndim < 1:
            raise InvalidArgumentError("input must be 1-D or higher")
        if shift_t.ndim > 1:
            raise InvalidArgumentError(
                f"shift must be a scalar or a 1-D vector. Found: {_shape_str(shift_t.shape)}"
            )
        if axis_t.ndim > 1:
            raise InvalidArgumentError(
                f"axis must be a scalar or a 1-D vector. Found: {_shape_str(axis_t.shape)}"
            )
        if shift_t.shape != axis_t.shape:
            raise InvalidArgumentError("shift and axis must have the same size")
        rank = x.ndim
        shifts = [0] * rank
        # TensorFlow adds the shifts of each axis up as int32s, each kept in [0, dim)
        for a, s in zip(
            axis_t.reshape(-1).tolist(), shift_t.reshape(-1).astype(np.int32).tolist(), strict=True
        ):
            if a < 0:
                a += rank
            if not 0 <= a < rank:
                raise InvalidArgumentError(f"axis {a} is out of range")
            shifts[a] = (shifts[a] + s) % max(x.shape[a], 1)
        if x.size == 0 or not any(shifts):
            return (x,)
        return (np.roll(x, shifts, axis=tuple(range(rank))),)

    return compute


@kernel("ReverseSequence")
def reverse_sequence(node: Node) -> Compute:
    """Reverses the first ``seq_lengths[b]`` entries along ``seq_dim`` of each batch entry ``b`` (along
    ``batch_dim``): Keras' Bidirectional RNNs over sequences with lengths."""
    seq_dim = node.attr_int("seq_dim")
    batch_dim = node.attr_int("batch_dim", 0)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, lengths_t = inputs
        if lengths_t.ndim != 1:
            raise InvalidArgumentError(f"seq_lengths must be 1-dim, not {lengths_t.ndim}")
        rank = x.ndim
        if batch_dim == seq_dim:
            raise InvalidArgumentError(f"batch_dim == seq_dim == {seq_dim}")
        if seq_dim >= rank:
            raise InvalidArgumentError(f"seq_dim must be < input rank ( {seq_dim} vs. {rank})")
        if batch_dim >= rank:
            raise InvalidArgumentError(f"batch_dim must be < input rank ( {batch_dim} vs. {rank})")
        if seq_dim < 0 or batch_dim < 0:
            raise InvalidArgumentError(f"Invalid {'seq_dim' if seq_dim < 0 else 'batch_dim'}")
        if lengths_t.shape[0] != x.shape[batch_dim]:
            raise InvalidArgumentError(
                f"Length of seq_lengths != input.dims({batch_dim}), ({lengths_t.shape[0]} vs. "
                f"{x.shape[batch_dim]})"
            )
        lengths = lengths_t.astype(np.int64)
        bad = np.flatnonzero((lengths < 0) | (lengths > x.shape[seq_dim]))
        if bad.size:
            d = int(bad[0])
            if lengths[d] < 0:
                raise InvalidArgumentError(f"seq_lens({d}) < 0")
            raise InvalidArgumentError(f"seq_lens({d}) > input.dims({seq_dim})")
        if not 2 <= rank <= 5:
            raise InvalidArgumentError(f"ReverseSequenceOp : Unhandled input dimensions: {rank}")
        if x.size == 0:
            return (x,)
        # source position along seq_dim of each (batch entry, position): len - 1 - s inside the prefix
        s = np.arange(x.shape[seq_dim])[None, :]
        src = np.where(s < lengths[:, None], lengths[:, None] - 1 - s, s)
        shape = [1] * rank
        shape[batch_dim], shape[seq_dim] = src.shape
        if batch_dim > seq_dim:  # laid out in the input's dim order
            src = src.T
        index = np.broadcast_to(src.reshape(shape), x.shape)
        return (np.take_along_axis(x, index, axis=seq_dim),)

    return compute
