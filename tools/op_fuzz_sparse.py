"""op_fuzz families: segment reductions (Segment*, UnsortedSegment*, SparseSegment* and their
WithNumSegments forms), sparse tensors (SparseToDense, SparseTensorDenseMatMul, SparseFillEmptyRows,
SparseReshape, SparseReorder) and scatters (ScatterNd, TensorScatterUpdate/Add/Sub/Max/Min).

Kept out of the cases, as TensorFlow's answers there are artifacts: NaN in Max/Min reductions and scatters
(its ``cwiseMax`` answer depends on the order of the operands), repeated indices in TensorScatterUpdate and
SparseReorder (which update wins, which value comes first: unspecified), SparseReshape indices outside their
shape (no check, an unspecified answer), a negative ``a_shape`` in SparseTensorDenseMatMul (TensorFlow
aborts the process).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from op_fuzz import Case, values

SEGMENT_T = ("float32", "float64", "float16", "int32", "int64", "int8", "uint8", "int16", "uint16")
SPARSE_MEAN_T = ("float32", "float64", "float16")


def _dims(rng: np.random.Generator, rank: int, low: int = 0, high: int = 4) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(low, high + 1, size=rank))


def _no_nan(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f":
        x = x.copy()
        x[np.isnan(x)] = 0
    return x


def _vals(rng: np.random.Generator, dims: tuple[int, ...], dtype: str) -> np.ndarray:
    """``values``, or byte strings for "string"."""
    if dtype != "string":
        return values(rng, dims, dtype)
    # no trailing NUL: TensorFlow's Session hands a string scalar back as numpy bytes, which drop it
    words = np.array([b"", b"a", b"bc", b"\x00\xff", b"word"], dtype=object)
    return rng.choice(words, size=dims).astype(object) if dims else np.array(rng.choice(words), dtype=object)


def _sorted_ids(rng: np.random.Generator, n: int, idx: str) -> np.ndarray:
    """Sorted segment ids with gaps; now and then unsorted or negative (refused)."""
    ids = np.sort(rng.integers(0, max(n, 1) + 2, size=n))
    r = rng.random()
    if n and r < 0.08:
        ids = rng.permutation(ids)
    elif n and r < 0.14:
        ids[0] = -int(rng.integers(1, 3))
    elif n and r < 0.18:
        ids[-1] = -1
    return ids.astype(idx)


def segments(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    sorted_ops = ("SegmentSum", "SegmentMean", "SegmentProd", "SegmentMax", "SegmentMin")
    unsorted_ops = ("UnsortedSegmentSum", "UnsortedSegmentProd", "UnsortedSegmentMax", "UnsortedSegmentMin")
    for _ in range(count):
        for op in sorted_ops:
            dtype = str(rng.choice([*SEGMENT_T, "complex64"] if op in sorted_ops[:3] else SEGMENT_T))
            n = int(rng.integers(0, 7))
            x = values(rng, (n, *_dims(rng, int(rng.integers(0, 3)))), dtype)
            if op in ("SegmentMax", "SegmentMin"):
                x = _no_nan(x)
            ids = _sorted_ids(rng, n, str(rng.choice(["int32", "int64"])))
            cases.append(Case(op, {"data": x, "segment_ids": ids}))
        for op in unsorted_ops:
            dtype = str(rng.choice([*SEGMENT_T, "complex64"] if op in unsorted_ops[:2] else SEGMENT_T))
            id_dims = _dims(rng, int(rng.integers(0, 3)))
            x = values(rng, (*id_dims, *_dims(rng, int(rng.integers(0, 2)))), dtype)
            if op in ("UnsortedSegmentMax", "UnsortedSegmentMin"):
                x = _no_nan(x)
            num = int(rng.integers(0, 6))
            idx = str(rng.choice(["int32", "int64"]))
            high = num + (1 if rng.random() < 0.15 else 0)
            ids = rng.integers(-1 if rng.random() < 0.3 else 0, max(high, 1), size=id_dims).astype(idx)
            num_t = np.array(num, dtype=str(rng.choice(["int32", "int64"])))
            cases.append(Case(op, {"data": x, "segment_ids": ids, "num_segments": num_t}))
        for base in ("SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN"):
            dtype = str(rng.choice(SEGMENT_T if base == "SparseSegmentSum" else SPARSE_MEAN_T))
            rows = int(rng.integers(0, 5))
            x = values(rng, (rows, *_dims(rng, int(rng.integers(0, 3)))), dtype)
            n = int(rng.integers(0, 8))
            tidx = str(rng.choice(["int32", "int64"]))
            low, high = (-1, rows + 1) if rng.random() < 0.1 else (0, max(rows, 1))
            indices = rng.integers(low, high, size=n).astype(tidx)
            if rows == 0 and rng.random() < 0.7:
                indices = indices[:0]
            ids = _sorted_ids(rng, indices.shape[0], str(rng.choice(["int32", "int64"])))
            inputs = {"data": x, "indices": indices, "segment_ids": ids}
            attrs = {"sparse_gradient": bool(rng.random() < 0.2)}
            cases.append(Case(base, inputs, attrs))
            last = int(ids[-1]) + 1 if ids.size else 0
            num = max(last, 0) + int(rng.integers(-1 if rng.random() < 0.1 else 0, 3))
            num_t = np.array(max(num, 0), dtype=str(rng.choice(["int32", "int64"])))
            cases.append(Case(base + "WithNumSegments", {**inputs, "num_segments": num_t}, attrs))
    return cases


def _sorted_unique_indices(rng: np.random.Generator, dims: tuple[int, ...], n: int) -> np.ndarray:
    size = int(np.prod(dims))
    if size == 0 or not dims:
        return np.zeros((0, len(dims)), np.int64)
    flat = np.sort(rng.choice(size, size=min(n, size), replace=False))
    return np.stack(np.unravel_index(flat, dims), axis=1).astype(np.int64)


def sparse_tensors(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        # SparseToDense
        rank = int(rng.integers(0, 4))
        dims = _dims(rng, rank, 0, 4)
        idx = _sorted_unique_indices(rng, dims, int(rng.integers(0, 6)))
        if rank == 0:  # a scalar: its indices are all the empty index
            idx = np.zeros((int(rng.integers(0, 3)), 0), np.int64)
        validate = bool(rng.random() < 0.7)
        r = rng.random()
        if len(idx) > 1 and r < 0.15:
            idx = idx[::-1].copy()  # out of order
        elif len(idx) and r < 0.25:
            idx = np.concatenate([idx, idx[-1:]])  # repeated: with validation off, the last write wins
        elif len(idx) and rank and r < 0.35:
            idx[-1, -1] = dims[-1] if rng.random() < 0.5 else -1
        dtype = str(
            rng.choice([*("float32", "int32", "int64", "float64"), *("bool", "uint8", "float16", "string")])
        )
        vals = _vals(rng, (len(idx),), dtype) if rng.random() < 0.8 else _vals(rng, (), dtype)
        tidx = str(rng.choice(["int32", "int64"]))
        sp_idx = idx.astype(tidx)
        if rank == 1 and rng.random() < 0.3:
            sp_idx = sp_idx.reshape(-1)  # a vector of 1-D indices
        cases.append(
            Case(
                "SparseToDense",
                {
                    "sparse_indices": sp_idx,
                    "output_shape": np.array(dims, tidx),
                    "sparse_values": vals,
                    "default_value": _vals(rng, (), dtype),
                },
                {"validate_indices": validate},
            )
        )
        # SparseTensorDenseMatMul
        m, k, n = (int(d) for d in rng.integers(0, 5, size=3))
        adj_a, adj_b = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        a_dims = (k, m) if adj_a else (m, k)
        a_idx = _sorted_unique_indices(rng, a_dims, int(rng.integers(0, 7)))
        if len(a_idx) and rng.random() < 0.1:
            a_idx[0, int(rng.integers(0, 2))] = a_dims[0] + 1 if rng.random() < 0.5 else -1
        if rng.random() < 0.3:
            a_idx = rng.permutation(a_idx)
        dtype = str(rng.choice(["float32", "float64", "int32", "int64", "complex64", "float16"]))
        b_dims = (n, k) if adj_b else (k, n)
        if rng.random() < 0.05:
            b_dims = (b_dims[0] + 1, b_dims[1])
        b = values(rng, b_dims, dtype, edge=False)
        a_vals = values(rng, (len(a_idx),), dtype, edge=False)
        if dtype == "float16":  # keep half products and sums exact enough to compare
            a_vals, b = np.round(a_vals), np.round(b)
        cases.append(
            Case(
                "SparseTensorDenseMatMul",
                {
                    "a_indices": a_idx.astype(str(rng.choice(["int32", "int64"]))),
                    "a_values": a_vals,
                    "a_shape": np.array(a_dims, np.int64),
                    "b": b,
                },
                {"adjoint_a": adj_a, "adjoint_b": adj_b},
            )
        )
        # SparseFillEmptyRows
        dims = _dims(rng, int(rng.integers(1, 4)), 0, 4)
        idx = _sorted_unique_indices(rng, dims, int(rng.integers(0, 7)))
        if len(idx) > 1 and rng.random() < 0.4:
            idx = rng.permutation(idx)
        if len(idx) and rng.random() < 0.1:
            idx[-1, 0] = dims[0] if rng.random() < 0.5 else -1
        dtype = str(rng.choice(["float32", "int64", "int32", "bool", "float64", "string"]))
        cases.append(
            Case(
                "SparseFillEmptyRows",
                {
                    "indices": idx,
                    "values": _vals(rng, (len(idx),), dtype),
                    "dense_shape": np.array(dims, np.int64),
                    "default_value": _vals(rng, (), dtype),
                },
            )
        )
        # SparseReshape: indices inside the shape (outside it TensorFlow's answer is unspecified)
        dims = _dims(rng, int(rng.integers(0, 4)), 0, 4)
        idx = _sorted_unique_indices(rng, dims, int(rng.integers(0, 6)))
        if not dims and rng.random() < 0.5:
            idx = np.zeros((1, 0), np.int64)
        size = int(np.prod(dims))
        target = [int(d) for d in rng.permutation(_factor(rng, size))]
        if target and rng.random() < 0.4:
            target[int(rng.integers(0, len(target)))] = -1
        if rng.random() < 0.1:
            target = [*target, int(rng.choice([-1, 2, 0]))]
        cases.append(
            Case(
                "SparseReshape",
                {
                    "input_indices": idx,
                    "input_shape": np.array(dims, np.int64),
                    "new_shape": np.array(target, np.int64),
                },
            )
        )
        # SparseReorder: unique indices (repeated ones may come out in any order there)
        dims = _dims(rng, int(rng.integers(1, 4)), 1, 4)
        idx = rng.permutation(_sorted_unique_indices(rng, dims, int(rng.integers(0, 7))))
        if len(idx) and rng.random() < 0.1:
            idx[0, 0] = -1 if rng.random() < 0.5 else dims[0] + 2  # not checked by TensorFlow
        dtype = str(rng.choice(["float32", "int64", "bool", "float16", "string"]))
        cases.append(
            Case(
                "SparseReorder",
                {
                    "input_indices": idx,
                    "input_values": _vals(rng, (len(idx),), dtype),
                    "input_shape": np.array(dims, np.int64),
                },
            )
        )
    return cases


def _factor(rng: np.random.Generator, size: int) -> list[int]:
    """A shape with ``size`` elements (rank 0 to 3)."""
    if size == 0:
        return [int(d) for d in rng.integers(0, 3, size=int(rng.integers(1, 3)))] + [0]
    out = []
    rest = size
    for _ in range(int(rng.integers(0, 3))):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        d = int(rng.choice(divisors))
        out.append(d)
        rest //= d
    if rest != 1 or not out:
        out.append(rest)
    return out if size != 1 or rng.random() < 0.7 else []


def scatters(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    ops = ("ScatterNd", "TensorScatterUpdate", "TensorScatterAdd", "TensorScatterSub")
    ops += ("TensorScatterMax", "TensorScatterMin")
    for _ in range(count):
        for op in ops:
            rank = int(rng.integers(1, 4)) if rng.random() < 0.9 else int(rng.integers(5, 9))
            dims = _dims(rng, rank, 1 if rng.random() < 0.9 else 0, 4 if rank < 5 else 2)
            depth = int(rng.integers(1, rank + 1))
            batch = _dims(rng, int(rng.integers(1, 3)), 0, 3)
            n = int(np.prod(batch))
            size = int(np.prod(dims[:depth]))
            if op == "TensorScatterUpdate":  # unique: which of repeated updates wins is unspecified
                n = min(n, size)
                batch = (n,)
                flat = rng.choice(size, size=n, replace=False) if size else np.zeros(0, np.int64)
            else:
                flat = rng.integers(0, max(size, 1), size=n)
            if size:
                idx = np.stack(np.unravel_index(flat, dims[:depth]), axis=-1).reshape(*batch, depth)
            else:
                idx = np.zeros((*batch, depth), np.int64)
            policy = str(rng.choice(["", "", "IGNORE", "ERROR"]))
            if idx.size and rng.random() < 0.15:
                pos = tuple(int(rng.integers(0, d)) for d in idx.shape)
                idx[pos] = -1 if rng.random() < 0.5 else dims[pos[-1]]
            tidx = str(rng.choice(["int32", "int64"]))
            dtype = str(rng.choice(["float32", "float64", "int32", "int64", "float16", "uint8", "int8"]))
            if op in ("ScatterNd", "TensorScatterUpdate") and rng.random() < 0.15:
                dtype = str(rng.choice(["bool", "complex64", "string"]))
            updates = _vals(rng, (*batch, *dims[depth:]), dtype)
            if op in ("TensorScatterMax", "TensorScatterMin"):
                updates = _no_nan(updates)
            attrs = {"bad_indices_policy": policy}
            if op == "ScatterNd":
                inputs = {"indices": idx.astype(tidx), "updates": updates, "shape": np.array(dims, tidx)}
            else:
                tensor = _vals(rng, dims, dtype)
                if op in ("TensorScatterMax", "TensorScatterMin"):
                    tensor = _no_nan(tensor)
                inputs = {"tensor": tensor, "indices": idx.astype(tidx), "updates": updates}
            cases.append(Case(op, inputs, attrs))
    return cases


def families() -> dict[str, Callable[[np.random.Generator, int], list[Case]]]:
    return {"sparse_segments": segments, "sparse_tensors": sparse_tensors, "sparse_scatters": scatters}
