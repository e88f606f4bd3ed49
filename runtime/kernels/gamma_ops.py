"""Incomplete gamma and beta functions and the Hurwitz zeta: Igamma, Igammac, Betainc, Zeta and Polygamma
(``tf.math.igamma``, ``igammac``, ``betainc``, ``zeta``, ``polygamma``; the CDFs of the Gamma, Poisson,
Beta and Student-t distributions).

Computed in float64 and rounded to the input's type (float32 or float64): the power series and continued
fractions of Numerical Recipes for the incomplete functions, and Cephes' Euler-Maclaurin sum (Eigen's) for
zeta, with TensorFlow's answers at the edges of the domains (NaN outside them, 0 and 1 at their ends).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels.math_ops import Fn, _binary
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_EPS = 1e-16
_TINY = 1e-300
_MAX_ITER = 100_000
_lgamma = np.vectorize(math.lgamma, otypes=[np.float64])


def _real(node: Node) -> np.dtype[Any]:
    dtype = node.attr_dtype("T")
    if dtype not in (np.float32, np.float64):
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): attr 'T' must be float32 or float64, got {dtype}",
            node.name,
        )
    return dtype


def _in_float64(fn: Fn) -> Fn:
    def run(*args: Any) -> Any:
        arrays = np.broadcast_arrays(*(np.asarray(a, np.float64) for a in args))
        with np.errstate(all="ignore"):
            out = fn(*(a.reshape(-1) for a in arrays)).reshape(arrays[0].shape)
        return out.astype(np.asarray(args[0]).dtype)

    return run


def _float_binary(fn: Fn) -> Any:
    def factory(node: Node) -> Compute:
        _real(node)
        return _binary(_in_float64(fn))

    return factory


def _converge(step: Any, n: int) -> None:
    """Runs ``step(i, active)`` for i = 1, 2, ... on the elements still ``active`` (it returns which have
    converged) until none is left."""
    active = np.ones(n, bool)
    for i in range(1, _MAX_ITER):
        if not active.any():
            return
        active[active] = ~step(i, active)


# --- incomplete gamma ---------------------------------------------------------------------------------------


def _gamma_series(a: Any, x: Any) -> Any:
    """P(a, x) by its power series (x < a + 1)."""
    total = 1 / a
    term = total.copy()
    ap = a.copy()

    def step(i: int, on: Any) -> Any:
        ap[on] += 1
        term[on] *= x[on] / ap[on]
        total[on] += term[on]
        return np.abs(term[on]) < np.abs(total[on]) * _EPS

    _converge(step, a.size)
    return total * np.exp(-x + a * np.log(x) - _lgamma(a))


def _gamma_fraction(a: Any, x: Any) -> Any:
    """Q(a, x) by its continued fraction (x >= a + 1), Lentz's method."""
    b = x + 1 - a
    c = np.full(a.shape, 1 / _TINY)
    d = 1 / b
    h = d.copy()

    def step(i: int, on: Any) -> Any:
        an = -i * (i - a[on])
        b[on] += 2
        dd = an * d[on] + b[on]
        dd = np.where(np.abs(dd) < _TINY, _TINY, dd)
        cc = b[on] + an / c[on]
        cc = np.where(np.abs(cc) < _TINY, _TINY, cc)
        d[on] = 1 / dd
        c[on] = cc
        delta = d[on] * cc
        h[on] *= delta
        return np.abs(delta - 1) < _EPS

    _converge(step, a.size)
    return np.exp(-x + a * np.log(x) - _lgamma(a)) * h


def _igamma(a: Any, x: Any, upper: bool) -> Any:
    out = np.full(a.shape, np.nan)
    ok = (a > 0) & (x >= 0)
    out[ok & (x == 0)] = 1.0 if upper else 0.0
    out[ok & np.isposinf(x)] = 0.0 if upper else 1.0
    inside = ok & (x > 0) & np.isfinite(x) & np.isfinite(a)
    series = inside & (x < a + 1)
    fraction = inside & ~series
    p = _gamma_series(a[series], x[series])
    q = _gamma_fraction(a[fraction], x[fraction])
    out[series] = 1 - p if upper else p
    out[fraction] = q if upper else 1 - q
    out[ok & np.isposinf(a) & np.isfinite(x)] = 1.0 if upper else 0.0
    return out


kernel("Igamma")(_float_binary(lambda a, x: _igamma(a, x, False)))
kernel("Igammac")(_float_binary(lambda a, x: _igamma(a, x, True)))


# --- incomplete beta ----------------------------------------------------------------------------------------


