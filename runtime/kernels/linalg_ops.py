"""Dense linear algebra on batches of matrices (the last two axes): MatrixInverse, MatrixDeterminant,
LogMatrixDeterminant, Cholesky, MatrixSolve, MatrixTriangularSolve, Qr, Svd and SelfAdjointEigV2.

``tf.linalg`` produces them: Gaussian-process and probabilistic layers (TensorFlow Probability's
Cholesky-based distributions), whitening and orthogonality regularisers, normalising flows (log
determinants), spectral normalisation. numpy's LAPACK does the factorisations; around it, TensorFlow's CPU
kernels (Eigen) are followed where they differ: exact zero pivots are errors for the inverse and solve
(``Input is not invertible.``), a failed Cholesky fills its lower triangle with NaN instead of raising, a
failed SVD (a non-finite input) gives NaN (both give 0 for complex types: TensorFlow fills with
``std::numeric_limits<std::complex<T>>::quiet_NaN()``, which is 0), ``sign(NaN)`` is NaN in a log
determinant, and the outputs ``compute_uv``/``compute_v`` leave out are 0-d (TensorFlow 2.21 leaves them
uninitialised: zeros here).
Singular vectors and eigenvectors are unique only up to sign (phase), which LAPACK and Eigen choose
differently: compare reconstructions, not vectors.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _bad_attr, _dims
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_FLOATS = (np.float32, np.float64, np.complex64, np.complex128)
_WITH_HALF = (np.float16, *_FLOATS)
_NOT_SQUARE = "Input matrix must be square."


def _dtype(node: Node, allowed: tuple[type, ...] = _FLOATS) -> np.dtype[Any]:
    dtype = node.attr_dtype("T")
    if dtype not in allowed:
        names = ", ".join(str(np.dtype(t)) for t in allowed)
        raise _bad_attr(node, "T", f"must be one of {names}, got {dtype}")
    return dtype


def _matrices(x: Any, index: int = 0) -> tuple[int, int]:
    if x.ndim < 2:
        raise InvalidArgumentError(f"Input tensor {index} must have rank >= 2, got {x.ndim}")
    return x.shape[-2], x.shape[-1]


def _square(x: Any) -> int:
    m, n = _matrices(x)
    if m != n:
        raise InvalidArgumentError(_NOT_SQUARE)
    return n


def _adjoint(x: Any) -> Any:
    t = np.swapaxes(x, -1, -2)
    return np.conj(t) if x.dtype.kind == "c" else t


def _finite(x: Any) -> Any:
    """Per matrix of ``x``: whether all its values are finite."""
    return np.isfinite(x).all(axis=(-2, -1))


def _eye(batch: tuple[int, ...], m: int, n: int, dtype: np.dtype[Any]) -> Any:
    return np.broadcast_to(np.eye(m, n, dtype=dtype), (*batch, m, n)).copy()


# --- LU: inverse, determinants, solve ----------------------------------------------------------------------

# Eigen's PartialPivLU factors matrices up to this size unblocked, in an order ``_lu`` repeats: rounding
# then decides exact zero pivots (TensorFlow's "not invertible", a determinant of 0) as TensorFlow does,
# as it would not through LAPACK (whose float32 LU of an integer matrix with a repeated row can miss the 0).
# Larger matrices go to LAPACK, also at 1e-5 of TensorFlow's answers when well conditioned.
_UNBLOCKED_LU_MAX = 16


def _lu(x: Any) -> tuple[Any, Any, Any]:
    """Eigen's unblocked LU with partial pivoting of each matrix of ``x`` (batch axes flattened): the
    factors packed in one array (L unit lower), each matrix's row order and the permutation's sign."""
    n = x.shape[-1]
    a = x.reshape(-1, n, n).copy()
    b = np.arange(a.shape[0])
    order = np.tile(np.arange(n), (a.shape[0], 1))
    sign = np.ones(a.shape[0], x.dtype)
    for k in range(n):
        p = k + np.argmax(np.abs(a[:, k:, k]), axis=1)
        nonzero = a[b, p, k] != 0
        p = np.where(nonzero, p, k)  # a zero column: no swap, no division
        rows = a[b, k].copy()
        a[b, k] = a[b, p]
        a[b, p] = rows
        ranks = order[b, k].copy()
        order[b, k] = order[b, p]
        order[b, p] = ranks
        sign = np.where(p != k, -sign, sign)
        a[:, k + 1 :, k] /= np.where(nonzero, a[:, k, k], 1)[:, None]
        a[:, k + 1 :, k + 1 :] -= a[:, k + 1 :, k, None] * a[:, k, None, k + 1 :]
    return a, order, sign


def _lu_solve(x: Any, rhs: Any, message: str) -> Any:
    """``x^-1 @ rhs``; an exact zero pivot (or a NaN one) is an error, as in TensorFlow."""
    if x.shape[-1] > _UNBLOCKED_LU_MAX:
        try:
            return np.linalg.solve(x, rhs) if rhs is not None else np.linalg.inv(x)
        except np.linalg.LinAlgError:
            raise InvalidArgumentError(message) from None
    lu, order, _ = _lu(x)
    if not (np.abs(np.diagonal(lu, axis1=-2, axis2=-1)).min(axis=-1) > 0).all():
        raise InvalidArgumentError(message)
    n = x.shape[-1]
    b = np.eye(n, dtype=x.dtype)[order] if rhs is None else rhs.reshape(-1, n, rhs.shape[-1])
    if rhs is not None:
        b = b[np.arange(b.shape[0])[:, None], order]
    y = _substitute(lu, b, lower=True, unit=True)
    return _substitute(lu, y, lower=False).reshape(*x.shape[:-2], n, b.shape[-1])


@kernel("MatrixInverse", expensive=True)
def matrix_inverse(node: Node) -> Compute:
    dtype = _dtype(node, _WITH_HALF)
    adjoint = node.attr_bool("adjoint", False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        if _square(x) == 0 or x.size == 0:
            return (np.empty(x.shape, dtype),)
        a = _adjoint(x) if adjoint else x
        # half goes through float32, as in TensorFlow
        y = _lu_solve(a.astype(np.float32) if dtype == np.float16 else a, None, "Input is not invertible.")
        return (y.astype(dtype, copy=False),)

    return compute


def _slogdet(x: Any) -> tuple[Any, Any]:
    """(sign, log|det|) per matrix, as TensorFlow's SLogDet: an empty matrix's determinant is 1, a singular
    one's sign 0 and log -inf, a NaN pivot's sign NaN."""
    n = _square(x)
    if n > _UNBLOCKED_LU_MAX:
        sign, logdet = np.linalg.slogdet(x)
        nan = complex(np.nan, np.nan) if x.dtype.kind == "c" else np.nan
        sign = np.where(np.isnan(logdet), x.dtype.type(nan), sign)  # numpy keeps the sign it had
        return np.asarray(sign, x.dtype), np.asarray(logdet, x.dtype)
    batch = x.shape[:-2]
    if x.size == 0:
        return np.ones(batch, x.dtype), np.zeros(batch, x.dtype)
    lu, _, sign = _lu(x)
    diag = np.diagonal(lu, axis1=-2, axis2=-1)
    size = np.abs(diag)
    logdet = np.log(size).sum(axis=-1)
    unit = np.where(size == 0, 0, diag / np.where(size == 0, 1, size))  # sign(d): 0 for 0, NaN for NaN
    sign = sign * np.prod(unit, axis=-1)
    return sign.reshape(batch).astype(x.dtype), logdet.reshape(batch).astype(x.dtype)


@kernel("MatrixDeterminant", expensive=True)
def matrix_determinant(node: Node) -> Compute:
    _dtype(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        sign, logdet = _slogdet(inputs[0])
        # as TensorFlow: sign * exp(log|det|), which neither overflows nor underflows on the way
        return (np.asarray(sign * np.exp(logdet)),)

    return compute


@kernel("LogMatrixDeterminant", expensive=True, outputs=2)
def log_matrix_determinant(node: Node) -> Compute:
    _dtype(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return _slogdet(inputs[0])

    return compute


def _check_solver(matrix: Any, rhs: Any) -> None:
    """TensorFlow's LinearAlgebraOp checks for MatrixSolve, in its order."""
    _matrices(matrix)
    if rhs.ndim != matrix.ndim:
        raise InvalidArgumentError("All input tensors must have the same rank.")
    if rhs.shape[:-2] != matrix.shape[:-2]:
        raise InvalidArgumentError("All input tensors must have the same outer dimensions.")
    if matrix.shape[-2] != matrix.shape[-1]:
        raise InvalidArgumentError("First input (lhs) must be a square matrix.")
    if matrix.shape[-2] != rhs.shape[-2]:
        raise InvalidArgumentError("Input matrix and rhs are incompatible.")


