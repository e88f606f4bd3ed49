"""Bucketize and the bincounts. Expected values are TensorFlow 2.21's (tf.raw_ops on the same inputs, and
the cases of tests/fixtures/kernels/text_ops.json, tools/make_text_fixtures.py); tools/op_fuzz_space.py
compares the kernels with TensorFlow on random cases."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support import check_node_case, node_cases, run_op

from poolserve.runtime.errors import InvalidArgumentError


def test_bucketize_counts_the_boundaries_at_or_below_each_value():
    x = np.array([[-1.0, 0.0, 0.5, np.nan], [2.0, -np.inf, np.inf, 1.0]], np.float32)
    out = run_op("Bucketize", [x], {"boundaries": [0.0, 0.5, 1.0]})
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [[0, 1, 2, 3], [3, 0, 3, 3]])
    ints = run_op("Bucketize", [np.array([-3, 0, 7], np.int64)], {"boundaries": [-2.5, 0.0]})
    np.testing.assert_array_equal(ints, [0, 2, 2])
    with pytest.raises(InvalidArgumentError, match="boundaries"):
        run_op("Bucketize", [x], {"boundaries": [1.0, 0.0]})


ARR = np.array([[1, 3, 1, 7], [0, 0, 2, 5]], np.int32)


def test_dense_bincount_counts_per_row_with_weights_and_drops_values_past_size():
    w = np.array([[0.5, 1, 2, 3], [1, 1, 1, 1]], np.float32)
    out = run_op(
        "DenseBincount", [ARR, np.int32(4), w], {"binary_output": False, "T": np.float32, "Tidx": np.int32}
    )
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [[0.0, 2.5, 0.0, 1.0], [2.0, 0.0, 1.0, 0.0]])
    binary = run_op(
        "DenseBincount",
        [ARR.astype(np.int64), np.int64(4), np.zeros(0, np.float32)],
        {"binary_output": True, "T": np.float32, "Tidx": np.int64},
    )
    np.testing.assert_array_equal(binary, [[0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]])
    empty = run_op(
        "DenseBincount",
        [np.zeros((2, 0), np.int32), np.int32(3), np.zeros(0, np.float64)],
        {"binary_output": True, "T": np.float64, "Tidx": np.int32},
    )
    np.testing.assert_array_equal(empty, np.zeros((2, 3)))
    with pytest.raises(InvalidArgumentError, match="Input arr must be non-negative!"):
        run_op(
            "DenseBincount",
            [np.array([1, -1], np.int32), np.int32(3), np.zeros(0, np.float32)],
            {"T": np.float32, "Tidx": np.int32},
        )


def test_bincount_v1():
    out = run_op(
        "Bincount", [np.array([4, 1, 1, 9, 0], np.int32), np.int32(5), np.zeros(0, np.int64)], {"T": np.int64}
    )
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, [1, 2, 0, 0, 1])


@pytest.mark.parametrize("case", node_cases("RaggedBincount", "DenseBincount", "Bincount"))
def test_bincounts_answer_as_tensorflow(case: dict[str, Any]):
    """Counts per ragged row, weights summed one after the other in the output's dtype (bit for bit
    TensorFlow's float32 sums), values past ``size`` dropped, TensorFlow's messages for bad input."""
    check_node_case(case)


def test_ragged_bincount_refuses_weights_that_are_not_one_per_value():
    """TensorFlow reads past the end of such weights; poolserve says what is wrong."""
    with pytest.raises(InvalidArgumentError, match="2 weights for 4 values"):
        run_op(
            "RaggedBincount",
            [
                np.array([0, 3, 4]),
                np.array([1, 2, 2, 4], np.int32),
                np.int32(5),
                np.array([1.0, 2.0], np.float32),
            ],
            {"T": np.float32, "Tidx": np.int32, "binary_output": False},
        )
