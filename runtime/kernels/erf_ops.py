"""Erf and Erfc.

float64: the rational approximations of fdlibm's s_erf.c (Sun Microsystems, 1993; error < 1 ulp), vectorized
over four ranges of |x|. float32 (and float16, through float32): what TensorFlow's CPU kernels compute, in
float32 throughout: erf is Eigen's odd rational ``x P(x^2) / Q(x^2)`` (its ``generic_fast_erf_float``,
a few ulp, exactly +-1 past erfinv(1 - 2^-23)), erfc is ``1 - erf`` below 1 and ``t exp(-x^2 + R(t))``,
``t = 1 / (1 + x/2)`` (a Chebyshev fit, fractional error 1.2e-7) from 1 on, with ``x^2`` split so that it
is exact; small tensors take that fit alone in float64, in fewer numpy calls. All run on cache-sized
blocks: their many temporaries would otherwise cost more than the arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from poolserve.runtime.kernels.math_ops import Fn, _float_dtype, _unary
from poolserve.runtime.kernels.registry import Compute, kernel
from poolserve.runtime.node import Node

# --- float64 ---------------------------------------------------------------------------------------------

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
_HIGH_WORD = np.uint64(0xFFFFFFFF00000000)


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
    # TF 2.21's float64 Erf is NaN from |x| = 1.3407807830046643e154 on (x*x within 2^-25 of overflowing),
    # infinities included (its Erfc and float32 Erf are not): an Eigen bug, kept out of here (+-1)
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


# --- float32 ---------------------------------------------------------------------------------------------

# Eigen's float erf: x P(x^2) / Q(x^2), exact +-1 from erfinv(1 - 2^-23) on
_ERF32_CLAMP = 3.832506856900711
_ERF32_P = (
    1.128379143519084,
    0.18520832239976145,
    0.050955695062380861,
    0.0034082910107109506,
    0.00022905065861350646,
)
_ERF32_Q = (
    1.0,
    0.49746925110067538,
    0.11098505178285362,
    0.014070470171167667,
    0.0010179625278914885,
    0.000023547966471313185,
    -1.1791602954361697e-7,
)
# erfc(z) ~= t exp(-z*z + R(t)), t = 1 / (1 + z/2), z >= 0 (Numerical Recipes' erfcc)
_ERFC32_R = (
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
# erfc(10.5) = 1e-49 rounds to 0 in float32; clamping keeps exp() and z*z finite for huge and infinite z
_ERFC32_ZERO_FROM = 10.5
_LOW_12_BITS = np.uint32(0xFFFFF000)


def _erf32(x: Any) -> Any:
    xc = np.clip(x, -_ERF32_CLAMP, _ERF32_CLAMP)  # NaN stays NaN; no overflow in x*x
    x2 = xc * xc
    y = _poly(x2, _ERF32_P)
    y *= xc
    y /= _poly(x2, _ERF32_Q)
    # the rational reaches 1.0000001 at the clamp, where Eigen switches to sign(x): one clip does both
    return np.clip(y, -1, 1, out=y)


def _erfc32_tail(z: Any) -> Any:
    """erfc(z) for z >= 1 (float32)."""
    z = np.minimum(z, _ERFC32_ZERO_FROM)
    t = z * np.float32(0.5)
    t += 1
    np.reciprocal(t, out=t)
    r = _poly(t, _ERFC32_R)
    # -z*z = -h*h + (h - z)(h + z) with h = z to 12 significant bits: h*h is exact in float32, and the
    # rounding error of z*z (up to 7e-6 of the result at z = 10) stays out of exp()
    h = (z.view(np.uint32) & _LOW_12_BITS).view(np.float32)
    r += (h - z) * (h + z)
    np.exp(r, out=r)
    r *= t
    r *= np.exp(-(h * h))
    return r


# erfc(z) ~= t exp(-z*z + R(t)) in float64 for every z: fewer numpy calls (about 20 against 60), each
# costlier per value. Below this many values the calls dominate: measured (best of 200, loaded machine)
# 49 against 126 us for 256 values, 128 against 179 for 4096, but 675 against 301 for 16384.
_ERFC_ONE_PASS_BELOW = 8192


def _erfc_one_pass(x: Any) -> Any:
    x = x.astype(np.float64)
    z = np.abs(x)
    t = z * 0.5
    t += 1.0
    np.reciprocal(t, out=t)
    r = _poly(t, _ERFC32_R)
    r -= z * z
    np.exp(r, out=r)
    r *= t
    return np.where(x < 0, 2.0 - r, r)


def _erfc32(x: Any) -> Any:
    if x.size < _ERFC_ONE_PASS_BELOW:
        return _erfc_one_pass(x)
    out = _erf32(x)
    np.subtract(1, out, out=out)  # accurate below 1, where erfc > 0.157
    tail = np.flatnonzero(x >= 1)
    if tail.size:
        out[tail] = _erfc32_tail(x[tail])
    return out


# Values a block: each of the ~30 passes then stays in the core's cache, and numpy's per-call cost (1-2 us)
# is paid once per block. Measured on BERT-tiny's GELU input ([1, 128, 512]), interleaved: float64 Erfc 3.47
# ms with 65536-value blocks, 2.19 with 16384, 2.02 with 8192; float32 Erfc (best of 40, loaded machine)
# 3.1 ms with 4096-value blocks, 1.25 with 16384, 0.96 with 32768, 1.49 with 65536.
_BLOCK = {np.float64: 1 << 13, np.float32: 1 << 15}


def _blockwise(fn: Fn, dtype: type[np.floating[Any]]) -> Fn:
    """Applies ``fn`` to ``dtype`` blocks of the input that stay in cache."""
    block = _BLOCK[dtype]

    def apply(x: Any) -> Any:
        flat = np.asarray(x).reshape(-1)
        out = np.empty(flat.shape, flat.dtype)
        for start in range(0, flat.size, block):
            out[start : start + block] = fn(flat[start : start + block].astype(dtype))
        return out.reshape(np.shape(x))

    return apply


def erf_fn(dtype: np.dtype[Any]) -> Fn:
    """Erf for an array of ``dtype`` (float16, float32 or float64)."""
    return _blockwise(_erf64, np.float64) if dtype == np.float64 else _blockwise(_erf32, np.float32)


def erfc_fn(dtype: np.dtype[Any]) -> Fn:
    """Erfc for an array of ``dtype`` (float16, float32 or float64); GELU's fused kernel uses it too."""
    return _blockwise(_erfc64, np.float64) if dtype == np.float64 else _blockwise(_erfc32, np.float32)


