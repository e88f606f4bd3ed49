"""DecodeAndCropJpeg and ExtractJpegShape (runtime/kernels/image_decode_ops.py) against what TensorFlow 2.21
computed (tools/make_op_case_fixtures.py, group "jpeg_crop"): windows inside, at the corner and at the edges
of RGB (4:4:4) and grayscale JPEGs, pixel for pixel, the header's shape, and a window past the image and
bytes that are no JPEG, refused with TensorFlow's messages."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("jpeg_crop")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=0)


def test_fixture_covers_results_and_refusals() -> None:
    errors = {name for name, m in CASES.meta.items() if "error" in m}
    assert errors == {"crop_outside", "shape_not_jpeg"}
