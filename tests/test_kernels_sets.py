"""DenseToDenseSetOperation and DenseToSparseSetOperation (runtime/kernels/set_ops.py), UnravelIndex
(array_ops.py) and AdjustHue (image_ops.py) against what TensorFlow 2.21 computed for the same inputs
(tools/make_op_case_fixtures.py, group "sets"): every set operation on int32, int64 and string sets, 3-D
groups, empty sets, hue shifts of either sign and past a whole turn (grey pixels and ties), and the inputs
TensorFlow refuses."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("sets")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=1e-6)


def test_fixture_covers_each_op() -> None:
    ops = {"DenseToDenseSetOperation", "DenseToSparseSetOperation", "UnravelIndex", "AdjustHue"}
    assert {m["op"] for m in CASES.meta.values()} == ops
    assert {m["op"] for m in CASES.meta.values() if "error" in m} == ops
