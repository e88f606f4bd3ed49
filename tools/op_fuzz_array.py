"""Op-fuzz families for the array, slicing and gather kernels (``runtime/kernels/array_ops.py``,
``slicing_ops.py``, ``gather_ops.py``); loaded by ``tools/op_fuzz.py``.

Every shape-like argument (dims, perm, begin, paddings, axis, k, ...) is a placeholder, so TensorFlow's shape
inference cannot see its value and the run-time checks of both sides are compared; attrs (masks, squeeze
dims, batch_dims, ...) are checked at graph construction and such cases are dropped by the harness.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from op_fuzz import Case, shape, values

Rng = np.random.Generator

# Dtypes of data-movement ops (every kernel here only re-indexes its input): strings included.
DATA = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "bool")
DATA_X = (*DATA, "complex64", "complex128", "string")
INDEX = ("int32", "int64")


def data(rng: Rng, dims: tuple[int, ...], dtype: str) -> np.ndarray:
    """``values`` with strings (object arrays of bytes) added."""
    if dtype == "string":
        n = int(np.prod(dims)) if dims else 1
        words = [b"", b"a", b"bc", b"a\x00b", "\u00e9".encode()]
        return np.array([words[int(i)] for i in rng.integers(0, len(words), size=n)], dtype=object).reshape(
            dims
        )
    return values(rng, dims, dtype)


def pick(rng: Rng, options: tuple[str, ...]) -> str:
    return str(rng.choice(options))


def ints(v: object, dtype: str) -> np.ndarray:
    return np.array(v, dtype=dtype)


def chance(rng: Rng, p: float) -> bool:
    return bool(rng.random() < p)


def wild(rng: Rng, lo: int, hi: int, p: float = 0.15) -> int:
    """An int in [lo, hi], or with probability ``p`` one a little outside."""
    hi = max(hi, lo)
    if chance(rng, p):
        return int(rng.choice([lo - 2, lo - 1, hi + 1, hi + 2]))
    return int(rng.integers(lo, hi + 1))


# ---- sources and shapes -----------------------------------------------------------------------------------


def fill(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = list(shape(rng))
        if chance(rng, 0.15) and dims:
            dims[int(rng.integers(len(dims)))] = -int(rng.integers(1, 3))
        value = data(rng, (), pick(rng, DATA_X))
        cases.append(Case("Fill", {"dims": ints(dims, pick(rng, INDEX)), "value": value}))
    return cases


def range_(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dtype = pick(rng, ("int32", "int64", "float32", "float64", "int16", "int8", "float16"))
        if dtype.startswith("float"):
            pool = [0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -3.25, 7.0, 0.1, -0.3, 1e-3]
            start, limit = (float(rng.choice(pool + [rng.uniform(-10, 10)])) for _ in range(2))
            delta = float(rng.choice([1.0, -1.0, 0.5, -0.5, 0.0, 0.3, -0.7, 2.0, 3.5]))
            if chance(rng, 0.1):
                which = int(rng.integers(3))
                special = float(rng.choice([np.nan, np.inf, -np.inf, -0.0]))
                start, limit, delta = [
                    special if i == which else v for i, v in enumerate((start, limit, delta))
                ]
        else:
            start, limit = (int(rng.integers(-12, 13)) for _ in range(2))
            delta = int(rng.choice([1, -1, 2, -2, 3, -3, 0, 5, -7, 20]))
        cases.append(
            Case(
                "Range",
                {"start": ints(start, dtype), "limit": ints(limit, dtype), "delta": ints(delta, dtype)},
                note=f"{start}:{limit}:{delta}",
            )
        )
    return cases


def _factor(rng: Rng, n: int, parts: int) -> list[int]:
    out = []
    for _ in range(parts - 1):
        divisors = [d for d in range(1, n + 1) if n % d == 0] if n else [0, 1, 2]
        d = int(rng.choice(divisors))
        out.append(d)
        n = n // d if d else n
    out.append(n)
    rng.shuffle(out)
    return out


def reshape(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = shape(rng, int(rng.integers(0, 5)))
        n = int(np.prod(dims)) if dims else 1
        target = _factor(rng, n, int(rng.integers(1, 4))) if chance(rng, 0.9) else []
        if n == 1 and chance(rng, 0.2):
            target = []
        r = rng.random()
        if target and r < 0.4:
            target[int(rng.integers(len(target)))] = -1
        elif target and r < 0.5:
            target[0] = target[-1] = -1
        elif target and r < 0.6:
            target[int(rng.integers(len(target)))] += int(rng.choice([1, -1, 2]))
        elif r < 0.65:
            target.append(-2)
        elif r < 0.75 and 0 in dims:
            target = [0, -1] if chance(rng, 0.5) else [-1, 0, 2]
        cases.append(
            Case(
                "Reshape",
                {"tensor": data(rng, dims, pick(rng, DATA_X)), "shape": ints(target, pick(rng, INDEX))},
            )
        )
    return cases


def squeeze(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = tuple(1 if chance(rng, 0.5) else int(d) for d in shape(rng, int(rng.integers(0, 5))))
        rank = len(dims)
        axes = []
        if rank and chance(rng, 0.7):
            ones = [i for i, d in enumerate(dims) if d == 1]
            k = int(rng.integers(0, len(ones) + 1))
            axes = (
                [int(a) - (rank if chance(rng, 0.5) else 0) for a in rng.choice(ones, size=k, replace=False)]
                if ones
                else []
            )
            if chance(rng, 0.1) and axes:
                axes.append(axes[0])  # duplicated
        cases.append(Case("Squeeze", {"input": data(rng, dims, pick(rng, DATA_X))}, {"axis": axes}))
    return cases


def expand_dims(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = shape(rng, int(rng.integers(0, 4)))
        rank = len(dims)
        d = wild(rng, -rank - 1, rank)
        axis = ints(d if chance(rng, 0.8) else [d], pick(rng, INDEX))
        cases.append(Case("ExpandDims", {"input": data(rng, dims, pick(rng, DATA_X)), "axis": axis}))
    return cases


def broadcast_to(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        target = list(shape(rng, int(rng.integers(0, 5))))
        drop = int(rng.integers(0, len(target) + 1))
        src = [d if chance(rng, 0.6) else 1 for d in target[drop:]]
        r = rng.random()
        if r < 0.1 and src:
            src[int(rng.integers(len(src)))] += 1  # incompatible
        elif r < 0.15:
            src = [1, *src]  # a higher rank
        elif r < 0.2 and target:
            target[int(rng.integers(len(target)))] = -1
        elif r < 0.3 and target:
            target[int(rng.integers(len(target)))] = 0
        x = data(rng, tuple(max(d, 0) for d in src), pick(rng, DATA_X))
        cases.append(Case("BroadcastTo", {"input": x, "shape": ints(target, pick(rng, INDEX))}))
    return cases


def broadcast_args(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        a = list(shape(rng, int(rng.integers(0, 5))))
        b = [d if chance(rng, 0.6) else 1 for d in a[int(rng.integers(0, len(a) + 1)) :]]
        if chance(rng, 0.15) and b:
            b[int(rng.integers(len(b)))] += 2
        if chance(rng, 0.1) and a:
            a[0] = -1
        if chance(rng, 0.5):
            a, b = b, a
        dtype = pick(rng, INDEX)
        cases.append(Case("BroadcastArgs", {"s0": ints(a, dtype), "s1": ints(b, dtype)}))
    return cases


def transpose(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = shape(rng, int(rng.integers(0, 5)))
        rank = len(dims)
        perm = [int(p) for p in rng.permutation(rank)]
        r = rng.random()
        if r < 0.2 and rank:
            i = int(rng.integers(rank))
            perm[i] -= rank  # negative: TF refuses
        elif r < 0.3 and rank > 1:
            perm[0] = perm[1]
        elif r < 0.4 and rank:
            perm[int(rng.integers(rank))] = rank + int(rng.integers(0, 2))
        cases.append(
            Case("Transpose", {"x": data(rng, dims, pick(rng, DATA_X)), "perm": ints(perm, pick(rng, INDEX))})
        )
    return cases


def matrix_band_part(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = shape(rng, int(rng.integers(2, 5)))
        m, n = dims[-2], dims[-1]
        dtype = pick(rng, INDEX)
        lower = wild(rng, -2, m, 0.1)
        upper = wild(rng, -2, n, 0.1)
        x = data(rng, dims, pick(rng, DATA_X))
        cases.append(
            Case(
                "MatrixBandPart",
                {"input": x, "num_lower": ints(lower, dtype), "num_upper": ints(upper, dtype)},
            )
        )
    return cases


def likes(rng: Rng, count: int) -> list[Case]:
    cases = []
    for dtype in DATA_X:
        for op in ("ZerosLike", "OnesLike"):
            cases.append(Case(op, {"x": data(rng, shape(rng), dtype)}))
    for _ in range(max(1, count // 2)):
        x = data(rng, shape(rng, int(rng.integers(0, 6))), pick(rng, DATA_X))
        cases.append(Case("Shape", {"input": x}, {"out_type": pick(rng, INDEX)}))
        cases.append(Case("Size", {"input": x}, {"out_type": pick(rng, INDEX)}))
        cases.append(Case("Rank", {"input": x}))
    return cases


# ---- slicing ----------------------------------------------------------------------------------------------


def slice_(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = shape(rng, int(rng.integers(0, 5)))
        begin, size = [], []
        for d in dims:
            b = wild(rng, 0, d, 0.1)
            s = -1 if chance(rng, 0.25) else wild(rng, 0, max(d - b, 0), 0.1)
            begin.append(b)
            size.append(s)
        dtype = pick(rng, INDEX)
        x = data(rng, dims, pick(rng, DATA_X))
        cases.append(Case("Slice", {"input": x, "begin": ints(begin, dtype), "size": ints(size, dtype)}))
    return cases


def strided_slice(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count * 3):
        dims = shape(rng, int(rng.integers(0, 5)), max_dim=5)
        rank = len(dims)
        n = int(rng.integers(0, rank + 3))

        def mask(p: float, n: int = n) -> int:
            return sum(1 << i for i in range(n) if chance(rng, p))

        ellipsis = 1 << int(rng.integers(n)) if n and chance(rng, 0.3) else 0
        if n > 1 and chance(rng, 0.03):
            ellipsis |= 1 << int(rng.integers(n))
        begin_mask, end_mask = mask(0.25), mask(0.25)
        new_axis, shrink = mask(0.15), mask(0.2)
        if chance(rng, 0.05):
            begin_mask |= 1 << n  # a bit past the spec: ignored
        begin, end, strides = [], [], []
        for i in range(n):
            d = dims[i] if i < rank else 3
            begin.append(
                wild(rng, -d, d, 0.2) if not chance(rng, 0.05) else int(rng.choice([-(2**31), 2**31 - 1]))
            )
            end.append(wild(rng, -d, d, 0.2))
            strides.append(
                int(rng.choice([1, 1, 1, 2, 3, -1, -1, -2, -3, 0] if chance(rng, 0.3) else [1, 2, -1, -2]))
            )
        dtype = pick(rng, INDEX)
        x = data(rng, dims, pick(rng, DATA))
        attrs = {
            "begin_mask": begin_mask,
            "end_mask": end_mask,
            "ellipsis_mask": ellipsis,
            "new_axis_mask": new_axis,
            "shrink_axis_mask": shrink,
        }
        cases.append(
            Case(
                "StridedSlice",
                {
                    "input": x,
                    "begin": ints(begin, dtype),
                    "end": ints(end, dtype),
                    "strides": ints(strides, dtype),
                },
                attrs,
                note=f"b={begin} e={end} s={strides}",
            )
        )
    return cases


# ---- concatenation, stacking, splitting -------------------------------------------------------------------


def concat(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = shape(rng, int(rng.integers(0, 4)))
        rank = len(dims)
        a = int(rng.integers(-rank, rank)) if rank else 0
        dtype = pick(rng, DATA_X)
        parts = []
        for _ in range(int(rng.integers(1, 4))):
            s = list(dims)
            if rank:
                s[a] = int(rng.integers(0, 4))
                if chance(rng, 0.1):
                    j = int(rng.integers(rank))
                    s[j] += 1  # mismatched unless j is the axis
            parts.append(data(rng, tuple(s), dtype))
        axis = wild(rng, -rank, rank - 1, 0.1)
        cases.append(
            Case(
                "ConcatV2", {"values": parts, "axis": ints(axis if chance(rng, 0.3) else a, pick(rng, INDEX))}
            )
        )
    return cases


def pack(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = shape(rng, int(rng.integers(0, 4)))
        rank = len(dims)
        dtype = pick(rng, DATA_X)
        parts = [data(rng, dims, dtype) for _ in range(int(rng.integers(1, 4)))]
        cases.append(Case("Pack", {"values": parts}, {"axis": int(rng.integers(-rank - 1, rank + 1))}))
        if rank:
            axis = int(rng.integers(-rank, rank))
            x = data(rng, dims, dtype)
            cases.append(Case("Unpack", {"value": x}, {"num": dims[axis], "axis": axis}))
    return cases


def split(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = list(shape(rng, int(rng.integers(1, 4)), max_dim=6))
        rank = len(dims)
        a = int(rng.integers(-rank, rank))
        num = int(rng.choice([1, 2, 3]))
        if chance(rng, 0.8):
            dims[a] = num * int(rng.integers(0, 3))
        dtype = pick(rng, DATA_X)
        # Grappler turns a num_split=1 split into an Identity, which accepts any sizes and axis where the
        # kernel (and poolserve) refuse: only valid ones then.
        axis = a if num == 1 or chance(rng, 0.85) else wild(rng, -rank, rank - 1, 1.0)
        x = data(rng, tuple(dims), dtype)
        cases.append(Case("Split", {"axis": ints(axis, "int32"), "value": x}, {"num_split": num}))
        # SplitV: sizes summing to the dim, one -1 perhaps, or wrong.
        sizes = _factor_sum(rng, dims[a], num)
        r = rng.random() if num > 1 else 1.0
        if r < 0.35:
            sizes[int(rng.integers(num))] = -1
        elif r < 0.45 and num > 1:
            sizes[0] = sizes[1] = -1
        elif r < 0.55:
            sizes[int(rng.integers(num))] += int(rng.choice([1, -1]))
        elif r < 0.6:
            sizes[int(rng.integers(num))] = -2
        cases.append(
            Case(
                "SplitV",
                {"value": x, "size_splits": ints(sizes, pick(rng, INDEX)), "axis": ints(axis, "int32")},
                {"num_split": num},
                note=f"sizes={sizes}",
            )
        )
    return cases


def _factor_sum(rng: Rng, n: int, parts: int) -> list[int]:
    cuts = sorted(int(c) for c in rng.integers(0, n + 1, size=parts - 1))
    edges = [0, *cuts, n]
    return [edges[i + 1] - edges[i] for i in range(parts)]


# ---- padding, reversal, tiling ----------------------------------------------------------------------------


def pad(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = shape(rng, int(rng.integers(0, 4)))
        dtype = pick(rng, DATA_X)
        x = data(rng, dims, dtype)
        idx = pick(rng, INDEX)
        pads = [[wild(rng, 0, 2, 0.1), wild(rng, 0, 2, 0.1)] for _ in dims]
        paddings = ints(pads, idx).reshape(len(dims), 2)
        op = pick(rng, ("Pad", "PadV2", "MirrorPad", "MirrorPad"))
        if op == "Pad":
            cases.append(Case("Pad", {"input": x, "paddings": paddings}))
        elif op == "PadV2":
            cases.append(
                Case("PadV2", {"input": x, "paddings": paddings, "constant_values": data(rng, (), dtype)})
            )
        else:
            mode = pick(rng, ("REFLECT", "SYMMETRIC"))
            mirror = [[wild(rng, 0, d - (mode == "REFLECT"), 0.2) for _ in range(2)] for d in dims]
            paddings = ints(mirror, idx).reshape(len(dims), 2)
            cases.append(Case("MirrorPad", {"input": x, "paddings": paddings}, {"mode": mode}))
    return cases


def reverse_tile(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = shape(rng, int(rng.integers(0, 5)))
        rank = len(dims)
        x = data(rng, dims, pick(rng, DATA_X))
        k = int(rng.integers(0, rank + 1))
        axes = (
            [int(a) - (rank if chance(rng, 0.4) else 0) for a in rng.choice(rank, size=k, replace=False)]
            if rank
            else []
        )
        if chance(rng, 0.1) and axes:
            axes.append(axes[0])
        if chance(rng, 0.1):
            axes.append(rank + int(rng.integers(0, 2)))
        cases.append(Case("ReverseV2", {"tensor": x, "axis": ints(axes, pick(rng, INDEX))}))
        multiples = [int(rng.choice([0, 1, 1, 2, 3])) for _ in dims]
        if chance(rng, 0.1) and multiples:
            multiples[0] = -1
        if x.dtype == np.uint16:  # TileOp refuses uint16 at run time (a kernel TF lacks)
            continue
        cases.append(Case("Tile", {"input": x, "multiples": ints(multiples, pick(rng, INDEX))}))
    return cases


# ---- gathers ----------------------------------------------------------------------------------------------


def _indices(rng: Rng, dims: tuple[int, ...], limit: int, dtype: str, bad: float) -> np.ndarray:
    n = int(np.prod(dims)) if dims else 1
    out = rng.integers(0, max(limit, 1), size=n)
    if limit == 0:
        out[:] = 0
    if chance(rng, bad) and n:
        out[int(rng.integers(n))] = int(rng.choice([-1, -limit - 1, limit, limit + 3]))
    return out.astype(dtype).reshape(dims)


def gather(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = shape(rng, int(rng.integers(1, 4)))
        rank = len(dims)
        dtype = pick(rng, DATA_X)
        params = data(rng, dims, dtype)
        idx = pick(rng, INDEX)
        if chance(rng, 0.25):
            ind = _indices(rng, shape(rng, int(rng.integers(0, 3))), dims[0], idx, 0.3)
            cases.append(
                Case("Gather", {"params": params, "indices": ind}, {"validate_indices": chance(rng, 0.5)})
            )
            continue
        axis = int(rng.integers(-rank, rank))
        a = axis % rank
        batch_dims = int(rng.integers(0, a + 1)) if chance(rng, 0.4) else 0
        ind_dims = tuple(dims[:batch_dims]) + shape(rng, int(rng.integers(0, 3)))
        ind = _indices(rng, ind_dims, dims[a], idx, 0.3)
        if batch_dims and chance(rng, 0.3):
            batch_dims -= ind.ndim  # the negative spelling
        axis_v = axis if chance(rng, 0.9) else wild(rng, -rank, rank - 1, 1.0)
        cases.append(
            Case(
                "GatherV2",
                {"params": params, "indices": ind, "axis": ints(axis_v, pick(rng, INDEX))},
                {"batch_dims": batch_dims},
            )
        )
    return cases


def gather_nd(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = shape(rng, int(rng.integers(1, 4)))
        rank = len(dims)
        k = int(rng.integers(0, rank + 1))
        lead = shape(rng, int(rng.integers(0, 3)))
        n = int(np.prod(lead)) if lead else 1
        cols = [rng.integers(0, max(d, 1), size=n) for d in dims[:k]]
        ind = np.stack(cols, axis=-1) if k else np.zeros((n, 0), np.int64)
        if chance(rng, 0.3) and n and k:
            ind[int(rng.integers(n)), int(rng.integers(k))] = int(rng.choice([-1, dims[0] + 1, 7]))
        ind = ind.reshape((*lead, k)).astype(pick(rng, INDEX))
        cases.append(Case("GatherNd", {"params": data(rng, dims, pick(rng, DATA_X)), "indices": ind}))
    return cases


def one_hot(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = shape(rng, int(rng.integers(0, 3)))
        depth = int(rng.integers(0, 5)) if chance(rng, 0.9) else -1
        idx = pick(rng, ("int32", "int64", "uint8", "int8"))
        n = int(np.prod(dims)) if dims else 1
        ind = rng.integers(-2, depth + 2, size=n)
        if idx == "uint8":
            ind = np.abs(ind)
        ind = ind.astype(idx).reshape(dims)
        dtype = pick(rng, DATA_X)
        on, off = data(rng, (), dtype), data(rng, (), dtype)
        axis = int(rng.integers(-1, len(dims) + 1))
        cases.append(
            Case(
                "OneHot",
                {"indices": ind, "depth": ints(depth, "int32"), "on_value": on, "off_value": off},
                {"axis": axis},
            )
        )
    return cases


# ---- selection --------------------------------------------------------------------------------------------


def top_k(rng: Rng, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = shape(rng, int(rng.integers(1, 4)), max_dim=6)
        dtype = pick(
            rng, ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16")
        )
        ties = chance(rng, 0.4)
        x = rng.integers(0, 3, size=dims).astype(dtype) if ties else values(rng, dims, dtype)
        k = wild(rng, 0, dims[-1], 0.15)
        # Documented differences (the kernel's comment): where TF puts NaNs (its algorithm's and CPU's
        # doing) and its unsorted (heap) order; poolserve always sorts.
        if x.dtype.kind == "f":
            x[np.isnan(x)] = 0
        is_sorted = k not in (0, 1, dims[-1]) or chance(rng, 0.5)
        k_type = pick(rng, ("int32", "int32", "int64", "int16"))
        cases.append(
            Case(
                "TopKV2",
                {"input": x, "k": ints(k, k_type)},
                {"sorted": is_sorted, "index_type": pick(rng, ("int32", "int64", "int16"))},
            )
        )
        if dtype in ("float16", "float32") and 0 <= k <= dims[-1]:
            # TensorFlow's CPU kernel for it is its TopK kernel: max-k along the last axis only
            attrs = {
                "k": k,
                "recall_target": float(rng.uniform(0.1, 1)),
                "aggregate_to_topk": chance(rng, 0.5),
            }
            cases.append(Case("ApproxTopK", {"input": x}, attrs))
    return cases


def where(rng: Rng, count: int) -> list[Case]:
    cases = []
    # No float16: TensorFlow's CPU WhereOp refuses it ("No WhereOp available for float16/half type on CPU").
    for dtype in (*DATA[1:], "complex64", "complex128", "int32", "bool", "float32"):
        for _ in range(max(1, count // 10)):
            dims = shape(rng, int(rng.integers(0, 6)), max_dim=3)
            x = data(rng, dims, dtype)
            if dtype.startswith("float") and x.size and chance(rng, 0.5):
                x.reshape(-1)[0] = -0.0
            if dtype in ("float32", "float64", "complex64") and x.size and chance(rng, 0.5):
                x.reshape(-1)[-1] = 1e-40 if dtype != "float64" else 1e-310  # subnormal: 0 to TF
            cases.append(Case("Where", {"condition": x}))
    return cases


def unique(rng: Rng, count: int) -> list[Case]:
    cases = []
    for dtype in (
        "float16",
        "float32",
        "float64",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "bool",
        "string",
    ):
        for _ in range(max(1, count // 6)):
            n = int(rng.integers(0, 9))
            if dtype.startswith("float"):
                x = np.array(
                    rng.choice([0.0, -0.0, 1.0, np.nan, 2.5, -np.inf, np.inf, 1e-40, -1e-310], size=n),
                    dtype=dtype,
                )
            elif dtype == "string":
                x = data(rng, (n,), dtype)
            else:
                x = rng.integers(0, 3, size=n).astype(dtype)
            if chance(rng, 0.1):
                x = x.reshape(1, n) if chance(rng, 0.5) else data(rng, (), dtype)
            cases.append(Case("Unique", {"x": x}, {"out_idx": pick(rng, INDEX)}))
    return cases


def edges(rng: Rng, count: int) -> list[Case]:
    """Hand-picked cases: huge dims of empty tensors, int64 extremes, overflowing spans."""
    big, i64max, i64min = 2**40, 2**63 - 1, -(2**63)
    f32 = np.zeros((0, 3), np.float32)
    cases = [
        Case("Reshape", {"tensor": f32, "shape": ints([big, 0, 5], "int64")}),
        Case("Reshape", {"tensor": f32, "shape": ints([2**62, 4, 0], "int64")}),
        Case("Reshape", {"tensor": f32, "shape": ints([2**62, 4, 0, -1], "int64")}),
        Case("Reshape", {"tensor": f32, "shape": ints([i64max, 0], "int64")}),
        Case("Reshape", {"tensor": np.zeros(6, np.int8), "shape": ints([2**62, 2**2, -1], "int64")}),
        Case("Fill", {"dims": ints([big, 0], "int64"), "value": ints(1.5, "float32")}),
        Case("Fill", {"dims": ints([2**62, 4, 0], "int64"), "value": ints(1.5, "float32")}),
        Case("BroadcastTo", {"input": ints(1, "int32"), "shape": ints([big, 0], "int64")}),
        Case("BroadcastTo", {"input": ints([1], "int32"), "shape": ints([2**62, 4, 0], "int64")}),
        Case("BroadcastArgs", {"s0": ints([i64max, 1], "int64"), "s1": ints([1, i64min], "int64")}),
        Case(
            "Range",
            {"start": ints(i64min, "int64"), "limit": ints(i64max, "int64"), "delta": ints(2**62, "int64")},
        ),
        Case(
            "Range",
            {"start": ints(i64min, "int64"), "limit": ints(i64max, "int64"), "delta": ints(i64max, "int64")},
        ),
        Case(
            "Range",
            {"start": ints(i64max, "int64"), "limit": ints(i64min, "int64"), "delta": ints(i64min, "int64")},
        ),
        Case(
            "Range",
            {
                "start": ints(-(2**31), "int32"),
                "limit": ints(2**31 - 1, "int32"),
                "delta": ints(2**30, "int32"),
            },
        ),
        Case(
            "Range",
            {
                "start": ints(2**31 - 1, "int32"),
                "limit": ints(-(2**31), "int32"),
                "delta": ints(-(2**31), "int32"),
            },
        ),
        Case(
            "Range",
            {"start": ints(0, "float32"), "limit": ints(3e38, "float32"), "delta": ints(1e20, "float32")},
        ),
        Case(
            "Range",
            {"start": ints(0, "float32"), "limit": ints(1, "float32"), "delta": ints(1e-30, "float32")},
        ),
        Case(
            "Range",
            {"start": ints(0, "float64"), "limit": ints(1e300, "float64"), "delta": ints(1e-300, "float64")},
        ),
        Case(
            "Range", {"start": ints(1, "float16"), "limit": ints(2, "float16"), "delta": ints(0.1, "float16")}
        ),
        Case(
            "Range",
            {"start": ints(-3, "float16"), "limit": ints(60000, "float16"), "delta": ints(7000, "float16")},
        ),
        Case("Tile", {"input": f32, "multiples": ints([big, 2], "int64")}),
        Case("Tile", {"input": f32, "multiples": ints([2**62, 2**62], "int64")}),
        Case("Pad", {"input": f32, "paddings": ints([[0, 0], [big, 0]], "int64")}),
        Case("Pad", {"input": f32, "paddings": ints([[0, 0], [i64max, 0]], "int64")}),
        Case(
            "OneHot",
            {
                "indices": np.zeros(0, np.int32),
                "depth": ints(2**31 - 1, "int32"),
                "on_value": ints(1, "float32"),
                "off_value": ints(0, "float32"),
            },
        ),
        Case(
            "OneHot",
            {
                "indices": np.zeros((2, 0), np.int64),
                "depth": ints(2**31 - 1, "int32"),
                "on_value": ints(1, "float32"),
                "off_value": ints(0, "float32"),
            },
            {"axis": 0},
        ),
        Case("ExpandDims", {"input": f32, "axis": ints(2**40, "int64")}),
        Case("ExpandDims", {"input": f32, "axis": ints(-(2**40), "int64")}),
        Case("Transpose", {"x": f32, "perm": ints([2**40, 0], "int64")}),
        Case("Transpose", {"x": f32, "perm": ints([1 - 2**32, 0], "int64")}),
        Case("GatherV2", {"params": f32, "indices": np.zeros(2, np.int64), "axis": ints(2**32 + 1, "int64")}),
        Case(
            "GatherV2",
            {
                "params": np.arange(6.0).reshape(2, 3),
                "indices": ints([2**32 + 1], "int64"),
                "axis": ints(1, "int64"),
            },
        ),
        Case(
            "GatherV2",
            {
                "params": np.arange(6.0).reshape(2, 3),
                "indices": ints([i64min], "int64"),
                "axis": ints(-1, "int64"),
            },
        ),
        Case("Gather", {"params": np.arange(6.0).reshape(2, 3), "indices": ints([[i64max]], "int64")}),
        Case(
            "GatherNd", {"params": np.arange(6.0).reshape(2, 3), "indices": ints([[1, 2**32 + 1]], "int64")}
        ),
        Case("Slice", {"input": f32, "begin": ints([0, i64max], "int64"), "size": ints([0, -1], "int64")}),
        Case(
            "Slice",
            {
                "input": np.arange(6.0).reshape(2, 3),
                "begin": ints([1, 2], "int64"),
                "size": ints([-1, i64max], "int64"),
            },
        ),
        Case(
            "Slice",
            {
                "input": np.arange(6.0).reshape(2, 3),
                "begin": ints([1, 2**32], "int64"),
                "size": ints([-1, -1], "int64"),
            },
        ),
        Case(
            "StridedSlice",
            {
                "input": np.arange(6.0).reshape(2, 3),
                "begin": ints([i64min, i64max], "int64"),
                "end": ints([i64max, i64min], "int64"),
                "strides": ints([1, -1], "int64"),
            },
        ),
        Case(
            "StridedSlice",
            {
                "input": np.arange(6.0).reshape(2, 3),
                "begin": ints([0, 0], "int64"),
                "end": ints([2, 3], "int64"),
                "strides": ints([i64min, i64max], "int64"),
            },
        ),
        Case(
            "StridedSlice",
            {
                "input": np.arange(6.0).reshape(2, 3),
                "begin": ints([-(2**32), 0], "int64"),
                "end": ints([2, 3], "int64"),
                "strides": ints([1, 1], "int64"),
            },
            {"shrink_axis_mask": 1},
        ),
        Case(
            "SplitV",
            {"value": np.arange(6.0), "size_splits": ints([i64max, -1], "int64"), "axis": ints(0, "int32")},
            {"num_split": 2},
        ),
        Case(
            "SplitV",
            {
                "value": np.arange(6.0),
                "size_splits": ints([i64max, i64max, 2], "int64"),
                "axis": ints(0, "int32"),
            },
            {"num_split": 3},
        ),
        Case(
            "SplitV",
            {"value": np.arange(6.0), "size_splits": ints([7, -1], "int64"), "axis": ints(0, "int32")},
            {"num_split": 2},
        ),
        Case(
            "SplitV",
            {"value": np.arange(6.0), "size_splits": ints([8, -2], "int64"), "axis": ints(0, "int32")},
            {"num_split": 2},
        ),
        Case("Split", {"axis": ints(-(2**31), "int32"), "value": np.arange(6.0)}, {"num_split": 2}),
        Case("ConcatV2", {"values": [f32, f32], "axis": ints(2**32, "int64")}),
        Case("ConcatV2", {"values": [f32, np.zeros((0, 0), np.float32)], "axis": ints(0, "int32")}),
        *(
            Case(
                "ConcatV2",
                {"values": [np.ones((1, 2), np.int8), np.ones((1, 1), np.int8)], "axis": ints(a, "int64")},
            )
            for a in (2**32 + 1, 2**32 + 2, -(2**32) + 1, -(2**32) - 1, 2**33 - 1, -(2**31) - 1)
        ),
        *(
            Case("Transpose", {"x": np.arange(6).reshape(2, 3), "perm": ints(p, "int64")})
            for p in ([2**32 + 1, -(2**32)], [2**32 - 1, 0], [-(2**32) - 1, 2**32], [2**31, 0])
        ),
        *(
            Case("TopKV2", {"input": np.arange(4.0), "k": ints(k, "int64")})
            for k in (2**32 + 2, 2**31 + 1, -(2**32))
        ),
        Case("ConcatV2", {"values": [f32, np.zeros((0, 0), np.float32)], "axis": ints(1, "int32")}),
        Case(
            "MatrixBandPart",
            {"input": f32, "num_lower": ints(i64min, "int64"), "num_upper": ints(i64max, "int64")},
        ),
        Case(
            "MatrixBandPart",
            {
                "input": np.ones((3, 3), np.float32),
                "num_lower": ints(2**32, "int64"),
                "num_upper": ints(-(2**32), "int64"),
            },
        ),
        Case(
            "MirrorPad",
            {"input": np.arange(3.0), "paddings": ints([[i64max, 0]], "int64")},
            {"mode": "SYMMETRIC"},
        ),
        Case("ReverseV2", {"tensor": np.arange(3.0), "axis": ints([2**32], "int64")}),
        Case("TopKV2", {"input": np.arange(3.0), "k": ints(2**32 + 1, "int64")}),
        Case("TopKV2", {"input": np.arange(3.0), "k": ints(-(2**32) + 1, "int64")}),
        Case("TopKV2", {"input": np.zeros((0, 3)), "k": ints(2, "int32")}, {"sorted": False}),
        Case("Unique", {"x": np.array([np.nan, -np.nan, 0.0, -0.0], np.float16)}),
        Case("Unique", {"x": np.array([b"", b"", b"a"], dtype=object)}, {"out_idx": "int64"}),
        Case("Where", {"condition": np.array([[np.nan, 0.0], [-0.0, 1e-45]], np.float32)}),
        Case("Where", {"condition": np.array([0j, 1j, complex(np.nan, 0)], np.complex64)}),
    ]
    return cases


def families() -> dict[str, Callable[[Rng, int], list[Case]]]:
    return {
        "arr_fill": fill,
        "arr_range": range_,
        "arr_reshape": reshape,
        "arr_squeeze": squeeze,
        "arr_expand_dims": expand_dims,
        "arr_broadcast_to": broadcast_to,
        "arr_broadcast_args": broadcast_args,
        "arr_transpose": transpose,
        "arr_matrix_band_part": matrix_band_part,
        "arr_likes": likes,
        "arr_slice": slice_,
        "arr_strided_slice": strided_slice,
        "arr_concat": concat,
        "arr_pack": pack,
        "arr_split": split,
        "arr_pad": pad,
        "arr_reverse_tile": reverse_tile,
        "arr_gather": gather,
        "arr_gather_nd": gather_nd,
        "arr_one_hot": one_hot,
        "arr_top_k": top_k,
        "arr_where": where,
        "arr_unique": unique,
        "arr_edges": edges,
    }
