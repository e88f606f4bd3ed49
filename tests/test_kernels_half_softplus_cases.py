"""float16 Softplus (runtime/kernels/_half.py) bit for bit against what TensorFlow 2.21 computed
(tools/make_op_case_fixtures.py, group "half_softplus"): Eigen rounds exp(x) to half before log1p, and
switches to x and exp(x) past +-7.008, log(2^-13) + 2 with Eigen's half epsilon."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("half_softplus")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=0)
