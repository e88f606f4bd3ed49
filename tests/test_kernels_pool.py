"""MaxPoolWithArgmax. Expected values are TensorFlow 2.21's (tf.raw_ops on the same inputs);
tools/op_fuzz_misc.py compares the kernel with TensorFlow on random cases."""

from __future__ import annotations

import numpy as np
import pytest
from support import run_op

from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError

# [2, 3, 2, 2]: ties within windows (the first maximum wins) and a batch entry of equal values
X = np.array(
    [
        [[[1, 5], [3, 3]], [[2, 2], [4, 0]], [[0, 7], [1, 1]]],
        [[[9, 9], [9, 9]], [[0, 0], [0, 0]], [[-1, -1], [9, 9]]],
    ],
    np.float32,
)
ATTRS = {"ksize": [1, 2, 2, 1], "strides": [1, 2, 1, 1]}


def pool(x, padding="SAME", with_batch=False, targmax=np.int64):
    attrs = {**ATTRS, "padding": padding, "include_batch_in_index": with_batch, "Targmax": targmax}
    return run_op("MaxPoolWithArgmax", [x], attrs, num_outputs=2)


def test_same_padding_flattens_positions_without_the_batch():
    out, arg = pool(X)
    np.testing.assert_array_equal(
        out, [[[[4, 5], [4, 3]], [[1, 7], [1, 1]]], [[[9, 9], [9, 9]], [[9, 9], [9, 9]]]]
    )
    assert arg.dtype == np.int64
    np.testing.assert_array_equal(
        arg, [[[[6, 1], [6, 3]], [[10, 9], [10, 11]]], [[[0, 1], [2, 3]], [[10, 11], [10, 11]]]]
    )


def test_with_the_batch_in_the_index_and_valid_padding():
    _, arg = pool(X, with_batch=True, targmax=np.int32)
    assert arg.dtype == np.int32
    np.testing.assert_array_equal(arg[1], [[[12, 13], [14, 15]], [[22, 23], [22, 23]]])
    out, arg = pool(X, "VALID", with_batch=True)
    np.testing.assert_array_equal(out, [[[[4, 5]]], [[[9, 9]]]])
    np.testing.assert_array_equal(arg, [[[[6, 1]]], [[[12, 13]]]])


def test_nan_is_skipped_wherever_it_is_in_the_window():
    # TensorFlow keeps a NaN first in its window (a later one is skipped): poolserve skips both
    x = np.array([[[[np.nan], [1.0]], [[2.0], [np.nan]]]], np.float32)
    out, arg = run_op(
        "MaxPoolWithArgmax", [x], {"ksize": [1, 2, 2, 1], "strides": [1, 1, 1, 1], "padding": "VALID"}, 2
    )
    np.testing.assert_array_equal(out.ravel(), [2.0])
    np.testing.assert_array_equal(arg.ravel(), [2])


def test_refusals():
    with pytest.raises(InvalidArgumentError, match=r"tensor_in must not be empty \(2\)"):
        pool(np.zeros((1, 0, 2, 1), np.float32))
    with pytest.raises(InvalidArgumentError, match="tensor_in must be 4-dimensional"):
        pool(X[0])
    with pytest.raises(UnimplementedError, match="batch dimension"):
        run_op(
            "MaxPoolWithArgmax", [X], {"ksize": [2, 1, 1, 1], "strides": [1, 1, 1, 1], "padding": "SAME"}, 2
        )
