"""Fractional pooling (``tf.nn.fractional_max_pool``, ``fractional_avg_pool``): FractionalMaxPool and
FractionalAvgPool, with TensorFlow's pooling regions.

Rows, then columns, each get a sequence of region boundaries drawn from the op's Philox generator (key the
``seed`` attr, counter high half ``seed2``), as TensorFlow's fractional_pool_common.cc draws them:
``pseudo_random`` regions from one uniform double u (boundaries ceil(alpha (i + u))), random ones as a
shuffle of gaps of k and k + 1 (one 32-bit draw a swap). With ``deterministic`` (what a seed gives in
``tf.nn``) every run uses the first draw; otherwise runs continue the node's stream, and both seeds 0 seed
it at random, as in TensorFlow. ``overlapping`` regions share their boundary row and column.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.runtime.kernels._common import _dims
from poolserve.runtime.kernels.random_ops import _add_counter, philox
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node


class _Generator:
    """TensorFlow's GuardedPhiloxRandom: reservations of 32-bit samples from one Philox stream."""

    def __init__(self, seed: int, seed2: int) -> None:
        if seed == 0 and seed2 == 0:
            seed, seed2 = (int(v) for v in np.random.default_rng().integers(1, 2**63, size=2))
        s0, s1 = seed & 0xFFFFFFFFFFFFFFFF, seed2 & 0xFFFFFFFFFFFFFFFF
        self.key = (s0 & 0xFFFFFFFF, s0 >> 32)
        self.counter = (0, 0, s1 & 0xFFFFFFFF, s1 >> 32)
        self.lock = threading.Lock()

    def samples32(self, n: int) -> np.ndarray:
        """ReserveSamples32(n): the next n 32-bit outputs; the stream moves on by whole Philox calls."""
        calls = (n + 3) // 4
        with self.lock:
            start = self.counter
            self.counter = _add_counter(start, calls)
        return philox(start, self.key, calls).ravel()[:n]


def _sequence(length: int, out: int, gen: _Generator, pseudo_random: bool) -> list[int]:
    """GeneratePoolingSequence: the cumulative region boundaries [0, ..., length] (out + 1 of them)."""
    if pseudo_random:
        alpha = length / out
        k = length // out
        max_u = min((k + 2) / alpha - 1, (length + 1 - k) / alpha - (out - 1))
        x0, x1 = (int(v) for v in gen.samples32(2))
        # Uint64ToDouble: 52 random mantissa bits after the exponent of 1.0, less 1
        u = float(np.array([((x0 & 0xFFFFF) << 32) | x1 | (1023 << 52)], np.uint64).view(np.float64)[0]) - 1
        u *= max_u
        cum = [1] + [math.ceil(alpha * (i + u)) for i in range(1, out)] + [length + 1]
        diff = [cum[i + 1] - cum[i] for i in range(out)]
    else:
        k, extra = divmod(length, out)
        diff = [k + 1 if i < extra else k for i in range(out)]
        bits = gen.samples32(out)
        for i in range(out - 1):  # RandomShuffle: exactly out - 1 draws
            j = i + int(bits[i]) % (out - i)
            diff[i], diff[j] = diff[j], diff[i]
    seq = [0]
    for d in diff:
        seq.append(seq[-1] + d)
    return seq


def _fractional_pool(node: Node, reduce: str) -> Compute:
    ratio = [float(r) for r in node.attr("pooling_ratio")]
    if len(ratio) != 4:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): pooling_ratio field must specify 4 dimensions", node.name
        )
    if ratio[0] != 1 and ratio[3] != 1:
        raise UnimplementedError(
            f"Fractional {reduce} pooling is not yet supported on the batch nor channel dimension.", node.name
        )
    pseudo_random = node.attr_bool("pseudo_random", False)
    overlapping = node.attr_bool("overlapping", False)
    deterministic = node.attr_bool("deterministic", False)
    seed, seed2 = node.attr_int("seed", 0), node.attr_int("seed2", 0)
    dtype = node.attr_dtype("T")
    slot = ("fractional pool stream", node.name)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x = inputs[0]
        if x.ndim != 4:
            raise InvalidArgumentError(f"tensor_in must be 4-dimensional, got shape {_dims(x.shape)}")
        # float division, floored: the op's shape function
        out = [int(np.floor(np.float32(n) / np.float32(r))) for n, r in zip(x.shape, ratio, strict=True)]
        if min(out) <= 0:
            raise InvalidArgumentError(
                f"Node '{node.name}': pooling_ratio {ratio} leaves no output for an input of shape "
                f"{_dims(x.shape)}"
            )
        if deterministic:  # every run pools over the regions of the first draw
            gen = _Generator(seed, seed2)
        else:
            gen = ctx.resources.values.get(slot) or ctx.resources.values.setdefault(
                slot, _Generator(seed, seed2)
            )
        rows = _sequence(x.shape[1], out[1], gen, pseudo_random)
        cols = _sequence(x.shape[2], out[2], gen, pseudo_random)
        extra = 1 if overlapping else 0
        y = np.empty((x.shape[0], out[1], out[2], x.shape[3]), dtype)
        for i in range(out[1]):
            r0, r1 = rows[i], min(rows[i + 1] + extra, x.shape[1])
            for j in range(out[2]):
                c0, c1 = cols[j], min(cols[j + 1] + extra, x.shape[2])
                region = x[:, r0:r1, c0:c1, :]
                if reduce == "max":
                    y[:, i, j, :] = region.max(axis=(1, 2))
                else:
                    total = region.sum(axis=(1, 2), dtype=dtype)
                    count = region.shape[1] * region.shape[2]
                    # an integer mean truncates toward zero (Eigen's integer division)
                    y[:, i, j, :] = (
                        np.trunc(total / count) if dtype.kind == "i" else total / dtype.type(count)
                    )
        return y, np.array(rows, np.int64), np.array(cols, np.int64)

    return compute


@kernel("FractionalMaxPool", expensive=True, outputs=3, stateful=True)
def fractional_max_pool(node: Node) -> Compute:
    return _fractional_pool(node, "max")


@kernel("FractionalAvgPool", expensive=True, outputs=3, stateful=True)
def fractional_avg_pool(node: Node) -> Compute:
    return _fractional_pool(node, "average")