def _beta_fraction(a: Any, b: Any, x: Any) -> Any:
    """The continued fraction of I_x(a, b) (Numerical Recipes' betacf), Lentz's method."""
    qab, qap, qam = a + b, a + 1, a - 1
    c = np.ones(a.shape)
    d = 1 - qab * x / qap
    d = 1 / np.where(np.abs(d) < _TINY, _TINY, d)
    h = d.copy()

    def step(m: int, on: Any) -> Any:
        aa_, bb_, xx, cc, dd = a[on], b[on], x[on], c[on], d[on]
        m2 = 2 * m
        hh = h[on]
        for num in (
            m * (bb_ - m) * xx / ((qam[on] + m2) * (aa_ + m2)),
            -(aa_ + m) * (qab[on] + m) * xx / ((aa_ + m2) * (qap[on] + m2)),
        ):
            dd = 1 + num * dd
            dd = 1 / np.where(np.abs(dd) < _TINY, _TINY, dd)
            cc = 1 + num / cc
            cc = np.where(np.abs(cc) < _TINY, _TINY, cc)
            delta = dd * cc
            hh = hh * delta
        c[on], d[on], h[on] = cc, dd, hh
        return np.abs(delta - 1) < _EPS

    _converge(step, a.size)
    return h


def _betainc(a: Any, b: Any, x: Any) -> Any:
    out = np.full(a.shape, np.nan)
    ok = (a > 0) & (b > 0) & (x >= 0) & (x <= 1)
    out[ok & (x == 0)] = 0.0
    out[ok & (x == 1)] = 1.0
    inside = ok & (x > 0) & (x < 1)
    a, b, x = a[inside], b[inside], x[inside]
    front = np.exp(_lgamma(a + b) - _lgamma(a) - _lgamma(b) + a * np.log(x) + b * np.log1p(-x))
    low = x < (a + 1) / (a + b + 2)
    res = np.empty(a.shape)
    res[low] = front[low] * _beta_fraction(a[low], b[low], x[low]) / a[low]
    hi = ~low
    res[hi] = 1 - front[hi] * _beta_fraction(b[hi], a[hi], 1 - x[hi]) / b[hi]
    out[inside] = res
    return out


@kernel("Betainc")
def betainc(node: Node) -> Compute:
    _real(node)
    run = _in_float64(_betainc)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        a, b, x = inputs
        shapes = {np.shape(t) for t in inputs if np.ndim(t)}
        if len(shapes) > 1:
            raise InvalidArgumentError(
                "Shapes of a, b and x are inconsistent: "
                + " vs. ".join(str(list(np.shape(t))) for t in inputs)
            )
        return (run(a, b, x),)

    return compute


# --- Hurwitz zeta and polygamma -----------------------------------------------------------------------------

# Cephes' Euler-Maclaurin coefficients: (2k)! / B_2k
_ZETA_A = (
    12.0,
    -720.0,
    30240.0,
    -1209600.0,
    47900160.0,
    -1.8924375803183791606e9,
    7.47242496e10,
    -2.950130727918164224e12,
    1.1646782814350067249e14,
    -4.5979787224074726105e15,
    1.8152105401943546773e17,
    -7.1661652561756670113e18,
)


def _zeta(x: Any, q: Any) -> Any:
    """zeta(x, q) = sum over k >= 0 of (q + k)^-x, as Cephes (Eigen) sums it: the first terms until
    q + k > 9 (at least 10 of them), then the Euler-Maclaurin tail."""
    out = np.full(x.shape, np.nan)
    out[x == 1] = np.inf
    q_int = q == np.floor(q)
    x_even = (x == np.floor(x)) & (np.fmod(x, 2) == 0)
    out[(x > 1) & (q <= 0) & q_int & x_even] = np.inf
    ok = (x > 1) & ((q > 0) | (~q_int & (x == np.floor(x))))
    x, q = x[ok], q[ok]
    s = q**-x
    n = np.maximum(9, np.floor(9 - q) + 1)
    for j in range(1, int(n.max(initial=0)) + 1):
        s = s + np.where(j <= n, (q + j) ** -x, 0)
    w = q + n
    b = w**-x
    s = s + b * w / (x - 1) - b / 2
    a = np.ones(x.shape)
    k = 0.0
    live = np.ones(x.shape, bool)
    for coeff in _ZETA_A:
        a = a * (x + k)
        b = b / w
        t = a * b / coeff
        s = np.where(live, s + t, s)
        live &= ~(np.abs(t / s) < 1.1e-16)
        k += 1
        a = a * (x + k)
        b = b / w
        k += 1
    out[ok] = s
    return out


kernel("Zeta")(_float_binary(_zeta))


def _polygamma(n: Any, x: Any) -> Any:
    from poolserve.runtime.kernels.special_ops import _digamma

    out = np.full(n.shape, np.nan)
    whole = (n == np.floor(n)) & (n >= 0)
    zero = whole & (n == 0)
    out[zero] = _digamma(x[zero])
    higher = whole & (n > 0)
    m = n[higher]
    sign = np.where(np.fmod(m + 1, 2) == 0, 1.0, -1.0)
    out[higher] = sign * np.exp(_lgamma(m + 1)) * _zeta(m + 1, x[higher])
    return out


kernel("Polygamma")(_float_binary(_polygamma))
