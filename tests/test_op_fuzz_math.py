"""Regressions found by tools/op_fuzz_math.py. Expected values are TensorFlow 2.21's (tf.raw_ops, x86 CPU)."""

import numpy as np
import pytest
from support import run_op

from poolserve.runtime.errors import InvalidArgumentError

f16, f32, f64 = np.float16, np.float32, np.float64
NAN, INF = np.nan, np.inf


@pytest.fixture(autouse=True)
def _quiet_numpy():
    with np.errstate(all="ignore"):
        yield


def cast(x, dst):
    return run_op("Cast", [x], {"SrcT": x.dtype, "DstT": np.dtype(dst)})


def assert_same(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    np.testing.assert_array_equal(actual, expected)


# --- Cast: float to narrow integers in range (out of range is undefined in C++; see math_ops._cast_fn) ----


def test_cast_in_range_floats_truncate():
    x = np.array([0.0, -0.0, 1.9, -1.9, 127.9, -128.9] * 6, f32)
    assert_same(cast(x, np.int8), np.array([0, 0, 1, -1, 127, -128] * 6, np.int8))
    y = np.array([0.0, -0.0, 1.9, 0.5, 255.9, 128.0] * 6, f64)
    assert_same(cast(y, np.uint8), np.array([0, 0, 1, 0, 255, 128] * 6, np.uint8))


# --- ArgMax's 16-bit outputs -----------------------------------------------------------------------------


def test_arg_max_16_bit_output_types():
    x = np.array([[1.0, NAN, 3.0], [5.0, 2.0, 5.0]], f32)
    got = run_op("ArgMax", [x, np.int32(1)], {"Tidx": np.int32, "output_type": np.int16})
    assert_same(got, np.array([2, 0], np.int16))  # TF
    got = run_op("ArgMax", [x, np.int32(0)], {"Tidx": np.int32, "output_type": np.uint16})
    assert_same(got, np.array([1, 1, 1], np.uint16))  # TF
    with pytest.raises(InvalidArgumentError, match="attr 'output_type' must be int32 or int64, got uint16"):
        run_op("ArgMin", [x, np.int32(0)], {"Tidx": np.int32, "output_type": np.uint16})  # TF: not allowed


# --- integer division by zero: nothing computed, nothing refused -----------------------------------------


@pytest.mark.parametrize("op", ["Div", "FloorDiv", "TruncateDiv", "FloorMod", "TruncateMod"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_empty_integer_division_by_zero(op, dtype):
    got = run_op(op, [np.zeros((2, 0), dtype), np.array([0], dtype)])
    assert_same(got, np.zeros((2, 0), dtype))  # TF
    with pytest.raises(InvalidArgumentError, match="Integer division by zero"):
        run_op(op, [np.ones((2, 1), dtype), np.array([0], dtype)])


# --- AddN: TensorFlow's order of additions ---------------------------------------------------------------


def test_add_n_float16_adds_in_tensorflows_order():
    values = [-3.973, -1.748, -2.81, 3.713, -0.5, 4.324, 5.348, 1.5, -2.5, -3.479, -2.725]
    inputs = [np.array([v], f16) for v in values]
    # TF: the first 3 one after another, the other 8 summed apart (one after another: -2.8515625)
    assert_same(run_op("AddN", inputs, {"N": 11}), np.array([-2.84375], f16))


# --- complex products that overflow ----------------------------------------------------------------------


def test_complex_mul_and_square_overflow_like_tensorflow():
    c = np.array([1e20 + 1e20j, 3e19 - 1e20j, 1 + 2j], np.complex64)
    got = run_op("Mul", [c, c[::-1]])
    want = np.array([-1.0000000200408773e20 + 3.000000060122632e20j, complex(NAN, -INF)], np.complex64)
    np.testing.assert_array_equal(got[:2], want)  # TF
    np.testing.assert_array_equal(got[2], got[0])
    got = run_op("Square", [c])
    np.testing.assert_array_equal(
        got, np.array([complex(NAN, INF), complex(NAN, -INF), -3 + 4j], np.complex64)
    )
