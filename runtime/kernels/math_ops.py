"""Element-wise math, comparisons, casts and reductions.

Factories choose the numpy function from the node's attrs (mostly ``T``) once, so ``compute`` is a call or
two into numpy. Every kernel here is cheap (inline): reductions and scans cost one pass over their input,
like the element-wise ops.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from poolserve.runtime import dtypes
from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
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


# --- binary arithmetic -----------------------------------------------------------------------------------

_SIMPLE_BINARY: dict[str, Fn] = {
    "Add": np.add,
    "AddV2": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Maximum": np.maximum,
    "Minimum": np.minimum,
    "Atan2": np.arctan2,
}


@kernel(*_SIMPLE_BINARY)
def simple_binary(node: Node) -> Compute:
    return _binary(_SIMPLE_BINARY[node.op])


def _check_divisor(y: Any) -> None:
    if not np.all(y):
        raise InvalidArgumentError("Integer division by zero")


def _int_trunc_div(x: Any, y: Any) -> Any:
    _check_divisor(y)
    # x - fmod(x, y) is an exact multiple of y and cannot overflow, so floor division is exact.
    return np.floor_divide(np.subtract(x, np.fmod(x, y)), y)


def _int_floor_div(x: Any, y: Any) -> Any:
    _check_divisor(y)
    return np.floor_divide(x, y)


def _int_floor_mod(x: Any, y: Any) -> Any:
    _check_divisor(y)
    return np.remainder(x, y)


def _int_trunc_mod(x: Any, y: Any) -> Any:
    _check_divisor(y)
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


def _int_pow(x: Any, y: Any) -> Any:
    if np.any(np.less(y, 0)):
        raise InvalidArgumentError("Integers to negative integer powers are not allowed")
    return np.power(x, y)


@kernel("Pow")
def power(node: Node) -> Compute:
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
        if len(inputs) == 1:
            return (first,)
        out = np.asarray(np.add(first, inputs[1]))
        for a in inputs[2:]:
            np.add(out, a, out=out)
        return (out,)

    return compute


# --- unary -----------------------------------------------------------------------------------------------

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


@kernel(*_SIMPLE_UNARY)
def simple_unary(node: Node) -> Compute:
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
    return _unary(_in_float32(_rsqrt) if dtype == np.float16 else _rsqrt)


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


@kernel("Sigmoid")
def sigmoid(node: Node) -> Compute:
    dtype = _float_dtype(node)
    if dtype.kind == "c":
        return _unary(_complex_sigmoid)
    return _unary(_in_float32(_sigmoid) if dtype == np.float16 else _sigmoid)


# --- erf / erfc ------------------------------------------------------------------------------------------
# float64: the rational approximations of fdlibm's s_erf.c (Sun Microsystems, 1993; error < 1 ulp),
# vectorized over four ranges of |x|. float16/float32: one rational in t = x*x that we fitted to erf(x)/x
# on [0, 4] (relative error 2e-9), evaluated in float64 so that the float32 result is off by at most
# ~0.53 ulp; erf(4) already rounds to 1 in float32. Both run on cache-sized blocks: their many temporaries
# would otherwise cost more than the arithmetic.

_ERX = 8.45062911510467529297e-01
# erf(x) = x + x * PP/QQ (x*x) for |x| < 0.84375
_PP = (
    1.28379167095512558561e-01,
    -3.25042107247001499370e-01,
    -2.84817495755985104766e-02,
    -5.77027029648944159157e-03,
    -2.37630166566501626084e-05,
)
_QQ = (
    1.0,
    3.97917223959155352819e-01,
    6.50222499887672944485e-02,
    5.08130628187576562776e-03,
    1.32494738004321644526e-04,
    -3.96022827877536812320e-06,
)
# erf(x) = erx + PA/QA (x - 1) for 0.84375 <= |x| < 1.25
_PA = (
    -2.36211856075265944077e-03,
    4.14856118683748331666e-01,
    -3.72207876035701323847e-01,
    3.18346619901161753674e-01,
    -1.10894694282396677476e-01,
    3.54783043256182359371e-02,
    -2.16637559486879084300e-03,
)
_QA = (
    1.0,
    1.06420880400844228286e-01,
    5.40397917702171048937e-01,
    7.18286544141962662868e-02,
    1.26171219808761642112e-01,
    1.36370839120290507362e-02,
    1.19844998467991074170e-02,
)
# erfc(x) = exp(-x*x - 0.5625 + R/S (1/x^2)) / x for 1.25 <= x < 1/0.35 (RA/SA) and beyond (RB/SB)
_RA = (
    -9.86494403484714822705e-03,
    -6.93858572707181764372e-01,
    -1.05586262253232909814e01,
    -6.23753324503260060396e01,
    -1.62396669462573470355e02,
    -1.84605092906711035994e02,
    -8.12874355063065934246e01,
    -9.81432934416914548592e00,
)
_SA = (
    1.0,
    1.96512716674392571292e01,
    1.37657754143519042600e02,
    4.34565877475229228821e02,
    6.45387271733267880336e02,
    4.29008140027567833386e02,
    1.08635005541779435134e02,
    6.57024977031928170135e00,
    -6.04244152148580987438e-02,
)
_RB = (
    -9.86494292470009928597e-03,
    -7.99283237680523006574e-01,
    -1.77579549177547519889e01,
    -1.60636384855821916062e02,
    -6.37566443368389627722e02,
    -1.02509513161107724954e03,
    -4.83519191608651397019e02,
)
_SB = (
    1.0,
    3.03380607434824582924e01,
    3.25792512996573918826e02,
    1.53672958608443695994e03,
    3.19985821950859553908e03,
    2.55305040643316442583e03,
    4.74528541206955367215e02,
    -2.24409524465858183362e01,
)
# erf(x) ~= x * P/Q (x*x) on [-4, 4], for float16/float32
_P32 = (
    1.1283791693771337,
    0.1852030790944979,
    0.05431689812002277,
    0.003849606420728084,
    0.00037960896020854405,
    4.684783831727351e-06,
    -1.3202255814099413e-08,
)
_Q32 = (
    1.0,
    0.49746536921929246,
    0.11395836221903595,
    0.015462079882749334,
    0.001307568947456438,
    6.311063620419951e-05,
)
_HIGH_WORD = np.uint64(0xFFFFFFFF00000000)
# 8192 float64 values (64 KiB) a block: each of erfc's ~30 passes then stays in the core's cache. Measured on
# BERT-tiny's GELU input ([1, 128, 512] float32), interleaved: Erfc 3.47 ms with 65536-value blocks, 2.19
# with 16384, 2.02 with 8192; Erf 1.78, 1.28, 1.13 ms. Inside the BERT-tiny step: 2.5 -> 2.15 ms a node.
_BLOCK = 1 << 13


def _poly(t: Any, coeffs: Sequence[float]) -> Any:
    acc = np.full_like(t, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc *= t
        acc += c
    return acc


def _ratio(t: Any, p: Sequence[float], q: Sequence[float]) -> Any:
    return _poly(t, p) / _poly(t, q)


def _erfc_tail(a: Any) -> Any:
    """erfc(a) for a >= 1.25 (and NaN); it underflows to 0 before a reaches 28."""
    a = np.minimum(a, 28.0)
    s = 1.0 / (a * a)
    rs = np.where(a < 1 / 0.35, _ratio(s, _RA, _SA), _ratio(s, _RB, _SB))
    # exp(-a*a) as exp(-z*z) * exp((z-a)(z+a)), z = a with its low word cleared, keeps a*a exact
    z = (a.view(np.uint64) & _HIGH_WORD).view(np.float64)
    return np.exp(-z * z - 0.5625) * np.exp((z - a) * (z + a) + rs) / a


def _erf_ranges(a: Any) -> tuple[Any, Any, Any]:
    small = a < 0.84375
    middle = (a < 1.25) & ~small
    return small, middle, ~(small | middle)


def _erf64(x: Any) -> Any:
    a = np.abs(x)
    out = np.empty_like(a)
    small, middle, large = _erf_ranges(a)
    s = a[small]
    out[small] = s + s * _ratio(s * s, _PP, _QQ)
    out[middle] = _ERX + _ratio(a[middle] - 1.0, _PA, _QA)
    out[large] = 1.0 - _erfc_tail(a[large])
    return np.copysign(out, x)


def _erfc64(x: Any) -> Any:
    a = np.abs(x)
    out = np.empty_like(a)
    small, middle, large = _erf_ranges(a)
    s = a[small]
    y = s * _ratio(s * s, _PP, _QQ)
    out[small] = np.where(s < 0.25, 1.0 - (s + y), 0.5 - (y + (s - 0.5)))
    out[middle] = (1.0 - _ERX) - _ratio(a[middle] - 1.0, _PA, _QA)
    out[large] = _erfc_tail(a[large])
    return np.where(x < 0, 2.0 - out, out)


def _erf_rational(x: Any) -> Any:
    xc = np.clip(x, -4.0, 4.0, out=x)
    t = xc * xc
    num = _poly(t, _P32)
    num *= xc
    num /= _poly(t, _Q32)
    return num


# erfc(z) ~= t * exp(-z*z + P(t)), t = 1 / (1 + z/2), z >= 0: a Chebyshev fit (Numerical Recipes' erfcc)
# with fractional error below 1.2e-7 everywhere, enough for float16/float32 results in one pass.
_ERFCC = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)


def _erfc_cheb(x: Any) -> Any:
    """erfc for float16/float32 results, computed in float64 with few numpy calls (GELU calls it a lot)."""
    z = np.abs(x)
    t = 0.5 * z
    t += 1.0
    np.reciprocal(t, out=t)
    acc = np.full_like(t, _ERFCC[-1])
    for c in _ERFCC[-2::-1]:
        acc *= t
        acc += c
    acc -= z * z
    np.exp(acc, out=acc)
    acc *= t
    return np.where(x < 0, 2.0 - acc, acc)


def _blockwise(fn: Fn) -> Fn:
    """Applies ``fn`` (float64 block -> float64 block) in blocks that stay in cache."""

    def apply(x: Any) -> Any:
        flat = np.asarray(x).reshape(-1)
        out = np.empty(flat.shape, flat.dtype)
        for start in range(0, flat.size, _BLOCK):
            block = flat[start : start + _BLOCK].astype(np.float64)
            out[start : start + _BLOCK] = fn(block)
        return out.reshape(np.shape(x))

    return apply


@kernel("Erf")
def erf(node: Node) -> Compute:
    dtype = _float_dtype(node)
    return _unary(_blockwise(_erf64 if dtype == np.float64 else _erf_rational))


@kernel("Erfc")
def erfc(node: Node) -> Compute:
    dtype = _float_dtype(node)
    return _unary(_blockwise(_erfc64 if dtype == np.float64 else _erfc_cheb))


# --- cast ------------------------------------------------------------------------------------------------

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
        # Like C++ on x86: narrow integers go through int32 (uint32 through int64), then wrap.
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


# --- comparisons, logic, select --------------------------------------------------------------------------

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


# --- reductions ------------------------------------------------------------------------------------------


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
        return np.true_divide(_sum(x, axis=axes, dtype=dtype, keepdims=keep), _count(x, axes) or empty)

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


@kernel("ArgMax", "ArgMin")
def arg_reduction(node: Node) -> Compute:
    out_dtype = node.attr_dtype("output_type", 9)  # DT_INT64
    if out_dtype not in (np.int32, np.int64):
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): attr 'output_type' must be int32 or int64, "
            f"got {out_dtype}",
            node.name,
        )
    is_max = node.op == "ArgMax"
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
