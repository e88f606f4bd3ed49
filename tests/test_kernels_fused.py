"""The fused kernels' epilogues (runtime/kernels/fused_ops.py): float32 GELU from its table."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from support import run_op

F32 = np.float32
_TF_ERF = Path(__file__).parent / "fixtures" / "kernels" / "erf_float32.npz"


def fused_gelu(x: np.ndarray) -> np.ndarray:
    """_FusedMatMul with an identity filter and a zero bias: GELU of x alone."""
    eye, zero = np.eye(x.shape[1], dtype=x.dtype), np.zeros(x.shape[1], x.dtype)
    attrs = {"fused_ops": ["BiasAdd", "GeluExact"], "num_args": 1}
    return run_op("_FusedMatMul", [x, eye, zero], attrs)


def test_gelu_float32_is_within_2e_7_of_the_exact_value():
    x = np.concatenate([np.linspace(-12, 12, 240001), [8 - 2**-10, -8, 8, 1e-3, -1e-3, 5e-8]]).astype(F32)
    want = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)])
    got = fused_gelu(x.reshape(-1, 1)).reshape(-1)
    assert got.dtype == F32
    assert np.max(np.abs(got - want)) <= 2.4e-7


def test_gelu_float32_matches_tensorflow_erfc_form():
    # TensorFlow's float32 Erfc on a grid z (tools/make_erf_fixture.py) gives its GELU at x = -sqrt(2) z
    with np.load(_TF_ERF) as tf:
        z, erfc = tf["x"].astype(np.float64), tf["erfc"].astype(np.float64)
    keep = np.abs(z) <= 8
    x = (-math.sqrt(2) * z[keep]).astype(F32)
    want = 0.5 * x.astype(np.float64) * erfc[keep]
    got = fused_gelu(x.reshape(-1, 1)).reshape(-1)
    # TF's erfc errs by up to 4e-6 relative, and x was rounded to float32
    np.testing.assert_allclose(got, want, rtol=5e-6, atol=3e-7)


def test_gelu_float32_special_values():
    x = np.array([[np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0]], F32)
    got = fused_gelu(x.T).reshape(-1)
    assert np.isnan(got[0]) and got[1] == np.inf and got[3] == F32(1e30)
    assert abs(got[2]) < 1e-12 and abs(got[4]) < 1e-12 and got[5] == 0
