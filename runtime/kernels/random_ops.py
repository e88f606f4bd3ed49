"""Random numbers as TensorFlow draws them: Philox4x32-10 and its distributions, so a seeded op gives
TensorFlow's numbers.

- Stateless ops (``tf.random.stateless_*``, Keras 3's seeded ``keras.random``): StatelessRandomUniform,
  StatelessRandomNormal, StatelessRandomUniformInt, StatelessRandomUniformFullInt (``stateless_split``,
  ``stateless_fold_in``, an int ``stateless_uniform`` without bounds), their V2 forms on a key and
  counter, and StatelessRandomGetKeyCounter. The seed is scrambled into a key and counter by one Philox
  round, as TensorFlow's ``GenerateKey`` does.
- Stateful ops with a seed (``tf.compat.v1.random_*(seed=...)``): RandomUniform, RandomStandardNormal,
  RandomUniformInt. Each node keeps its generator in the session, as TensorFlow's kernel does: the first
  run draws TensorFlow's first numbers, later runs continue from where it reserved up to (multiples of 256
  samples). With both seeds 0 the op is seeded at random, as in TensorFlow.

Output element ``i`` comes from Philox call ``i // k`` after the op's counter (``k`` values per call: 4 for
32-bit and half types, 2 for 64-bit ones), as TensorFlow's CPU fill lays them out. Uniform floats take a
random mantissa in [1, 2) less 1; normals are Box-Muller pairs.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK32 = np.uint64(0xFFFFFFFF)
_PHILOX = 1  # RNG_ALG_PHILOX
# the algorithm ids the V2 ops take on CPU, as TensorFlow's kernels: Philox, and RNG_ALG_AUTO_SELECT (3),
# which is Philox on CPU (what tf.random.stateless_* write by default); others are "Unsupported"
_PHILOX_IDS = (_PHILOX, 3)


def philox(
    counter: tuple[int, int, int, int], key: tuple[int, int], calls: int, index: Any = None
) -> np.ndarray:
    """``calls`` Philox4x32-10 outputs [calls, 4] (uint32) for counters ``counter``, ``counter + 1``, ...
    (or, given ``index``, for ``counter + i`` for each i of it)."""
    index = np.arange(calls, dtype=np.uint64) if index is None else np.asarray(index, np.uint64).ravel()
    low = np.uint64(counter[0] | counter[1] << 32) + index  # the 128-bit counter plus the call's index
    carry = (low < index).astype(np.uint64)
    high = np.uint64(counter[2] | counter[3] << 32) + carry
    c0, c1 = low & _MASK32, low >> np.uint64(32)
    c2, c3 = high & _MASK32, high >> np.uint64(32)
    k0, k1 = key
    for round_ in range(10):
        p0, p1 = _M0 * c0, _M1 * c2
        hi0, lo0 = p0 >> np.uint64(32), p0 & _MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & _MASK32
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
        if round_ < 9:
            k0, k1 = (k0 + _W0) & 0xFFFFFFFF, (k1 + _W1) & 0xFFFFFFFF
    return np.stack([c0, c1, c2, c3], axis=1).astype(np.uint32)


def seed_key_counter(seed0: int, seed1: int) -> tuple[tuple[int, int, int, int], tuple[int, int]]:
    """TensorFlow's GenerateKey: the two seeds scrambled by one Philox call into a key and counter."""
    s0, s1 = seed0 & 0xFFFFFFFFFFFFFFFF, seed1 & 0xFFFFFFFFFFFFFFFF
    counter = (s0 & 0xFFFFFFFF, s0 >> 32, s1 & 0xFFFFFFFF, s1 >> 32)
    mix = [int(v) for v in philox(counter, (0x3EC8F720, 0x02461E29), 1)[0]]
    return (0, 0, mix[2], mix[3]), (mix[0], mix[1])


def _per_call(dtype: np.dtype[Any]) -> int:
    return 2 if dtype.itemsize == 8 else 4


