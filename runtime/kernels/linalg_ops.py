"""Dense linear algebra on batches of matrices (the last two axes): MatrixInverse, MatrixDeterminant,
LogMatrixDeterminant, Lu, Cholesky, MatrixSolve, MatrixTriangularSolve, TridiagonalSolve, Qr, Svd,
SelfAdjointEigV2, Eig, MatrixSquareRoot and MatrixLogarithm.

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
differently: compare reconstructions, not vectors. Eig's eigenvalues are LAPACK's, put in the order Eigen
gives them (``_schur.py``: a real matrix's real Schur form's, a complex one's by magnitude), except where
rounding decides that order.
MatrixSquareRoot and MatrixLogarithm work from the eigendecomposition where Eigen works from the Schur
form; a defective matrix (dependent eigenvectors) goes through Denman and Beavers' iteration instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _bad_attr, _dims, _index_type
from poolserve.runtime.kernels._schur import in_eigen_order
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


@kernel("Lu", expensive=True, outputs=2)
def lu(node: Node) -> Compute:
    _dtype(node)
    index = _index_type(node, "output_idx_type")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        if x.ndim < 2:
            raise InvalidArgumentError(f"Input tensor must have rank >= 2, got {x.ndim}")
        n = _square(x)
        if x.size == 0:
            return x.copy(), np.zeros((*x.shape[:-2], n), index)
        # Eigen's PartialPivLU, unblocked at every size here (Eigen blocks past 16 columns: the same
        # pivots on all but near ties, values within rounding); the permutation is the rows' order, so
        # that x[..., p, :] = L @ U
        factors, order, _ = _lu(x)
        if not (np.abs(np.diagonal(factors, axis1=-2, axis2=-1)) > 0).all():
            raise InvalidArgumentError("Input is not invertible.")
        return factors.reshape(x.shape), order.reshape(*x.shape[:-2], n).astype(index)

    return compute


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


# --- tridiagonal solve -------------------------------------------------------------------------------------


def _tridiagonal_pivoting(sup: Any, diag: Any, sub: Any, rhs: Any) -> Any:
    """TensorFlow's Gaussian elimination with partial pivoting (LAPACK's gtsv) on every system of the
    batch at once (``sup``, ``diag``, ``sub`` [B, n], ``rhs`` [B, n, K], n >= 2); a zero pivot makes its
    system's solution NaN."""
    b, n = diag.shape
    u0, u1, u2 = diag.copy(), np.zeros_like(diag), np.zeros_like(diag)
    u1[:, 0] = sup[:, 0]
    x = rhs.copy()
    bad = np.zeros(b, bool)
    with np.errstate(all="ignore"):
        for i in range(n - 1):
            s, last = sub[:, i + 1], i == n - 2
            keep = np.abs(u0[:, i]) >= np.abs(s)
            bad |= keep & (u0[:, i] == 0)
            f = np.where(keep, s / u0[:, i], u0[:, i] / s)
            kept = diag[:, i + 1] - f * u1[:, i]
            swapped = u1[:, i] - f * diag[:, i + 1]
            u0[:, i + 1] = np.where(keep, kept, swapped)
            xi, ri = x[:, i].copy(), rhs[:, i + 1]
            k = keep[:, None]
            x[:, i + 1] = np.where(k, ri - f[:, None] * xi, xi - f[:, None] * ri)
            x[:, i] = np.where(k, xi, ri)
            u0[:, i] = np.where(keep, u0[:, i], s)
            u1[:, i] = np.where(keep, u1[:, i], diag[:, i + 1])
            if not last:
                u1[:, i + 1] = np.where(keep, sup[:, i + 1], -f * sup[:, i + 1])
                u2[:, i] = np.where(keep, 0, sup[:, i + 1])
        bad |= u0[:, n - 1] == 0
        x[:, n - 1] /= u0[:, n - 1, None]
        x[:, n - 2] = (x[:, n - 2] - u1[:, n - 2, None] * x[:, n - 1]) / u0[:, n - 2, None]
        for i in range(n - 3, -1, -1):
            x[:, i] = (x[:, i] - u1[:, i, None] * x[:, i + 1] - u2[:, i, None] * x[:, i + 2]) / u0[:, i, None]
    x[bad] = _nan(x.dtype)
    return x


