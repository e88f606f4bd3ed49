"""Block moves between space, batch and depth. Expected values are TensorFlow 2.21's (tf.raw_ops on the same
inputs); tools/op_fuzz_space.py compares the kernels with TensorFlow on random cases."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from support import run_op

from poolserve.runtime.errors import InvalidArgumentError


def i32(v: Any) -> Any:
    return np.array(v, np.int32)


def fails(op: str, inputs: list[Any], message: str, attrs: dict[str, Any] | None = None) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        run_op(op, inputs, attrs)


X = np.arange(24, dtype=np.float32).reshape(1, 4, 6, 1)
# SpaceToBatchND(X, block_shape [2, 3], paddings [[0, 0], [1, 2]]), each batch entry flattened
S2B = [
    [0, 2, 5, 0, 14, 17],
    [0, 3, 0, 12, 15, 0],
    [1, 4, 0, 13, 16, 0],
    [0, 8, 11, 0, 20, 23],
    [6, 9, 0, 18, 21, 0],
    [7, 10, 0, 19, 22, 0],
]


def test_space_to_batch_nd_pads_and_moves_blocks_into_the_batch():
    out = run_op("SpaceToBatchND", [X, i32([2, 3]), i32([[0, 0], [1, 2]])])
    assert out.shape == (6, 2, 3, 1)
    np.testing.assert_array_equal(out.reshape(6, -1), np.array(S2B, np.float32))


def test_batch_to_space_nd_inverts_it_and_crops():
    back = run_op(
        "BatchToSpaceND", [np.array(S2B, np.float32).reshape(6, 2, 3, 1), i32([2, 3]), i32([[0, 0], [1, 2]])]
    )
    np.testing.assert_array_equal(back, X)
    a = np.arange(32, dtype=np.int32).reshape(8, 2, 1, 2)
    out = run_op("BatchToSpaceND", [a, np.array([2, 2], np.int64), np.array([[1, 0], [0, 1]], np.int64)])
    want = [[[[16, 17]], [[2, 3]], [[18, 19]]], [[[20, 21]], [[6, 7]], [[22, 23]]]]
    np.testing.assert_array_equal(out, np.array(want, np.int32))


def test_block_moves_refuse_what_tensorflow_refuses():
    z = np.zeros((1, 5, 4, 1), np.float32)
    fails(
        "SpaceToBatchND",
        [z, i32([2, 2]), i32([[0, 0], [0, 0]])],
        "padded_shape[0]=5 is not divisible by block_shape[0]=2",
    )
    fails(
        "SpaceToBatchND",
        [z, i32([0, 2]), i32([[0, 0], [0, 0]])],
        "All values in block_shape must be positive, got value, 0 at index 0.",
    )
    fails(
        "SpaceToBatchND",
        [z, i32([2, 2]), i32([[0, -1], [0, 0]])],
        "All values in paddings must be non-negative",
    )
    fails("SpaceToBatchND", [z, i32([2, 2]), i32([0, 0])], "paddings should have shape [2, 2]")
    y = np.zeros((3, 2, 2, 1), np.float32)
    fails(
        "BatchToSpaceND",
        [y, i32([2, 2]), i32([[0, 0], [0, 0]])],
        "Input batch dimension (3) is not divisible by product of block sizes (4)",
    )
    fails(
        "BatchToSpaceND",
        [np.zeros((4, 2, 2, 1), np.float32), i32([2, 2]), i32([[3, 2], [0, 0]])],
        "cropped_shape[0]=-1 must be non-negative",
    )


def test_v1_forms_take_one_block_size_for_both_dimensions():
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)
    nd = run_op("SpaceToBatchND", [x, i32([2, 2]), i32([[0, 0], [0, 0]])])
    np.testing.assert_array_equal(run_op("SpaceToBatch", [x, i32([[0, 0], [0, 0]])], {"block_size": 2}), nd)
    np.testing.assert_array_equal(run_op("BatchToSpace", [nd, i32([[0, 0], [0, 0]])], {"block_size": 2}), x)
    fails("SpaceToBatch", [x, i32([[0, 0], [0, 0]])], "block_size", {"block_size": 1})


def test_space_to_depth_and_depth_to_space():
    s = np.arange(32, dtype=np.float32).reshape(1, 4, 4, 2)
    want = [
        [
            [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]],
            [[16, 17, 18, 19, 24, 25, 26, 27], [20, 21, 22, 23, 28, 29, 30, 31]],
        ]
    ]
    out = run_op("SpaceToDepth", [s], {"block_size": 2})
    np.testing.assert_array_equal(out, np.array(want, np.float32))
    np.testing.assert_array_equal(run_op("DepthToSpace", [out], {"block_size": 2}), s)
    d = np.arange(16, dtype=np.int64).reshape(1, 1, 2, 8)
    want_d = [[[[0, 1], [2, 3], [8, 9], [10, 11]], [[4, 5], [6, 7], [12, 13], [14, 15]]]]
    np.testing.assert_array_equal(run_op("DepthToSpace", [d], {"block_size": 2}), np.array(want_d, np.int64))
    fails(
        "SpaceToDepth",
        [np.zeros((1, 3, 4, 1), np.float32)],
        "Image width 4 and height 3 should be divisible by block_size: 2",
        {"block_size": 2},
    )
    fails(
        "DepthToSpace",
        [np.zeros((1, 3, 4, 3), np.float32)],
        "Input depth dimension 3 should be divisible by: 4",
        {"block_size": 2},
    )
    fails(
        "DepthToSpace", [np.zeros((1, 2, 2, 4), np.float32)], "NCHW", {"block_size": 2, "data_format": "NCHW"}
    )
