"""float16 Sigmoid (runtime/kernels/math_ops.py), what gates of LSTMs and GRUs under Keras' mixed_float16
policy run, bit for bit against what TensorFlow 2.21 computed (tools/make_op_case_fixtures.py, group
"half_sigmoid"): Eigen rounds each step to half, so rounding a float32 sigmoid once differs in the last bit
for about 1 value in 4. Long and short inputs (Eigen's vectorized and scalar paths), and the edges:
zeros, overflow of exp to inf, underflow, infinities and NaN."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("half_sigmoid")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=0)
