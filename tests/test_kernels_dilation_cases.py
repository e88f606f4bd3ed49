"""Dilation2D (runtime/kernels/pool_ops.py), what ``tf.nn.dilation2d`` and ``tf.nn.erosion2d`` leave in a
graph (morphological post-processing of segmentation masks), against what TensorFlow 2.21 computed
(tools/make_op_case_fixtures.py, group "dilation"): SAME and VALID padding, strides, rates (taps falling
outside the input skipped), NaN and -inf inputs, int32 and float64, and a depth mismatch TensorFlow refuses."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("dilation")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=0)


def test_fixture_covers_results_and_refusals() -> None:
    assert {name for name, m in CASES.meta.items() if "error" in m} == {"depth_mismatch"}