def _tridiagonal_thomas(sup: Any, diag: Any, sub: Any, rhs: Any) -> Any:
    """The Thomas algorithm (no pivoting) over the batch; a zero pivot makes its system's solution NaN."""
    n = diag.shape[1]
    u = np.empty_like(diag)
    x = np.empty_like(rhs)
    with np.errstate(all="ignore"):
        bad = diag[:, 0] == 0
        u[:, 0] = sup[:, 0] / diag[:, 0]
        x[:, 0] = rhs[:, 0] / diag[:, 0, None]
        for i in range(1, n):
            denom = diag[:, i] - sub[:, i] * u[:, i - 1]
            bad |= denom == 0
            u[:, i] = sup[:, i] / denom
            x[:, i] = (rhs[:, i] - sub[:, i, None] * x[:, i - 1]) / denom[:, None]
        for i in range(n - 2, -1, -1):
            x[:, i] -= u[:, i, None] * x[:, i + 1]
    x[bad] = _nan(x.dtype)
    return x


def _perturbed_pivot(tol: Any, pivot: Any, row: Any) -> tuple[Any, Any]:
    """TensorFlow's MaybePerturbPivot (from LAPACK's xLAGTS): a pivot below 1 in magnitude moved away from
    0 (or the row scaled up) so that neither ``row / pivot`` nor ``1 / pivot`` overflows."""
    info = np.finfo(row.real.dtype)
    safemin = info.tiny  # 1 / max is below it for IEEE types
    bignum = 1 / safemin
    size = abs(pivot)
    if size >= 1:
        return pivot, row
    perturb = np.copysign(max(abs(tol), safemin), pivot.real)
    biggest = np.abs(row).max() if row.size else 0.0
    while size < 1:
        if size < safemin:
            if size == 0 or biggest * safemin > size:
                pivot, perturb = pivot + perturb, perturb * 2
            else:
                return pivot * bignum, row * bignum
        elif biggest > size * bignum:
            pivot, perturb = pivot + perturb, perturb * 2
        else:
            break
        size = abs(pivot)
    return pivot, row


def _tridiagonal_perturbed(sup: Any, diag: Any, sub: Any, rhs: Any) -> Any:
    """TensorFlow's pivoting solve that perturbs tiny pivots instead of failing (LAPACK's xLAGTF and xLAGTS,
    which ``tf.linalg.eigh_tridiagonal`` uses for inverse iteration), one system at a time."""
    eps = np.finfo(diag.real.dtype).eps
    out = np.empty_like(rhs)
    with np.errstate(all="ignore"):
        for m in range(diag.shape[0]):
            d, up, lo, r = diag[m], sup[m], sub[m], rhs[m]
            n = d.shape[0]
            x = r.copy()
            if n == 1:
                pivot, row = _perturbed_pivot(eps * abs(d[0]), d[0], r[0])
                out[m, 0] = row * (1 / pivot)
                continue
            u = np.zeros((n, 3), d.dtype)
            u[0, 0], u[0, 1] = d[0], up[0]
            top = max(abs(u[0, 0]), abs(u[0, 1]))
            scale1 = abs(u[0, 0]) + abs(u[0, 1])
            for k in range(n - 1):
                u[k + 1, 0] = d[k + 1]
                scale2 = abs(lo[k + 1]) + abs(u[k + 1, 0]) + (abs(up[k + 1]) if k < n - 2 else 0)
                if lo[k + 1] == 0:
                    scale1 = scale2
                    u[k + 1, 1], u[k, 2] = up[k + 1], 0
                    x[k + 1] = r[k + 1]
                else:
                    piv1 = 0 if u[k, 0] == 0 else abs(u[k, 0]) / scale1
                    if abs(lo[k + 1]) / scale2 <= piv1:
                        scale1 = scale2
                        f = lo[k + 1] / u[k, 0]
                        u[k + 1, 0] = d[k + 1] - f * u[k, 1]
                        u[k + 1, 1], u[k, 2] = up[k + 1], 0
                        x[k + 1] = r[k + 1] - f * x[k]
                    else:
                        f = u[k, 0] / lo[k + 1]
                        u[k, 0] = lo[k + 1]
                        u[k + 1, 0] = u[k, 1] - f * d[k + 1]
                        u[k, 1] = d[k + 1]
                        if k < n - 2:
                            u[k, 2] = up[k + 1]
                            u[k + 1, 1] = -f * up[k + 1]
                        x[k + 1] = x[k] - f * r[k + 1]
                        x[k] = r[k + 1]
                if k < n - 2:
                    top = max(top, np.abs(u[k]).max())
            top = max(top, abs(u[n - 1, 0]))
            tol = eps * top
            pivot, row = _perturbed_pivot(tol, u[n - 1, 0], x[n - 1])
            x[n - 1] = row * (1 / pivot)
            for k in range(n - 2, -1, -1):
                row = x[k] - u[k, 1] * x[k + 1] - (u[k, 2] * x[k + 2] if k < n - 2 else 0)
                pivot, row = _perturbed_pivot(np.copysign(tol, u[k, 0].real), u[k, 0], row)
                x[k] = row * (1 / pivot)
            out[m] = x
    return out


