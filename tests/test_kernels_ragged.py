"""Ragged tensors made dense. Expected values are TensorFlow 2.21's (tf.raw_ops on the same inputs);
tools/op_fuzz_strings.py ("ragged") compares the kernel with TensorFlow on random cases."""

from __future__ import annotations

import numpy as np
import pytest
from support import run_op

from poolserve.runtime.errors import InvalidArgumentError


def test_ragged_to_dense_pads_and_truncates_to_the_shape():
    out = run_op(
        "RaggedTensorToTensor",
        [
            np.array([-1, 3], np.int64),
            np.array([1, 2, 3, 4, 5, 6], np.int32),
            np.int32(0),
            np.array([0, 2, 2, 6], np.int64),
        ],
        {"row_partition_types": ["ROW_SPLITS"], "num_row_partition_tensors": 1},
    )
    np.testing.assert_array_equal(out, [[1, 2, 0], [0, 0, 0], [3, 4, 5]])
    nested = run_op(
        "RaggedTensorToTensor",
        [
            np.array([-1, -1, -1], np.int64),
            np.arange(5, dtype=np.float32),
            np.float32(-1),
            np.array(2, np.int64),
            np.array([0, 0, 1], np.int64),
            np.array([0, 0, 2, 2, 2], np.int64),
        ],
        {
            "row_partition_types": ["FIRST_DIM_SIZE", "VALUE_ROWIDS", "VALUE_ROWIDS"],
            "num_row_partition_tensors": 3,
        },
    )
    np.testing.assert_array_equal(nested, [[[0, 1, -1], [-1, -1, -1]], [[2, 3, 4], [-1, -1, -1]]])
    with pytest.raises(InvalidArgumentError, match="row_splits must start at 0"):
        run_op(
            "RaggedTensorToTensor",
            [
                np.array([-1, 3], np.int64),
                np.arange(3, dtype=np.int32),
                np.int32(0),
                np.array([1, 3], np.int64),
            ],
            {"row_partition_types": ["ROW_SPLITS"]},
        )
