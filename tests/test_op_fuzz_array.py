"""Regressions found by differential fuzzing of the array, slicing and gather kernels against TensorFlow
(``tools/op_fuzz_array.py``). Expected values are TensorFlow 2.21's, run on its CPU."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from support import assert_close, run_op

from poolserve.runtime.errors import InvalidArgumentError


def i32(v: Any) -> Any:
    return np.array(v, np.int32)


def i64(v: Any) -> Any:
    return np.array(v, np.int64)


def fails(op: str, inputs: list[Any], message: str, attrs: dict[str, Any] | None = None) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        run_op(op, inputs, attrs)


def test_broadcast_args_takes_negative_dims_as_plain_numbers():
    # TensorFlow's BCast: dims broadcast when equal or one of them is 1, whatever their sign.
    assert_close(run_op("BroadcastArgs", [i64([-1, 1, 4]), i64([1, 4])]), i64([-1, 1, 4]))
    assert_close(run_op("BroadcastArgs", [i64([-1, 1, 4]), i64([-2, 4])]), i64([-1, -2, 4]))
    assert_close(run_op("BroadcastArgs", [i32([]), i32([-1, 0])]), i32([-1, 0]))
    assert_close(run_op("BroadcastArgs", [i64([-3]), i64([1])]), i64([-3]))
    fails("BroadcastArgs", [i64([2]), i64([-1])], "Incompatible shapes: [2] vs. [-1]")
    fails("BroadcastArgs", [i64([0]), i64([-1])], "Incompatible shapes: [0] vs. [-1]")


def test_range_with_a_nan_delta_checks_start_against_limit_as_for_a_negative_one():
    f32 = np.float32
    fails("Range", [f32(1), f32(3), f32(np.nan)], "Requires start >= limit when delta < 0: 1/3")
    fails("Range", [f32(3), f32(1), f32(np.nan)], "Requires ((limit - start) / delta) <=")


def test_top_k_v2_gives_int16_indices():
    values, indices = run_op("TopKV2", [i32([3, 1, 3, 2]), i32(2)], {"index_type": np.int16}, num_outputs=2)
    assert_close(values, i32([3, 3]))
    assert_close(indices, np.array([0, 2], np.int16))


def test_top_k_v2_reads_an_int64_k_as_int32():
    values, indices = run_op("TopKV2", [np.array([1, 5, 3], np.float32), i64(2**32 + 2)], num_outputs=2)
    assert_close(values, np.array([5, 3], np.float32))
    assert_close(indices, i32([1, 2]))
    with pytest.raises(InvalidArgumentError, match="Need k >= 0, got -2147483646"):
        run_op("TopKV2", [np.array([1, 5, 3], np.float32), i64(2**31 + 2)], num_outputs=2)


def test_transpose_reads_an_int64_perm_as_int32():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_close(run_op("Transpose", [x, i64([1 - 2**32, 2**32])]), x.T)
    fails("Transpose", [x, i64([2**32 + 2, 0])], "2 is out of range [0 .. 2)")


def test_concat_v2_wraps_an_int64_axis_to_int32():
    a, b = np.array([[1, 2]], np.int32), np.array([[3]], np.int32)
    assert_close(run_op("ConcatV2", [a, b, i64(2**32 + 1)], {"N": 2}), i32([[1, 2, 3]]))
    assert_close(run_op("ConcatV2", [a, b, i64(-(2**32) - 1)], {"N": 2}), i32([[1, 2, 3]]))
    fails(
        "ConcatV2",
        [a, b, i64(2**32 + 2)],
        "Expected concatenating dimensions in the range [-2, 2), but got 4294967298",
        {"N": 2},
    )
    fails("ConcatV2", [a, b, i64(-(2**32) + 1)], "but got -4294967295", {"N": 2})


def unique(x: Any) -> tuple[Any, Any]:
    y, idx = run_op("Unique", [x], {"out_idx": np.int32}, num_outputs=2)
    return y, idx


def test_unique_tells_the_zeros_of_float16_apart():
    # TensorFlow hashes halves by their bits; NaNs stay distinct.
    y, idx = unique(np.array([0.0, -0.0, np.nan, np.nan, -0.0, 1.0], np.float16))
    assert_close(idx, i32([0, 1, 2, 3, 1, 4]))
    assert (
        y.view(np.uint16).tolist()
        == np.array([0.0, -0.0, np.nan, np.nan, 1.0], np.float16).view(np.uint16).tolist()
    )
    y, idx = unique(np.array([-0.0, 0.0, 0.0], np.float16))
    assert np.signbit(y).tolist() == [True, False]
    assert_close(idx, i32([0, 1, 1]))
    # float32 and float64 take the two zeros as one value
    y, idx = unique(np.array([-0.0, 0.0, 0.0], np.float32))
    assert np.signbit(y).tolist() == [True]
    assert_close(idx, i32([0, 0, 0]))
