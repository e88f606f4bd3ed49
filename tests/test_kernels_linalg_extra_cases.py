"""Lu, TridiagonalSolve, MatrixSquareRoot, MatrixLogarithm and Eig (runtime/kernels/linalg_ops.py), what
``tf.linalg.lu``, ``tridiagonal_solve``, ``sqrtm``, ``logm`` and ``eig`` leave in a graph, against what
TensorFlow 2.21 computed (tools/make_op_case_fixtures.py, group "linalg_extra"): every float and complex
type, batches, empty and 1x1 matrices, the permutation's two index types, tridiagonal systems that need
pivoting or are singular (NaN, not an error, as in TensorFlow) or perturbed, a real matrix with a negative
eigenvalue (an all-NaN square root), and the shapes TensorFlow refuses.

Eig's eigenvalues come in Eigen's order (a real matrix's real Schur form's, a complex one's by magnitude),
which TensorFlow documents nowhere, and its eigenvectors are unique up to a phase, so they are compared as
TensorFlow's own tests do: the eigenvalues sorted, and each eigenvector of ours parallel to TensorFlow's for
the same eigenvalue; and then, where rounding does not decide it, the order too."""

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


@pytest.mark.parametrize("case", [c for c in EIG if "error" not in CASES.meta[c] and "symmetric" not in c])
def test_eig_gives_eigenvalues_in_tensorflows_order(case: str) -> None:
    """Eigen's order (runtime/kernels/_schur.py): a real matrix's real Schur form's, a complex one's by
    magnitude. (The symmetric cases converge so fast that rounding noise decides their order in Eigen.)"""
    got, want, _ = CASES.run(case)
    np.testing.assert_allclose(got[0], want[0], atol=_atol(case) * 10, err_msg=case)
