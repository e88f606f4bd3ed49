"""Sources, identities, shapes and checks: Const, Placeholder, Fill, Range, LinSpace, Empty, Bitcast, Shape,
Reshape, Squeeze, ExpandDims, BroadcastTo, Transpose, CheckNumerics(V2), the debugging pass-throughs (Assert,
Print, PrintV2), MatrixBandPart and the diagonal ops (Diag, DiagPart, MatrixDiag/DiagPart/SetDiag V1-V3), ...

Shape-like arguments (dims, sizes, perm, ...) are input tensors, read per call. Results are numpy views of the
input wherever TensorFlow's result is a re-indexing of it (Reshape, Squeeze, ExpandDims, Transpose,
BroadcastTo, ...): kernels never write into their inputs, so sharing is safe.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from poolserve.runtime import dtypes
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _dims, _index_type, _scalar, _shape_str, _type_name
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_INT64_MAX = 2**63 - 1
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


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


def _check_range(start: Any, limit: Any, delta: Any, show: Callable[[Any], str]) -> None:
    """TensorFlow's checks of Range's arguments (Python ints or numpy scalars), ``show`` writing a value."""
    if delta == 0:
        raise InvalidArgumentError(f"Requires delta != 0: {show(delta)}")
    if delta > 0:
        if not start <= limit:
            raise InvalidArgumentError(f"Requires start <= limit when delta > 0: {show(start)}/{show(limit)}")
    elif not start >= limit:  # a NaN delta too, as in TensorFlow
        raise InvalidArgumentError(f"Requires start >= limit when delta < 0: {show(start)}/{show(limit)}")


@kernel("Range")
def range_(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        for name, t in zip(("start", "limit", "delta"), inputs, strict=True):
            if t.ndim > 1 or t.size != 1:
                raise InvalidArgumentError(f"{name} must be a scalar, not shape {_shape_str(t.shape)}")
        dtype = inputs[0].dtype
        if dtype.kind in "iu":  # as Python ints: numpy scalar comparisons made a 128-long Range cost 10 us
            s, l, d = (int(t.item()) for t in inputs)
            _check_range(s, l, d, str)
            size = (abs(l - s) + abs(d) - 1) // abs(d)
            return ((np.arange(size, dtype=np.int64) * d + s).astype(dtype),)
        start, limit, delta = (t.reshape(()) for t in inputs)
        _check_range(start, limit, delta, _num)
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
        return (np.array(_broadcast_dims(s0.tolist(), s1.tolist()), dtype=s0.dtype),)

    return compute


def _broadcast_dims(a: list[int], b: list[int]) -> list[int]:
    """TensorFlow's ``BCast`` of two shape vectors: dims are plain numbers (negative ones included), equal
    or one of them 1."""
    if a == b:
        return a
    n = max(len(a), len(b))
    a2, b2 = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    out = []
    for x, y in zip(a2, b2, strict=True):
        if x != y and x != 1 and y != 1:
            raise InvalidArgumentError(f"Incompatible shapes: {_dims(tuple(a))} vs. {_dims(tuple(b))}")
        out.append(x if y == 1 else y)
    return out


# --- transposes --------------------------------------------------------------------------------------------


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
                if perm_t.dtype != np.int32 and not all(
                    _INT32_MIN <= q <= _INT32_MAX for q in perm_t.tolist()
                ):
                    return compute(ctx, [x, perm_t.astype(np.int32)])  # TensorFlow reads perm as int32
                raise InvalidArgumentError(f"{p} is out of range [0 .. {rank})")
        if len(set(perm)) != rank:
            missing = min(set(range(rank)) - set(perm))
            raise InvalidArgumentError(f"{missing} is missing from {{{','.join(map(str, perm))}}}.")
        return (x.transpose(perm),)

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


@kernel("CheckNumericsV2")
def check_numerics_v2(node: Node) -> Compute:
    """CheckNumerics that tells -Inf from +Inf (``tf.debugging.enable_check_numerics``)."""
    message = node.attr_str("message", "")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        if x.dtype.kind == "f" and x.size and not np.isfinite(np.sum(x)):
            found = [
                name
                for name, bad in (
                    ("-Inf", np.isneginf(x).any()),
                    ("+Inf", np.isposinf(x).any()),
                    ("NaN", np.isnan(x).any()),
                )
                if bad
            ]
            if found:
                what = f"{found[0]}, {found[1]}, and {found[2]}" if len(found) == 3 else " and ".join(found)
                raise InvalidArgumentError(f"{message} : Tensor had {what} values")
        return (x,)

    return compute


# --- debugging pass-throughs -------------------------------------------------------------------------------


def _element_str(v: Any, dtype: np.dtype[Any]) -> str:
    """One element as TensorFlow's ``SummarizeValue`` writes it (FloatToBuffer's shortest of %.6g/%.9g,
    DoubleToBuffer's of %.15g/%.17g, booleans as 1/0, strings as they are)."""
    if dtype.kind == "O":
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
    if dtype.kind == "b":
        return "1" if v else "0"
    if dtype.kind in "iu":
        return str(int(v))
    if dtype == np.float64:
        s = f"{float(v):.15g}"
        return s if math.isnan(v) or float(s) == v else f"{float(v):.17g}"
    f = np.float32(v)
    s = f"{float(f):.6g}"
    return s if math.isnan(f) or np.float32(float(s)) == f else f"{float(f):.9g}"


