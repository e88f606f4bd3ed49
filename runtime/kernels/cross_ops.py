"""Feature crosses and fingerprints: SparseCross, SparseCrossHashed, SparseCrossV2 and Fingerprint.

``tf.sparse.cross`` / ``cross_hashed`` (Keras' HashedCrossing and FeatureSpace crosses, feature columns'
``crossed_column``) cross sparse [batch, n] string or int64 columns and dense [batch, k] ones: each batch row
gets every combination of one value per column (sparse columns first, then dense; the last column varies
fastest), as a [batch, max crosses] SparseTensor. SparseCrossV2 joins the values' text with a separator;
the hashed forms chain TensorFlow's ``FingerprintCat64`` over each value's fingerprint (FarmHash
``Fingerprint64`` of a string, an int64 as itself) and take it modulo the bucket count (modulo 2**63 - 1
without one). SparseCross starts the chain at its ``hash_key`` attr; SparseCrossHashed at the first value,
and hashes strings (and int64 values of sparse columns) with SipHash under its salt when ``strong_hash``
is set.

As TensorFlow does, a sparse column's rows are read walking its indices in order: a row whose index goes
back (unsorted) or out of [0, batch) ends the column there, the rest of its values are not crossed.
SparseCrossHashed fingerprints an int64 value of a sparse column (or strong-hashes one of a dense column)
from its first four bytes only (TensorFlow takes ``sizeof`` of the dtype enum for the value's size); this
is reproduced, since models trained with TensorFlow hashed so. TensorFlow 2.21 crashes on strong hashes of
dense int64 columns; here they hash those four bytes like the sparse ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import farmhash
import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _dims, _type_name
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.kernels.string_ops import siphash24
from poolserve.runtime.node import Node

_U64 = np.dtype(np.uint64)
_I64 = np.dtype(np.int64)
_MUL = np.uint64(0xC6A4A7935BD1E995)
_INT64_MAX = np.uint64(2**63 - 1)


def fingerprint64(items: list[bytes]) -> Any:
    """FarmHash ``Fingerprint64`` of each string, as uint64."""
    fp = farmhash.fingerprint64
    return np.fromiter((fp(s) for s in items), dtype=_U64, count=len(items))


def fingerprint_cat64(fp1: Any, fp2: Any) -> Any:
    """TensorFlow's ``FingerprintCat64``, elementwise over uint64 arrays."""
    with np.errstate(over="ignore"):
        r = fp1 ^ _MUL
        m = fp2 * _MUL
        r = (r ^ ((m ^ (m >> np.uint64(47))) * _MUL)) * _MUL
        r = (r ^ (r >> np.uint64(47))) * _MUL
        return r ^ (r >> np.uint64(47))


# --- columns -----------------------------------------------------------------------------------------------


class _Columns:
    """The crossed columns of one step: per column its per-row feature counts, and where the features of a
    row start in the column's flat values (dense columns: row * width)."""

    def __init__(self, inputs: list[Any], n_sparse: int, n_dense: int) -> None:
        indices = inputs[:n_sparse]
        self.values: list[Any] = inputs[n_sparse : 2 * n_sparse]
        shapes = inputs[2 * n_sparse : 3 * n_sparse]
        self.dense: list[Any] = inputs[3 * n_sparse : 3 * n_sparse + n_dense]
        _validate(indices, self.values, shapes, self.dense)
        if shapes:
            self.batch = int(shapes[0][0])
        else:
            self.batch = self.dense[0].shape[0] if self.dense else 0
        for i, s in enumerate(shapes):
            if int(s[0]) != self.batch:
                raise InvalidArgumentError(
                    f"Expected batch size {self.batch} got {int(s[0])} at position {i}"
                )
        for i, d in enumerate(self.dense):
            if d.shape[0] != self.batch:
                raise InvalidArgumentError(
                    f"Expected batch size {self.batch} got {d.shape[0]} at dense tensor {i}"
                )
        batch = max(self.batch, 0)
        self.counts: list[Any] = []
        self.starts: list[Any] = []
        for idx in indices:
            rows = idx[:, 0]
            bad = (rows < 0) | (rows >= batch)
            bad[1:] |= rows[1:] < rows[:-1]
            end = int(np.argmax(bad)) if bad.any() else rows.size
            counts = np.bincount(rows[:end], minlength=batch)[:batch].astype(_I64)
            self.counts.append(counts)
            self.starts.append(np.cumsum(counts) - counts)
        for d in self.dense:
            self.counts.append(np.full(batch, d.shape[1], _I64))
            self.starts.append(np.arange(batch, dtype=_I64) * d.shape[1])

    def flat(self) -> list[Any]:
        """Each column's values, flat."""
        return [*self.values, *(d.reshape(-1) for d in self.dense)]

    def crosses(self) -> tuple[Any, Any, list[Any]]:
        """The output's indices and dense shape, and per column the flat position of the value each cross
        takes from it."""
        batch = max(self.batch, 0)
        per_row = np.ones(batch, _I64)
        for c in self.counts:
            per_row *= c
        if not self.counts:
            per_row[:] = 0
        total = int(per_row.sum())
        row_start = np.cumsum(per_row) - per_row
        rows = np.repeat(np.arange(batch, dtype=_I64), per_row)
        j = np.arange(total, dtype=_I64) - row_start[rows]
        indices = np.stack([rows, j], axis=1) if total else np.zeros((0, 2), _I64)
        positions: list[Any] = []
        rest = j.copy()
        for counts, starts in zip(reversed(self.counts), reversed(self.starts), strict=True):
            c = counts[rows]
            rest, k = np.divmod(rest, c) if total else (rest, rest)
            positions.append(starts[rows] + k)
        positions.reverse()
        shape = np.array([self.batch, int(per_row.max()) if batch else 0], _I64)
        return indices, shape, positions


