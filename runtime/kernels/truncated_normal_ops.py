"""StatelessParameterizedTruncatedNormal (``tf.random.stateless_parameterized_truncated_normal``): normals
of a mean and standard deviation cut to [minval, maxval], as TensorFlow's CPU kernel draws them.

The parameters broadcast to the trailing axes of the shape (the batches); the leading axes are samples of
each. Per batch, in the input's type, the bounds are normalised and one of three rejection samplers runs on
the Philox stream: normals kept when inside (a bound at least 1.3 deviations away on the side of 0), uniforms
on the interval weighted by exp(-z^2 / 2) (a narrow one), or an exponential proposal (bounds far in one
tail). A batch's samples use the stream's draws in order and drop the rest of the draw that completes the
batch; the next batch continues the stream. TensorFlow splits large outputs over its thread pool, each part
skipping ahead in the stream: this is its answer when one thread does the work, as for small outputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.runtime.errors import InternalError, InvalidArgumentError
from poolserve.runtime.kernels._common import _shape_str
from poolserve.runtime.kernels.random_ops import (
    _add_counter,
    _normal,
    _seed,
    _shape,
    _uniform_float,
    philox,
    seed_key_counter,
)
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_MAX_ITERATIONS = 1000  # TensorFlow's kMaxIterations
_RANDN_BOUND = 1.3  # kStdDevsInsideBoundsToUseRandnSampler


class _Stream:
    """Philox calls one after the other, as uniform or normal draws of one type."""

    def __init__(self, counter: Any, key: Any, dtype: np.dtype[Any]) -> None:
        self.counter, self.key, self.dtype, self.calls = counter, key, dtype, 0

    def _bits(self) -> Any:
        bits = philox(_add_counter(self.counter, self.calls), self.key, 1)
        self.calls += 1
        return bits

    def uniform(self) -> Any:
        return _uniform_float(self._bits(), self.dtype)

    def normal(self) -> Any:
        return _normal(self._bits(), self.dtype)


def _batch(stream: _Stream, t: Any, mean: Any, stddev: Any, lo: Any, hi: Any, n: int) -> list[Any]:
    """``n`` samples of one batch, TensorFlow's TruncatedNormalFunctorV2 in type ``t``."""
    if not (stddev > 0 and lo < hi and (np.isfinite(lo) or np.isfinite(hi))):
        raise InvalidArgumentError("Invalid parameters")
    if (np.isinf(lo) and lo < 0) or hi < mean:  # make the one-sided bound the lower one
        lo, hi, stddev = hi, lo, -stddev
    norm_min = t((lo - mean) / stddev)
    norm_max = t((hi - mean) / stddev)
    sqrt_factor = np.sqrt(norm_min * norm_min + t(4))
    cutoff = t(2) * np.exp(t(0.5) + (norm_min * (norm_min - sqrt_factor)) / t(4)) / (norm_min + sqrt_factor)
    diff = norm_max - norm_min
    out: list[Any] = []
    misses = 0

    def take(z: Any) -> bool:
        out.append(z * stddev + mean)
        return len(out) >= n

    with np.errstate(all="ignore"):
        if (norm_min < -_RANDN_BOUND and norm_max >= 0) or (norm_max > _RANDN_BOUND and norm_min <= 0):
            while len(out) < n:
                for z in stream.normal():
                    if norm_min <= z <= norm_max:
                        if take(z):
                            break
                        misses = 0
                    else:
                        misses += 1
                        if misses > _MAX_ITERATIONS:
                            raise InternalError(
                                "TruncatedNormal randn rejection sampler failed to accept a sample."
                            )
        elif diff < cutoff:
            plus = t(0) if norm_min < 0 else norm_min * norm_min
            while len(out) < n:
                z = stream.uniform() * diff + norm_min
                g = (plus - z * z) / t(2)
                u = stream.uniform()
                for zi, gi, ui in zip(z, g, u, strict=True):
                    if ui <= np.exp(gi) or misses + 1 >= _MAX_ITERATIONS:
                        if not ui <= np.exp(gi):
                            raise InternalError(
                                "TruncatedNormal uniform rejection sampler failed to  accept a sample."
                            )
                        if take(zi):
                            break
                        misses = 0
                    else:
                        misses += 1
        else:
            alpha = (norm_min + np.sqrt(norm_min * norm_min + t(4))) / t(2)
            while len(out) < n:
                r = stream.uniform()
                for i in range(0, r.size, 2):
                    z = -np.log(r[i]) / alpha + norm_min
                    x = alpha - z if norm_min < alpha else norm_min - alpha
                    ok = r[i + 1] <= np.exp(-x * x / t(2)) and z < norm_max
                    if ok or misses + 1 >= _MAX_ITERATIONS:
                        if not ok:
                            raise InternalError(
                                "TruncatedNormal exponential distribution rejection sampler failed to accept "
                                "a sample."
                            )
                        if take(z):
                            break
                        misses = 0
                    else:
                        misses += 1
    return out


@kernel("StatelessParameterizedTruncatedNormal", expensive=True)
def stateless_parameterized_truncated_normal(node: Node) -> Compute:
    dtype = node.attr_dtype("dtype")
    if dtype not in (np.float16, np.float32, np.float64):
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): attr 'dtype' must be float16, float32 or float64",
            node.name,
        )

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        shape_t, seed_t, *params = inputs
        seed = _seed(seed_t)
        try:
            batch_shape = np.broadcast_shapes(*(p.shape for p in params))
        except ValueError:
            raise InvalidArgumentError(
                "means, stddevs, minvals, maxvals must have compatible batch dimensions: "
                + " vs. ".join(_shape_str(p.shape) for p in params)
            ) from None
        shape = _shape(node, shape_t)
        if len(batch_shape) > len(shape) or shape[len(shape) - len(batch_shape) :] != batch_shape:
            raise InvalidArgumentError("Shape passed in must end with broadcasted shape.")
        batches = int(np.prod(batch_shape))
        per_batch = int(np.prod(shape[: len(shape) - len(batch_shape)]))
        t = dtype.type
        flat = [np.broadcast_to(p, batch_shape).reshape(-1).astype(dtype) for p in params]
        counter, key = seed_key_counter(*seed)
        stream = _Stream(counter, key, dtype)
        out = np.empty((per_batch, batches), dtype)
        for b in range(batches if per_batch else 0):
            mean, stddev, lo, hi = (p[b] for p in flat)
            out[:, b] = _batch(stream, t, mean, stddev, lo, hi, per_batch)
        return (out.reshape(shape),)

    return compute
