"""RaggedRange, RaggedGather and RaggedTensorToSparse (runtime/kernels/ragged_ops.py) against what TensorFlow
2.21 computed for the same inputs (tools/make_op_case_fixtures.py, group "ragged"): integer and float
ranges (broadcast scalars, empty and reversed rows), gathers of ragged rank 1 and 2 by vectors and matrices,
conversions of empty and string tensors, and the inputs TensorFlow refuses."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("ragged")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case)


def test_fixture_covers_each_op() -> None:
    assert {m["op"] for m in CASES.meta.values()} == {"RaggedRange", "RaggedGather", "RaggedTensorToSparse"}
    assert {m["op"] for m in CASES.meta.values() if "error" in m} == {
        "RaggedRange",
        "RaggedGather",
        "RaggedTensorToSparse",
    }
