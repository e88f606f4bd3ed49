"""Sources, identities and array manipulation: shapes, slicing, gathering, padding, concatenation.

Shape-like arguments (axes, sizes, begins, ...) are input tensors, read per call. Results are numpy views of
the input wherever TensorFlow's result is a re-indexing of it (Reshape, Transpose, Slice, StridedSlice,
Split, Reverse, BroadcastTo, ...): kernels never write into their inputs, so sharing is safe.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from proto import types_pb2
from runtime import dtypes
from runtime.errors import InvalidArgumentError
from runtime.kernels.registry import Compute, OpContext, kernel
from runtime.node import Node

_INT64_MAX = 2**63 - 1


def _shape_str(shape: tuple[int, ...] | None) -> str:
    if shape is None:
        return "<unknown>"
    return "[" + ",".join("?" if d < 0 else str(d) for d in shape) + "]"


def _bad_attr(node: Node, attr: str, problem: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"Node '{node.name}' (op '{node.op}'): attr '{attr}' {problem}", node.name)


def _index_type(node: Node, attr: str) -> np.dtype[Any]:
    """An int32/int64 output-type attr (``out_type``, ``out_idx``, ``index_type``), int32 by default."""
    dtype = node.attr_dtype(attr, types_pb2.DT_INT32)
    if dtype not in (np.int32, np.int64):
        raise _bad_attr(node, attr, f"must be int32 or int64, got {dtype}")
    return dtype


def _tensor(value: Any, dtype: np.dtype[Any]) -> Any:
    """numpy hands back a bare scalar for some 0-d results (a Python ``bytes`` for strings): re-wrap it."""
    return value if isinstance(value, np.ndarray) else np.array(value, dtype=dtype)


def _scalar(t: Any) -> Any:
    """A scalar or one-element tensor as a Python number (callers check the size first)."""
    return t.item()


def _zero(dtype: np.dtype[Any]) -> Any:
    return b"" if dtype.kind == "O" else dtype.type(0)


# --- sources and identities --------------------------------------------------------------------------------


@kernel("Const")
def const(node: Node) -> Compute:
    value = node.attr_tensor("value")
    expected = node.attr_dtype("dtype")
    if value.dtype != expected:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op 'Const'): value has dtype {value.dtype}, attr dtype is {expected}",
            node.name,
        )
    value.flags.writeable = False
    outputs = (value,)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return outputs

    return compute


@kernel("Placeholder")
def placeholder(node: Node) -> Compute:
    dtype = node.attr_type("dtype")
    shape = node.attr_shape("shape", None)
    message = (
        f"You must feed a value for placeholder tensor '{node.name}' with dtype {dtypes.name(dtype)}"
        + (f" and shape {_shape_str(shape)}" if shape is not None else "")
    )

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        raise InvalidArgumentError(message, node.name)

    return compute


@kernel("PlaceholderWithDefault", "Identity", "StopGradient", "Snapshot", "PreventGradient")
def identity(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        return inputs

    return compute


@kernel("IdentityN", outputs=lambda node: len(node.attr_types("T")))
def identity_n(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        return inputs

    return compute


@kernel("NoOp", outputs=0)
def no_op(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return ()

    return compute


@kernel("Fill")
def fill(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        dims_t, value = inputs
        if dims_t.ndim != 1:
            raise InvalidArgumentError(f"dims must represent a vector, got shape {_shape_str(dims_t.shape)}")
        if value.ndim != 0:
            raise InvalidArgumentError(f"value must represent a scalar, got shape {_shape_str(value.shape)}")
        dims = dims_t.tolist()
        for d in dims:
            if d < 0:
                raise InvalidArgumentError(f"Dimension {d} must be >= 0")
        return (np.full(dims, value, dtype=value.dtype),)

    return compute


@kernel("ZerosLike")
def zeros_like(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        if x.dtype.kind == "O":
            return (np.full(x.shape, b"", dtype=object),)
        return (np.zeros(x.shape, dtype=x.dtype),)

    return compute


@kernel("OnesLike")
def ones_like(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        if x.dtype.kind == "O":
            raise InvalidArgumentError("OnesLike is not defined for string tensors")
        return (np.ones(x.shape, dtype=x.dtype),)

    return compute


@kernel("Range")
def range_(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        for name, t in zip(("start", "limit", "delta"), inputs, strict=True):
            if t.ndim > 1 or t.size != 1:
                raise InvalidArgumentError(f"{name} must be a scalar, not shape {_shape_str(t.shape)}")
        dtype = inputs[0].dtype
        start, limit, delta = (t.reshape(()) for t in inputs)
        if delta == 0:
            raise InvalidArgumentError(f"Requires delta != 0: {_num(delta)}")
        if delta > 0 and not start <= limit:
            raise InvalidArgumentError(f"Requires start <= limit when delta > 0: {_num(start)}/{_num(limit)}")
        if delta < 0 and not start >= limit:
            raise InvalidArgumentError(f"Requires start >= limit when delta < 0: {_num(start)}/{_num(limit)}")
        if dtype.kind in "iu":
            s, l, d = int(start), int(limit), int(delta)
            size = (abs(l - s) + abs(d) - 1) // abs(d)
            return ((np.arange(size, dtype=np.int64) * d + s).astype(dtype),)
        # Size and values in the input's precision, as TensorFlow computes them: start + i * delta.
        span = np.ceil(np.abs((limit - start) / delta))
        if not span <= _INT64_MAX:
            raise InvalidArgumentError(f"Requires ((limit - start) / delta) <= {_INT64_MAX}")
        steps = np.arange(int(span), dtype=np.int64).astype(dtype)
        return (steps * delta + start,)

    return compute


def _num(v: Any) -> str:
    """A number as TensorFlow's error messages print it (``0``, ``0.5``, ``nan``)."""
    if v.dtype.kind in "iub":
        return str(int(v))
    return f"{float(v):g}"


