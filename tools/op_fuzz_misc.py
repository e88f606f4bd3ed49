"""op_fuzz families: MaxPoolWithArgmax, CumulativeLogsumexp, DecodeRaw, the losses (L2Loss and the softmax
cross entropies), Cross and HistogramFixedWidth. BatchNormWithGlobalNormalization has no family:
TensorFlow refuses to build it in a current GraphDef (removed in version 9), so its tests hold
TensorFlow's values from a version-8 graph."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from op_fuzz import Case, values


def _dims(rng: np.random.Generator, rank: int, low: int = 0, high: int = 4) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(low, high + 1, size=rank))


def max_pool_argmax(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = (
            int(rng.integers(1, 3)),
            *_dims(rng, 2, 0 if rng.random() < 0.1 else 3, 6),
            int(rng.integers(1, 4)),
        )
        dtype = str(rng.choice(["float32", "float64", "float16", "int32", "int64", "uint8", "int8"]))
        x = values(rng, dims, dtype)
        if x.dtype.kind == "f":
            # TensorFlow keeps a NaN first in its window and skips a later one: an order artifact
            # poolserve does not follow, so no NaN here
            x[np.isnan(x)] = 0.5
        if rng.random() < 0.3:  # many ties
            x = rng.integers(0, 2, size=dims).astype(dtype)
        kh, kw = (int(k) for k in rng.integers(1, 4, size=2))
        sh, sw = (int(k) for k in rng.integers(1, 4, size=2))
        ksize, strides = [1, kh, kw, 1], [1, sh, sw, 1]
        if rng.random() < 0.05:
            ksize[0] = 2
        # no depth window or stride: TensorFlow checks them as MaxPool does, then pools each channel
        # spatially as if they were 1 (an output shape its shape function disagrees with); poolserve refuses
        attrs = {
            "ksize": ksize,
            "strides": strides,
            "padding": str(rng.choice(["SAME", "VALID"])),
            "Targmax": str(rng.choice(["int32", "int64"])),
            "include_batch_in_index": bool(rng.random() < 0.5),
        }
        if rng.random() < 0.05:
            x = x[0]
        cases.append(Case("MaxPoolWithArgmax", {"input": x}, attrs))
    return cases


def cumulative_logsumexp(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        rank = int(rng.integers(0, 4))
        dims = _dims(rng, rank)
        dtype = str(rng.choice(["float32", "float64", "float16"]))
        x = values(rng, dims, dtype)
        # TensorFlow's log-add of NaN and a number takes the number twice (Eigen's min and max pass the NaN
        # over), and of inf and inf gives NaN: artifacts poolserve does not follow (NaN propagates,
        # inf + inf is inf), so neither is generated
        x[np.isnan(x) | (x == np.inf)] = 1.5
        axis = int(rng.integers(-rank, rank)) if rank else 0
        if rng.random() < 0.1:  # out of range
            axis = rank if rng.random() < 0.5 else -rank - 1
        axis_t = np.array(axis, dtype=str(rng.choice(["int32", "int64"])))
        if rng.random() < 0.05:
            axis_t = axis_t.reshape(1)
        attrs = {"exclusive": bool(rng.random() < 0.5), "reverse": bool(rng.random() < 0.5)}
        cases.append(Case("CumulativeLogsumexp", {"x": x, "axis": axis_t}, attrs))
    return cases


RAW_TYPES = (
    "float16",
    "float32",
    "float64",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "int64",
    "complex64",
)
RAW_TYPES += ("complex128", "bool")


def decode_raw(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        out_type = str(rng.choice(RAW_TYPES))
        size = np.dtype(out_type).itemsize
        dims = _dims(rng, int(rng.integers(0, 3)))
        length = size * int(rng.integers(0, 4))
        if rng.random() < 0.1:
            length += 1
        n = int(np.prod(dims))
        lengths = [length] * n
        if n and rng.random() < 0.1:
            lengths[int(rng.integers(0, n))] = length + size
        data = [rng.integers(0, 256, size=k).astype(np.uint8).tobytes() for k in lengths]
        if out_type == "bool":  # TensorFlow gives the byte itself as a bool (2 stays 2): only 0 and 1 here
            data = [bytes(b & 1 for b in d) for d in data]
        strings = np.array(data, dtype=object).reshape(dims)
        attrs = {"out_type": out_type, "little_endian": bool(rng.random() < 0.7)}
        cases.append(Case("DecodeRaw", {"bytes": strings}, attrs))
    return cases


def losses(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dtype = str(rng.choice(["float32", "float64", "float16"]))
        dims = _dims(rng, int(rng.integers(0, 4)))
        cases.append(Case("L2Loss", {"t": values(rng, dims, dtype)}))
        n, k = _dims(rng, 2)
        logits = values(rng, (n, k), dtype, edge=rng.random() < 0.3)
        labels = np.abs(values(rng, (n, k), dtype, edge=False))
        if rng.random() < 0.4:  # broadcast one side
            which = int(rng.integers(0, 2))
            small = (1, k) if rng.random() < 0.5 else (n, 1)
            if rng.random() < 0.1:
                small = (k + 1,)
            if which:
                labels = np.abs(values(rng, small, dtype, edge=False))
            else:
                logits = values(rng, small, dtype)
        cases.append(Case("SoftmaxCrossEntropyWithLogits", {"features": logits, "labels": labels}))
        idx = str(rng.choice(["int32", "int64"]))
        sparse = rng.integers(-1 if rng.random() < 0.1 else 0, max(k, 1) + int(rng.random() < 0.1), size=n)
        feats = values(rng, (n, k), dtype, edge=rng.random() < 0.3)
        if rng.random() < 0.05:
            sparse = sparse[:-1] if n else np.zeros(1, int)
        cases.append(
            Case("SparseSoftmaxCrossEntropyWithLogits", {"features": feats, "labels": sparse.astype(idx)})
        )
    return cases


def cross_histogram(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dtype = str(rng.choice(["float32", "float64", "float16", "int32", "int64", "int8", "uint8"]))
        dims = (*_dims(rng, int(rng.integers(0, 3))), 3 if rng.random() < 0.9 else int(rng.integers(0, 5)))
        if rng.random() < 0.03:
            dims = ()
        other = dims if rng.random() < 0.95 else (*dims[:-1], 3, 1)
        a, b = values(rng, dims, dtype), values(rng, other, dtype)
        cases.append(Case("Cross", {"a": a, "b": b}))
        dtype = str(rng.choice(["float32", "float64", "int32", "int64"]))
        x = values(rng, _dims(rng, int(rng.integers(0, 3)), 0, 6), dtype)
        lo = float(rng.integers(-10, 5)) / 2
        hi = lo + float(rng.integers(0 if rng.random() < 0.1 else 1, 12)) / 2
        vr = np.array([lo, hi] if rng.random() < 0.95 else [lo, hi, hi], dtype=dtype)
        nbins = np.array(int(rng.integers(-1 if rng.random() < 0.1 else 1, 8)), "int32")
        attrs = {"dtype": str(rng.choice(["int32", "int64"]))}
        cases.append(Case("HistogramFixedWidth", {"values": x, "value_range": vr, "nbins": nbins}, attrs))
    return cases


def families() -> dict[str, Callable[[np.random.Generator, int], list[Case]]]:
    return {
        "misc_max_pool_argmax": max_pool_argmax,
        "misc_cumulative_logsumexp": cumulative_logsumexp,
        "misc_decode_raw": decode_raw,
        "misc_losses": losses,
        "misc_cross_histogram": cross_histogram,
    }
