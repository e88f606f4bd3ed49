"""Special functions and bit operations: the inverse trigonometric and hyperbolic functions, Lgamma and
Digamma, the x * f(y) ops (Xlogy, Xdivy, Xlog1py), ApproximateEqual, and the bitwise ops (And, Or, Xor,
Invert, PopulationCount, shifts), elementwise as math_ops' kernels are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _shape_str
from poolserve.runtime.kernels.math_ops import Fn, _binary, _float_dtype, _unary
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

# --- inverse trigonometric, hyperbolic and special functions ------------------------------------------------

_FLOAT_UNARY: dict[str, Fn] = {
    "Acos": np.arccos,
    "Asin": np.arcsin,
    "Atan": np.arctan,
    "Sinh": np.sinh,
    "Cosh": np.cosh,
    "Asinh": np.arcsinh,
    "Acosh": np.arccosh,
    "Atanh": np.arctanh,
}


@kernel(*_FLOAT_UNARY)
def float_unary(node: Node) -> Compute:
    _float_dtype(node)
    return _unary(_FLOAT_UNARY[node.op])


def _poly(x: Any, coeffs: Sequence[float]) -> Any:
    """Horner's rule, the highest power's coefficient first."""
    out = np.full_like(x, coeffs[0])
    for c in coeffs[1:]:
        out = out * x + c
    return out


# fdlibm's e_lgamma_r.c (Sun Microsystems, 1993; error < 1 ulp): glibc's lgamma, which TensorFlow calls.
# Rational fits of lgamma around its minimum tc, near 1 and near 2 (on [0.9, 2): y = x - 1 or 2 - x)
_LG_TC, _LG_TF, _LG_TT = 1.46163214496836224576e00, -1.21486290535849611461e-01, -3.63867699703950536541e-18
_LG_A = (  # a0..a11
    7.72156649015328655494e-02, 3.22467033424113591611e-01, 6.73523010531292681824e-02,
    2.05808084325167332806e-02, 7.38555086081402883957e-03, 2.89051383673415629091e-03,
    1.19270763183362067845e-03, 5.10069792153511336608e-04, 2.20862790713908385557e-04,
    1.08011567247583939954e-04, 2.52144565451257326939e-05, 4.48640949618915160150e-05,
)  # fmt: skip
_LG_T = (  # t0..t14
    4.83836122723810047042e-01, -1.47587722994593911752e-01, 6.46249402391333854778e-02,
    -3.27885410759859649565e-02, 1.79706750811820387126e-02, -1.03142241298341437450e-02,
    6.10053870246291332635e-03, -3.68452016781138256760e-03, 2.25964780900612472250e-03,
    -1.40346469989232843813e-03, 8.81081882437654011382e-04, -5.38595305356740546715e-04,
    3.15632070903625950361e-04, -3.12754168375120860518e-04, 3.35529192635519073543e-04,
)  # fmt: skip
_LG_U = (1.33810918536787660377e-02, 2.28963728064692451092e-01, 9.77717527963372745603e-01,
         1.45492250137234768737e00, 6.32827064025093366517e-01, -7.72156649015328655494e-02)  # fmt: skip
_LG_V = (3.21709242282423911810e-03, 1.04222645593369134254e-01, 7.69285150456672783825e-01,
         2.12848976379893395361e00, 2.45597793713041134822e00, 1.0)  # fmt: skip
_LG_S = (3.19475326584100867617e-05, 1.84028451407337715652e-03, 2.66422703033638609560e-02,
         1.46350472652464452805e-01, 3.25778796408930981787e-01, 2.14982415960608852501e-01,
         -7.72156649015328655494e-02)  # fmt: skip
_LG_R = (7.32668430744625636189e-06, 7.77942496381893596434e-04, 1.86459191715652901344e-02,
         1.71933865632803078993e-01, 7.21935547567138069525e-01, 1.39200533467621045958e00, 1.0)  # fmt: skip
_LG_W = (-1.63092934096575273989e-03, 8.36339918996282139126e-04, -5.95187557450339963135e-04,
         7.93650558643019558500e-04, -2.77777777728775536470e-03, 8.33333333333329678849e-02)  # fmt: skip
_LG_W0 = 4.18938533204672725052e-01


def _lgamma_near_min(y: Any, kind: Any) -> Any:
    """lgamma(x) - r on fdlibm's three pieces of (0, 2): kind 0 around 1 or 2, 1 around tc, 2 otherwise."""
    out = np.empty_like(y)
    for k in range(3):
        m = kind == k
        if not m.any():
            continue
        t = y[m]
        if k == 0:
            z = t * t
            p = t * _poly(z, _LG_A[10::-2]) + z * _poly(z, _LG_A[11::-2])
            out[m] = p - 0.5 * t
        elif k == 1:
            z = t * t
            w = z * t
            p1, p2, p3 = (_poly(w, _LG_T[12 + i :: -3]) for i in range(3))
            out[m] = _LG_TF + (z * p1 - (_LG_TT - w * (p2 + t * p3)))
        else:
            out[m] = -0.5 * t + t * _poly(t, _LG_U) / _poly(t, _LG_V)
    return out