def _summarize(x: Any, limit: int) -> str:
    """TensorFlow's ``Tensor::SummarizeValue(limit)`` (v1 form): the first ``limit`` elements (all when
    negative), one bracket per dim of a tensor of rank 2 and more, ``...`` where elements were left out."""
    n = x.size
    limit = n if limit < 0 else min(limit, n)
    if x.dtype.kind == "c":  # TensorFlow prints no complex values
        return " ".join("?" * limit) + ("..." if limit < n else "")
    flat = x.reshape(-1)[:limit].tolist()
    words = [_element_str(v, x.dtype) for v in flat]
    if x.ndim == 0:
        return " ".join(words)
    out: list[str] = []
    taken = 0

    def one_dim(dim: int) -> None:
        nonlocal taken
        if taken >= limit:
            return
        if dim == x.ndim - 1:
            for i in range(x.shape[dim]):
                if taken >= limit:
                    if dim:
                        out.append("...")
                    return
                if i:
                    out.append(" ")
                out.append(words[taken])
                taken += 1
            return
        for _ in range(x.shape[dim]):
            opened = taken < limit
            if opened:
                out.append("[")
            one_dim(dim + 1)
            if taken < limit or opened:
                out.append("]")

    one_dim(0)
    return "".join(out) + ("..." if n > limit else "")


@kernel("Assert", stateful=True, outputs=0)
def assert_(node: Node) -> Compute:
    summarize = node.attr_int("summarize", 3)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        cond = inputs[0]
        if cond.ndim != 0:
            raise InvalidArgumentError(f"In[0] should be a scalar: {_shape_str(cond.shape)}")
        if not cond.item():
            data = " ".join(f"[{_summarize(t, summarize)}]" for t in inputs[1:])
            raise InvalidArgumentError(f"assertion failed: {data}", node.name)
        return ()

    return compute


@kernel("Print", stateful=True)
def print_(node: Node) -> Compute:
    """Passes its first input on; writes the message and a summary of the data to stderr (its first
    ``first_n`` runs only, when that is not negative), as TensorFlow's CPU kernel does."""
    message = node.attr_str("message", "")
    first_n = node.attr_int("first_n", -1)
    summarize = node.attr_int("summarize", 3)
    runs = [0]
    lock = threading.Lock()

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        if first_n >= 0:
            with lock:
                if runs[0] >= first_n:
                    return (inputs[0],)
                runs[0] += 1
        text = message + "".join(f"[{_summarize(t, summarize)}]" for t in inputs[1:])
        print(text, file=sys.stderr, flush=True)
        return (inputs[0],)

    return compute


_PRINT_STREAMS = ("stdout", "stderr", "log(info)", "log(warning)", "log(error)")


@kernel("PrintV2", stateful=True, outputs=0)
def print_v2(node: Node) -> Compute:
    """``tf.print``: writes its string (StringFormat's) and ``end`` to stdout, or stderr for every other
    stream. A ``file://`` stream goes to stderr too: a served graph writes no files on the server."""
    stream = node.attr_str("output_stream", "stderr")
    end = node.attr_str("end", "\n")
    if stream not in _PRINT_STREAMS and not stream.startswith("file://"):
        raise InvalidArgumentError(
            f"Unknown output stream: {stream}, Valid streams are: {' '.join(_PRINT_STREAMS)}", node.name
        )
    out = sys.stdout if stream == "stdout" else sys.stderr

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        if x.ndim != 0:
            raise InvalidArgumentError(f"Input is expected to be scalar, but got {_shape_str(x.shape)}")
        value = x.item()
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        print(text, end=end, file=out, flush=True)
        return ()

    return compute


