"""Stateless draws from the gamma, Poisson and binomial distributions, as TensorFlow's CPU kernels draw them:
StatelessRandomGammaV2 and V3 (``tf.random.stateless_gamma``, Keras 3's seeded ``keras.random.gamma``
and ``beta``), StatelessRandomPoisson (``stateless_poisson``) and StatelessRandomBinomial
(``stateless_binomial``).

Each output is a rejection loop of its own on the Philox stream that starts a fixed number of calls after
the previous output's (256; 42 for small binomials), so output ``i`` does not depend on how many draws
the others rejected. All the arithmetic is in double, as in TensorFlow, one sample at a time with Python's
``math`` functions: they are the C library's, which TensorFlow calls too (numpy's own vectorised log and
exp differ from it in the last bit). The one exception is the Poisson sampler's lgamma (fdlibm's, as the
C library's, but on numpy's log): it decides only whether a draw is kept, so an ulp could change a sample
only on an exact tie of the two sides of the test. Output element ``i`` of parameter ``j`` (the
parameters being the last axes of the shape) is sample ``i * parameters + j``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _shape_str
from poolserve.runtime.kernels.random_ops import (
    _add_counter,
    _seed,
    _shape,
    key_counter,
    philox,
    seed_key_counter,
)
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.kernels.special_ops import _lgamma
from poolserve.runtime.node import Node

Counter = tuple[int, int, int, int]
Key = tuple[int, int]
_PREFETCH = 4  # Philox calls fetched for every output at once (more, one output at a time, when rejected)
_TWO_52 = 2.0**-52


# The C library's functions with C's answers where Python's raise (log(0), exp overflow, a NaN floor...):
# the samplers then run on odd parameters (alpha <= 0, huge rates) as TensorFlow's do, without a traceback


def _log(x: float) -> float:
    return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _sqrt(x: float) -> float:
    return math.sqrt(x) if x >= 0 else math.nan


def _pow(base: float, exponent: float) -> float:
    try:
        return math.pow(base, exponent)
    except (ValueError, OverflowError):
        with np.errstate(all="ignore"):
            return float(np.power(np.float64(base), np.float64(exponent)))


def _div(a: float, b: float) -> float:
    if b:
        return a / b
    with np.errstate(all="ignore"):
        return float(np.float64(a) / np.float64(b))


def _floor(x: float) -> float:
    return float(math.floor(x)) if math.isfinite(x) else x


def _ceil(x: float) -> float:
    return float(math.ceil(x)) if math.isfinite(x) else x


class _Draws:
    """One output's Philox calls, from its own offset in the op's stream on."""

    __slots__ = ("counter", "key", "used", "words")

    def __init__(self, counter: Counter, key: Key, words: list[list[int]]) -> None:
        self.counter, self.key, self.words, self.used = counter, key, words, 0

    def next(self) -> list[int]:
        if self.used == len(self.words):
            self.words += philox(_add_counter(self.counter, self.used), self.key, 8).tolist()
        self.used += 1
        return self.words[self.used - 1]


def _uniform_pair(w: list[int]) -> list[float]:
    """TensorFlow's UniformDistribution<double>: two doubles in [0, 1) from a call's four words (a 52-bit
    mantissa each, which the product by 2**-52 gives exactly)."""
    return [((w[0] & 0xFFFFF) << 32 | w[1]) * _TWO_52, ((w[2] & 0xFFFFF) << 32 | w[3]) * _TWO_52]


def _normal_pair(w: list[int]) -> list[float]:
    """TensorFlow's BoxMullerDouble on a call's four words."""
    u1, u2 = _uniform_pair(w)
    v1 = 2 * math.pi * u2
    r = math.sqrt(-2.0 * math.log(max(u1, 1.0e-7)))  # u1 >= 1e-7: no edge here
    return [math.sin(v1) * r, math.cos(v1) * r]


class _Buffer:
    """TensorFlow's sample buffers: a call's pair of values handed out last first."""

    __slots__ = ("draws", "make", "values")

    def __init__(self, draws: _Draws, make: Callable[[list[int]], list[float]]) -> None:
        self.draws, self.make = draws, make
        self.values: list[float] = []

    def __call__(self) -> float:
        if not self.values:
            self.values = self.make(self.draws.next())
        return self.values.pop()


def _sample(
    counter: Counter,
    key: Key,
    params: list[Any],
    samples: int,
    one: Callable[[_Draws, Any], float],
    stride: Callable[[Any], int] = lambda p: 256,
) -> np.ndarray:
    """[samples, len(params)] draws: output ``(i, j)`` is ``one`` of parameter j on the stream that starts
    ``stride(j) * (j * samples + i)`` calls after ``counter``."""
    n = len(params)
    out = np.empty((samples, n), np.float64)
    steps = np.array([stride(p) for p in params], np.uint64)
    starts = steps[None, :] * (np.arange(n, dtype=np.uint64)[None, :] * samples + np.arange(samples)[:, None])
    words = philox(counter, key, 0, (starts.reshape(-1, 1) + np.arange(_PREFETCH, dtype=np.uint64)))
    words = words.reshape(samples, n, _PREFETCH, 4).tolist()
    for i in range(samples):
        for j, p in enumerate(params):
            start = _add_counter(counter, int(starts[i, j]))
            out[i, j] = one(_Draws(start, key, words[i][j]), p)
    return out


def _cast(values: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """static_cast of doubles to the output type: half through float (Eigen's), NaN to 0 for integers
    (what TensorFlow's build gives for the undefined cast)."""
    if dtype.kind in "iu":
        with np.errstate(invalid="ignore"):  # beyond the type's range: its minimum, as on x86
            return np.where(np.isnan(values), 0, values).astype(dtype)
    if dtype == np.float16:
        return values.astype(np.float32).astype(np.float16)
    return values.astype(dtype)


def _ends_with(shape: tuple[int, ...], tail: tuple[int, ...]) -> None:
    if len(tail) > len(shape) or shape[len(shape) - len(tail) :] != tail:
        raise InvalidArgumentError("Shape passed in must end with broadcasted shape.")


# --- gamma --------------------------------------------------------------------------------------------------


def _gamma_one(draws: _Draws, alpha: float) -> float:
    """Marsaglia and Tsang's transformation-rejection, as TensorFlow's: exponential draws for alpha 1, and
    for alpha < 1 a draw for alpha + 1 times uniform^(1 / alpha)."""
    uniform = _Buffer(draws, _uniform_pair)
    if alpha == 1.0:
        return -math.log1p(-_uniform_pair(draws.next())[1])
    normal = _Buffer(draws, _normal_pair)
    small = alpha < 1
    d = alpha + (2.0 / 3 if small else -1.0 / 3)
    c = _div(1.0 / 3, _sqrt(d))
    while True:
        x = normal()
        v = 1 + c * x
        if v <= 0:
            continue
        v = v * v * v
        u = uniform()
        if u < 1 - 0.0331 * (x * x) * (x * x) or _log(u) < 0.5 * x * x + d * (1 - v + _log(v)):
            res = d * v
            if small:
                res *= _pow(uniform(), _div(1, alpha))
            return res


def _gamma(node: Node, v3: bool) -> Compute:
    dtype = node.attr_dtype("dtype")
    if dtype not in (np.float16, np.float32, np.float64):
        raise InvalidArgumentError(
            f"Node '{node.name}': attr 'dtype' must be half, float or double, got {dtype}"
        )

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        shape = _shape(node, inputs[0])
        if v3:
            counter, key = key_counter(*inputs[1:4])
        else:
            counter, key = seed_key_counter(*_seed(inputs[1]))
        alpha = inputs[-1]
        out = np.zeros(shape, dtype)
        if out.size == 0:
            return (out,)
        _ends_with(shape, alpha.shape)
        params = alpha.astype(np.float64).ravel().tolist()
        draws = _sample(counter, key, params, out.size // len(params), _gamma_one)
        return (_cast(draws, dtype).reshape(shape),)

    return compute


@kernel("StatelessRandomGammaV2", expensive=True)
def stateless_random_gamma_v2(node: Node) -> Compute:
    return _gamma(node, v3=False)


@kernel("StatelessRandomGammaV3", expensive=True)
def stateless_random_gamma_v3(node: Node) -> Compute:
    return _gamma(node, v3=True)


# --- Poisson ------------------------------------------------------------------------------------------------


def _poisson_one(draws: _Draws, rate: float) -> float:
    """Knuth's product of uniforms below rate 10; Hormann's transformed rejection from 10 on."""
    uniform = _Buffer(draws, _uniform_pair)
    if rate < 10:
        exp_neg_rate = _exp(-rate)
        prod, x = 1.0, 0.0
        while True:
            prod = prod * uniform()
            if prod <= exp_neg_rate:
                return x
            x += 1
    log_rate = _log(rate)
    b = 0.931 + 2.53 * _sqrt(rate)
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    while True:
        u = uniform() - 0.5
        v = uniform()
        u_shifted = 0.5 - abs(u)
        k = _floor((_div(2 * a, u_shifted) + b) * u + rate + 0.43)
        if u_shifted >= 0.07 and v <= 0.9277 - 3.6224 / (b - 2):
            return k
        if k < 0 or (u_shifted < 0.013 and v > u_shifted):
            continue
        s = _log(_div(v * inv_alpha, _div(a, u_shifted * u_shifted) + b))
        t = -rate + k * log_rate - float(_lgamma(np.array([k + 1.0]))[0])
        if s <= t:
            return k


@kernel("StatelessRandomPoisson", expensive=True)
def stateless_random_poisson(node: Node) -> Compute:
    dtype = node.attr_dtype("dtype")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        shape = _shape(node, inputs[0])
        counter, key = seed_key_counter(*_seed(inputs[1]))
        lam = inputs[2]
        out = np.zeros(shape, dtype)
        if out.size == 0:
            return (out,)
        _ends_with(shape, lam.shape)
        params = lam.astype(np.float64).ravel().tolist()
        # TensorFlow's loop never ends on these
        if not all(math.isfinite(p) for p in params):
            raise InvalidArgumentError("lam must be finite: a NaN or infinite rate has no Poisson samples")
        draws = _sample(counter, key, params, out.size // len(params), _poisson_one)
        return (_cast(draws, dtype).reshape(shape),)

    return compute


# --- binomial -----------------------------------------------------------------------------------------------


def _inversion(draws: _Draws, count: float, prob: float) -> float:
    """Binomial inversion: geometric waiting times summed until they pass ``count``."""
    uniform = _Buffer(draws, _uniform_pair)
    total, n = 0.0, 0
    while True:
        u = uniform()
        total += _ceil(_div(_log(u), math.log1p(-prob)))
        if total > count:
            return n
        n += 1


_TAIL = (0.0810614667953272, 0.0413406959554092, 0.0276779256849983, 0.02079067210376509,
         0.0166446911898211, 0.0138761288230707, 0.0118967099458917, 0.0104112652619720,
         0.00925546218271273, 0.00833056343336287)  # fmt: skip


def _stirling_tail(k: float) -> float:
    if k <= 9:
        return _TAIL[int(k)]
    kp1sq = (k + 1) * (k + 1)
    return (1.0 / 12 - (1.0 / 360 - 1.0 / 1260 / kp1sq) / kp1sq) / (k + 1)


def _btrs(draws: _Draws, count: float, prob: float) -> float:
    """Hormann's BTRS transformed rejection (TensorFlow's version, for count * prob >= 10)."""
    uniform = _Buffer(draws, _uniform_pair)
    stddev = _sqrt(count * prob * (1 - prob))
    b = 1.15 + 2.53 * stddev
    a = -0.0873 + 0.0248 * b + 0.01 * prob
    c = count * prob + 0.5
    v_r = 0.92 - 4.2 / b
    r = prob / (1 - prob)
    alpha = (2.83 + 5.1 / b) * stddev
    m = _floor((count + 1) * prob)
    log = _log
    while True:
        u = uniform()
        v = uniform()
        u = u - 0.5
        us = 0.5 - abs(u)
        k = _floor((_div(2 * a, us) + b) * u + c)
        if us >= 0.07 and v <= v_r:
            return k
        if k < 0 or k > count:
            continue
        v = log(_div(v * alpha, _div(a, us * us) + b))
        bound = (
            (m + 0.5) * log((m + 1) / (r * (count - m + 1)))
            + (count + 1) * log((count - m + 1) / (count - k + 1))
            + (k + 0.5) * log(r * (count - k + 1) / (k + 1))
            + _stirling_tail(m)
            + _stirling_tail(count - m)
            - _stirling_tail(k)
            - _stirling_tail(count - k)
        )
        if v <= bound:
            return k


def _binomial_params(count: Any, prob: Any) -> tuple[str, float, float]:
    """Which sampler draws for (count, prob) (numpy scalars of the op's type T, whose arithmetic decides
    it, as in TensorFlow), on what count and probability."""
    dcount = float(count)
    if math.isnan(dcount):
        raise InvalidArgumentError("counts must not be NaN: a NaN count has no binomial samples")
    if dcount <= 0 or prob <= 0:
        return "zero", dcount, 0.0
    if prob >= 1:
        return "all", dcount, 1.0
    if prob <= 0.5:
        return ("btrs" if count * prob >= 10 else "inversion"), dcount, float(prob)
    if prob > 0.5:
        q = prob.dtype.type(1) - prob
        return ("btrs_q" if count * q >= 10 else "inversion_q"), dcount, float(q)
    return "nan", dcount, math.nan


def _binomial_one(draws: _Draws, params: tuple[str, float, float]) -> float:
    how, count, p = params
    if how == "zero":
        return 0.0
    if how == "all":
        return count
    if how == "nan":
        return math.nan
    k = _btrs(draws, count, p) if how.startswith("btrs") else _inversion(draws, count, p)
    return count - k if how.endswith("_q") else k


@kernel("StatelessRandomBinomial", expensive=True)
def stateless_random_binomial(node: Node) -> Compute:
    dtype = node.attr_dtype("dtype")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        shape_t, seed_t, counts, probs = inputs
        counter, key = seed_key_counter(*_seed(seed_t))
        try:
            batch = np.broadcast_shapes(counts.shape, probs.shape)
        except ValueError:
            raise InvalidArgumentError(
                "counts and probs must have compatible batch dimensions: "
                f"{_shape_str(counts.shape)} vs. {_shape_str(probs.shape)}"
            ) from None
        if shape_t.ndim != 1:
            raise InvalidArgumentError(
                f"Input shape should be a vector, got shape: {_shape_str(shape_t.shape)}"
            )
        shape = _shape(node, shape_t)
        _ends_with(shape, batch)
        out = np.zeros(shape, dtype)
        if out.size == 0:
            return (out,)
        c, p = (np.broadcast_to(a, batch).ravel() for a in (counts, probs))
        with np.errstate(all="ignore"):
            params = [_binomial_params(ci, pi) for ci, pi in zip(c, p, strict=True)]
        samples = out.size // len(params)

        def stride(param: tuple[str, float, float]) -> int:
            return 42 if param[0].startswith("inversion") else 256

        draws = _sample(counter, key, params, samples, _binomial_one, stride)
        return (_cast(draws, dtype).reshape(shape),)

    return compute
