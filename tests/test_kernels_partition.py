"""DynamicPartition and DynamicStitch (expected values follow TensorFlow's documented examples and its
answers: parts keep their rows' order, a later index wins in a stitch)."""

from __future__ import annotations

import numpy as np
import pytest
from support import run_op

from poolserve.runtime.errors import InvalidArgumentError


def test_dynamic_partition_splits_rows_by_part_in_order():
    data = np.array([10, 20, 30, 40, 50], np.float32)
    parts = run_op(
        "DynamicPartition", [data, np.array([0, 0, 1, 1, 0], np.int32)], {"num_partitions": 2}, num_outputs=2
    )
    np.testing.assert_array_equal(parts[0], [10, 20, 50])
    np.testing.assert_array_equal(parts[1], [30, 40])
    rows = np.arange(12, dtype=np.int64).reshape(2, 2, 3)
    got = run_op(
        "DynamicPartition", [rows, np.array([[1, 0], [1, 2]], np.int32)], {"num_partitions": 3}, num_outputs=3
    )
    assert [g.shape for g in got] == [(1, 3), (2, 3), (1, 3)]
    np.testing.assert_array_equal(got[1], [[0, 1, 2], [6, 7, 8]])
    with pytest.raises(InvalidArgumentError, match=r"partitions\[1\] = 2 is not in \[0, 2\)"):
        run_op(
            "DynamicPartition", [data[:2], np.array([0, 2], np.int32)], {"num_partitions": 2}, num_outputs=2
        )
    with pytest.raises(InvalidArgumentError, match="must start with partitions.shape"):
        run_op("DynamicPartition", [data, np.array([0, 1], np.int32)], {"num_partitions": 2}, num_outputs=2)


@pytest.mark.parametrize("op", ["DynamicStitch", "ParallelDynamicStitch"])
def test_dynamic_stitch_merges_by_index(op):
    indices = [np.array(6, np.int32), np.array([4, 1], np.int32), np.array([[5, 2], [0, 3]], np.int32)]
    data = [np.array([61, 62], np.float32), np.array([[41, 42], [11, 12]], np.float32),
            np.array([[[51, 52], [21, 22]], [[1, 2], [31, 32]]], np.float32)]  # fmt: skip
    got = run_op(op, [*indices, *data], {"N": 3})
    np.testing.assert_array_equal(got, [[1, 2], [11, 12], [21, 22], [31, 32], [41, 42], [51, 52], [61, 62]])
    # a later index wins
    dup = run_op(
        op, [np.array([0, 1], np.int32), np.array([1], np.int32), np.array([7, 8]), np.array([9])], {"N": 2}
    )
    np.testing.assert_array_equal(dup, [7, 9])
    with pytest.raises(InvalidArgumentError, match="does not start with"):
        run_op(op, [np.array([0, 1], np.int32), np.array([7, 8, 9])], {"N": 1})
