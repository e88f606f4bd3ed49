"""SparseReduceSum/Max and their Sparse forms, SparseAdd, SparseConcat, SparseSlice and SparseSoftmax
(runtime/kernels/sparse_math_ops.py) against what TensorFlow 2.21 computed for the same inputs
(tools/make_op_case_fixtures.py, group "sparse"): float and integer dtypes, negative, repeated and empty
reduction axes, keep_dims, unsorted indices, empty tensors, thresholds, and the inputs TensorFlow refuses."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("sparse")
OPS = {
    "SparseReduceSum",
    "SparseReduceSumSparse",
    "SparseReduceMax",
    "SparseReduceMaxSparse",
    "SparseAdd",
    "SparseConcat",
    "SparseSlice",
    "SparseSoftmax",
}


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case)


def test_fixture_covers_each_op() -> None:
    assert {m["op"] for m in CASES.meta.values()} == OPS
    refused = {m["op"] for m in CASES.meta.values() if "error" in m}
    assert refused >= {"SparseAdd", "SparseConcat", "SparseSlice", "SparseSoftmax", "SparseReduceSum"}
