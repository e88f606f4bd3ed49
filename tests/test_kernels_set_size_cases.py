"""SetSize (``tf.sets.size``, runtime/kernels/set_ops.py) against what TensorFlow 2.21 computed
(tools/make_op_case_fixtures.py, group "set_size"): distinct values per set, rank 2 and 3, strings, empty
sets, and indices out of order, refused."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("set_size")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case)


def test_fixture_covers_results_and_refusals() -> None:
    assert {name for name, m in CASES.meta.items() if "error" in m} == {"unordered"}
