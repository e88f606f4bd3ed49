"""The order Eigen gives eigenvalues in, which TensorFlow's Eig keeps: for a real matrix, EigenSolver's, the
diagonal (and 2x2 blocks, a conjugate pair with the positive imaginary part first) of its real Schur form
(RealSchur: Householder reduction to Hessenberg form, then Francis double-shift QR steps deflating from the
bottom, with its exceptional shifts); for a complex one, ComplexEigenSolver's, sorted by magnitude.

The eigenvalues and eigenvectors themselves are LAPACK's (numpy); only their order is Eigen's: each of
LAPACK's values goes to the place of the nearest of the Schur form's, which is computed here in float64
with the deflation tolerance of the input's type (TensorFlow computes it in that type, so two eigenvalues
whose order a float32 rounding decides may still come out swapped).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _householder(x: Any) -> tuple[Any, float, float]:
    """Eigen's makeHouseholder on a real vector: (essential, tau, beta)."""
    c0, tail = x[0], x[1:]
    tail_sq = float(tail @ tail) if tail.size else 0.0
    tiny = np.finfo(np.float64).tiny
    if tail_sq <= tiny:
        return np.zeros(tail.shape), 0.0, c0
    beta = math.sqrt(c0 * c0 + tail_sq)
    if c0 >= 0:
        beta = -beta
    return tail / (c0 - beta), (beta - c0) / beta, beta


def _left(block: Any, ess: Any, tau: float) -> None:
    v = np.concatenate([[1.0], ess])
    block -= tau * np.outer(v, v @ block)


def _right(block: Any, ess: Any, tau: float) -> None:
    v = np.concatenate([[1.0], ess])
    block -= tau * np.outer(block @ v, v)


def real_schur_eigenvalues(a: Any, eps: float) -> Any:
    """Eigen's EigenSolver eigenvalue order (RealSchur) of one real matrix."""
    t = np.array(a, np.float64)
    n = t.shape[0]
    scale = float(np.abs(t).max()) if t.size else 0.0
    if scale < np.finfo(np.float64).tiny:
        return np.zeros(n, complex)
    t = t / scale
    for i in range(n - 1):  # Hessenberg
        ess, tau, beta = _householder(t[i + 1 :, i].copy())
        t[i + 1, i] = beta
        t[i + 2 :, i] = 0
        if tau != 0:
            _left(t[i + 1 :, i + 1 :], ess, tau)
            _right(t[:, i + 1 :], ess, tau)
    iu, it, total, exshift = n - 1, 0, 0, 0.0
    norm = sum(float(np.abs(t[: min(n, j + 2), j]).sum()) for j in range(n))
    zero = max(norm * eps * eps, np.finfo(np.float64).tiny)
    if norm != 0:
        while iu >= 0:
            il = iu  # findSmallSubdiagEntry
            while il > 0:
                s = max((abs(t[il - 1, il - 1]) + abs(t[il, il])) * eps, zero)
                if abs(t[il, il - 1]) <= s:
                    break
                il -= 1
            if il == iu:
                t[iu, iu] += exshift
                if iu > 0:
                    t[iu, iu - 1] = 0
                iu -= 1
                it = 0
            elif il == iu - 1:
                p = 0.5 * (t[iu - 1, iu - 1] - t[iu, iu])
                q = p * p + t[iu, iu - 1] * t[iu - 1, iu]
                t[iu, iu] += exshift
                t[iu - 1, iu - 1] += exshift
                if q >= 0:
                    z = math.sqrt(abs(q))
                    c, s = _givens(p + z if p >= 0 else p - z, t[iu, iu - 1])
                    x, y = t[iu - 1, iu - 1 :].copy(), t[iu, iu - 1 :].copy()
                    t[iu - 1, iu - 1 :] = c * x - s * y
                    t[iu, iu - 1 :] = s * x + c * y
                    x, y = t[: iu + 1, iu - 1].copy(), t[: iu + 1, iu].copy()
                    t[: iu + 1, iu - 1] = c * x - s * y
                    t[: iu + 1, iu] = s * x + c * y
                    t[iu, iu - 1] = 0
                if iu > 1:
                    t[iu - 1, iu - 2] = 0
                iu -= 2
                it = 0
            else:
                info = [t[iu, iu], t[iu - 1, iu - 1], t[iu, iu - 1] * t[iu - 1, iu]]
                if it > 0 and it % 16 == 0:
                    if it % 32 != 0:
                        exshift += info[0]
                        for i in range(iu + 1):
                            t[i, i] -= info[0]
                        s = abs(t[iu, iu - 1]) + abs(t[iu - 1, iu - 2])
                        info = [0.75 * s, 0.75 * s, -0.4375 * s * s]
                    else:
                        s = (info[1] - info[0]) / 2.0
                        s = s * s + info[2]
                        if s > 0:
                            s = math.sqrt(s)
                            if info[1] < info[0]:
                                s = -s
                            s = s + (info[1] - info[0]) / 2.0
                            s = info[0] - info[2] / s
                            exshift += s
                            for i in range(iu + 1):
                                t[i, i] -= s
                            info = [0.964, 0.964, 0.964]
                it += 1
                total += 1
                if total > 40 * n:
                    return None
                im = iu - 2
                while True:  # initFrancisQRStep
                    tmm = t[im, im]
                    r, s = info[0] - tmm, info[1] - tmm
                    v = np.array(
                        [
                            (r * s - info[2]) / t[im + 1, im] + t[im, im + 1],
                            t[im + 1, im + 1] - tmm - r - s,
                            t[im + 2, im + 1],
                        ]
                    )
                    if im == il:
                        break
                    lhs = t[im, im - 1] * (abs(v[1]) + abs(v[2]))
                    rhs = v[0] * (abs(t[im - 1, im - 1]) + abs(tmm) + abs(t[im + 1, im + 1]))
                    if abs(lhs) < eps * rhs:
                        break
                    im -= 1
                for k in range(im, iu - 1):  # performFrancisQRStep
                    first = k == im
                    vv = v if first else t[k : k + 3, k - 1].copy()
                    ess, tau, beta = _householder(vv)
                    if beta != 0:
                        if first and k > il:
                            t[k, k - 1] = -t[k, k - 1]
                        elif not first:
                            t[k, k - 1] = beta
                        _left(t[k : k + 3, k:], ess, tau)
                        _right(t[: min(iu, k + 3) + 1, k : k + 3], ess, tau)
                ess, tau, beta = _householder(t[iu - 1 : iu + 1, iu - 2].copy())
                if beta != 0:
                    t[iu - 1, iu - 2] = beta
                    _left(t[iu - 1 : iu + 1, iu - 1 :], ess, tau)
                    _right(t[: iu + 1, iu - 1 : iu + 1], ess, tau)
                for i in range(im + 2, iu + 1):
                    t[i, i - 2] = 0
                    if i > im + 2:
                        t[i, i - 3] = 0
    t *= scale
    out = np.empty(n, complex)
    i = 0
    while i < n:
        if i == n - 1 or t[i + 1, i] == 0:
            out[i] = t[i, i]
            i += 1
        else:
            p = 0.5 * (t[i, i] - t[i + 1, i + 1])
            z = math.sqrt(abs(p * p + t[i + 1, i] * t[i, i + 1]))
            out[i] = complex(t[i + 1, i + 1] + p, z)
            out[i + 1] = complex(t[i + 1, i + 1] + p, -z)
            i += 2
    return out