def _validate(indices: list[Any], values: list[Any], shapes: list[Any], dense: list[Any]) -> None:
    """TensorFlow's ``ValidateInput``, in its order."""
    for i, idx in enumerate(indices):
        if idx.ndim != 2:
            raise InvalidArgumentError(
                f"Input indices should be a matrix but received shape {_dims(idx.shape)} at position {i}"
            )
        if idx.shape[1] != 2:
            raise InvalidArgumentError(f"Expected D2 of index to be 2 got {idx.shape[1]} at position {i}")
    for i, (idx, v) in enumerate(zip(indices, values, strict=True)):
        if v.ndim != 1:
            raise InvalidArgumentError(
                f"Input values should be a vector but received shape {_dims(v.shape)} at position {i}"
            )
        if idx.shape[0] != v.shape[0]:
            raise InvalidArgumentError(
                f"Expected size of values to be {idx.shape[0]} got {v.shape[0]} at position {i}"
            )
    for i, s in enumerate(shapes):
        if s.ndim != 1:
            raise InvalidArgumentError(
                f"Input shapes should be a vector but received shape {_dims(s.shape)} at position {i}"
            )
        if s.shape[0] != 2:
            raise InvalidArgumentError(
                f"shape should imply a 2D tensor, but got {_dims(s.shape)} at position {i}"
            )
    for i, d in enumerate(dense):
        if d.ndim != 2:
            raise InvalidArgumentError(
                f"Dense inputs should be a matrix but received shape {_dims(d.shape)} at position {i}"
            )


def _counts(node: Node) -> tuple[int, int]:
    return node.attr_int("N", 0), len(node.attr_types("dense_types", []))


def _as_text(values: Any) -> list[bytes]:
    if values.dtype == object:
        return list(values.tolist())
    return [str(v).encode() for v in values.tolist()]


def _join_crosses(columns: list[list[bytes]], positions: list[Any], sep: bytes) -> Any:
    picked = [[col[p] for p in pos.tolist()] for col, pos in zip(columns, positions, strict=True)]
    out = np.empty(len(positions[0]) if positions else 0, dtype=object)
    out[:] = [sep.join(parts) for parts in zip(*picked, strict=True)]
    return out


def _hash_crosses(features: list[Any], positions: list[Any], start: Any, buckets: int) -> Any:
    """Chains FingerprintCat64 over the features the crosses pick, from ``start`` (None: the first)."""
    if not positions or positions[0].size == 0:
        return np.zeros(0, _I64)
    h = features[0][positions[0]] if start is None else fingerprint_cat64(start, features[0][positions[0]])
    for f, pos in zip(features[1:], positions[1:], strict=True):
        h = fingerprint_cat64(h, f[pos])
    mod = np.uint64(buckets) if buckets > 0 else _INT64_MAX
    return (h % mod).astype(_I64)