def _nan(dtype: np.dtype[Any]) -> Any:
    """TensorFlow's ``numeric_limits<T>::quiet_NaN()``: 0 for complex T (see the module's docstring)."""
    return 0 if dtype.kind == "c" else np.nan


@kernel("TridiagonalSolve", expensive=True)
def tridiagonal_solve(node: Node) -> Compute:
    dtype = _dtype(node)
    pivoting = node.attr_bool("partial_pivoting", True)
    perturb = node.attr_bool("perturb_singular", False)
    if perturb and not pivoting:
        raise InvalidArgumentError("Setting perturb_singular requires also setting partial_pivoting.")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        diagonals, rhs = inputs
        _matrices(diagonals)
        _matrices(rhs, 1)
        if rhs.ndim != diagonals.ndim:
            raise InvalidArgumentError("All input tensors must have the same rank.")
        if rhs.shape[:-2] != diagonals.shape[:-2]:
            raise InvalidArgumentError("All input tensors must have the same outer dimensions.")
        rows, n = diagonals.shape[-2:]
        if rows != 3:
            raise InvalidArgumentError(
                f"Expected diagonals to be provided as a matrix with 3 rows, got {rows} rows."
            )
        if rhs.shape[-2] != n:
            raise InvalidArgumentError(
                "Expected the same number of left-hand sides and right-hand sides, "
                f"got {n} and {rhs.shape[-2]}."
            )
        if rhs.size == 0:
            return (np.zeros(rhs.shape, dtype),)
        d = diagonals.reshape(-1, 3, n)
        sup, diag, sub = d[:, 0], d[:, 1], d[:, 2]
        b = rhs.reshape(-1, n, rhs.shape[-1])
        if perturb:
            x = _tridiagonal_perturbed(sup, diag, sub, b)
        elif n == 1:
            with np.errstate(all="ignore"):
                x = np.where(diag[:, :, None] == 0, _nan(dtype), b / diag[:, :, None])
        else:
            x = (_tridiagonal_pivoting if pivoting else _tridiagonal_thomas)(sup, diag, sub, b)
        return (x.reshape(rhs.shape).astype(dtype, copy=False),)

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


def _finite_eig(x: Any) -> tuple[Any, Any]:
    """numpy's eig of each matrix, NaN for those holding an infinity or a NaN (which LAPACK refuses; Eigen
    answers partly NaN)."""
    ok = _finite(x)
    w = np.full(x.shape[:-1], complex(np.nan, np.nan), np.result_type(x.dtype, np.complex64))
    v = np.full(x.shape, complex(np.nan, np.nan), w.dtype)
    if ok.any():
        w[ok], v[ok] = np.linalg.eig(x[ok])
    return w, v


@kernel("Eig", expensive=True, outputs=2)
def eig(node: Node) -> Compute:
    _dtype(node)
    out = node.attr_dtype("Tout")
    if out not in (np.complex64, np.complex128):
        raise _bad_attr(node, "Tout", f"must be complex64 or complex128, got {out}")
    compute_v = node.attr_bool("compute_v", True)
    unused = np.zeros((), out)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        n = _square(x)
        if x.size == 0:
            e, v = np.zeros((*x.shape[:-2], n), out), np.zeros(x.shape, out)
        else:
            e, v = _finite_eig(x)  # eigenvectors of unit norm, as Eigen's
            e, v = in_eigen_order(x, e, v)
        return e.astype(out), v.astype(out) if compute_v else unused

    return compute


