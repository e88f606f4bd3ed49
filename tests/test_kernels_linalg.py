"""Dense linear algebra: inverse, determinants, Cholesky, solves, QR, SVD, symmetric eigendecomposition.
Expected values are TensorFlow 2.21's (tf.raw_ops on the same inputs); tools/op_fuzz_mathx.py compares the
kernels with TensorFlow on random cases (``python tools/op_fuzz_mathx.py``: the factors with vectors)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from support import assert_close, run_op

from poolserve.runtime.errors import InvalidArgumentError

A = np.array([[4.0, 7.0], [2.0, 6.0]])
SINGULAR = np.array([[1.0, 2.0], [2.0, 4.0]])


def fails(
    op: str, inputs: list[Any], message: str, attrs: dict[str, Any] | None = None, outputs: int = 1
) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        run_op(op, inputs, attrs, num_outputs=outputs)


def test_matrix_inverse_adjoint_and_half():
    want = np.array([[0.6, -0.20000000000000004], [-0.7000000000000001, 0.4]])
    assert_close(run_op("MatrixInverse", [A], {"adjoint": True}), want, rtol=1e-15, atol=0)
    half = run_op("MatrixInverse", [A.astype(np.float16)], {"adjoint": False})
    assert_close(half, np.array([[0.6, -0.7], [-0.2, 0.4]], np.float16), rtol=1e-3, atol=0)
    assert run_op("MatrixInverse", [np.zeros((2, 0, 0))], {"adjoint": False}).shape == (2, 0, 0)


def test_matrix_inverse_refuses_what_tensorflow_refuses():
    fails("MatrixInverse", [SINGULAR], "Input is not invertible.", {"adjoint": False})
    # float32 rounding leaves the last pivot of this integer matrix exactly 0, in Eigen's order of operations
    fails("MatrixInverse", [np.arange(1, 10, dtype=np.float32).reshape(3, 3)], "Input is not invertible.")
    fails("MatrixInverse", [np.ones((2, 3))], "Input matrix must be square.")
    fails("MatrixInverse", [np.ones(3)], "Input tensor 0 must have rank >= 2, got 1")
    with pytest.raises(InvalidArgumentError, match="attr 'T'"):
        run_op("MatrixInverse", [np.eye(2, dtype=np.int32)])


def test_determinants_of_batches_singular_and_empty_matrices():
    det = run_op("MatrixDeterminant", [np.stack([A, SINGULAR])])
    assert_close(det, np.array([10.000000000000002, 0.0]), rtol=1e-15, atol=0)
    assert_close(run_op("MatrixDeterminant", [np.zeros((2, 0, 0))]), np.ones(2))
    sign, logdet = run_op(
        "LogMatrixDeterminant", [np.array([[[0.0, 2.0], [3.0, 0.0]], SINGULAR])], num_outputs=2
    )
    assert_close(sign, np.array([-1.0, 0.0]))
    assert_close(logdet, np.array([1.791759469228055, -np.inf]))
    sign, logdet = run_op("LogMatrixDeterminant", [np.array([[1 + 1j, 2], [0, 1j]])], num_outputs=2)
    assert_close(sign, np.array(-0.7071067811865475 + 0.7071067811865475j))
    assert_close(logdet, np.array(0.3465735902799727 + 0j))
    # a NaN pivot: NaN sign (TensorFlow's sign(NaN))
    sign, logdet = run_op("LogMatrixDeterminant", [np.array([[np.nan, 1.0], [1.0, 2.0]])], num_outputs=2)
    assert np.isnan(sign) and np.isnan(logdet)
    fails("LogMatrixDeterminant", [np.ones((2, 3))], "Input matrix must be square.", outputs=2)


def test_large_matrices_take_lapack():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 20, 20)) + 22 * np.eye(20)
    inv = run_op("MatrixInverse", [a], {"adjoint": False})
    assert_close(inv @ a, np.broadcast_to(np.eye(20), (2, 20, 20)), atol=1e-12)
    assert_close(run_op("MatrixDeterminant", [a]), np.linalg.det(a), rtol=1e-12)
    fails("MatrixSolve", [np.zeros((20, 20)), np.ones((20, 1))], "Input matrix is not invertible.")


def test_cholesky_reads_the_lower_triangle_and_fills_failures_with_nan():
    out = run_op("Cholesky", [np.array([[[4.0, 99.0], [2.0, 5.0]], [[1.0, 0.0], [2.0, 1.0]]])])
    # TensorFlow leaves the failed matrix's upper triangle uninitialised: zeros here
    assert_close(out, np.array([[[2.0, 0.0], [1.0, 2.0]], [[np.nan, 0.0], [np.nan, np.nan]]]))
    assert_close(
        run_op("Cholesky", [np.array([[4.0, 0.0], [np.nan, 5.0]])]), np.array([[2.0, 0.0], [np.nan, np.nan]])
    )
    complex_ = run_op(
        "Cholesky", [np.array([[4 + 1j, 0], [1j, 5]])]
    )  # the diagonal's imaginary part is ignored
    assert_close(complex_, np.array([[2, 0], [0.5j, 2.179449471770337]]))
    failed = run_op("Cholesky", [np.array([[-1 + 0j]])])  # (sic: TensorFlow's "NaN" is 0 for complex)
    assert_close(failed, np.array([[0j]]))
    fails("Cholesky", [np.ones((2, 3))], "Input matrix must be square.")


def test_matrix_solve_and_its_checks():
    out = run_op("MatrixSolve", [A, np.array([[1.0, 0.0], [2.0, 1.0]])], {"adjoint": True})
    want = np.array([[0.20000000000000004, -0.20000000000000004], [0.09999999999999996, 0.4]])
    assert_close(out, want, rtol=1e-15, atol=0)
    assert run_op("MatrixSolve", [SINGULAR, np.ones((2, 0))]).shape == (2, 0)
    fails("MatrixSolve", [SINGULAR, np.ones((2, 1))], "Input matrix is not invertible.")
    fails("MatrixSolve", [np.eye(2), np.ones((3, 1))], "Input matrix and rhs are incompatible.")
    fails("MatrixSolve", [np.ones((2, 3)), np.ones((2, 1))], "First input (lhs) must be a square matrix.")
    fails(
        "MatrixSolve",
        [np.ones((2, 2, 2)), np.ones((3, 2, 1))],
        "All input tensors must have the same outer dimensions.",
    )
    fails("MatrixSolve", [np.eye(2), np.ones(2)], "All input tensors must have the same rank.")


def test_triangular_solve_broadcasts_batches_and_reads_one_triangle():
    t = np.array([[2.0, 9.0], [1.0, 4.0]])
    out = run_op(
        "MatrixTriangularSolve",
        [t, np.array([[[2.0], [1.0]], [[4.0], [0.0]]])],
        {"lower": True, "adjoint": False},
    )
    assert_close(out, np.array([[[1.0], [0.0]], [[2.0], [-0.5]]]))
    upper = np.array([[2.0, 3.0], [9.0, 4.0]])
    out = run_op(
        "MatrixTriangularSolve", [upper, np.array([[2.0], [1.0]])], {"lower": False, "adjoint": True}
    )
    assert_close(out, np.array([[1.0], [-0.5]]))
    zero = run_op("MatrixTriangularSolve", [np.array([[0.0, 0.0], [1.0, 4.0]]), np.array([[2.0], [1.0]])])
    assert_close(zero, np.array([[np.inf], [-np.inf]]))
    l3 = np.stack([t] * 3)
    fails(
        "MatrixTriangularSolve",
        [l3, np.ones((2, 2, 1))],
        "In[0] and In[1] must have compatible batch dimensions: [3,2,2] vs. [2,2,1]",
    )
    fails(
        "MatrixTriangularSolve",
        [t, np.ones((3, 1))],
        "In[0] mismatch In[1] shape: 2 vs. 3: [2,2] [3,1] 1 0",
        {"lower": True, "adjoint": False},
    )
    fails(
        "MatrixTriangularSolve",
        [np.ones((2, 3)), np.ones((2, 1))],
        "In[0] matrices in the last dimensions must be square (3 =/= 2)",
    )
    fails("MatrixTriangularSolve", [t, np.ones(2)], "In[1] ndims must be >= 2: 1")


def test_qr_reduced_full_and_empty():
    x = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    q, r = run_op("Qr", [x], {"full_matrices": False}, num_outputs=2)
    want_q = [
        [-0.16903085094570325, 0.89708522714506],
        [-0.5070925528371099, 0.27602622373694297],
        [-0.8451542547285166, -0.34503277967117774],
    ]
    assert_close(q, np.array(want_q), rtol=1e-12)
    assert_close(
        r, np.array([[-5.916079783099616, -7.437357441610944], [0.0, 0.8280786712108239]]), rtol=1e-12
    )
    q, r = run_op("Qr", [x], {"full_matrices": True}, num_outputs=2)
    assert q.shape == (3, 3) and r.shape == (3, 2)
    assert_close(q @ r, x, atol=1e-12)
    q, r = run_op("Qr", [np.ones((3, 0))], {"full_matrices": True}, num_outputs=2)
    assert_close(q, np.eye(3))
    assert r.shape == (3, 0)


def test_svd_values_vectors_and_non_finite_input():
    x = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    s, u, v = run_op("Svd", [x], {"compute_uv": False, "full_matrices": False}, num_outputs=3)
    assert_close(s, np.array([9.525518091565104, 0.5143005806586437]), rtol=1e-12)
    assert u.shape == v.shape == ()  # TensorFlow 2.21: 0-d and uninitialised
    s, u, v = run_op("Svd", [x], {"compute_uv": True, "full_matrices": True}, num_outputs=3)
    assert u.shape == (3, 3) and v.shape == (2, 2)
    assert_close((u[:, :2] * s) @ v.T, x, atol=1e-12)
    s, u, v = run_op("Svd", [np.array([[np.inf, 1.0], [1.0, 3.0]])], num_outputs=3)
    assert np.isnan(s).all() and np.isnan(u).all() and np.isnan(v).all()
    s, u, v = run_op("Svd", [np.ones((2, 0, 3))], {"compute_uv": True, "full_matrices": True}, num_outputs=3)
    assert s.shape == (2, 0) and u.shape == (2, 0, 0)
    assert_close(v, np.broadcast_to(np.eye(3), (2, 3, 3)))
    fails("Svd", [np.ones(3)], "Input tensor 0 must have rank >= 2, got 1", outputs=3)


def test_self_adjoint_eig_reads_the_lower_triangle():
    sym = np.array([[2.0, 99.0], [1.0, 3.0]])
    e, v = run_op("SelfAdjointEigV2", [sym], {"compute_v": False}, num_outputs=2)
    assert_close(e, np.array([1.381966011250105, 3.6180339887498945]), rtol=1e-14)
    assert v.shape == ()
    e, v = run_op("SelfAdjointEigV2", [sym], {"compute_v": True}, num_outputs=2)
    assert_close((v * e) @ v.T, np.array([[2.0, 1.0], [1.0, 3.0]]), atol=1e-12)
    e, v = run_op("SelfAdjointEigV2", [np.array([[2 + 1j]])], num_outputs=2)
    assert_close(e, np.array([2 + 0j]))
    assert_close(v, np.array([[1 + 0j]]))
    message = "Self-adjoint eigen decomposition was not successful. The input might not be valid."
    fails("SelfAdjointEigV2", [np.array([[np.nan, 1.0], [1.0, 3.0]])], message, outputs=2)
    fails("SelfAdjointEigV2", [np.ones((2, 3))], "Input matrix must be square.", outputs=2)
