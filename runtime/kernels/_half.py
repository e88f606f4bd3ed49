"""float16 arithmetic as TensorFlow's CPU kernels (Eigen) do it: each step rounded to half.

Eigen computes a half operation in float and rounds the result back to half, step by step; a float32
computation rounded once at the end differs from TensorFlow in the last bit for a fair share of values
(Softmax over 10 classes: 1 value in 5). Sums follow Eigen's innermost-dimension reducer for half on
TensorFlow's x86 build (8-lane packets): four packet accumulators over blocks of 32 values, the packets
left over added to their total, its lanes summed in float and rounded once, plus the values past the
last packet added one by one; rows longer than 1600 values (200 packets) are split in two at a packet
boundary of the flat tensor, recursively. Checked bit for bit against TensorFlow 2.21 for row lengths
1 to 5000 (tests/test_kernels_half_cases.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

_H, _F = np.float16, np.float32
_LANES = 8  # Packet8h
_LEAF = _LANES * 200  # Eigen's LeafSize<half>


def _add(a: Any, b: Any) -> Any:
    return (a.astype(_F) + b.astype(_F)).astype(_H)


def _leaf(e: Any) -> Any:
    rows, n = e.shape
    vectorized = n // _LANES * _LANES
    unrolled = n // (4 * _LANES) * (4 * _LANES)
    acc = np.zeros((rows, 4, _LANES), _H)
    blocks = e[:, :unrolled].reshape(rows, -1, 4, _LANES)
    for k in range(blocks.shape[1]):
        acc = _add(acc, blocks[:, k])
    total = acc[:, 0]
    for u in range(1, 4):
        total = _add(total, acc[:, u])
    for j in range(unrolled, vectorized, _LANES):
        total = _add(total, e[:, j : j + _LANES])
    scalar = np.zeros(rows, _H)
    for j in range(vectorized, n):
        scalar = _add(scalar, e[:, j])
    lanes = total.astype(_F).sum(axis=1).astype(_H) if vectorized else np.zeros(rows, _H)
    return _add(scalar, lanes)


def _tree(e: Any, first: int) -> Any:
    """Rows of ``e`` whose first values sit at flat index ``first`` (mod 8)."""
    n = e.shape[1]
    if n <= _LEAF:
        return _leaf(e)
    split = _LANES * -(-(first + -(-n // 2)) // _LANES)
    left = min(split - first, n)
    acc = _add(np.zeros(e.shape[0], _H), _tree(e[:, :left], first))
    if left < n:
        acc = _add(acc, _tree(e[:, left:], (first + left) % _LANES))
    return acc


def row_sums(x: Any) -> Any:
    """Sums of the rows of a 2-D float16 array (row r at flat index r * n), as TensorFlow's Sum over the
    innermost axis gives them."""
    rows, n = x.shape
    if n <= _LEAF or n % _LANES == 0:
        return _tree(x, 0)
    out = np.empty(rows, _H)
    starts = np.arange(rows) * n % _LANES
    for first in range(_LANES):
        picked = np.nonzero(starts == first)[0]
        if picked.size:
            out[picked] = _tree(x[picked], first)
    return out


def softmax(x: Any, log: bool) -> Any:
    """TensorFlow's SoftmaxEigenImpl for half over the last axis: shifted = x - max; softmax is
    exp(shifted) * (1 / sum), log softmax shifted - log(sum)."""
    n = x.shape[-1]
    rows = x.reshape(-1, n)
    shifted = (rows.astype(_F) - rows.max(axis=1, keepdims=True).astype(_F)).astype(_H)
    e = np.exp(shifted.astype(_F)).astype(_H)
    total = row_sums(e)[:, None].astype(_F)
    if log:
        y = shifted.astype(_F) - np.log(total).astype(_H).astype(_F)
    else:
        y = e.astype(_F) * (np.float32(1) / total).astype(_H).astype(_F)
    return y.astype(_H).reshape(x.shape)


def _round(x: Any) -> Any:
    return np.asarray(x, _F).astype(_H)


def elu(x: Any) -> Any:
    """TensorFlow's Elu functor in half steps: x < 0 ? exp(x) - 1 : x."""
    with np.errstate(over="ignore"):
        em1 = _round(_round(np.exp(x.astype(_F))).astype(_F) - 1)
    return np.where(x < 0, em1, x)


_SELU_SCALE = _H(1.0507009873554804934193349852946)
_SELU_SCALE_ALPHA = _H(1.7580993408473768599402175208123)


def selu(x: Any) -> Any:
    """TensorFlow's Selu functor in half steps, its two constants rounded to half."""
    with np.errstate(over="ignore"):
        em1 = _round(_round(np.exp(x.astype(_F))).astype(_F) - 1)
    neg = _round(_F(_SELU_SCALE_ALPHA) * em1.astype(_F))
    return np.where(x < 0, neg, _round(_F(_SELU_SCALE) * x.astype(_F)))


# Softplus's cut-offs, log(epsilon) + 2 in half steps, past -threshold x and below threshold exp(x); Eigen's
# half epsilon is 2^-13 (raw 0x0800), not numpy's 2^-10: the threshold is -7.008, not -4.93
_SOFTPLUS_THRESHOLD = _round(_round(np.log(_F(2.0**-13))).astype(_F) + 2)


def softplus(x: Any) -> Any:
    """TensorFlow's Softplus functor in half steps: log1p(exp(x)), exp rounded to half before log1p."""
    with np.errstate(over="ignore"):
        e = _round(np.exp(x.astype(_F)))
        mid = _round(np.log1p(e.astype(_F)))
    return np.where(x > -_SOFTPLUS_THRESHOLD, x, np.where(x < _SOFTPLUS_THRESHOLD, e, mid))


def rsqrt(x: Any) -> Any:
    """Eigen's half rsqrt: 1 / sqrt in float rounded once on whole 8-lane packets, but in two roundings
    (sqrt to half, then its reciprocal) on the scalar tail, the last size % 8 values of the flat tensor."""
    f = np.asarray(x, _F)
    root = np.sqrt(f)
    out = (1 / root).astype(_H)
    flat = out.reshape(-1)
    tail = flat.size - flat.size % _LANES
    if tail < flat.size:
        flat[tail:] = (1 / root.reshape(-1)[tail:].astype(_H).astype(_F)).astype(_H)
    return out


def mean_rows(x: Any) -> Any:
    """TensorFlow's half Mean over the innermost axis: the half row sum (``row_sums``) divided in float."""
    return (row_sums(x).astype(_F) / _F(x.shape[1])).astype(_H)
