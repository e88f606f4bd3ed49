"""Element-wise math, comparisons, casts and reductions.

Factories choose the numpy function from the node's attrs (mostly ``T``) once, so ``compute`` is a call or
two into numpy. Every kernel here is cheap (inline): reductions and scans cost one pass over their input,
like the element-wise ops.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from poolserve.runtime import dtypes
from poolserve.runtime.errors import FailedPreconditionError, InvalidArgumentError, UnimplementedError
from poolserve.runtime.kernels import _half
from poolserve.runtime.kernels._common import _ones_column
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

Fn = Callable[..., Any]


def _shape_str(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _broadcastable(*arrays: Any) -> bool:
    try:
        np.broadcast_shapes(*(np.shape(a) for a in arrays))
    except ValueError:
        return False
    return True


def _incompatible(x: Any, y: Any) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"Incompatible shapes: {_shape_str(np.shape(x))} vs. {_shape_str(np.shape(y))}"
    )


def _binary(fn: Fn) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, y = inputs
        try:
            return (fn(x, y),)
        except ValueError:
            if not _broadcastable(x, y):
                raise _incompatible(x, y) from None
            raise

    return compute


def _unary(fn: Fn) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (fn(inputs[0]),)

    return compute


# --- binary arithmetic --------------------------------------------------------------------------------------

_SIMPLE_BINARY: dict[str, Fn] = {
    "Add": np.add,
    "AddV2": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Maximum": np.maximum,
    "Minimum": np.minimum,
    "Atan2": np.arctan2,
}


def _complex_mul(x: Any, y: Any) -> Any:
    # TF multiplies complex numbers by the textbook formula; numpy fuses a*c - b*d into an FMA, which
    # differs once the products overflow (TF: inf - inf = NaN, numpy: -inf)
    x, y = np.asarray(x), np.asarray(y)
    a, b, c, d = x.real, x.imag, y.real, y.imag
    out = np.empty(np.broadcast_shapes(x.shape, y.shape), np.result_type(x, y))
    out.real = a * c - b * d
    out.imag = a * d + b * c
    return out


@kernel(*_SIMPLE_BINARY)
def simple_binary(node: Node) -> Compute:
    if node.op == "Mul" and node.attr_dtype("T").kind == "c":
        return _binary(_complex_mul)
    return _binary(_SIMPLE_BINARY[node.op])


def _check_divisor(x: Any, y: Any) -> None:
    # TF checks the divisors it uses: none when the result is empty
    if not np.all(y) and math.prod(np.broadcast_shapes(np.shape(x), np.shape(y))):
        raise InvalidArgumentError("Integer division by zero")


def _int_trunc_div(x: Any, y: Any) -> Any:
    _check_divisor(x, y)
    # x - fmod(x, y) is an exact multiple of y and cannot overflow, so floor division is exact.
    return np.floor_divide(np.subtract(x, np.fmod(x, y)), y)


def _int_floor_div(x: Any, y: Any) -> Any:
    _check_divisor(x, y)
    return np.floor_divide(x, y)


def _int_floor_mod(x: Any, y: Any) -> Any:
    _check_divisor(x, y)
    return np.remainder(x, y)


def _int_trunc_mod(x: Any, y: Any) -> Any:
    _check_divisor(x, y)
    return np.fmod(x, y)


def _float_trunc_div(x: Any, y: Any) -> Any:
    return np.trunc(np.true_divide(x, y))


def _float_floor_div(x: Any, y: Any) -> Any:
    # TF floors the quotient; numpy's floor_divide differs (1.0 // 0.1 is 9 there, 10 in TF).
    return np.floor(np.true_divide(x, y))


def _float_floor_mod(x: Any, y: Any) -> Any:
    # numpy's remainder is TF's except for zeros, which TF signs like x (fmod) and numpy like y.
    r = np.remainder(x, y)
    return np.where(r == 0, np.copysign(r, x), r)


def _div_no_nan(x: Any, y: Any) -> Any:
    return np.where(y == 0, 0, np.true_divide(x, y))


_SIGNED_DIVISION: dict[str, Fn] = {
    "Div": _int_trunc_div,
    "RealDiv": _int_trunc_div,
    "TruncateDiv": _int_trunc_div,
    "FloorDiv": _int_floor_div,
    "FloorMod": _int_floor_mod,
    "TruncateMod": _int_trunc_mod,
}
_UNSIGNED_DIVISION: dict[str, Fn] = {
    **_SIGNED_DIVISION,
    "Div": _int_floor_div,
    "RealDiv": _int_floor_div,
    "TruncateDiv": _int_floor_div,
}
_FLOAT_DIVISION: dict[str, Fn] = {
    "Div": np.true_divide,
    "RealDiv": np.true_divide,
    "TruncateDiv": _float_trunc_div,
    "FloorDiv": _float_floor_div,
    "FloorMod": _float_floor_mod,
    "TruncateMod": np.fmod,
    "DivNoNan": _div_no_nan,
}


@kernel(*_FLOAT_DIVISION)
def division(node: Node) -> Compute:
    kind = node.attr_dtype("T").kind
    table = _SIGNED_DIVISION if kind == "i" else _UNSIGNED_DIVISION if kind == "u" else _FLOAT_DIVISION
    fn = table.get(node.op)
    if fn is None:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): attr 'T' must be a floating-point or complex type",
            node.name,
        )
    return _binary(fn)


@kernel("MulNoNan")
def mul_no_nan(node: Node) -> Compute:
    """x * y, but 0 where y is 0 whatever x is (inf or NaN included): tf.math.multiply_no_nan."""
    kind = node.attr_dtype("T").kind
    if kind not in "fc":
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): attr 'T' must be a floating-point or complex type",
            node.name,
        )
    mul = _complex_mul if kind == "c" else np.multiply
    return _binary(lambda x, y: np.where(np.equal(y, 0), 0, mul(x, y)))


@kernel("NextAfter")
def next_after(node: Node) -> Compute:
    """``tf.math.nextafter``: the next representable float32 or float64 after x1 toward x2."""
    if node.attr_dtype("T") not in (np.float32, np.float64):
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): attr 'T' must be float32 or float64", node.name
        )
    return _binary(np.nextafter)


def _int_pow(x: Any, y: Any) -> Any:
    if np.any(np.less(y, 0)):
        raise InvalidArgumentError("Integers to negative integer powers are not allowed")
    return np.power(x, y)


# the optimizer's mark on a Pow by a constant 3, which Grappler rewrites to x * Square(x) (two roundings)
CUBE_ATTR = "_pow_as_cube"


@kernel("Pow")
def power(node: Node) -> Compute:
    if node.attr_bool(CUBE_ATTR, False):
        return _binary(lambda x, y: np.multiply(x, np.multiply(x, x)))
    return _binary(_int_pow if node.attr_dtype("T").kind == "i" else np.power)


def _squared_difference(x: Any, y: Any) -> Any:
    d = np.subtract(x, y)
    return np.multiply(d, d)


def _complex_squared_difference(x: Any, y: Any) -> Any:
    d = np.subtract(x, y)
    return np.multiply(d, np.conj(d))


@kernel("SquaredDifference")
def squared_difference(node: Node) -> Compute:
    complex_ = node.attr_dtype("T").kind == "c"
    return _binary(_complex_squared_difference if complex_ else _squared_difference)


@kernel("AddN")
def add_n(node: Node) -> Compute:
    name = node.name

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        first = inputs[0]
        shape = np.shape(first)
        for i, a in enumerate(inputs[1:], 1):
            if np.shape(a) != shape:
                raise InvalidArgumentError(
                    f"Inputs to operation {name} of type AddN must have the same size and shape.  "
                    f"Input 0: {_shape_str(shape)} != input {i}: {_shape_str(np.shape(a))}"
                )
        n = len(inputs)
        if n == 1:
            return (first,)
        # TF's order, which rounding shows: the first n % 8 inputs (8 or 9 for 0 or 1) one after another,
        # then each further 8 summed apart and added to the total
        head = min(n, n % 8 + 8 if n % 8 < 2 else n % 8)
        out = np.asarray(np.add(first, inputs[1]))
        for a in inputs[2:head]:
            np.add(out, a, out=out)
        for start in range(head, n, 8):
            group = np.asarray(np.add(inputs[start], inputs[start + 1]))
            for a in inputs[start + 2 : start + 8]:
                np.add(group, a, out=group)
            np.add(out, group, out=out)
        return (out,)

    return compute


# --- unary --------------------------------------------------------------------------------------------------

_SIMPLE_UNARY: dict[str, Fn] = {
    "Neg": np.negative,
    "Abs": np.absolute,
    "Exp": np.exp,
    "Expm1": np.expm1,
    "Log": np.log,
    "Log1p": np.log1p,
    "Sqrt": np.sqrt,
    "Square": np.square,
    "Reciprocal": np.reciprocal,
    "Inv": np.reciprocal,
    "Tanh": np.tanh,
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Rint": np.rint,
    "Sign": np.sign,
    "Sin": np.sin,
    "Cos": np.cos,
    "Tan": np.tan,
    "IsNan": np.isnan,
    "IsInf": np.isinf,
    "IsFinite": np.isfinite,
}


def _complex_square(x: Any) -> Any:
    return _complex_mul(x, x)


@kernel(*_SIMPLE_UNARY)
def simple_unary(node: Node) -> Compute:
    if node.op == "Square" and node.attr_dtype("T").kind == "c":
        return _unary(_complex_square)
    return _unary(_SIMPLE_UNARY[node.op])


def _identity(x: Any) -> Any:
    return x


@kernel("Round")
def round_(node: Node) -> Compute:
    # Half to even, like np.rint. TF 2.21 returns zeros for integer inputs (a bug): they are kept as is here.
    return _unary(np.rint if node.attr_dtype("T").kind in "fc" else _identity)


def _float_dtype(node: Node) -> np.dtype[Any]:
    dtype = node.attr_dtype("T")
    if dtype.kind not in "fc":
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): attr 'T' must be a floating-point or complex type, "
            f"got {dtype}",
            node.name,
        )
    return dtype


def _in_float32(fn: Fn) -> Fn:
    """float16 through float32, rounded once at the end."""

    def wrapped(x: Any) -> Any:
        return fn(np.asarray(x, np.float32)).astype(np.float16)

    return wrapped


def _rsqrt(x: Any) -> Any:
    r = np.sqrt(x, out=np.empty(np.shape(x), x.dtype))
    return np.reciprocal(r, out=r)


@kernel("Rsqrt")
def rsqrt(node: Node) -> Compute:
    dtype = _float_dtype(node)
    return _unary(_half.rsqrt if dtype == np.float16 else _rsqrt)


def _sigmoid(x: Any) -> Any:
    # exp(-|x|) never overflows. r = 1 / (1 + e) is sigmoid(|x|) and e * r is sigmoid(-|x|); the sign bit
    # of x picks one, with integer ops: np.where with a data-dependent mask is several times slower.
    x = np.asarray(x)
    e = np.abs(x, out=np.empty(x.shape, x.dtype))
    np.negative(e, out=e)
    np.exp(e, out=e)
    r = np.add(e, 1, out=np.empty_like(e))
    np.reciprocal(r, out=r)
    e *= r
    bits = np.dtype(f"i{x.dtype.itemsize}")
    r_bits, e_bits = r.view(bits), e.view(bits)
    e_bits ^= r_bits
    e_bits &= x.view(bits) >> (8 * x.dtype.itemsize - 1)  # all ones where x is negative
    r_bits ^= e_bits
    return r


def _complex_sigmoid(x: Any) -> Any:
    return np.reciprocal(np.add(np.exp(np.negative(x)), 1))


def _half_sigmoid(x: Any) -> Any:
    """Eigen's logistic for half, each step rounded to half: e = exp(x), e / (1 + e), 1 where e is inf.
    Rounding once from float32 differs from TensorFlow in the last bit for 1 value in 4."""
    with np.errstate(over="ignore"):
        e = np.exp(np.asarray(x, np.float32)).astype(np.float16)
    ef = e.astype(np.float32)
    with np.errstate(invalid="ignore"):
        r = (ef / (ef + np.float32(1)).astype(np.float16).astype(np.float32)).astype(np.float16)
    return np.where(np.isposinf(e), np.float16(1), r)


@kernel("Sigmoid")
def sigmoid(node: Node) -> Compute:
    dtype = _float_dtype(node)
    if dtype.kind == "c":
        return _unary(_complex_sigmoid)
    return _unary(_half_sigmoid if dtype == np.float16 else _sigmoid)


# --- cast ---------------------------------------------------------------------------------------------------

_MANTISSA_BITS = {2: 10, 4: 23, 8: 52}  # by float itemsize


def _truncator(src: np.dtype[Any], dst: np.dtype[Any]) -> Fn | None:
    """Clears the mantissa bits the destination cannot hold: the cast then truncates instead of rounding."""
    src_item = src.itemsize // 2 if src.kind == "c" else src.itemsize
    dst_item = dst.itemsize // 2 if dst.kind == "c" else dst.itemsize
    drop = _MANTISSA_BITS[src_item] - _MANTISSA_BITS[dst_item]
    if drop <= 0:
        return None
    bits = np.dtype(f"u{src_item}")
    mask = bits.type(~((1 << drop) - 1) & ((1 << (8 * src_item)) - 1))

    def truncate(x: Any) -> Any:
        a = np.ascontiguousarray(x)
        return (a.view(bits) & mask).view(src).reshape(np.shape(x))

    return truncate


def _cast_fn(src: np.dtype[Any], dst: np.dtype[Any], truncate: bool) -> Fn:
    steps: list[Fn] = []
    kind = src.kind
    if kind == "c" and dst.kind != "c":
        steps.append(np.real)  # TF keeps the real part, even for bool
        kind = "f"
    if truncate and src.kind in "fc" and dst.kind in "fc":
        t = _truncator(src, dst)
        if t is not None:
            steps.insert(0, t)
    if dst.kind == "b":
        steps.append(lambda x: np.not_equal(x, 0))
    elif kind == "f" and dst.kind in "iu" and (dst.itemsize < 4 or dst == np.uint32):
        # Like C++ on x86: narrow integers go through int32 (uint32 through int64), then wrap. A value out
        # of range (NaN, infinities) is undefined in C++: TensorFlow's x86 build saturates the values its
        # SIMD packets convert and wraps the rest, by their place in the tensor; not followed here
        via = np.dtype(np.int64 if dst == np.uint32 else np.int32)
        steps.append(lambda x: np.asarray(x).astype(via).astype(dst))
    else:
        steps.append(lambda x: np.asarray(x).astype(dst))
    if len(steps) == 1:
        return steps[0]

    def chain(x: Any) -> Any:
        for step in steps:
            x = step(x)
        return x

    return chain


@kernel("Cast")
def cast(node: Node) -> Compute:
    src_code, dst_code = node.attr_type("SrcT"), node.attr_type("DstT")
    src, dst = dtypes.as_numpy_dtype(src_code), dtypes.as_numpy_dtype(dst_code)
    truncate = node.attr_bool("Truncate", False)
    if src.kind == "O" or dst.kind == "O":
        message = f"Cast {dtypes.name(src_code)} to {dtypes.name(dst_code)} is not supported"

        def unsupported(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            raise UnimplementedError(message)

        return unsupported
    if src == dst:
        return _unary(_identity)
    return _unary(_cast_fn(src, dst, truncate))


# --- comparisons, logic, select -----------------------------------------------------------------------------

_COMPARISONS: dict[str, Fn] = {
    "Less": np.less,
    "LessEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterEqual": np.greater_equal,
    "LogicalAnd": np.logical_and,
    "LogicalOr": np.logical_or,
}


@kernel(*_COMPARISONS)
def comparison(node: Node) -> Compute:
    return _binary(_COMPARISONS[node.op])


@kernel("Equal", "NotEqual")
def equality(node: Node) -> Compute:
    fn = np.equal if node.op == "Equal" else np.not_equal
    if node.attr_bool("incompatible_shape_error", True):
        return _binary(fn)
    # Shapes that do not broadcast make the tensors unequal: a scalar answer instead of an error.
    mismatch = np.asarray(node.op == "NotEqual")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, y = inputs
        try:
            return (fn(x, y),)
        except ValueError:
            if not _broadcastable(x, y):
                return (mismatch,)
            raise

    return compute


@kernel("LogicalNot")
def logical_not(node: Node) -> Compute:
    return _unary(np.logical_not)


@kernel("Select")
def select(node: Node) -> Compute:
    name = node.name

    def same_size(x: Any, y: Any) -> None:
        if x.shape != y.shape:
            raise InvalidArgumentError(
                "'then' and 'else' must have the same size.  but received: "
                f"{_shape_str(x.shape)} vs. {_shape_str(y.shape)}"
            )

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        cond, x, y = inputs
        if cond.ndim == 0:
            same_size(x, y)
            return (x if cond else y,)
        if cond.ndim == 1 and x.ndim != 1:
            # one condition per row of x
            if x.ndim == 0:
                raise InvalidArgumentError("'then' must be at least a vector, but saw shape: []")
            if x.shape[0] != cond.shape[0]:
                raise InvalidArgumentError(
                    "Number of batches of 'then' must match size of 'cond', but saw: "
                    f"{x.shape[0]} vs. {cond.shape[0]}"
                )
            same_size(x, y)
            return (np.where(cond.reshape((-1,) + (1,) * (x.ndim - 1)), x, y),)
        for i, a in ((1, x), (2, y)):
            if a.shape != cond.shape:
                raise InvalidArgumentError(
                    f"Inputs to operation {name} of type Select must have the same size and shape.  "
                    f"Input 0: {_shape_str(cond.shape)} != input {i}: {_shape_str(a.shape)}"
                )
        return (np.where(cond, x, y),)

    return compute


@kernel("SelectV2")
def select_v2(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        cond, x, y = inputs
        try:
            return (np.where(cond, x, y),)
        except ValueError:
            if not _broadcastable(cond, x, y):
                raise InvalidArgumentError(
                    f"condition {_shape_str(np.shape(cond))}, then {_shape_str(np.shape(x))}, "
                    f"and else {_shape_str(np.shape(y))} must be broadcastable"
                ) from None
            raise

    return compute


def _no_nan(bound: Any, fill: float) -> Any:
    # TF compares with '<', so a NaN bound never wins: make it one that cannot (fmin/fmax skip NaN).
    return np.fmin(bound, fill) if fill > 0 else np.fmax(bound, fill)


@kernel("ClipByValue")
def clip_by_value(node: Node) -> Compute:
    floating = node.attr_dtype("T").kind == "f"

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        t, lo, hi = inputs
        shape = np.shape(t)
        if (np.ndim(lo) and np.shape(lo) != shape) or (np.ndim(hi) and np.shape(hi) != shape):
            # (sic: TF's message runs the shapes together)
            raise InvalidArgumentError(
                "clip_value_min and clip_value_max must be either of the same shape as input, or a scalar. "
                f"input shape: {_shape_str(shape)}clip_value_min shape: {_shape_str(np.shape(lo))}"
                f"clip_value_max shape: {_shape_str(np.shape(hi))}"
            )
        if floating:
            lo, hi = _no_nan(lo, -np.inf), _no_nan(hi, np.inf)
        # min with hi first, then max with lo: NaN in t stays, and lo wins when lo > hi
        return (np.maximum(np.minimum(t, hi), lo),)

    return compute


# --- reductions ---------------------------------------------------------------------------------------------


def _reduction_axes(axis: Any, rank: int) -> tuple[int, ...]:
    if axis.dtype.kind not in "iu":
        raise InvalidArgumentError(f"reduction indices must be int32 or int64, got {axis.dtype}")
    out: list[int] = []
    for a in np.ravel(axis).tolist():
        if not -rank <= a < rank:
            raise InvalidArgumentError(f"Invalid reduction dimension ({a} for input with {rank} dimension(s)")
        if a < 0:
            a += rank
        if a in out:
            raise InvalidArgumentError(f"Invalid reduction arguments: Axes contains duplicate dimension: {a}")
        out.append(a)
    return tuple(out)


def _count(x: Any, axes: tuple[int, ...]) -> int:
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


Reducer = Callable[[Any, tuple[int, ...], bool], Any]

# Typed loosely: numpy's stubs want a literal for keepdims.
_REDUCE: dict[str, Any] = {
    "Sum": np.add.reduce,
    "Prod": np.multiply.reduce,
    "Max": np.maximum.reduce,
    "Min": np.minimum.reduce,
    "All": np.logical_and.reduce,
    "Any": np.logical_or.reduce,
}
_sum: Any = np.add.reduce

# Rows left to np.add.reduce once ``_float_sum`` halved them: it adds them one after another.
_TREE_LEAF = 8


def _float_sum(x: Any, axes: tuple[int, ...], keep: bool) -> Any:
    """``np.add.reduce(x, axes)`` for float ``x``, also accurate where numpy adds the values one after
    another (an error growing with their count, not its log): across axes before a kept one, as in NHWC's
    Mean over H and W (GlobalAveragePooling2D, every squeeze-excite block). numpy sums pairwise only along
    the innermost axes. Here W values go one after another (one pass, as cheap as numpy's whole reduction),
    then the H partial sums pairwise. Float32 Means on EfficientNetV2M's squeeze-excite inputs (480 px,
    [1, 30, 30, 1056] and [1, 15, 15, 1824], values up to 5e4), max error against float64 relative to the
    largest mean: 2.2e-7 to 5.6e-7 one after another, 0.7e-7 to 3.6e-7 in TensorFlow 2.21, 0.3e-7 to
    1.2e-7 here."""
    rank, shape = x.ndim, x.shape
    kept = [a for a in range(rank) if a not in axes]
    if not kept or max(kept) < min(axes, default=rank):
        return _sum(x, axis=axes, keepdims=keep)  # innermost axes: numpy's pairwise loop
    first, last = min(axes), max(axes)
    if last - first + 1 == len(axes):  # consecutive: [outer, n, inner], a view of a contiguous x
        outer, inner = math.prod(shape[:first]), math.prod(shape[last + 1 :])
        n = math.prod(shape[first : last + 1])
        if x.dtype in _BLAS_FLOATS and n:
            y = _block_sum(x.reshape(outer, n, inner))
        else:
            if first < last:
                x = _sum(x, axis=last)
                n = math.prod(shape[first:last])
            y = _tree_sum(x.reshape(outer, n, inner))
    else:  # the reduced axes moved last (a copy), where numpy's loop is pairwise
        moved = np.moveaxis(x, axes, range(rank - len(axes), rank))
        y = _sum(moved.reshape([shape[a] for a in kept] + [_count(x, axes)]), axis=-1)
    return y.reshape(
        [1 if a in axes else d for a, d in enumerate(shape)] if keep else [shape[a] for a in kept]
    )


# Rows per BLAS product in ``_block_sum``.
_SUM_BLOCK = 128
_BLAS_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _block_sum(y: Any) -> Any:
    """The sum over axis 1 of float32 or float64 [outer, n, inner] ``y`` as BLAS products by a row of ones,
    ``_SUM_BLOCK`` rows at a time, the blocks' sums then added pairwise (``_tree_sum``). numpy's own
    reduction across a middle axis loops over ``inner`` values at a time, slowly when they are few; the
    products run over whole rows. One BLAS thread, best of 5, us (``_float_sum``'s path before: W one after
    another, then H pairwise), error against float64 relative to the largest sum, values 3e4 +- 1e4:

        [n, h, w, c]        before          blocks         [n, h, w, c]         before         blocks
        [32, 14, 14, 32]    259 (1.4e-7)    35 (1.4e-7)    [8, 32, 32, 16]      257 (1.2e-7)   24 (1.3e-7)
        [1, 56, 56, 64]     127 (1.4e-7)    34 (0.96e-7)   [1, 112, 112, 32]    437 (1.8e-7)   78 (1.4e-7)
        [1, 30, 30, 1056]   291 (1.5e-7)    177 (1.6e-7)   [1, 15, 15, 1824]    105 (1.4e-7)   45 (1.8e-7)
        [8, 16, 16, 128]    114 (1.2e-7)    27 (1.4e-7)    [1, 3, 3, 576]       11 (0.94e-7)   3.5 (1.2e-7)

    Within a block BLAS adds in its vector lanes, a few values one after another in each, so blocks of 128
    lose no accuracy; blocks of 256 did (2.5e-7 to 2.7e-7 on three of the shapes above)."""
    outer, n, inner = y.shape
    block = _SUM_BLOCK
    if n <= block:
        return np.matmul(_ones_column(n, y.dtype).T, y)[:, 0]
    k = n // block
    heads = np.matmul(_ones_column(block, y.dtype).T, y[:, : k * block].reshape(outer, k, block, inner))
    total = _tree_sum(heads[:, :, 0])
    if n > k * block:
        total += np.matmul(_ones_column(n - k * block, y.dtype).T, y[:, k * block :])[:, 0]
    return total


def _tree_sum(y: Any) -> Any:
    """The sum over axis 1 of [outer, n, inner] ``y``: halves added together until ``_TREE_LEAF`` rows are
    left, each pass one vectorised add over whole rows."""
    n = y.shape[1]
    if n <= _TREE_LEAF:
        return _sum(y, axis=1)
    k = n // 2
    z = np.add(y[:, :k], y[:, k : 2 * k])
    if n % 2:
        z[:, k - 1] += y[:, n - 1]
    while k > _TREE_LEAF:
        h = k // 2
        np.add(z[:, :h], z[:, h : 2 * h], out=z[:, :h])
        if k % 2:
            z[:, h - 1] += z[:, k - 1]
        k = h
    return _sum(z[:, :k], axis=1)


def _half_sum(x: Any, axes: tuple[int, ...], keep: bool) -> Any:
    """float16 Sum over the innermost axes as TensorFlow's Eigen reducer adds them, each step in half
    (``_half.row_sums``); over other axes, ``_float_sum``."""
    rank, shape = x.ndim, x.shape
    if not axes or not x.size or sorted(axes) != list(range(rank - len(axes), rank)):
        return _float_sum(x, axes, keep)
    kept = shape[: rank - len(axes)]
    sums = _half.row_sums(np.ascontiguousarray(x).reshape(math.prod(kept), -1))
    return sums.reshape([1 if a in axes else d for a, d in enumerate(shape)] if keep else kept)


def _mean(dtype: np.dtype[Any]) -> Reducer:
    if dtype.kind in "iu":
        # TF sums integers in 64 bits, then divides truncating toward zero; an empty mean is 0.
        wide = np.dtype(np.int64 if dtype.kind == "i" else np.uint64)

        def int_mean(x: Any, axes: tuple[int, ...], keep: bool) -> Any:
            s = _sum(x, axis=axes, dtype=wide, keepdims=keep)
            n = wide.type(_count(x, axes) or 1)
            return np.floor_divide(s - np.fmod(s, n), n).astype(dtype)

        return int_mean
    empty = 1 if dtype.kind == "c" else 0  # TF: an empty complex mean is 0, a float one NaN

    def mean(x: Any, axes: tuple[int, ...], keep: bool) -> Any:
        rank = x.ndim
        if dtype == np.float16 and axes and x.size and sorted(axes) == list(range(rank - len(axes), rank)):
            kept = x.shape[: rank - len(axes)]
            means = _half.mean_rows(np.ascontiguousarray(x).reshape(math.prod(kept), -1))
            return means.reshape([1 if a in axes else d for a, d in enumerate(x.shape)] if keep else kept)
        total = (
            _float_sum(x, axes, keep) if dtype.kind == "f" else _sum(x, axis=axes, dtype=dtype, keepdims=keep)
        )
        return np.true_divide(total, _count(x, axes) or empty)

    return mean


def _euclidean_norm(dtype: np.dtype[Any]) -> Reducer:
    if dtype.kind == "c":
        return lambda x, axes, keep: np.sqrt(_sum(x * np.conj(x), axis=axes, keepdims=keep))
    if dtype.kind in "iu":
        # TF takes the integer square root of the integer sum of squares
        return lambda x, axes, keep: np.sqrt(
            np.asarray(_sum(np.multiply(x, x), axis=axes, dtype=dtype, keepdims=keep), np.float64)
        ).astype(dtype)
    return lambda x, axes, keep: np.sqrt(_sum(np.multiply(x, x), axis=axes, keepdims=keep))


def _reducer(op: str, dtype: np.dtype[Any]) -> Reducer:
    if op == "Mean":
        return _mean(dtype)
    if op == "EuclideanNorm":
        return _euclidean_norm(dtype)
    if op == "Sum" and dtype == np.float16:
        return _half_sum
    if op == "Sum" and dtype.kind == "f":
        return _float_sum
    extra: dict[str, Any] = {}
    if op in ("Sum", "Prod"):
        extra["dtype"] = dtype  # numpy would widen small integers
    elif op in ("Max", "Min"):
        # An empty reduction gives the identity: -inf/+inf for floats, the extreme value for integers.
        info = np.iinfo(dtype) if dtype.kind in "iu" else None
        if op == "Max":
            extra["initial"] = -np.inf if info is None else info.min
        else:
            extra["initial"] = np.inf if info is None else info.max
    reduce = functools.partial(_REDUCE[op], **extra)
    return lambda x, axes, keep: reduce(x, axis=axes, keepdims=keep)


@kernel("Sum", "Mean", "Prod", "Max", "Min", "EuclideanNorm", "All", "Any")
def reduction(node: Node) -> Compute:
    keep = node.attr_bool("keep_dims", False)
    dtype = np.dtype(np.bool_) if node.op in ("All", "Any") else node.attr_dtype("T")
    fn = _reducer(node.op, dtype)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, axis = inputs
        return (fn(x, _reduction_axes(axis, x.ndim), keep),)

    return compute


_ARG_MAX_TYPES = (np.int16, np.uint16, np.int32, np.int64)
_ARG_MIN_TYPES = (np.int32, np.int64)  # (sic: TF 2.21's ArgMin has no 16-bit outputs)


@kernel("ArgMax", "ArgMin")
def arg_reduction(node: Node) -> Compute:
    out_dtype = node.attr_dtype("output_type", 9)  # DT_INT64
    is_max = node.op == "ArgMax"
    allowed = _ARG_MAX_TYPES if is_max else _ARG_MIN_TYPES
    if out_dtype not in allowed:
        names = [str(np.dtype(t)) for t in allowed]
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): attr 'output_type' must be "
            f"{', '.join(names[:-1])} or {names[-1]}, got {out_dtype}",
            node.name,
        )
    arg = np.argmax if is_max else np.argmin
    # TF skips NaN (no comparison with it is true): it loses to every number, as -inf (+inf) does.
    nan_check = node.attr_dtype("T").kind == "f"
    nan_fill = -np.inf if is_max else np.inf

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, dim = inputs
        if np.ndim(dim) != 0:
            raise InvalidArgumentError(
                f"dim must be a scalar, but received tensor of shape: {_shape_str(np.shape(dim))}"
            )
        rank, given = x.ndim, int(dim)
        if not -rank <= given < rank:
            raise InvalidArgumentError(f"Expected dimension in the range [{-rank}, {rank}), but got {given}")
        axis = given + rank if given < 0 else given
        if x.shape[axis] == 0:
            raise InvalidArgumentError(f"Reduction axis {given} is empty in shape {_shape_str(x.shape)}")
        idx = arg(x, axis=axis)
        # numpy picks the first NaN; only then is the slower NaN-free search needed
        if nan_check and np.isnan(np.take_along_axis(x, np.expand_dims(idx, axis), axis)).any():
            idx = arg(np.where(np.isnan(x), nan_fill, x), axis=axis)
        return (idx.astype(out_dtype),)

    return compute


@kernel("Cumsum", "Cumprod")
def scan(node: Node) -> Compute:
    exclusive = node.attr_bool("exclusive", False)
    reverse = node.attr_bool("reverse", False)
    ufunc, identity = (np.add, 0) if node.op == "Cumsum" else (np.multiply, 1)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, axis_t = inputs
        if np.ndim(axis_t) != 0:
            raise InvalidArgumentError(f"ScanOp: axis must be a scalar, not {_shape_str(np.shape(axis_t))}")
        rank, axis = x.ndim, int(axis_t)
        if not -rank <= axis < rank:
            raise InvalidArgumentError(
                f"ScanOp: Expected scan axis in the range [{-rank}, {rank}), but got {axis}"
            )
        if axis < 0:
            axis += rank
        if reverse:
            x = np.flip(x, axis)
        out = ufunc.accumulate(x, axis=axis, dtype=x.dtype)
        if exclusive:
            lead = (slice(None),) * axis
            shifted = np.empty_like(out)
            shifted[(*lead, slice(0, 1))] = identity
            shifted[(*lead, slice(1, None))] = out[(*lead, slice(None, -1))]
            out = shifted
        return (np.flip(out, axis) if reverse else out,)

    return compute


@kernel("CumulativeLogsumexp")
def cumulative_logsumexp(node: Node) -> Compute:
    """``log(cumsum(exp(x)))`` without overflow (``tf.math.cumulative_logsumexp``); the exclusive form
    starts from log(0) = -inf. Half precision is computed in float32 and rounded once."""
    exclusive = node.attr_bool("exclusive", False)
    reverse = node.attr_bool("reverse", False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, axis_t = inputs
        if np.ndim(axis_t) != 0:
            raise InvalidArgumentError(f"ScanOp: axis must be a scalar, not {_shape_str(np.shape(axis_t))}")
        rank, axis = x.ndim, int(axis_t)
        if axis < 0:
            axis += rank
        if not 0 <= axis < rank:  # TensorFlow names the axis after adding the rank to a negative one
            raise InvalidArgumentError(
                f"ScanOp: Expected scan axis in the range [{-rank}, {rank}), but got {axis}"
            )
        xs = x.astype(np.float32) if x.dtype == np.float16 else x
        if reverse:
            xs = np.flip(xs, axis)
        with np.errstate(invalid="ignore"):
            out = np.logaddexp.accumulate(xs, axis=axis)
        if exclusive:
            lead = (slice(None),) * axis
            shifted = np.empty_like(out)
            shifted[(*lead, slice(0, 1))] = -np.inf
            shifted[(*lead, slice(1, None))] = out[(*lead, slice(None, -1))]
            out = shifted
        if reverse:
            out = np.flip(out, axis)
        return (out.astype(x.dtype, copy=False),)

    return compute


@kernel("Cross")
def cross(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        a, b = inputs
        if a.shape != b.shape:
            raise InvalidArgumentError(
                f"Both inputs must be of same shape: {_shape_str(a.shape)} vs. {_shape_str(b.shape)}"
            )
        if a.ndim < 1:
            raise InvalidArgumentError(f"Input must be at least 1D{_shape_str(a.shape)}")
        if a.shape[-1] != 3:
            raise FailedPreconditionError("Cross-products are only defined for 3-element vectors.")
        with np.errstate(all="ignore"):  # integers wrap, as in TensorFlow
            return (np.cross(a, b).astype(a.dtype, copy=False),)

    return compute
