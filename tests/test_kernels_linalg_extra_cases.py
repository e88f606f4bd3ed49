"""Lu, TridiagonalSolve, MatrixSquareRoot, MatrixLogarithm and Eig (runtime/kernels/linalg_ops.py), what
``tf.linalg.lu``, ``tridiagonal_solve``, ``sqrtm``, ``logm`` and ``eig`` leave in a graph, against what
TensorFlow 2.21 computed (tools/make_op_case_fixtures.py, group "linalg_extra"): every float and complex
type, batches, empty and 1x1 matrices, the permutation's two index types, tridiagonal systems that need
pivoting or are singular (NaN, not an error, as in TensorFlow) or perturbed, a real matrix with a negative
eigenvalue (an all-NaN square root), and the shapes TensorFlow refuses.

Eig's eigenvalues have no fixed order (LAPACK's here, Eigen's complex Schur form's in TensorFlow) and its
eigenvectors are unique up to a phase, so they are compared as TensorFlow's own tests do: the eigenvalues
sorted, and each eigenvector of ours parallel to TensorFlow's for the same eigenvalue."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support import OpCases, run_op

from poolserve.runtime.errors import InvalidArgumentError

CASES = OpCases("linalg_extra")
OTHERS = [c for c in CASES.names() if CASES.meta[c]["op"] != "Eig"]
EIG = CASES.names("Eig")


def _atol(case: str) -> float:
    single = any(
        CASES.arrays[f"{case}/in/{k}"].dtype in (np.float32, np.complex64) for k in CASES.meta[case]["feeds"]
    )
    return 5e-6 if single else 1e-13


@pytest.mark.parametrize("case", OTHERS)
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=_atol(case))


def _sorted(w: Any) -> Any:
    return np.sort_complex(np.round(w, 6)).astype(w.dtype), np.argsort(np.round(w, 6))


@pytest.mark.parametrize("case", EIG)
def test_eig_matches_tensorflow_up_to_order_and_phase(case: str) -> None:
    meta = CASES.meta[case]
    if "error" in meta:
        CASES.check(case)
        return
    got, want, _ = CASES.run(case)
    atol = _atol(case)
    assert got[0].dtype == want[0].dtype and got[0].shape == want[0].shape
    x = CASES.arrays[f"{case}/in/{meta['feeds'][0]}"]
    n = x.shape[-1]
    if x.size == 0:
        assert got[1].shape == want[1].shape
        return
    for e, w, v_got, v_want in zip(
        got[0].reshape(-1, n),
        want[0].reshape(-1, n),
        np.reshape(got[1], (-1, n, n)) if got[1].ndim else [None] * (got[0].size // max(n, 1)),
        np.reshape(want[1], (-1, n, n)) if want[1].ndim else [None] * (got[0].size // max(n, 1)),
        strict=True,
    ):
        (es, ei), (ws, wi) = _sorted(e), _sorted(w)
        np.testing.assert_allclose(es, ws, atol=atol, err_msg=case)
        if v_got is None:
            assert got[1].shape == ()
            continue
        assert v_got.shape == v_want.shape
        for i, j in zip(ei, wi, strict=True):
            a, b = v_got[:, i], v_want[:, j]
            np.testing.assert_allclose(np.linalg.norm(a), 1, atol=atol)
            # parallel unit vectors: |<a, b>| = 1
            np.testing.assert_allclose(abs(np.vdot(a, b)), 1, atol=atol, err_msg=case)


def test_fixture_covers_results_and_refusals() -> None:
    refused = {name for name, m in CASES.meta.items() if "error" in m}
    assert {"lu_singular", "lu_not_square", "tri_mismatch_1", "sqrtm_vector"} <= refused
    assert {"tri_singular_1", "tri_needs_pivot_0", "sqrtm_negative", "tri_perturb"}.isdisjoint(refused)


def test_perturbing_needs_pivoting() -> None:
    with pytest.raises(InvalidArgumentError, match="Setting perturb_singular requires also setting partial"):
        run_op(
            "TridiagonalSolve",
            [np.ones((3, 2)), np.ones((2, 1))],
            {"partial_pivoting": False, "perturb_singular": True},
        )
