"""Volumetric convolutions and pools. Expected values are TensorFlow 2.21's (tf.raw_ops in a v1 Session on the
same inputs); tools/op_fuzz_space.py ("volumes") compares the kernels with TensorFlow on random cases."""

from __future__ import annotations

import numpy as np
import pytest
from support import run_op

from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError

X = (np.arange(72).reshape(1, 3, 3, 4, 2) % 7 - 3).astype(np.float32) / 2
W = (np.arange(16).reshape(2, 2, 2, 2, 1) % 5 - 2).astype(np.float32)
STRIDED = {"strides": [1, 2, 1, 2, 1], "padding": "SAME"}


def test_conv3d_same_strided():
    out = run_op("Conv3D", [X, W], STRIDED)
    want = [7.5, -7.0, 3.0, -1.0, 10.0, -4.5, -2.5, -1.5, 3.0, -3.0, 3.0, -4.5]
    assert out.shape == (1, 2, 3, 2, 1)
    np.testing.assert_allclose(out.ravel(), want, rtol=1e-6)


def test_conv3d_backprop_input_is_the_transposed_convolution():
    dy = (np.arange(12).reshape(1, 2, 3, 2, 1) % 4 - 1.5).astype(np.float32)
    out = run_op("Conv3DBackpropInputV2", [np.array([1, 3, 3, 4, 2], np.int32), W, dy], STRIDED)
    want = [
        3.0, 1.5, 0.0, -1.5, 1.0, 0.5, 0.0, -0.5, -4.0, 2.5, 1.5, 0.5, -4.0, -0.5, 0.5, 1.5, 4.0, 0.5, -0.5,
        -1.5, 4.0, -2.5, -1.5, -0.5, -1.5, -3.0, 3.0, 1.5, -0.5, -1.0, 1.0, 0.5, 0.5, -0.5, -4.0, 2.5, 1.5,
        2.5, -4.0, -0.5, -1.5, -2.5, 4.0, 0.5, -0.5, 0.5, 4.0, -2.5, -1.0, -0.5, 0.0, 0.5, -3.0, -1.5, 0.0,
        1.5, 4.0, 0.5, -0.5, -1.5, 4.0, -2.5, -1.5, -0.5, -4.0, 2.5, 1.5, 0.5, -4.0, -0.5, 0.5, 1.5,
    ]  # fmt: skip
    assert out.shape == X.shape
    np.testing.assert_allclose(out.ravel(), want, rtol=1e-6)
    # an empty gradient: zeros of the input's size, whatever the geometry (as TensorFlow answers)
    empty = run_op(
        "Conv3DBackpropInputV2",
        [
            np.array([2, 4, 1, 4, 1], np.int32),
            np.ones((3, 3, 1, 1, 3), np.float32),
            np.zeros((2, 2, 0, 4, 3), np.float32),
        ],
        {"strides": [1, 2, 1, 1, 1], "padding": "VALID"},
    )
    np.testing.assert_array_equal(empty, np.zeros((2, 4, 1, 4, 1), np.float32))


def test_pools_3d():
    avg = run_op("AvgPool3D", [X], {"ksize": [1, 2, 2, 2, 1], "strides": [1, 2, 2, 2, 1], "padding": "SAME"})
    want = [
        0.0,
        0.0625,
        -0.1875,
        -0.125,
        -0.125,
        0.375,
        0.125,
        -0.25,
        -0.375,
        -0.75,
        0.75,
        0.375,
        -0.5,
        0.0,
        -0.25,
        0.25,
    ]
    np.testing.assert_allclose(avg.ravel(), want, rtol=1e-6)
    # SAME padding counts as the lowest float: a window of -inf and padding gives it, one of -inf gives -inf
    x = np.array([3, 1, -np.inf, -np.inf, 2, 4, 5, 0], np.float32).reshape(1, 2, 2, 2, 1)
    mx = run_op("MaxPool3D", [x], {"ksize": [1, 1, 1, 2, 1], "strides": [1, 1, 1, 1, 1], "padding": "SAME"})
    low = np.finfo(np.float32).min
    np.testing.assert_array_equal(mx.ravel(), np.array([3, 1, -np.inf, low, 4, 4, 5, 0], np.float32))


def test_volumes_refuse_what_tensorflow_refuses():
    with pytest.raises(InvalidArgumentError, match="input and filter must have the same depth: 2 vs 3"):
        run_op("Conv3D", [X, np.ones((1, 1, 1, 3, 1), np.float32)], {"strides": [1] * 5, "padding": "VALID"})
    with pytest.raises(UnimplementedError, match="strides in the batch and depth dimensions"):
        run_op("Conv3D", [X, W], {"strides": [2, 1, 1, 1, 1], "padding": "VALID"})
    with pytest.raises(UnimplementedError, match="Pooling is not yet supported on the batch dimension"):
        run_op("MaxPool3D", [X], {"ksize": [2, 1, 1, 1, 1], "strides": [1] * 5, "padding": "VALID"})
    with pytest.raises(InvalidArgumentError, match="Computed output size would be negative"):
        run_op("Conv3D", [X, np.ones((5, 1, 1, 2, 1), np.float32)], {"strides": [1] * 5, "padding": "VALID"})