# --- shapes ------------------------------------------------------------------------------------------------


@kernel("Shape")
def shape(node: Node) -> Compute:
    out = _index_type(node, "out_type")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (np.array(inputs[0].shape, dtype=out),)

    return compute


@kernel("ShapeN", outputs=lambda node: node.attr_int("N"))
def shape_n(node: Node) -> Compute:
    out = _index_type(node, "out_type")

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        return [np.array(x.shape, dtype=out) for x in inputs]

    return compute


@kernel("Size")
def size(node: Node) -> Compute:
    out = _index_type(node, "out_type")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (np.array(inputs[0].size, dtype=out),)

    return compute


@kernel("Rank")
def rank(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (np.array(inputs[0].ndim, dtype=np.int32),)

    return compute


def _reshape_dims(sizes: list[int], in_shape: tuple[int, ...], in_size: int) -> list[int]:
    """The shape Reshape gives, with TensorFlow's inference of one -1 (zero-sized dims included)."""
    unknown, product, has_zero = -1, 1, False
    out = list(sizes)
    for d, s in enumerate(sizes):
        if s == -1:
            if unknown != -1:
                raise InvalidArgumentError(f"Only one input size may be -1, not both {unknown} and {d}")
            unknown = d
            out[d] = 1
        elif s < 0:
            raise InvalidArgumentError(f"Size {d} must be non-negative, not {s}")
        elif s == 0:
            has_zero = True
        else:
            product *= s
    if unknown != -1:
        # Zero dims are left out on both sides so that e.g. [0, 6] -> [-1, 0, 2] can still infer its -1.
        known, input_has_zero = 1, False
        for d in in_shape:
            if d > 0 or not has_zero:
                known *= d
            else:
                input_has_zero = True
        missing = known // product
        if not input_has_zero and missing * product != known:
            raise InvalidArgumentError(
                f"Input to reshape is a tensor with {known} values, but the requested shape requires a "
                f"multiple of {product}"
            )
        out[unknown] = missing
    if math.prod(out) != in_size:
        raise InvalidArgumentError(
            f"Input to reshape is a tensor with {in_size} values, but the requested shape has "
            f"{math.prod(out)}"
        )
    return out


@kernel("Reshape")
def reshape(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, sizes_t = inputs
        if sizes_t.ndim > 1:
            raise InvalidArgumentError(f"sizes input must be 1-D, not {_shape_str(sizes_t.shape)}")
        sizes = sizes_t.reshape(-1).tolist()
        if math.prod(sizes) != x.size or min(sizes, default=0) < 0:
            sizes = _reshape_dims(sizes, x.shape, x.size)
        return (x.reshape(sizes),)

    return compute


@kernel("Squeeze")
def squeeze(node: Node) -> Compute:
    squeeze_dims = node.attr_ints("squeeze_dims", [])

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        in_shape = x.shape
        rank = len(in_shape)
        if not squeeze_dims:
            return (x.reshape([d for d in in_shape if d != 1]),)
        wrapped = set()
        for d in squeeze_dims:
            if not -rank <= d < rank:
                raise InvalidArgumentError(
                    f"Tried to squeeze dim index {d} for tensor with {rank} dimensions."
                )
            wrapped.add(d + rank if d < 0 else d)
        for i in sorted(wrapped):
            if in_shape[i] != 1:
                raise InvalidArgumentError(
                    f"Can not squeeze dim[{i}], expected a dimension of 1, got {in_shape[i]}"
                )
        return (x.reshape([d for i, d in enumerate(in_shape) if i not in wrapped]),)

    return compute


@kernel("ExpandDims")
def expand_dims(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, dim_t = inputs
        if dim_t.size != 1:
            raise InvalidArgumentError("'dim' must be a tensor with a single value")
        d = _scalar(dim_t)
        rank = x.ndim
        if not -rank - 1 <= d <= rank:
            raise InvalidArgumentError(f"Tried to expand dim index {d} for tensor with {rank} dimensions.")
        if d < 0:
            d += rank + 1
        return (x.reshape(x.shape[:d] + (1,) + x.shape[d:]),)

    return compute


@kernel("EnsureShape")
def ensure_shape(node: Node) -> Compute:
    expected = node.attr_shape("shape")
    source = node.node_def.input[0] if node.node_def.input else node.name

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        if expected is not None and (
            len(expected) != x.ndim or any(e >= 0 and e != d for e, d in zip(expected, x.shape, strict=True))
        ):
            raise InvalidArgumentError(
                f"Shape of tensor {source} {_shape_str(x.shape)} is not compatible with expected shape "
                f"{_shape_str(expected)}."
            )
        return (x,)

    return compute


@kernel("BroadcastTo")
def broadcast_to(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, shape_t = inputs
        if shape_t.ndim != 1:
            raise InvalidArgumentError(
                f"shape must be a vector of {{int32,int64}}, got shape {_shape_str(shape_t.shape)}"
            )
        target = tuple(shape_t.tolist())
        for d in target:
            if d < 0:
                raise InvalidArgumentError(f"Dimension {d} must be >= 0")
        if x.shape == target:
            return (x,)
        if x.ndim > len(target):
            raise InvalidArgumentError(
                f"Rank of input ({x.ndim}) must be no greater than rank of output shape ({len(target)})."
            )
        try:
            joint = np.broadcast_shapes(x.shape, target)
        except ValueError:
            raise InvalidArgumentError(
                f"Incompatible shapes: {_shape_str(x.shape)} vs. {_shape_str(target)}"
            ) from None
        if joint != target:
            raise InvalidArgumentError(
                f"Unable to broadcast tensor of shape {_shape_str(x.shape)} to tensor of shape "
                f"{_shape_str(target)}"
            )
        return (np.broadcast_to(x, target),)

    return compute


@kernel("BroadcastArgs")
def broadcast_args(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        s0, s1 = inputs
        for i, s in enumerate(inputs):
            if s.ndim != 1:
                raise InvalidArgumentError(f"In[{i}] must be a vector.{_shape_str(s.shape)}")
        a, b = tuple(s0.tolist()), tuple(s1.tolist())
        try:
            joint = np.broadcast_shapes(a, b)
        except ValueError:
            raise InvalidArgumentError(f"Incompatible shapes: {_shape_str(a)} vs. {_shape_str(b)}") from None
        return (np.array(joint, dtype=s0.dtype),)

    return compute


# --- transposes, reversals, tiling --------------------------------------------------------------------------


@kernel("Transpose")
def transpose(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, perm_t = inputs
        if perm_t.ndim != 1:
            raise InvalidArgumentError(f"perm must be rank 1, got shape {_shape_str(perm_t.shape)}")
        rank = x.ndim
        perm = [p + rank if p < 0 else p for p in perm_t.tolist()]
        if len(perm) != rank:
            raise InvalidArgumentError(
                f"transpose expects a vector of size {rank}. But input(1) is a vector of size {len(perm)}"
            )
        for p in perm:
            if not 0 <= p < rank:
                raise InvalidArgumentError(f"{p} is out of range [0 .. {rank})")
        if len(set(perm)) != rank:
            missing = min(set(range(rank)) - set(perm))
            raise InvalidArgumentError(f"{missing} is missing from {{{','.join(map(str, perm))}}}.")
        return (x.transpose(perm),)

    return compute


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


# --- gathering ---------------------------------------------------------------------------------------------


def _check_indices(indices: Any, limit: int) -> None:
    """Raises TensorFlow's error for the first index outside [0, limit)."""
    if indices.min() >= 0 and indices.max() < limit:
        return
    first = np.flatnonzero((indices < 0) | (indices >= limit))[0]
    pos = np.unravel_index(first, indices.shape)
    where = "[" + ",".join(str(int(p)) for p in pos) + "]" if indices.ndim else ""
    raise InvalidArgumentError(f"indices{where} = {indices[pos]} is not in [0, {limit})")


def _gather(params: Any, indices: Any, axis: int, batch_dims: int) -> Any:
    out_shape = params.shape[:axis] + indices.shape[batch_dims:] + params.shape[axis + 1 :]
    if math.prod(out_shape) == 0:  # TensorFlow checks no index when there is nothing to copy
        return np.empty(out_shape, dtype=params.dtype)
    _check_indices(indices, params.shape[axis])
    if batch_dims == 0:
        return _tensor(np.take(params, indices, axis=axis), params.dtype)
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
        return (_gather(params, indices, a, batch_dims),)

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
    # sorted=False leaves the order to the implementation; this one always sorts.
    node.attr_bool("sorted", True)
    index_type = _index_type(node, "index_type")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, k_t = inputs
        if k_t.ndim != 0:
            raise InvalidArgumentError(f"k must be scalar, got shape {_shape_str(k_t.shape)}")
        k = _scalar(k_t)
        if k < 0:
            raise InvalidArgumentError(f"Need k >= 0, got {k}")
        if x.ndim < 1:
            raise InvalidArgumentError(f"input must be >= 1-D, got shape {_shape_str(x.shape)}")
        n = x.shape[-1]
        if n < k:
            raise InvalidArgumentError(f"input must have at least k columns. Had {n}, needed {k}")
        # A stable ascending sort of the reversed rows, read backwards, is descending with ties in
        # increasing index order (TensorFlow's order) and works for every orderable dtype.
        order = np.argsort(x[..., ::-1], axis=-1, kind="stable")[..., ::-1][..., :k]
        indices = (n - 1) - order
        return np.take_along_axis(x, indices, axis=-1), indices.astype(index_type, copy=False)

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
        _, first, inverse = np.unique(x, return_index=True, return_inverse=True, equal_nan=False)
        order = np.argsort(first, kind="stable")
        rank_of = np.empty_like(order)
        rank_of[order] = np.arange(order.size)
        return x[first[order]], rank_of[inverse].astype(out_idx, copy=False)

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


# --- checks ------------------------------------------------------------------------------------------------


@kernel("CheckNumerics")
def check_numerics(node: Node) -> Compute:
    message = node.attr_str("message", "")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        # One sum is finite exactly when every element is, barring overflow: only then look closer.
        if x.dtype.kind == "f" and x.size and not np.isfinite(np.sum(x)):
            has_nan, has_inf = bool(np.isnan(x).any()), bool(np.isinf(x).any())
            if has_nan or has_inf:
                what = "Inf and NaN" if has_nan and has_inf else "NaN" if has_nan else "Inf"
                raise InvalidArgumentError(f"{message} : Tensor had {what} values")
        return (x,)

    return compute


@kernel("MatrixBandPart")
def matrix_band_part(node: Node) -> Compute:
    """Keeps a band of the innermost matrices: ``num_lower`` diagonals below, ``num_upper`` above
    (negative: all of them); used for causal attention masks."""

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, lower, upper = inputs
        if x.ndim < 2:
            raise InvalidArgumentError(f"input must be at least 2-dim, received shape: {_shape_str(x.shape)}")
        m, n = x.shape[-2], x.shape[-1]
        lo, up = int(lower), int(upper)
        if lo > m:
            raise InvalidArgumentError(
                f"num_lower must be negative or less or equal to number of rows ({m}) got: {lo}"
            )
        if up > n:
            raise InvalidArgumentError(
                f"num_upper must be negative or less or equal to number of columns ({n}) got: {up}"
            )
        diff = np.arange(m)[:, None] - np.arange(n)[None, :]  # row - column
        keep = np.ones((m, n), dtype=bool)
        if lo >= 0:
            keep &= diff <= lo
        if up >= 0:
            keep &= -diff <= up
        return (np.where(keep, x, np.zeros((), x.dtype)),)

    return compute
