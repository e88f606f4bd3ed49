"""Inverse trigonometric and hyperbolic functions, Lgamma and Digamma, Xlogy and friends, ApproximateEqual,
bitwise ops and shifts. Expected values are TensorFlow 2.21's (tf.raw_ops on the same inputs);
tools/op_fuzz_mathx.py compares the kernels with TensorFlow on random cases."""

from __future__ import annotations

import numpy as np
import pytest
from support import assert_close, run_op

from poolserve.runtime.errors import InvalidArgumentError

INF, NAN = np.inf, np.nan


def test_lgamma_float64_matches_glibc_and_its_poles():
    x = np.array([-2.5, 0.5, 1.4616321449683622, 3.0, 7.5, 8.0, 100.0, 1e-30, 0.0, -3.0, -INF])
    want = [
        -5.6243716497674068e-02, 5.7236494292470008e-01, -1.2148629053584961e-01, 6.9314718055994529e-01,
        7.5343642367587336e00, 8.5251613610654129e00, 3.5913420536957545e02, 6.9077552789821368e01,
        INF, INF, INF,
    ]  # fmt: skip
    assert_close(run_op("Lgamma", [x]), np.array(want), rtol=1e-15, atol=0)


def test_lgamma_float32_and_large_arguments():
    x = np.array([-2.5, 0.5, 3.0, 1e30], np.float32)
    want = np.array([-5.6243714e-02, 5.7236493e-01, 6.9314718e-01, 6.8077553e31], np.float32)
    assert_close(run_op("Lgamma", [x]), want, rtol=1e-7, atol=0)


def test_lgamma_is_vectorised_over_a_big_tensor():
    x = np.linspace(-20.5, 50.5, 200_000)
    out = run_op("Lgamma", [x])
    assert out.shape == x.shape and np.isfinite(out).all()
    assert out[np.searchsorted(x, 3.0)] == pytest.approx(np.log(2.0), rel=1e-4)


def test_digamma_follows_eigen_with_nan_at_the_poles():
    x = np.array([-2.5, -0.5, 0.5, 1.0, 2.0, 10.5, 1e20, 0.0, -3.0, INF])
    want = [
        1.1031566406452433, 3.6489973978576451e-02, -1.9635100260214227, -5.7721566490153231e-01,
        4.2278433509846747e-01, 2.3030010342976865, 4.6051701859880914e01, NAN, NAN, INF,
    ]  # fmt: skip
    assert_close(run_op("Digamma", [x]), np.array(want), rtol=1e-15, atol=0)
    f32 = run_op("Digamma", [np.array([-2.5, 0.5, 1.0, 10.5], np.float32)])
    assert_close(f32, np.array([1.1031568, -1.9635108, -0.5772159, 2.3030012], np.float32), rtol=1e-7, atol=0)
    half = run_op("Digamma", [np.array([0.5, 3.0], np.float16)])
    assert_close(half, np.array([-1.964, 0.923], np.float16), rtol=1e-3, atol=0)
    assert run_op("Digamma", [np.float32(2.0)]).shape == ()


def test_special_functions_refuse_integers():
    with pytest.raises(InvalidArgumentError, match="attr 'T'"):
        run_op("Lgamma", [np.array([1, 2], np.int32)])
    with pytest.raises(InvalidArgumentError, match="attr 'T'"):
        run_op("Acos", [np.array([1, 2], np.int32)])


def test_inverse_hyperbolic_real_and_complex():
    assert_close(run_op("Acosh", [np.array([1.0, 2.0, 0.5])]), np.array([0.0, 1.3169578969248166, NAN]))
    out = run_op("Atanh", [np.array([2 + 0j, 0.5 + 0.5j])])
    assert_close(
        out, np.array([0.5493061443340549 + 1.5707963267948966j, 0.40235947810852507 + 0.5535743588970452j])
    )