@kernel("MatrixSolve", expensive=True)
def matrix_solve(node: Node) -> Compute:
    dtype = _dtype(node)
    adjoint = node.attr_bool("adjoint", False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        matrix, rhs = inputs
        _check_solver(matrix, rhs)
        if matrix.size == 0 or rhs.size == 0:
            return (np.empty(rhs.shape, dtype),)
        a = _adjoint(matrix) if adjoint else matrix
        return (_lu_solve(a, rhs, "Input matrix is not invertible.").astype(dtype, copy=False),)

    return compute


# --- triangular: Cholesky, triangular solve -----------------------------------------------------------------


def _cholesky_unblocked(x: Any) -> Any:
    """Eigen's LLT, column by column over the whole batch: a matrix fails where a pivot is <= 0 (a NaN one
    passes and spreads), and a failed matrix's lower triangle is NaN, as in TensorFlow (which leaves the
    upper one uninitialised: zeros here)."""
    n = x.shape[-1]
    a = np.tril(x).reshape(-1, n, n)
    failed = np.zeros(a.shape[0], bool)
    for k in range(n):
        row = a[:, k, :k]
        pivot = a[:, k, k].real - (row * np.conj(row)).real.sum(axis=-1)
        failed |= pivot <= 0
        pivot = np.sqrt(pivot)
        a[:, k, k] = pivot
        if k + 1 < n:
            below = a[:, k + 1 :, k] - np.matmul(a[:, k + 1 :, :k], np.conj(row)[:, :, None])[:, :, 0]
            a[:, k + 1 :, k] = below / pivot[:, None]
    # (sic: 0 for complex T, see the module's docstring)
    a[failed] = np.tril(np.full((n, n), 0 if x.dtype.kind == "c" else np.nan, x.dtype))
    return a.reshape(x.shape)


@kernel("Cholesky", expensive=True)
def cholesky(node: Node) -> Compute:
    _dtype(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        if _square(x) == 0 or x.size == 0:
            return (x.copy(),)
        try:
            return (np.linalg.cholesky(x),)  # the lower triangle only, as Eigen's LLT
        except np.linalg.LinAlgError:  # not positive definite, or a NaN pivot (which Eigen lets through)
            return (_cholesky_unblocked(x),)

    return compute


def _substitute(t: Any, b: Any, lower: bool, unit: bool = False) -> Any:
    """Solves ``t @ x = b`` for triangular ``t`` (its diagonal taken as ones if ``unit``) by substitution,
    one row of x at a time over the whole batch (batch axes broadcast); a zero on the diagonal gives
    infinities and NaN, as in TensorFlow."""
    n = t.shape[-1]
    x = np.empty(np.broadcast_shapes(t.shape[:-2], b.shape[:-2]) + b.shape[-2:], np.result_type(t, b))
    rows = range(n) if lower else range(n - 1, -1, -1)
    for i in rows:
        done = slice(0, i) if lower else slice(i + 1, n)
        acc = b[..., i, :] - np.matmul(t[..., i : i + 1, done], x[..., done, :])[..., 0, :]
        x[..., i, :] = acc if unit else acc / t[..., i, i, None]
    return x


@kernel("MatrixTriangularSolve", expensive=True)
def matrix_triangular_solve(node: Node) -> Compute:
    dtype = _dtype(node)
    lower = node.attr_bool("lower", True)
    adjoint = node.attr_bool("adjoint", False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        matrix, rhs = inputs
        for i, a in enumerate(inputs):
            if a.ndim < 2:
                raise InvalidArgumentError(f"In[{i}] ndims must be >= 2: {a.ndim}")
        n = matrix.shape[-1]
        if matrix.shape[-2] != n:
            raise InvalidArgumentError(
                f"In[0] matrices in the last dimensions must be square ({n} =/= {matrix.shape[-2]})"
            )
        try:
            batch = np.broadcast_shapes(matrix.shape[:-2], rhs.shape[:-2])
        except ValueError:
            raise InvalidArgumentError(
                "In[0] and In[1] must have compatible batch dimensions: "
                f"{_dims(matrix.shape)} vs. {_dims(rhs.shape)}"
            ) from None
        if rhs.shape[-2] != n:
            raise InvalidArgumentError(
                f"In[0] mismatch In[1] shape: {n} vs. {rhs.shape[-2]}: {_dims(matrix.shape)} "
                f"{_dims(rhs.shape)} {int(lower)} {int(adjoint)}"
            )
        shape = (*batch, n, rhs.shape[-1])
        if not all(shape):
            return (np.zeros(shape, dtype),)
        t = np.tril(matrix) if lower else np.triu(matrix)
        if adjoint:
            t = _adjoint(t)
        return (_substitute(t, rhs, lower != adjoint).astype(dtype, copy=False),)

    return compute


# --- orthogonal: QR, SVD, symmetric eigendecomposition ------------------------------------------------------


@kernel("Qr", expensive=True, outputs=2)
def qr(node: Node) -> Compute:
    dtype = _dtype(node, _WITH_HALF)
    full = node.attr_bool("full_matrices", False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        m, n = _matrices(x)
        k = m if full else min(m, n)
        if x.size == 0:
            return _eye(x.shape[:-2], m, k, dtype), np.zeros((*x.shape[:-2], k, n), dtype)
        a = x.astype(np.float32) if dtype == np.float16 else x
        q, r = np.linalg.qr(a, mode="complete" if full else "reduced")
        return q.astype(dtype, copy=False), r.astype(dtype, copy=False)

    return compute


@kernel("Svd", expensive=True, outputs=3)
def svd(node: Node) -> Compute:
    dtype = _dtype(node)
    compute_uv = node.attr_bool("compute_uv", True)
    full = node.attr_bool("full_matrices", False)
    unused = np.zeros((), dtype)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        m, n = _matrices(x)
        k = min(m, n)
        batch = x.shape[:-2]
        shapes = [(*batch, k), (*batch, m, m if full else k), (*batch, n, n if full else k)]
        if x.size == 0:  # TensorFlow: the full factor of the non-empty side is the identity
            u, v = (_eye(s[:-2], s[-2], s[-1], dtype) for s in shapes[1:])
            s = np.zeros(shapes[0], dtype)
            return (s, u, v) if compute_uv else (s, unused, unused)
        # Eigen's BDCSVD refuses non-finite input; TensorFlow then answers numeric_limits<T>::quiet_NaN(),
        # which is 0 for complex T
        fill = 0 if dtype.kind == "c" else np.nan
        outs = [np.full(s, fill, dtype) for s in (shapes if compute_uv else shapes[:1])]
        ok = _finite(x)
        if ok.any():
            a = x[ok]
            if compute_uv:
                u, s, vh = np.linalg.svd(a, full_matrices=full)
                for out, part in zip(outs, (s, u, _adjoint(vh)), strict=True):
                    out[ok] = part
            else:
                outs[0][ok] = np.linalg.svd(a, compute_uv=False)
        return tuple(outs) if compute_uv else (outs[0], unused, unused)

    return compute


_EIG_FAILED = "Self-adjoint eigen decomposition was not successful. The input might not be valid."


@kernel("SelfAdjointEigV2", expensive=True, outputs=2)
def self_adjoint_eig(node: Node) -> Compute:
    dtype = _dtype(node)
    compute_v = node.attr_bool("compute_v", True)
    unused = np.zeros((), dtype)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        n = _square(x)
        batch = x.shape[:-2]
        if n == 0 or x.size == 0:
            e, v = np.zeros((*batch, n), dtype), np.zeros(x.shape, dtype)
        elif n == 1:  # Eigen: the (real) value itself, and the vector 1
            e, v = x[..., 0].real.astype(dtype), np.ones(x.shape, dtype)
        else:
            # the lower triangle only, as Eigen and LAPACK read it. Eigen fails to converge on a NaN (on an
            # infinity too, or answers NaN, depending on where it is): refused here
            if not np.isfinite(np.tril(x)).all():
                raise InvalidArgumentError(_EIG_FAILED)
            if compute_v:
                w, v = np.linalg.eigh(x, UPLO="L")
            else:
                w, v = np.linalg.eigvalsh(x, UPLO="L"), unused
            e = w.astype(dtype)
        return (e, v if compute_v else unused)

    return compute