def _lgamma_positive(x: Any) -> Any:
    """lgamma of positive float64 ``x`` (and of +inf, NaN)."""
    out = np.empty_like(x)
    small = x < 2.0
    if small.any():
        s = x[small]
        low = s < 0.9000000953674316  # lgamma(x) = lgamma(x + 1) - log(x)
        r = np.where(low, -np.log(s), 0.0)
        kind = np.where(
            low,
            np.where(s >= 0.7315998077392578, 0, np.where(s >= 0.23163998126983643, 1, 2)),
            np.where(s >= 1.7316312789916992, 0, np.where(s >= 1.2316322326660156, 1, 2)),
        )
        shifted = [np.where(low, 1.0 - s, 2.0 - s), s - np.where(low, _LG_TC - 1.0, _LG_TC)]
        y = np.choose(kind, [*shifted, np.where(low, s, s - 1.0)])
        out[small] = r + _lgamma_near_min(y, kind)
        out[small & ((x == 1.0) | (x == 2.0))] = 0.0
    mid = (x >= 2.0) & (x < 8.0)
    if mid.any():
        s = x[mid]
        i = np.floor(s)
        y = s - i
        r = 0.5 * y + y * _poly(y, _LG_S) / _poly(y, _LG_R)
        z = np.ones_like(y)
        for k in range(2, 7):  # lgamma(y + i) = lgamma(y + 2) + log((y + 2) ... (y + i - 1))
            z *= np.where(i > k, y + k, 1.0)
        out[mid] = r + np.log(z)
    big = (x >= 8.0) & (x < 2.8823037615171174e17)
    if big.any():
        s = x[big]
        z = 1.0 / s
        out[big] = (s - 0.5) * (np.log(s) - 1.0) + (_LG_W0 + z * _poly(z * z, _LG_W))
    huge = ~(small | mid | big)  # 2**58 and beyond, +inf, NaN
    out[huge] = x[huge] * (np.log(x[huge]) - 1.0)
    return out


def _lgamma(x: Any) -> Any:
    """log|Gamma(x)| in float64; poles (0 and the negative integers) and -inf give +inf."""
    x = np.asarray(x)
    a = np.abs(x.astype(np.float64).reshape(-1))
    tiny = a < 8.470329472543003e-22  # 2**-70: lgamma(x) = -log|x|
    out = _lgamma_positive(np.where(tiny, 1.0, a))
    out[tiny] = -np.log(a[tiny])
    neg = (x.reshape(-1) < 0) & ~tiny
    if neg.any():
        # reflection: lgamma(x) = log(pi / |x sin(pi x)|) - lgamma(-x), |sin(pi x)| from x's distance to
        # the nearest integer (exact), so that it keeps its precision near the poles
        s = a[neg]
        f = np.fmod(s, 1.0)
        sin_pi = np.sin(np.pi * np.minimum(f, 1.0 - f))
        reflected = np.log(np.pi / (sin_pi * s)) - out[neg]
        out[neg] = np.where((sin_pi == 0) | (s == np.inf), np.inf, reflected)
    return out.reshape(x.shape)


@kernel("Lgamma")
def lgamma(node: Node) -> Compute:
    dtype = _real_float_dtype(node)
    # float32 through float64, rounded once: glibc's lgammaf (TensorFlow's) is within an ulp or two of it
    return _unary(lambda x: _lgamma(x).astype(dtype))


_DG_A32 = (-4.16666666666666666667e-3, 3.96825396825396825397e-3, -8.33333333333333333333e-3,
           8.33333333333333333333e-2)  # fmt: skip
_DG_A64 = (8.33333333333333333333e-2, -2.10927960927960927961e-2, 7.57575757575757575758e-3,
           -4.16666666666666666667e-3, 3.96825396825396825397e-3, -8.33333333333333333333e-3,
           8.33333333333333333333e-2)  # fmt: skip


