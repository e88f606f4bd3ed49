"""SparseSparseMaximum and SparseSparseMinimum (``tf.sparse.maximum``, ``minimum``,
runtime/kernels/sparse_math_ops.py) against what TensorFlow 2.21 computed (tools/make_op_case_fixtures.py,
group "sparse_minmax"): the union of the operands' indices, 0 where one holds none, an empty operand, int64
values, and operands of different shapes (refused)."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("sparse_minmax")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=0)


def test_fixture_covers_results_and_refusals() -> None:
    errors = {name for name, m in CASES.meta.items() if "error" in m}
    assert errors == {"maximum_shapes_differ"}
