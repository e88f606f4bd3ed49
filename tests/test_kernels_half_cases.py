"""float16 Softmax, LogSoftmax, Sum and Mean over innermost axes, Rsqrt (whole packets and the scalar tail),
Elu and Selu (runtime/kernels/_half.py), bit for bit against
what TensorFlow 2.21 computed (tools/make_op_case_fixtures.py, group "half"): Eigen rounds each step to half
and adds a row in packets of 8, so a float32 computation rounded once differs in the last bit (Softmax over
10 classes: 1 value in 5). Rows of 1 to 2049 values (packet tails, rows split past 1600 values at packet
boundaries of the flat tensor), rank-4 logits, sums over two and all axes, and logits of +-60000, inf and
NaN."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("half")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=0)