# --- sequences and raw memory ------------------------------------------------------------------------------


@kernel("LinSpace")
def lin_space(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        for name, t in zip(("start", "stop", "num"), inputs, strict=True):
            if t.ndim != 0:
                raise InvalidArgumentError(f"{name} must be a scalar, not shape {_shape_str(t.shape)}")
        start, stop, num_t = inputs
        num = int(num_t)
        if num <= 0:
            raise InvalidArgumentError(f"Requires num > 0: {num}")
        dtype = start.dtype
        if num == 1:
            return (start.reshape(1).copy(),)
        # start + step * i in the input's precision, the last value exactly stop (TensorFlow's LinSpaceOp)
        with np.errstate(all="ignore"):
            step = (stop - start) / dtype.type(num - 1)
            out = start + step * np.arange(num - 1).astype(dtype)
        return (np.concatenate([out, stop.reshape(1)]).astype(dtype, copy=False),)

    return compute


@kernel("Empty", stateful=True)
def empty(node: Node) -> Compute:
    """A new tensor of ``shape``: zeros (empty strings) whether ``init`` is set or not; TensorFlow leaves
    it uninitialized without ``init``, and its contents then are whatever the memory held."""
    dtype = node.attr_dtype("dtype")
    node.attr_bool("init", False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        shape_t = inputs[0]
        if shape_t.ndim != 1:
            raise InvalidArgumentError(
                f"shape must be a vector of int32, got shape {_shape_str(shape_t.shape)}"
            )
        dims = shape_t.tolist()
        for d in dims:
            if d < 0:
                raise InvalidArgumentError(f"Dimension {d} must be >= 0")
        if dtype.kind == "O":
            return (np.full(dims, b"", dtype=object),)
        return (np.zeros(dims, dtype),)

    return compute


@kernel("Bitcast")
def bitcast(node: Node) -> Compute:
    src_type, dst_type = node.attr_type("T"), node.attr_type("type")
    dst = node.attr_dtype("type")
    src = node.attr_dtype("T")
    if src.kind in "bO" or dst.kind in "bO":
        raise InvalidArgumentError(
            f"Node '{node.name}' (op 'Bitcast'): cannot bitcast from {dtypes.name(src_type)} to "
            f"{dtypes.name(dst_type)}",
            node.name,
        )
    refused = f"Cannot bitcast from {src_type} to {dst_type}"  # TensorFlow prints the DataType numbers

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        a, b = x.dtype.itemsize, dst.itemsize
        if a == b:
            return (x.view(dst),)
        c = np.ascontiguousarray(x)
        if a > b:
            return (c.reshape(*x.shape, 1).view(dst).reshape(*x.shape, a // b),)
        if x.ndim == 0 or x.shape[-1] != b // a:
            raise InvalidArgumentError(refused)
        return (c.view(dst).reshape(x.shape[:-1]),)

    return compute


# --- UnravelIndex ------------------------------------------------------------------------------------------


@kernel("UnravelIndex")
def unravel_index(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        indices, dims = inputs
        if indices.ndim > 1:
            raise InvalidArgumentError(
                f'The indices can only be scalar or vector, got "{_dims(indices.shape)}"'
            )
        if dims.ndim != 1:
            raise InvalidArgumentError(f'The indices can only be 1-D, got "{_dims(dims.shape)}"')
        if indices.size == 0:
            raise InvalidArgumentError(
                f"received empty tensor indices: Tensor<type: {_type_name(indices.dtype)} shape: "
                f"{_dims(indices.shape)} values: >"
            )
        zeros = np.flatnonzero(dims == 0)
        if zeros.size:
            raise InvalidArgumentError(
                f"Input dims cannot contain a dim of zero, but dims contains zero at index {int(zeros[0])}"
            )
        strides = np.ones(dims.size, dims.dtype)
        strides[:-1] = np.cumprod(dims[::-1])[::-1][1:]
        if (indices >= np.prod(dims)).any():
            raise InvalidArgumentError("index is out of bound as with dims")
        flat = indices.reshape(-1, 1)
        # C division and remainder, as TensorFlow's Eigen expression: a negative index is not refused
        quotient = np.abs(flat) // strides * np.sign(flat)
        out = np.fmod(quotient, dims).T.astype(indices.dtype)
        return (out.reshape(dims.size) if indices.ndim == 0 else out,)

    return compute