def _uniform_float(bits: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """[n, 4] Philox outputs as uniform values in [0, 1) of ``dtype``, TensorFlow's mantissa trick."""
    if dtype == np.float32:
        return ((bits & np.uint32(0x7FFFFF)) | np.uint32(127 << 23)).view(np.float32).ravel() - np.float32(1)
    if dtype == np.float16:
        half = (bits & np.uint32(0x3FF)).astype(np.uint16) | np.uint16(15 << 10)
        return half.view(np.float16).ravel() - np.float16(1)
    pairs = bits.reshape(-1, 2).astype(np.uint64)
    mantissa = ((pairs[:, 0] & np.uint64(0xFFFFF)) << np.uint64(32)) | pairs[:, 1]
    return (mantissa | np.uint64(1023 << 52)).view(np.float64) - 1.0


def _normal(bits: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """Box-Muller pairs, as TensorFlow's NormalDistribution: float32 (and half, through float32) from two
    uint32 a value pair, float64 from four."""
    if dtype == np.float64:
        u = _uniform_float(bits, np.dtype(np.float64)).reshape(-1, 2)
        u1 = np.maximum(u[:, 0], 1.0e-7)
        v1 = 2.0 * np.pi * u[:, 1]
        r = np.sqrt(-2.0 * np.log(u1))
        return np.stack([np.sin(v1) * r, np.cos(v1) * r], axis=1).ravel()
    u = _uniform_float(bits, np.dtype(np.float32)).reshape(-1, 2)
    f, d = np.float32, np.float64
    u1 = np.maximum(u[:, 0], f(1.0e-7))
    # TensorFlow's BoxMullerFloat: 2 * M_PI * u is a double product (M_PI is a double) rounded to float;
    # then glibc's logf, sinf and cosf. numpy's float32 SIMD versions of those differ from glibc's in the
    # last bit for 4 draws in 10; the exact values rounded to float32 (float64 here) for 1 in 60, where
    # glibc does not round to nearest (within 0.82 ulp): matching those would take glibc's own tables
    v1 = (2.0 * np.pi * u[:, 1].astype(d)).astype(f)
    r = np.sqrt(f(-2.0) * np.log(u1.astype(d)).astype(f))
    v = v1.astype(d)
    out = np.stack([np.sin(v).astype(f) * r, np.cos(v).astype(f) * r], axis=1).ravel()
    return out.astype(dtype)


def _uniform_int(bits: np.ndarray, dtype: np.dtype[Any], low: int, high: int) -> np.ndarray:
    span = high - low
    if dtype.itemsize == 8:
        pairs = bits.reshape(-1, 2).astype(np.uint64)
        wide = pairs[:, 0] | (pairs[:, 1] << np.uint64(32))  # the first word is the low one
        return (np.uint64(low & 0xFFFFFFFFFFFFFFFF) + wide % np.uint64(span)).astype(np.int64)
    return (np.uint32(low & 0xFFFFFFFF) + bits.ravel() % np.uint32(span)).view(np.int32)


def _full_int(bits: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """TensorFlow's UniformFullIntDistribution: the words themselves; for 64 bits a pair, the first word
    the low half (as the bounded draw)."""
    if dtype.itemsize == 8:
        pairs = bits.reshape(-1, 2).astype(np.uint64)
        return (pairs[:, 0] | (pairs[:, 1] << np.uint64(32))).view(dtype)
    return bits.ravel().view(dtype)


def _add_counter(counter: Any, calls: int) -> tuple[int, int, int, int]:
    low = (counter[0] | counter[1] << 32) + calls
    high = ((counter[2] | counter[3] << 32) + (low >> 64)) & 0xFFFFFFFFFFFFFFFF
    low &= 0xFFFFFFFFFFFFFFFF
    return (low & 0xFFFFFFFF, low >> 32, high & 0xFFFFFFFF, high >> 32)


def _truncated(dtype: np.dtype[Any], count: int, counter: Any, key: Any) -> np.ndarray:
    """TensorFlow's TruncatedNormalDistribution: each group of k outputs (4, 2 for float64) starts 256 k / 4
    Philox calls after the one before, and takes the group's Box-Muller normals in order, keeping those
    under 2 in magnitude until it has k."""
    k = _per_call(dtype)
    out = np.empty(count, np.float64 if dtype == np.float64 else np.float32)
    for g in range(-(-count // k)):
        start = _add_counter(counter, g * 256 * k // 4)
        calls, kept = 8, np.empty(0)
        while kept.size < k:
            normals = _normal(
                philox(start, key, calls), np.dtype(np.float64 if dtype == np.float64 else np.float32)
            )
            kept = normals[np.abs(normals) < 2]
            calls *= 4
        n = min(k, count - g * k)
        out[g * k : g * k + n] = kept[:n]
    return out


def _draw(
    kind: str, dtype: np.dtype[Any], shape: tuple[int, ...], counter: Any, key: Any, bounds: Any = None
) -> np.ndarray:
    count = int(np.prod(shape)) if shape else 1
    if kind == "truncated":
        return _truncated(dtype, count, counter, key).astype(dtype).reshape(shape)
    per_call = _per_call(dtype)
    bits = philox(counter, key, -(-count // per_call))
    if kind == "uniform":
        values = _uniform_float(bits, dtype)
    elif kind == "normal":
        values = _normal(bits, dtype)
    elif kind == "full_int":
        values = _full_int(bits, dtype)
    else:
        values = _uniform_int(bits, dtype, *bounds)
    return values[:count].astype(dtype, copy=False).reshape(shape)


def _shape(node: Node, value: Any) -> tuple[int, ...]:
    if value.ndim != 1:
        raise InvalidArgumentError(
            f"shape must be a vector of {{int32,int64}}, got shape {_shape_str(value.shape)}"
        )
    dims = tuple(int(d) for d in value.tolist())
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(f"Dimension {min(dims)} must be >= 0")
    return dims


def _seed(value: Any) -> tuple[int, int]:
    if value.shape != (2,):
        raise InvalidArgumentError(f"seed must have shape [2], not {_shape_str(value.shape)}")
    return int(value[0]), int(value[1])


def _bounds(node: Node, low_t: Any, high_t: Any) -> tuple[int, int]:
    if low_t.ndim or high_t.ndim:
        raise InvalidArgumentError(
            f"minval must be 0-D, got shape {_shape_str(low_t.shape)} and maxval {_shape_str(high_t.shape)}"
        )
    low, high = int(low_t), int(high_t)
    if not low < high:
        raise InvalidArgumentError(f"Need minval < maxval, got {low} >= {high}")
    return low, high


def key_counter(key_t: Any, counter_t: Any, alg_t: Any) -> tuple[tuple[int, int, int, int], tuple[int, int]]:
    """The V2 ops' Philox counter and key from their key, counter and algorithm inputs."""
    if key_t.shape != (1,):
        raise InvalidArgumentError(
            f"key must have shape [1], not {_shape_str(key_t.shape)}. (Note that batched keys are not "
            "supported yet.)"
        )
    if counter_t.ndim != 1 or counter_t.shape[0] < 2:
        # (TensorFlow reads two elements whatever the length: past the end of a shorter one)
        raise InvalidArgumentError(
            "counter must be a vector of at least 2 elements (Philox's), got shape "
            f"{_shape_str(counter_t.shape)}"
        )
    if alg_t.ndim:
        raise InvalidArgumentError(f"alg must be a scalar, got shape {_shape_str(alg_t.shape)}")
    if int(alg_t) not in _PHILOX_IDS:
        raise InvalidArgumentError(f"Unsupported algorithm id: {int(alg_t)}")
    k = int(key_t.reshape(-1)[0])
    c = [int(v) for v in counter_t.reshape(-1)[:2]]
    key = (k & 0xFFFFFFFF, k >> 32 & 0xFFFFFFFF)
    counter = (c[0] & 0xFFFFFFFF, c[0] >> 32 & 0xFFFFFFFF, c[1] & 0xFFFFFFFF, c[1] >> 32 & 0xFFFFFFFF)
    return counter, key


def _stateless(kind: str, v2: bool) -> Any:
    def factory(node: Node) -> Compute:
        dtype = node.attr_dtype("dtype", 1)

        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            shape = _shape(node, inputs[0])
            if v2:
                counter, key = key_counter(*inputs[1:4])
                rest = inputs[4:]
            else:
                counter, key = seed_key_counter(*_seed(inputs[1]))
                rest = inputs[2:]
            bounds = _bounds(node, rest[0], rest[1]) if kind == "int" else None
            return (_draw(kind, dtype, shape, counter, key, bounds),)

        return compute

    return factory


kernel("StatelessRandomUniform")(_stateless("uniform", v2=False))
kernel("StatelessRandomNormal")(_stateless("normal", v2=False))
kernel("StatelessRandomUniformInt")(_stateless("int", v2=False))
kernel("StatelessRandomUniformV2")(_stateless("uniform", v2=True))
kernel("StatelessRandomNormalV2")(_stateless("normal", v2=True))
kernel("StatelessRandomUniformIntV2")(_stateless("int", v2=True))
kernel("StatelessRandomUniformFullInt")(_stateless("full_int", v2=False))
kernel("StatelessRandomUniformFullIntV2")(_stateless("full_int", v2=True))
kernel("StatelessTruncatedNormal")(_stateless("truncated", v2=False))
kernel("StatelessTruncatedNormalV2")(_stateless("truncated", v2=True))


@kernel("StatelessRandomGetKeyCounter", outputs=2)
def stateless_random_get_key_counter(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        counter, key = seed_key_counter(*_seed(inputs[0]))
        return (
            np.array([key[0] | key[1] << 32], np.uint64),
            np.array([counter[0] | counter[1] << 32, counter[2] | counter[3] << 32], np.uint64),
        )

    return compute


@kernel("StatelessRandomGetAlg")
def stateless_random_get_alg(node: Node) -> Compute:
    alg = np.array(_PHILOX, np.int32)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (alg,)

    return compute


# --- seeded stateful ops ------------------------------------------------------------------------------


class _Stream:
    """A stateful random node's generator in the session: the counter it has reserved up to."""

    __slots__ = ("counter", "key", "lock")

    def __init__(self, seed: int, seed2: int) -> None:
        if seed == 0 and seed2 == 0:  # TensorFlow then seeds from the system's entropy
            seed, seed2 = (int(v) for v in np.random.default_rng().integers(1, 2**63, size=2))
        s0, s1 = seed & 0xFFFFFFFFFFFFFFFF, seed2 & 0xFFFFFFFFFFFFFFFF
        self.key = (s0 & 0xFFFFFFFF, s0 >> 32)
        self.counter = (0, 0, s1 & 0xFFFFFFFF, s1 >> 32)
        self.lock = threading.Lock()

    def reserve(self, outputs: int) -> tuple[int, int, int, int]:
        """TensorFlow's ReserveRandomOutputs(outputs, 256): this run's counter; the stream skips 256 Philox
        calls an output (room for rejection sampling, whatever the distribution uses)."""
        return self.reserve_calls(outputs * 256)

    def reserve_calls(self, calls: int) -> tuple[int, int, int, int]:
        """This run's counter; the stream moves on by ``calls`` Philox calls."""
        with self.lock:
            start = self.counter
            self.counter = _add_counter(start, calls)
            return start


def _stateful(kind: str) -> Any:
    def factory(node: Node) -> Compute:
        dtype = node.attr_dtype("dtype" if kind != "int" else "Tout", 1 if kind != "int" else 3)
        seed, seed2 = node.attr_int("seed", 0), node.attr_int("seed2", 0)
        slot = ("random stream", node.name)

        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            shape = _shape(node, inputs[0])
            bounds = _bounds(node, inputs[1], inputs[2]) if kind == "int" else None
            streams = ctx.resources.values
            stream = streams.get(slot)
            if stream is None:
                stream = streams.setdefault(slot, _Stream(seed, seed2))
            counter = stream.reserve(int(np.prod(shape)) if shape else 1)
            return (_draw(kind, dtype, shape, counter, stream.key, bounds),)

        return compute

    return factory


kernel("RandomUniform", stateful=True)(_stateful("uniform"))
kernel("RandomStandardNormal", stateful=True)(_stateful("normal"))
kernel("RandomUniformInt", stateful=True)(_stateful("int"))
kernel("TruncatedNormal", stateful=True)(_stateful("truncated"))


# --- categorical sampling: Multinomial and StatelessMultinomial (tf.random.categorical) ---------------------


def _multinomial(logits: Any, samples: int, counter: Any, key: Any, out_dtype: np.dtype[Any]) -> np.ndarray:
    """TensorFlow's CPU sampler with its rows in one shard (small batches): per row, the cumulative
    exp(logit - max) over finite logits in float64, and per sample a uniform double (two uint32 of one
    continuing Philox stream) times the total, found by upper bound."""
    if logits.ndim != 2:
        raise InvalidArgumentError(f"logits should be a matrix, got shape {_shape_str(logits.shape)}")
    batch, classes = logits.shape
    if samples < 0:
        raise InvalidArgumentError(f"num_samples should be nonnegative, got {samples}")
    if classes == 0 and samples > 0:
        raise InvalidArgumentError("num_classes should be positive, got 0")
    out = np.zeros((batch, samples), out_dtype)
    if batch == 0 or samples == 0:
        return out
    words = philox(counter, key, -(-batch * samples * 2 // 4)).ravel()
    pairs = words[: batch * samples * 2].reshape(batch, samples, 2).astype(np.uint64)
    mantissa = ((pairs[..., 0] & np.uint64(0xFFFFF)) << np.uint64(32)) | pairs[..., 1]
    uniform = (mantissa | np.uint64(1023 << 52)).view(np.float64) - 1.0
    for b in range(batch):
        row = logits[b]
        finite = np.isfinite(row)
        top = row[finite].max() if finite.any() else np.finfo(row.dtype).min
        weights = np.where(finite, np.exp(row.astype(np.float64) - float(top)), 0.0)
        cdf = np.cumsum(weights)
        out[b] = np.searchsorted(cdf, uniform[b] * cdf[-1], side="right")
    return out


@kernel("StatelessMultinomial")
def stateless_multinomial(node: Node) -> Compute:
    out_dtype = node.attr_dtype("output_dtype", 9)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        logits, samples_t, seed_t = inputs
        counter, key = seed_key_counter(*_seed(seed_t))
        return (_multinomial(logits, int(samples_t), counter, key, out_dtype),)

    return compute


@kernel("Multinomial", stateful=True)
def multinomial(node: Node) -> Compute:
    out_dtype = node.attr_dtype("output_dtype", 9)
    seed, seed2 = node.attr_int("seed", 0), node.attr_int("seed2", 0)
    slot = ("random stream", node.name)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        logits, samples_t = inputs
        samples = int(samples_t)
        stream = ctx.resources.values.get(slot) or ctx.resources.values.setdefault(slot, _Stream(seed, seed2))
        batch = logits.shape[0] if logits.ndim == 2 else 0
        counter = stream.reserve(batch * ((samples + 3) // 4 * 4))
        return (_multinomial(logits, samples, counter, stream.key, out_dtype),)

    return compute


# --- shuffles: StatelessShuffle (tf.random.experimental.stateless_shuffle) and RandomShuffle ----------------


def _shuffle(x: Any, counter: Any, key: Any) -> Any:
    """TensorFlow's RandomShuffle: the rows of x permuted by a Fisher-Yates pass from the front, swap i with
    i + (draw % (n - i)), one 32-bit draw a swap (n - 1 of them)."""
    if x.ndim == 0:
        raise InvalidArgumentError("input must be at least 1-D, got a scalar")
    n = x.shape[0]
    if x.size <= 1 or n <= 1:
        return x
    bits = philox(counter, key, (n + 2) // 4).ravel()
    perm = list(range(n))
    for i in range(n - 1):
        j = i + int(bits[i]) % (n - i)
        perm[i], perm[j] = perm[j], perm[i]
    return x[np.array(perm)]


@kernel("StatelessShuffle")
def stateless_shuffle(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        value, key_t, counter_t, alg_t = inputs
        counter, key = key_counter(key_t, counter_t, alg_t)
        return (_shuffle(value, counter, key),)

    return compute


@kernel("RandomShuffle", stateful=True)
def random_shuffle(node: Node) -> Compute:
    """``tf.random.shuffle``: each run continues the node's stream after the last run's draws."""
    seed, seed2 = node.attr_int("seed", 0), node.attr_int("seed2", 0)
    slot = ("random stream", node.name)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (value,) = inputs
        stream = ctx.resources.values.get(slot) or ctx.resources.values.setdefault(slot, _Stream(seed, seed2))
        n = value.shape[0] if value.ndim else 0
        if value.size <= 1 or n <= 1:
            return (value,)
        # ReserveSamples32(n - 1): the stream moves on by the Philox calls of the n - 1 draws
        counter = stream.reserve_calls((n + 2) // 4)
        return (_shuffle(value, counter, stream.key),)

    return compute