def _givens(p: float, q: float) -> tuple[float, float]:
    """Eigen's real makeGivens: (c, s)."""
    if q == 0:
        return (-1.0 if p < 0 else 1.0), 0.0
    if p == 0:
        return 0.0, (1.0 if q < 0 else -1.0)
    if abs(p) > abs(q):
        t = q / p
        u = math.sqrt(1 + t * t)
        if p < 0:
            u = -u
        c = 1 / u
        return c, -t * c
    t = p / q
    u = math.sqrt(1 + t * t)
    if q < 0:
        u = -u
    s = -1 / u
    return -t * s, s


def _order(w: Any, targets: Any) -> list[int]:
    """Indices into ``w`` taking, for each target in turn, the nearest value not yet taken."""
    free = list(range(len(w)))
    out = []
    for d in targets:
        j = min(free, key=lambda i: abs(w[i] - d))
        free.remove(j)
        out.append(j)
    return out


def in_eigen_order(x: Any, w: Any, v: Any) -> tuple[Any, Any]:
    """LAPACK's eigenvalues ``w`` (and eigenvector columns ``v``, or a 0-d placeholder) of each matrix of
    ``x`` put in Eigen's order."""
    n = x.shape[-1]
    flat_x = x.reshape(-1, n, n)
    flat_w = w.reshape(-1, n).copy()
    flat_v = v.reshape(-1, n, n).copy() if v.ndim else None
    eps = float(np.finfo(x.dtype).eps)
    for k in range(flat_x.shape[0]):
        if not np.isfinite(flat_w[k]).all():
            continue
        if x.dtype.kind == "c":
            # selection sort by magnitude (sortEigenvalues), stable for equal ones
            order = sorted(range(n), key=lambda i: abs(flat_w[k, i]))
        else:
            schur = real_schur_eigenvalues(flat_x[k], eps)
            if schur is None:
                continue
            order = _order(flat_w[k], schur)
        flat_w[k] = flat_w[k, order]
        if flat_v is not None:
            flat_v[k] = flat_v[k][:, order]
    return flat_w.reshape(w.shape), flat_v.reshape(v.shape) if flat_v is not None else v
