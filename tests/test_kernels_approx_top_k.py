"""ApproxTopK (runtime/kernels/gather_ops.py) against what TensorFlow 2.21's CPU kernel computed for the same
inputs (tools/make_serving_op_cases.py, group "approx_top_k"): float and half rows of 7 to 1500 values full
of ties (their indices in TensorFlow's order), every k from 0 to the row, the approximation's attrs; and
what TensorFlow refuses or has no CPU kernel for."""

from __future__ import annotations

import numpy as np
import pytest
from support import OpCases, run_op

from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError

CASES = OpCases("approx_top_k")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=0)


def test_refuses_what_tensorflow_refuses() -> None:
    x = np.zeros((2, 3), np.float32)
    # TensorFlow's eager kernel: "input must have at least k columns. Had 3, needed 4"
    with pytest.raises(InvalidArgumentError, match="input must have at least k columns. Had 3, needed 4"):
        run_op("ApproxTopK", [x], {"k": 4}, num_outputs=2)
    with pytest.raises(InvalidArgumentError, match="input must be >= 1-D"):
        run_op("ApproxTopK", [np.float32(1)], {"k": 0}, num_outputs=2)
    # TensorFlow registers its CPU kernel for max-k along the last axis only
    for attrs in ({"is_max_k": False}, {"reduction_dimension": 0}):
        with pytest.raises(UnimplementedError, match="has no CPU kernel in TensorFlow"):
            run_op("ApproxTopK", [x], {"k": 1, **attrs}, num_outputs=2)
