"""DenseCountSparseOutput, SparseCountSparseOutput and RaggedCountSparseOutput (``tf.sparse.bincount``,
runtime/kernels/bucket_ops.py) against what TensorFlow 2.21 computed (tools/make_op_case_fixtures.py, group
"count_sparse"): counts per row as sparse tensors, weights, binary output, minlength and maxlength, 1-d
inputs, and a negative value TensorFlow refuses."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("count_sparse")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=0)


def test_fixture_covers_results_and_refusals() -> None:
    errors = {name for name, m in CASES.meta.items() if "error" in m}
    assert errors == {"dense_negative"}