def test_xlogy_family_is_zero_where_x_is_zero_and_broadcasts():
    out = run_op("Xlogy", [np.array([0.0, 2.0, 0.0]), np.array([[0.0], [3.0]])])
    assert_close(out, np.array([[0.0, -INF, 0.0], [0.0, 2.1972245773362196, 0.0]]))
    out = run_op("Xlog1py", [np.array([0.0, 2.0], np.float32), np.array([NAN, 3.0], np.float32)])
    assert_close(out, np.array([0.0, 2.7725887], np.float32))
    assert_close(
        run_op("Xdivy", [np.array([0.0, 2.0, 1.0]), np.array([0.0, 4.0, 0.0])]), np.array([0.0, 0.5, INF])
    )
    with pytest.raises(InvalidArgumentError, match=r"Incompatible shapes: \[2\] vs. \[3\]"):
        run_op("Xlogy", [np.ones(2), np.ones(3)])


def test_approximate_equal_uses_a_float32_tolerance_inclusively():
    x = np.array([1.0, 2.0, 0.0, NAN, INF])
    y = np.array([1.5, 2.25, 0.0, NAN, INF])
    out = run_op("ApproximateEqual", [x, y], {"tolerance": 0.5})
    np.testing.assert_array_equal(out, [True, True, True, False, False])
    f32 = np.array([1.0], np.float32)
    assert not run_op("ApproximateEqual", [f32, np.array([1.1], np.float32)], {"tolerance": 0.1})[0]
    with pytest.raises(
        InvalidArgumentError, match=r"x and y must be of the same shape. x shape: \[2\]. y shape: \[1\]"
    ):
        run_op("ApproximateEqual", [np.ones(2), np.ones(1)], {"tolerance": 0.5})
    with pytest.raises(InvalidArgumentError, match="attr 'T'"):
        run_op("ApproximateEqual", [np.ones(2, np.int32), np.ones(2, np.int32)], {"tolerance": 0.5})


def test_bitwise_ops_and_population_count():
    x, y = np.array([12, -1, 5], np.int8), np.array([10, 3, -128], np.int8)
    np.testing.assert_array_equal(run_op("BitwiseAnd", [x, y]), np.array([8, 3, 0], np.int8))
    np.testing.assert_array_equal(run_op("BitwiseOr", [x, y]), np.array([14, -1, -123], np.int8))
    np.testing.assert_array_equal(run_op("BitwiseXor", [x, y]), np.array([6, -4, -123], np.int8))
    np.testing.assert_array_equal(
        run_op("Invert", [np.array([1], np.uint32)]), np.array([4294967294], np.uint32)
    )
    count = run_op("PopulationCount", [np.array([-1, 0, 5, -128], np.int8)])
    assert_close(count, np.array([8, 0, 2, 1], np.uint8))


def test_shifts_clamp_the_count_to_the_bit_width():
    left = run_op("LeftShift", [np.array([1, -1, 3], np.int16), np.array([15, 3, 20], np.int16)])
    np.testing.assert_array_equal(left, np.array([-32768, -8, -32768], np.int16))
    right = run_op("RightShift", [np.array([-100, 100, -1], np.int32), np.array([2, -5, 99], np.int32)])
    np.testing.assert_array_equal(right, np.array([-25, 100, -1], np.int32))
    unsigned = run_op("RightShift", [np.array([200, 5], np.uint8), np.array([100, 1], np.uint8)])
    np.testing.assert_array_equal(unsigned, np.array([1, 2], np.uint8))


def test_mul_no_nan_is_zero_where_y_is_zero_whatever_x_is():
    x = np.array([INF, NAN, 2.0, -3.0], np.float32)
    y = np.array([0.0, -0.0, 0.5, INF], np.float32)
    assert_close(run_op("MulNoNan", [x, y]), np.array([0, 0, 1, -INF], np.float32), rtol=0, atol=0)
    z = run_op("MulNoNan", [np.array([1 + 2j, INF], np.complex64), np.array([0j, 2j], np.complex64)])
    assert z.dtype == np.complex64 and z[0] == 0 and np.isnan(z[1].real) and z[1].imag == INF


def test_next_after_steps_one_float_toward_x2():
    got = run_op(
        "NextAfter", [np.array([1.0, 0.0, -1.0], np.float32), np.array([2.0, -1.0, -1.0], np.float32)]
    )
    assert got.dtype == np.float32
    assert got.tolist() == [1.0000001192092896, -1.401298464324817e-45, -1.0]  # TensorFlow's
    with pytest.raises(InvalidArgumentError, match="attr 'T' must be float32 or float64"):
        run_op("NextAfter", [np.array([1.0], np.float16), np.array([2.0], np.float16)])
