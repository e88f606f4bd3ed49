"""FractionalMaxPool and FractionalAvgPool (runtime/kernels/fractional_pool_ops.py) against what TensorFlow
2.21 computed with the same seeds (tools/make_op_case_fixtures.py, group "fractional_pool"): the pooled
values and TensorFlow's row and column pooling sequences, drawn from its Philox stream, for pseudo-random
and random regions, overlapping or not, ratios below and past 2, float64 and int32 (a truncated mean)."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("fractional_pool")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=1e-6)