# eigenvectors further from independent than this (their matrix's condition number) make V f(w) V^-1
# inaccurate: a defective (or nearly defective) matrix goes through an iteration instead
_EIG_COND_MAX = 1e8


def _sqrtm_iterated(a: Any) -> Any:
    """Denman and Beavers' iteration for one matrix's principal square root (any matrix without eigenvalues
    on the closed negative real axis, defective ones included); NaN when it does not converge."""
    y, z = a, np.eye(a.shape[-1], dtype=a.dtype)
    size = float(np.linalg.norm(a))
    for _ in range(100):
        try:
            y, z = (y + np.linalg.inv(z)) / 2, (z + np.linalg.inv(y)) / 2
        except np.linalg.LinAlgError:
            break
        if float(np.linalg.norm(y @ y - a)) <= 1e-13 * max(size, 1e-300):
            return y
    return np.full(a.shape, complex(np.nan, np.nan), a.dtype)


def _logm_iterated(a: Any) -> Any:
    """Inverse scaling and squaring for one matrix's principal logarithm: square roots until the matrix is
    near the identity, the series of log(I + E) there, times 2 for each root taken."""
    eye = np.eye(a.shape[-1], dtype=a.dtype)
    roots = 0
    while np.linalg.norm(a - eye, 1) > 0.25 and roots < 60:
        a = _sqrtm_iterated(a)
        roots += 1
    e = a - eye
    term, out = eye, np.zeros_like(a)
    for j in range(1, 40):  # |E| <= 0.25: 0.25^40 / 40 is far below double rounding
        term = term @ e
        out += term * ((-1) ** (j + 1) / j)
    return out * 2.0**roots


def _matrix_function(x: Any, f: Any, iterated: Any) -> Any:
    """f(x) = V f(w) V^-1 from x's eigendecomposition, in x's complex type: the primary matrix function of
    a diagonalisable x. Matrices whose eigenvectors are (nearly) dependent, which Eigen's Schur form
    handles, go through ``iterated`` instead."""
    w, v = _finite_eig(x)
    out = np.full(x.shape, complex(np.nan, np.nan), w.dtype)
    with np.errstate(all="ignore"):
        cond = np.linalg.cond(np.where(np.isfinite(v), v, 0))
        good = _finite(x) & (cond < _EIG_COND_MAX)
        if good.any():
            fv = v[good] * f(w[good])[..., None, :]
            vt = np.swapaxes(v[good], -1, -2)
            out[good] = np.swapaxes(np.linalg.solve(vt, np.swapaxes(fv, -1, -2)), -1, -2)
        rest = _finite(x) & ~good
        for index in np.ndindex(rest.shape):
            if rest[index]:
                out[index] = iterated(x[index].astype(w.dtype))
    return out


@kernel("MatrixSquareRoot", expensive=True)
def matrix_square_root(node: Node) -> Compute:
    dtype = _dtype(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        _matrices(x)
        _square(x)
        if x.size == 0:
            return (x.copy(),)
        if dtype.kind == "c":
            return (_matrix_function(x.astype(np.complex128), np.sqrt, _sqrtm_iterated).astype(dtype),)
        y = _matrix_function(x.astype(np.float64), np.sqrt, _sqrtm_iterated)
        # a real x's square root is real unless x has a negative eigenvalue: Eigen's real Schur form then
        # takes the square root of a negative 1x1 block, and the NaN spreads through the whole matrix
        w = np.linalg.eigvals(np.where(_finite(x)[..., None, None], x, 0))
        negative = ((w.imag == 0) & (w.real < 0)).any(axis=-1)
        y = np.where(negative[..., None, None], np.nan, y.real)
        return (y.astype(dtype),)

    return compute


@kernel("MatrixLogarithm", expensive=True)
def matrix_logarithm(node: Node) -> Compute:
    dtype = _dtype(node, (np.complex64, np.complex128))

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        _square(x)
        if x.size == 0:
            return (x.copy(),)
        with np.errstate(divide="ignore"):
            return (_matrix_function(x.astype(np.complex128), np.log, _logm_iterated).astype(dtype),)

    return compute
