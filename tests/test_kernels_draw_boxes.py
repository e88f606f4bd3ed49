"""DrawBoundingBoxes and DrawBoundingBoxesV2 (runtime/kernels/detection_ops.py) against what TensorFlow 2.21
drew on the same images (tools/make_serving_op_cases.py, group "draw_boxes"): pixel for pixel, float and
half images of 1, 3 and 4 channels, boxes partly or wholly outside, inverted or one pixel, TensorFlow's
default colors and given ones (fewer than the boxes, more, wider than the image), and the inputs TensorFlow
refuses."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("draw_boxes")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=0)


def test_fixture_covers_each_op() -> None:
    ops = {"DrawBoundingBoxes", "DrawBoundingBoxesV2"}
    assert {m["op"] for m in CASES.meta.values()} == ops
    assert {m["op"] for m in CASES.meta.values() if "error" in m} == ops
