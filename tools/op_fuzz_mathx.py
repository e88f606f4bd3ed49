"""op_fuzz families: inverse trigonometric and hyperbolic functions, Lgamma and Digamma, Xlogy and friends,
ApproximateEqual, bitwise ops and shifts (math_ops.py), and the linear algebra of linalg_ops.py.

Matrices are well conditioned (a multiple of the identity added) so that float32 answers agree to the
fuzzer's tolerance whatever the factorisation's order of operations; exactly singular ones (integer rows
repeated) test the errors. Left out on purpose, as TensorFlow's answers there are artifacts of its
implementation: NaN and infinities in LU and eigen inputs (Eigen's pivot search and its minimum of the pivots
depend on where the NaN lies), subnormals (TensorFlow flushes them to zero), singular vectors and
eigenvectors (unique up to sign: ``python tools/op_fuzz_mathx.py`` compares their reconstructions instead).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from op_fuzz import FLOATS, Case, broadcastable, shape, values

COMPLEX = ("complex64", "complex128")
INT_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
TRIG = "Acos Asin Atan Sinh Cosh Asinh Acosh Atanh".split()  # noqa: SIM905


def _edgy(rng: np.random.Generator, dims: tuple[int, ...], dtype: str) -> np.ndarray:
    """values() plus points where the special functions are delicate: poles, the minimum of lgamma, large
    arguments, halves of negative integers."""
    x = values(rng, dims, dtype)
    if np.dtype(dtype).kind != "f" or not x.size:
        return x
    special = np.array([-1.0, -2.0, -3.5, 1.0, 2.0, 1.4616321, 1e5, -1e5 - 0.5, 30.0, -0.25, 2.5e-3, 1e10])
    flat = x.reshape(-1)
    pick = rng.random(flat.size) < 0.2
    flat[pick] = rng.choice(special, size=int(pick.sum())).astype(dtype)
    return flat.reshape(dims)


def elementwise(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(max(1, count // 10)):
        for op in TRIG:
            for dtype in (*FLOATS, *COMPLEX):
                cases.append(Case(op, {"x": values(rng, shape(rng), dtype)}))
        for op in ("Lgamma", "Digamma"):
            for dtype in FLOATS:
                cases.append(Case(op, {"x": _edgy(rng, shape(rng, max_dim=6), dtype)}))
                wide = (rng.uniform(-40, 40, size=(64,)) * rng.choice([1.0, 0.01, 100.0])).astype(dtype)
                cases.append(Case(op, {"x": wide}))
    return cases


def binary(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(max(1, count // 10)):
        for op in ("Xlogy", "Xdivy", "Xlog1py"):
            for dtype in (*FLOATS, *COMPLEX):
                a = shape(rng)
                b = broadcastable(rng, a)
                if rng.random() < 0.5:
                    a, b = b, a
                x = values(rng, a, dtype)
                if x.size and dtype not in COMPLEX:
                    x.reshape(-1)[rng.random(x.size) < 0.3] = 0  # often zero: the special case
                cases.append(Case(op, {"x": x, "y": values(rng, b, dtype)}))
        for dtype in ("float32", "float64"):
            dims = shape(rng)
            x = values(rng, dims, dtype)
            y = (x + rng.choice([0.0, 1e-6, 1e-5, 1e-3, 0.5], size=dims)).astype(dtype)
            other = dims if rng.random() < 0.85 else broadcastable(rng, dims)
            if other != dims:
                y = values(rng, other, dtype)
            tol = float(rng.choice([1e-5, 1e-3, 0.5, 0.0, -1.0]))
            cases.append(Case("ApproximateEqual", {"x": x, "y": y}, {"tolerance": tol}))
        for dtype in INT_TYPES:
            info = np.iinfo(dtype)
            bits = 8 * np.dtype(dtype).itemsize
            a = shape(rng)
            b = broadcastable(rng, a)
            for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
                x = rng.integers(info.min, info.max, size=a, dtype=dtype, endpoint=True)
                y = rng.integers(info.min, info.max, size=b, dtype=dtype, endpoint=True)
                cases.append(Case(op, {"x": x, "y": y}))
            for op in ("LeftShift", "RightShift"):
                x = rng.integers(info.min, info.max, size=a, dtype=dtype, endpoint=True)
                low = max(int(info.min), -3)
                y = rng.integers(low, bits + 4, size=b).astype(dtype)  # out of range both ways
                cases.append(Case(op, {"x": x, "y": y}))
            x = rng.integers(info.min, info.max, size=a, dtype=dtype, endpoint=True)
            cases.append(Case("Invert", {"x": x}))
            cases.append(Case("PopulationCount", {"x": x}))
    return cases


# ---- linear algebra ---------------------------------------------------------------------------------------


def _random(rng: np.random.Generator, dims: tuple[int, ...], dtype: str) -> np.ndarray:
    a = rng.standard_normal(dims)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(dims)
    return a


def _well_conditioned(rng: np.random.Generator, batch: tuple[int, ...], n: int, dtype: str) -> np.ndarray:
    a = _random(rng, (*batch, n, n), dtype) + (n + 2) * np.eye(n) * rng.choice([1, -1])
    return a.astype(dtype)


def _singular(rng: np.random.Generator, batch: tuple[int, ...], n: int, dtype: str) -> np.ndarray:
    """Integer matrices with a repeated row: LU meets an exact zero pivot."""
    a = rng.integers(-3, 4, size=(*batch, n, n)).astype(np.float64)
    if n > 1:
        i, j = rng.choice(n, size=2, replace=False)
        a[..., i, :] = a[..., j, :]
    else:
        a[:] = 0
    return a.astype(dtype)


def _spd(rng: np.random.Generator, batch: tuple[int, ...], n: int, dtype: str) -> np.ndarray:
    a = _random(rng, (*batch, n, n), dtype)
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)).astype(dtype)


def _batch(rng: np.random.Generator) -> tuple[int, ...]:
    return tuple(
        int(d) for d in rng.integers(0 if rng.random() < 0.1 else 1, 4, size=int(rng.integers(0, 3)))
    )


def linalg(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    dtypes = ("float32", "float64", *COMPLEX)
    for _ in range(count):
        dtype = str(rng.choice(dtypes))
        batch = _batch(rng)
        # 20: LAPACK's path, past Eigen's unblocked LU
        n = int(rng.integers(0, 6)) if rng.random() < 0.9 else 20
        # exactly singular: real only (Eigen's complex division rounds otherwise than numpy's, so whether the
        # last pivot comes out exactly 0 differs); small only (past 16, LAPACK's rounding noise is the answer)
        singular = rng.random() < 0.2 and dtype in ("float32", "float64") and n < 20
        a = _singular(rng, batch, n, dtype) if singular else _well_conditioned(rng, batch, n, dtype)
        adjoint = bool(rng.random() < 0.5)
        inv_dtype = "float16" if rng.random() < 0.15 and not singular else dtype
        cases.append(Case("MatrixInverse", {"input": a.astype(inv_dtype)}, {"adjoint": adjoint}))
        cases.append(Case("MatrixDeterminant", {"input": a}))
        cases.append(Case("LogMatrixDeterminant", {"input": a}))
        rhs = _random(rng, (*batch, n, int(rng.integers(0, 4))), dtype).astype(dtype)
        cases.append(Case("MatrixSolve", {"matrix": a, "rhs": rhs}, {"adjoint": adjoint}))
        # Cholesky: positive definite, with NaN sometimes: in the upper triangle (ignored) or the lower one
        # (it spreads: Eigen's pivot test lets NaN through, LAPACK's does not). Not positive definite ones are
        # left to the tests: TensorFlow fills their lower triangle with NaN, leaves the upper uninitialised
        spd = _spd(rng, batch, n, dtype)
        if spd.size and rng.random() < 0.3:
            i, j = sorted(int(v) for v in rng.integers(0, n, size=2))
            spd[..., j, i] = np.nan if rng.random() < 0.5 else spd[..., j, i]
            spd[..., 0, -1] = np.nan
        cases.append(Case("Cholesky", {"input": spd}))
        # triangular solve: batch axes broadcast; a zero on the diagonal gives inf/NaN
        tb = broadcastable(rng, batch) if rng.random() < 0.5 else batch
        t = _well_conditioned(rng, tb, n, dtype)
        rb = batch if rng.random() < 0.7 else broadcastable(rng, batch)
        rhs = _random(rng, (*rb, n, int(rng.integers(0, 4))), dtype).astype(dtype)
        attrs = {"lower": bool(rng.random() < 0.5), "adjoint": adjoint}
        cases.append(Case("MatrixTriangularSolve", {"matrix": t, "rhs": rhs}, attrs))
        # decompositions: values that are unique (R and Q of a full-rank QR, singular values, eigenvalues)
        m = int(rng.integers(0, 6))
        rect = _random(rng, (*batch, m, n), dtype).astype(dtype)
        # float16 left out: TensorFlow's QR computes in half precision (errors of 1e-2), poolserve in float32
        full = bool(rng.random() < 0.5)
        if m <= n or not full:  # (Q's extra columns are any orthonormal completion)
            cases.append(Case("Qr", {"input": rect}, {"full_matrices": full}))
        # Svd and SelfAdjointEigV2 always have outputs TensorFlow leaves uninitialised (the vectors, or 0-d
        # placeholders for them): their values are compared by check_factors below; here only refusals
        sym = _spd(rng, batch, n, dtype)
        if n > 1 and rng.random() < 0.3:
            sym[..., -1, 0] = np.nan  # lower triangle: refused
            cases.append(Case("SelfAdjointEigV2", {"input": sym}, {"compute_v": bool(rng.random() < 0.5)}))
    return cases


def families() -> dict[str, Callable[[np.random.Generator, int], list[Case]]]:
    return {"mathx_elementwise": elementwise, "mathx_binary": binary, "mathx_linalg": linalg}


# ---- factors unique only up to sign: reconstructions ------------------------------------------------------


def _factor_cases(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dtype = str(rng.choice(["float32", "float64", *COMPLEX]))
        batch = _batch(rng)
        m, n = (int(d) for d in rng.integers(0, 6, size=2))
        full = bool(rng.random() < 0.5)
        vectors = bool(rng.random() < 0.7)
        rect = _random(rng, (*batch, m, n), dtype).astype(dtype)
        if rect.size and rng.random() < 0.1:
            rect.reshape(-1)[0] = rng.choice([np.nan, np.inf])  # Svd: NaN out
        cases.append(Case("Svd", {"input": rect}, {"full_matrices": full, "compute_uv": vectors}))
        sym = (_spd(rng, batch, n, dtype) - n * np.eye(n)).astype(dtype)
        cases.append(Case("SelfAdjointEigV2", {"input": sym}, {"compute_v": vectors}))
        rect = _random(rng, (*batch, m, n), dtype).astype(dtype)
        cases.append(Case("Qr", {"input": rect}, {"full_matrices": full}))
    return cases


def _check_factors(case: Case, outs: list[np.ndarray]) -> str | None:
    """Whether ``outs`` (TensorFlow's or poolserve's) factor the input: shapes aside, which the caller
    compares, the reconstruction must match and the factors be orthonormal."""
    x = next(iter(case.inputs.values())).astype(np.complex128)
    tol = 2e-4 if next(iter(case.inputs.values())).dtype in (np.float32, np.complex64) else 1e-9
    scale = max(1.0, float(np.abs(x).max(initial=0)))

    def adj(a: np.ndarray) -> np.ndarray:
        return np.conj(np.swapaxes(a, -1, -2))

    if case.op == "Svd":
        s, u, v = outs
        k = s.shape[-1]
        rebuilt = (u[..., :k] * s[..., None, :].real) @ adj(v[..., :k])
        factors = [u, v]
    elif case.op == "SelfAdjointEigV2":
        e, v = outs
        lower = np.tril(x) + adj(np.tril(x, -1))
        x = lower - 1j * np.imag(np.diagonal(lower, axis1=-2, axis2=-1))[..., None] * np.eye(x.shape[-1])
        rebuilt = (v * e[..., None, :].real) @ adj(v)
        factors = [v]
    else:
        q, r = outs
        rebuilt = q @ r
        factors = [q]
        if np.abs(np.tril(r, -1)).max(initial=0) > 0:
            return "r is not upper triangular"
    if np.abs(rebuilt - x).max(initial=0) > tol * scale:
        return f"reconstruction off by {np.abs(rebuilt - x).max():.2e}"
    for f in factors:
        gram = adj(f) @ f
        if np.abs(gram - np.eye(gram.shape[-1])).max(initial=0) > tol * 10:
            return "factor not orthonormal"
    return None


def check_factors(folder: Path) -> int:
    """(poolserve side, the venv's Python) Runs the stored cases: shapes and dtypes, singular values,
    eigenvalues and |diag(R)| must agree with TensorFlow's, and each side's factors must rebuild the input."""
    from poolserve.proto import graph_pb2
    from poolserve.runtime.graph import Graph
    from poolserve.runtime.session import Session

    stored = pickle.loads((folder / "factors.pkl").read_bytes())
    bad = 0
    for case, tf_result in stored:
        gd = graph_pb2.GraphDef()
        gd.ParseFromString(tf_result["graph"])
        session = Session(Graph(gd))
        got = [np.asarray(g) for g in session.run(tf_result["fetches"], tf_result["feeds"])]
        session.close()
        want: list[Any] = tf_result["outputs"]
        problems = []
        for k, (w, g) in enumerate(zip(want, got, strict=True)):
            if w.shape != g.shape or w.dtype != g.dtype:  # (uninitialised placeholders: shapes only)
                problems.append(f"output {k}: {g.dtype}{g.shape} != TF {w.dtype}{w.shape}")
        unique = case.op in ("Svd", "SelfAdjointEigV2")
        close = np.allclose(got[0], want[0], rtol=1e-4, atol=1e-5, equal_nan=True)
        if unique and not problems and not close:
            problems.append("values differ")
        if case.op == "Qr" and not problems:
            dw = np.abs(np.diagonal(want[1], axis1=-2, axis2=-1))
            dg = np.abs(np.diagonal(got[1], axis1=-2, axis2=-1))
            if not np.allclose(dg, dw, rtol=1e-4, atol=1e-5):
                problems.append("|diag(R)| differs")
        vectors = case.attrs.get("compute_uv", case.attrs.get("compute_v", True))
        finite = np.isfinite(next(iter(case.inputs.values()))).all()
        if not problems and vectors and finite:
            for side, outs in (("TF", want), ("poolserve", got)):
                why = _check_factors(case, outs)
                if why:
                    problems.append(f"{side}: {why}")
        if problems:
            bad += 1
            spec = {k: f"{v.dtype}{list(v.shape)}" for k, v in case.inputs.items()}
            print(f"[factors] {case.op} {spec} {case.attrs}: {'; '.join(problems)}")
    print(f"{bad} findings of {len(stored)} factorisations")
    return 1 if bad else 0


def main() -> int:
    """``/opt/tfenv/bin/python tools/op_fuzz_mathx.py [--seed N] [--count N]``: Svd, SelfAdjointEigV2 and Qr
    with their vectors, run by TensorFlow here, then compared by ``check_factors`` in the venv."""
    import argparse
    import subprocess
    import tempfile

    import op_fuzz

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=30)
    parser.add_argument("--check", default="")
    args = parser.parse_args()
    if args.check:
        return check_factors(Path(args.check))
    folder = Path(tempfile.mkdtemp(prefix="op_fuzz_factors_"))
    stored = []
    for case in _factor_cases(np.random.default_rng(args.seed), args.count):
        result = op_fuzz.run_tf(case)
        if result["status"] == "ok":
            stored.append((case, result))
    (folder / "factors.pkl").write_bytes(pickle.dumps(stored))
    python = str(op_fuzz.HERE.parent / ".venv/bin/python")
    return subprocess.run([python, __file__, "--check", str(folder)], cwd=op_fuzz.HERE.parent).returncode


if __name__ == "__main__":
    raise SystemExit(main())
