"""StatelessParameterizedTruncatedNormal (runtime/kernels/truncated_normal_ops.py) against what TensorFlow
2.21 drew from the same seed (tools/make_op_case_fixtures.py, group "param_truncated"): each of its three
rejection samplers, a bound above the mean, parameters broadcast over batches, float64, and the parameters
and shapes TensorFlow refuses."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("param_truncated")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=1e-6)


def test_fixture_covers_results_and_refusals() -> None:
    errors = {name for name, m in CASES.meta.items() if "error" in m}
    assert errors == {"bad_stddev", "bad_shape"}