@kernel("Erf")
def erf(node: Node) -> Compute:
    return _unary(erf_fn(_float_dtype(node)))


@kernel("Erfc")
def erfc(node: Node) -> Compute:
    return _unary(erfc_fn(_float_dtype(node)))


# --- the inverses: Erfinv and Ndtri (Keras' ops.erfinv, quantile transforms) ------------------------------

# Giles' single-precision approximation of erfinv ("Approximating the erfinv function", 2010): the start
# of the Newton steps below, within ~4e-7 of the answer
_GILES_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                  -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)  # fmt: skip
_GILES_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
               -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)  # fmt: skip
_TWO_OVER_SQRT_PI = 1.1283791670955126


def _erfinv64(y: Any) -> Any:
    """erfinv in float64: Giles' approximation, then Newton steps on erf (exact to a few ulp); +-inf at
    +-1, NaN outside [-1, 1]."""
    y = np.asarray(y, np.float64)
    with np.errstate(all="ignore"):
        w = -np.log((1.0 - y) * (1.0 + y))
        central = w < 5.0
        p = np.where(
            central,
            _poly(np.where(central, w - 2.5, 0.0), _GILES_CENTRAL[::-1]),
            _poly(np.where(central, 0.0, np.sqrt(w) - 3.0), _GILES_TAIL[::-1]),
        )
        x = p * y
        for _ in range(3):
            x = x - (_erf64(x) - y) / (_TWO_OVER_SQRT_PI * np.exp(-x * x))
    x = np.where(np.abs(y) == 1.0, np.copysign(np.inf, y), x)
    return np.where(np.abs(y) > 1.0, np.nan, x)


def _inverse_fn(fn: Callable[[Any], Any], via_ndtri: bool = False) -> Callable[[Node], Compute]:
    def factory(node: Node) -> Compute:
        dtype = _float_dtype(node)

        def apply(x: Any) -> Any:
            if via_ndtri:
                # TensorFlow's erfinv is ndtri((x + 1) / 2) / sqrt(2), the sum rounded in the input's type:
                # near +-1 that rounding is most of its answer
                half = np.asarray((x.astype(dtype) + dtype.type(1)), np.float64) * 0.5
                return fn(2.0 * half - 1.0)
            return fn(x)

        return _unary(_blockwise(apply, np.float64))  # computed in float64, written in the input's type

    return factory


kernel("Erfinv")(_inverse_fn(_erfinv64, via_ndtri=True))
# ndtri(p) = sqrt(2) * erfinv(2p - 1): the standard normal's quantile
kernel("Ndtri")(_inverse_fn(lambda p: np.sqrt(2.0) * _erfinv64(2.0 * np.asarray(p, np.float64) - 1.0)))
