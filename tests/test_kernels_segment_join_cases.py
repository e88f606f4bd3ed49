"""UnsortedSegmentJoin (runtime/kernels/string_ops.py), what ``tf.strings.reduce_join`` over a ragged
tensor's rows and ``tf.strings.unsorted_segment_join`` leave in a graph, against what TensorFlow 2.21
computed (tools/make_op_case_fixtures.py, group "segment_join"): separators, segments no id names, ids of
rank 2, rows of strings, and the ids TensorFlow refuses."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("segment_join")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case)


def test_fixture_covers_results_and_refusals() -> None:
    errors = {name for name, m in CASES.meta.items() if "error" in m}
    assert {"vector_1", "unused_segments_3", "matrix_ids", "empty"}.isdisjoint(errors)
    assert {"negative_1", "too_big_1", "wrong_shape_1"} <= errors
