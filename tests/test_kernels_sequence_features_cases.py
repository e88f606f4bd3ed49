"""ParseExampleV2 with ``tf.io.FixedLenSequenceFeature`` (runtime/kernels/parsing_ops.py) against what
TensorFlow 2.21 computed (tools/make_op_case_fixtures.py, group "sequence_features"): int64, float and string
features of variable length, in blocks of one, two and 2x1 values, padded with their default to the longest
example (none for a batch where no example has the feature), beside a fixed-length feature, for a batch and
a single Example, and the features TensorFlow refuses (a length not a multiple of the block, a wrong type)."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("sequence_features")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case)


def test_fixture_covers_results_and_refusals() -> None:
    errors = {name for name, m in CASES.meta.items() if "error" in m}
    assert errors == {"not_multiple", "wrong_type"}