def _digamma(x: Any) -> Any:
    """Eigen's digamma (Cephes' psi), step for step in x's precision (float32 or float64), as TensorFlow
    computes it: the recurrence psi(x + 1) = psi(x) + 1/x up to 10, then the asymptotic series; reflection
    for x <= 0, NaN at the poles (0, -0 and the negative integers) and at -inf."""
    shape, x = x.shape, x.reshape(-1)
    t = x.dtype.type
    one, half = t(1), t(0.5)
    neg = x <= 0
    q = x[neg]
    p = np.floor(q)
    nz = q - p
    up = nz > half
    nz = np.where(up, q - (p + one), nz)
    cot = np.where(nz == half, t(0), t(np.pi) / np.tan(t(np.pi) * nz))
    s = np.where(neg, one - x, x)
    w = np.zeros_like(s)
    for _ in range(10):
        below = s < t(10)
        if not below.any():
            break
        w = np.where(below, w + one / s, w)
        s = np.where(below, s + one, s)
    coeffs, limit = (_DG_A32, t(1e8)) if x.dtype == np.float32 else (_DG_A64, t(1e17))
    z = one / (s * s)
    y = np.where(s < limit, z * _poly(z, coeffs), t(0))
    y = np.log(s) - half / s - y - w
    y[neg] = np.where(p == q, t(np.nan), y[neg] - cot)
    return y.reshape(shape)


@kernel("Digamma")
def digamma(node: Node) -> Compute:
    dtype = _real_float_dtype(node)
    if dtype == np.float16:
        return _unary(lambda x: _digamma(x.astype(np.float32)).astype(np.float16))
    return _unary(_digamma)


def _real_float_dtype(node: Node) -> np.dtype[Any]:
    dtype = node.attr_dtype("T")
    if dtype.kind != "f":
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): attr 'T' must be a floating-point type, got {dtype}",
            node.name,
        )
    return dtype


# --- x * f(y), zero where x is zero -------------------------------------------------------------------------


def _where_x_zero(f: Fn) -> Fn:
    # x itself where it is zero (its sign kept, as TensorFlow's vectorised loop does), whatever y is
    return lambda x, y: np.where(np.equal(x, 0), x, f(x, y))


_X_OPS: dict[str, Fn] = {
    "Xlogy": _where_x_zero(lambda x, y: x * np.log(y)),
    "Xlog1py": _where_x_zero(lambda x, y: x * np.log1p(y)),
    "Xdivy": _where_x_zero(np.true_divide),
}


@kernel(*_X_OPS)
def x_ops(node: Node) -> Compute:
    _float_dtype(node)
    return _binary(_X_OPS[node.op])


@kernel("ApproximateEqual")
def approximate_equal(node: Node) -> Compute:
    dtype = node.attr_dtype("T")
    if dtype not in (np.float32, np.float64):
        raise InvalidArgumentError(
            f"Node '{node.name}' (op 'ApproximateEqual'): attr 'T' must be float or double, got {dtype}",
            node.name,
        )
    tolerance = np.float32(node.attr_float("tolerance", 1e-5)).astype(dtype)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, y = inputs
        if x.shape != y.shape:
            raise InvalidArgumentError(
                f"x and y must be of the same shape. x shape: {_shape_str(x.shape)}. "
                f"y shape: {_shape_str(y.shape)}"
            )
        return (np.abs(x - y) <= tolerance,)

    return compute


# --- bitwise ------------------------------------------------------------------------------------------------

_BITWISE: dict[str, Fn] = {
    "BitwiseAnd": np.bitwise_and,
    "BitwiseOr": np.bitwise_or,
    "BitwiseXor": np.bitwise_xor,
}


@kernel(*_BITWISE)
def bitwise(node: Node) -> Compute:
    return _binary(_BITWISE[node.op])


@kernel("Invert")
def invert(node: Node) -> Compute:
    return _unary(np.invert)


@kernel("PopulationCount")
def population_count(node: Node) -> Compute:
    unsigned = np.dtype(f"u{node.attr_dtype('T').itemsize}")
    # numpy counts the bits of |x|; TensorFlow those of x's two's complement
    return _unary(lambda x: np.bitwise_count(x.astype(unsigned)))


@kernel("LeftShift", "RightShift")
def shift(node: Node) -> Compute:
    dtype = node.attr_dtype("T")
    bits = 8 * dtype.itemsize
    unsigned = np.dtype(f"u{dtype.itemsize}")
    # TensorFlow clamps the shift to [0, bits - 1]; left shifts are done unsigned (no overflow), right shifts
    # of signed values are arithmetic

    def left(x: Any, y: Any) -> Any:
        return np.left_shift(x.astype(unsigned), np.clip(y, 0, bits - 1).astype(unsigned)).astype(dtype)

    def right(x: Any, y: Any) -> Any:
        return np.right_shift(x, np.clip(y, 0, bits - 1).astype(dtype))

    return _binary(left if node.op == "LeftShift" else right)
