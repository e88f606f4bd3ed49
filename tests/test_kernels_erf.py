"""Erf and Erfc (runtime/kernels/erf_ops.py): float64 against the exact functions, float32 as TensorFlow
computes it (and against its committed outputs), float16, special values and large tensors."""

import math
from pathlib import Path

import numpy as np
import pytest
from support import assert_close, run_op
from test_kernels_math import arr, assert_same, f16, f32, f64, i32, op

from poolserve.runtime.errors import InvalidArgumentError


@pytest.fixture(autouse=True)
def _quiet_numpy_references():
    with np.errstate(all="ignore"):
        yield


def _wide_grid(seed):
    rng = np.random.default_rng(seed)
    mag = np.concatenate(
        [np.exp(rng.uniform(np.log(1e-300), np.log(30.0), 30000)), np.linspace(0, 30, 30001)]
    )
    # the range boundaries of the approximations
    mag = np.concatenate([mag, [0.84375, 1.25, 1 / 0.35, 4.0, 6.0, 27.9, 28.0, 28.1]])
    return np.concatenate([mag, -mag])


def _ref(fn, x):
    return np.array([fn(float(v)) for v in x.ravel()]).reshape(x.shape)


def test_erf_float64():
    x = _wide_grid(0)
    want = _ref(math.erf, x)
    got = op("Erf", x)
    assert got.dtype == f64
    rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-300)
    assert rel.max() <= 1e-15


def test_erfc_float64_including_tails():
    x = _wide_grid(1)
    want = _ref(math.erfc, x)
    got = op("Erfc", x)
    normal = want > 1e-300
    rel = np.abs(got - want)[normal] / want[normal]
    assert rel.max() <= 2e-15
    np.testing.assert_allclose(got[~normal], want[~normal], rtol=0, atol=1e-300)
    assert got[x == 30.0][0] == 0.0 and got[x == -30.0][0] == 2.0


# TensorFlow's own float32 Erf and Erfc (tools/make_erf_fixture.py): measured over 2 million points in
# [-10, 10], TF's erf is off from the exact value by up to 3.6e-7 relative and its erfc by 4.0e-6 (6.8e-7
# below 1, where it is 1 - erf)
_TF_ERF = Path(__file__).parent / "fixtures" / "kernels" / "erf_float32.npz"


def test_erf_float32():
    rng = np.random.default_rng(2)
    mag = np.concatenate([np.exp(rng.uniform(np.log(1e-38), np.log(6.0), 40000)), np.linspace(0, 6, 40001)])
    x = np.concatenate([mag, -mag, [1e-45, 3e-42]]).astype(f32)
    want = _ref(math.erf, x.astype(f64))
    got = op("Erf", x)
    assert got.dtype == f32
    normal = np.abs(want) >= np.finfo(f32).tiny
    rel = np.abs(got.astype(f64) - want)[normal] / np.abs(want[normal])
    assert rel.max() <= 3.6e-7  # TF's own error bound
    np.testing.assert_allclose(got[~normal], want[~normal], rtol=0, atol=1.5e-45)  # subnormal: 1 ulp
    with np.load(_TF_ERF) as tf:
        # the same rational as TensorFlow's; the last bits differ where Eigen fuses multiply-adds (TF flushes
        # subnormal inputs to zero, so they are left out)
        normal_x = np.abs(tf["x"]) >= np.finfo(f32).tiny
        assert_close(op("Erf", tf["x"])[normal_x], tf["erf"][normal_x], rtol=5e-7, atol=3e-45)
    assert_same(op("Erf", arr([3.84, 4.0, -5.0, np.inf], f32)), arr([1.0, 1.0, -1.0, 1.0], f32))  # TF


def test_erfc_float32():
    rng = np.random.default_rng(3)
    x = np.concatenate(
        [rng.uniform(-6.0, 10.0, 60000), np.exp(rng.uniform(np.log(1e-30), np.log(9.0), 20000))]
    )
    x = x.astype(f32)
    want = _ref(math.erfc, x.astype(f64))
    # 1 - erf below 1 (as TensorFlow), an exact-square exponential fit above: closer than TF's 4e-6; small
    # tensors (the first 4000 values) take the fit alone, in float64
    for n in (x.size, 4000):
        got = op("Erfc", x[:n])
        assert got.dtype == f32
        normal = want[:n] > np.finfo(f32).tiny
        assert (np.abs(got.astype(f64) - want[:n])[normal] / want[:n][normal]).max() <= 1e-6
    with np.load(_TF_ERF) as tf:
        tf_normal = tf["erfc"] > np.finfo(f32).tiny
        assert_close(op("Erfc", tf["x"])[tf_normal], tf["erfc"][tf_normal], rtol=5e-6, atol=0)
        big = np.resize(tf["x"], 4 * tf["x"].size)  # past the small-tensor path
        tf_normal = np.resize(tf_normal, big.size)
        assert_close(
            op("Erfc", big)[tf_normal], np.resize(tf["erfc"], big.size)[tf_normal], rtol=5e-6, atol=0
        )
    assert_same(op("Erfc", arr([10.5, 11.0, 1e30], f32)), arr([0.0, 0.0, 0.0], f32))


def test_erf_float16_and_special_values():
    x = np.linspace(-4, 4, 801).astype(f16)
    want = _ref(math.erf, x.astype(f64)).astype(f16)
    assert_close(op("Erf", x), want, rtol=1e-3, atol=0)
    assert_close(op("Erfc", x), _ref(math.erfc, x.astype(f64)).astype(f16), rtol=1e-3, atol=1e-7)
    for dtype in (f16, f32, f64):
        s = arr([np.nan, np.inf, -np.inf, 0.0, -0.0], dtype)
        assert_same(op("Erf", s), arr([np.nan, 1.0, -1.0, 0.0, -0.0], dtype))  # TF
        assert_same(op("Erfc", s), arr([np.nan, 0.0, 2.0, 1.0, 1.0], dtype))  # TF
        assert_same(op("Erf", np.zeros((0, 3), dtype)), np.zeros((0, 3), dtype))
        assert_close(op("Erf", arr(0.5, dtype)), arr(math.erf(0.5), dtype), rtol=1e-3)


def test_erf_large_tensor_spans_blocks():
    x = np.linspace(-3, 3, 3 * 50000, dtype=f32).reshape(3, 50000)
    got = op("Erf", x)
    assert got.shape == x.shape
    assert_close(got, _ref(math.erf, x.astype(f64)).astype(f32), rtol=3.6e-7, atol=1e-38)
    got = op("Erfc", x.astype(f64))
    assert_close(got, _ref(math.erfc, x.astype(f64)), rtol=1e-15, atol=0)


def test_erf_needs_float():
    with pytest.raises(InvalidArgumentError, match="floating-point"):
        op("Erf", arr([1], i32))


# Erfinv and Ndtri: TensorFlow 2.21's values
def test_erfinv_and_ndtri():
    y = np.array([0.0, 0.5, -0.9, 0.999, 1.0, -1.0, 1.5], np.float32)
    want = [0.0, 0.47693631052970886, -1.1630871295928955, 2.326768159866333, np.inf, -np.inf, np.nan]
    np.testing.assert_allclose(run_op("Erfinv", [y]), np.array(want, np.float32), rtol=2e-6)
    p = np.array([0.5, 0.975, 0.01, 0.0, 1.0])
    want = [0.0, 1.959963984540054, -2.3263478740408408, -np.inf, np.inf]
    np.testing.assert_allclose(run_op("Ndtri", [p]), want, rtol=1e-12)