@kernel("SparseCross", outputs=3, expensive=True)
def sparse_cross(node: Node) -> Compute:
    n_sparse, n_dense = _counts(node)
    hashed = node.attr_dtype("out_type") == _I64  # TensorFlow picks its kernel by out_type, not hashed_output
    internal_string = node.attr_dtype("internal_type") == np.dtype(object)
    buckets = node.attr_int("num_buckets", 0)
    start = np.full(1, node.attr_int("hash_key") & 0xFFFFFFFFFFFFFFFF, _U64)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        if internal_string:
            n = 3 * n_sparse
            for what, tensors in (
                ("Input values", inputs[n_sparse : 2 * n_sparse]),
                ("Dense inputs", inputs[n:]),
            ):
                for t in tensors:
                    if t.dtype == _I64:
                        raise InvalidArgumentError(
                            f"{what} should be of internal type string but received {_type_name(t.dtype)}"
                        )
        cols = _Columns(inputs, n_sparse, n_dense)
        indices, shape, positions = cols.crosses()
        if hashed:
            features = [fingerprint64(v.tolist()) if v.dtype == object else v.view(_U64) for v in cols.flat()]
            values = _hash_crosses(features, positions, start, buckets)
        else:
            values = _join_crosses([_as_text(v) for v in cols.flat()], positions, b"_X_")
        return indices, values, shape

    return compute


@kernel("SparseCrossV2", outputs=3, expensive=True)
def sparse_cross_v2(node: Node) -> Compute:
    n_sparse, n_dense = _counts(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        cols = _Columns(inputs, n_sparse, n_dense)
        sep = inputs[-1]
        if sep.ndim != 0:
            raise InvalidArgumentError(f"Input separator should be a scalar. Received: {sep!r}")
        indices, shape, positions = cols.crosses()
        return indices, _join_crosses([_as_text(v) for v in cols.flat()], positions, sep.item()), shape

    return compute


@kernel("SparseCrossHashed", outputs=3, expensive=True)
def sparse_cross_hashed(node: Node) -> Compute:
    n_sparse, n_dense = _counts(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        cols = _Columns(inputs, n_sparse, n_dense)
        buckets_t, strong_t, salt = inputs[-3:]
        if salt.size != 2:
            raise InvalidArgumentError(f'Input "salt" must have length 2 but has length {salt.size}')
        buckets, strong = int(buckets_t.reshape(-1)[0]), bool(strong_t.reshape(-1)[0])
        k0, k1 = (int(k) & 0xFFFFFFFFFFFFFFFF for k in salt.reshape(-1).tolist())
        hash_: Callable[[list[bytes]], Any] = (lambda s: siphash24(s, k0, k1)) if strong else fingerprint64
        features = []
        for i, v in enumerate(cols.flat()):
            if v.dtype == object:
                features.append(hash_(v.tolist()))
            elif i < n_sparse or strong:  # the value's first four bytes (see the module's docstring)
                low = np.ascontiguousarray(v.astype("<i8")).view(np.uint8).reshape(-1, 8)[:, :4]
                features.append(hash_([bytes(r) for r in low]))
            else:
                features.append(v.view(_U64))
        indices, shape, positions = cols.crosses()
        return indices, _hash_crosses(features, positions, None, buckets), shape

    return compute


# --- Fingerprint -------------------------------------------------------------------------------------------


@kernel("Fingerprint", expensive=True)
def fingerprint(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        data, method = inputs
        if method.ndim != 0:
            raise InvalidArgumentError(f"`method` should be a scalar string: {_dims(method.shape)}")
        if method.item() != b"farmhash64":
            raise InvalidArgumentError(
                f"Unsupported fingerprint method: {method.item().decode(errors='replace')}"
            )
        if data.ndim < 1:
            raise InvalidArgumentError(f"`data` should have at least one dimension: {_dims(data.shape)}")
        rows = data.shape[0]
        if data.dtype == object:
            items = data.reshape(-1).tolist()
            if rows != len(items):  # several strings a row: the fingerprint of their fingerprints
                per_row = len(items) // rows if rows else 0
                raw = fingerprint64(items).astype("<u8").tobytes()
                items = [raw[r * per_row * 8 : (r + 1) * per_row * 8] for r in range(rows)]
        else:
            raw = np.ascontiguousarray(data).tobytes()
            width = len(raw) // rows if rows else 0
            items = [raw[r * width : (r + 1) * width] for r in range(rows)]
        return (fingerprint64(items).astype("<u8").view(np.uint8).reshape(rows, 8),)

    return compute
