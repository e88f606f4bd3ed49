"""Detection post-processing: non-max suppression, CropAndResize, ExtractImagePatches. Expected values are
TensorFlow 2.21's (tf.raw_ops on the same inputs); tools/op_fuzz_detect.py compares the kernels with
TensorFlow on random cases."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from support import run_op

from poolserve.runtime.errors import InvalidArgumentError, OutOfRangeError, UnimplementedError

BOXES = np.array(
    [[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11], [1, 11, 0, 10], [0, 100, 1, 101]],
    np.float32,
)
SCORES = np.array([0.9, 0.75, 0.6, 0.95, 0.5, 0.3], np.float32)


def f32(v: Any) -> Any:
    return np.array(v, np.float32)


def i32(v: Any) -> Any:
    return np.array(v, np.int32)


def nms(op: str, boxes: Any, scores: Any, limit: int, *rest: Any, attrs: Any = None, n: int = 1) -> Any:
    return run_op(op, [boxes, scores, i32(limit), *rest], attrs, num_outputs=n)


def test_nms_v3_greedy_by_score_with_flipped_boxes_and_threshold():
    # box 4 is box 3 flipped (y1 > y2, x1 > x2): the same box, so suppressed by it
    np.testing.assert_array_equal(nms("NonMaxSuppressionV3", BOXES, SCORES, 3, f32(0.5), f32(0.0)), [3, 0, 5])
    out = nms("NonMaxSuppressionV3", BOXES, SCORES, 10, f32(0.5), f32(0.4))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [3, 0])  # scores strictly above 0.4


def test_nms_ties_take_the_lower_index_and_nan_boxes_decay_the_score():
    boxes = f32([[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3]])
    out = nms("NonMaxSuppressionV3", boxes, f32([0.5, 0.5, 0.5]), 3, f32(0.5), f32(-np.inf))
    np.testing.assert_array_equal(out, [0, 2])
    # a NaN IoU weighs the score by 0: requeued at score 0 when that is above the threshold, else dropped
    nan_boxes = f32([[0, 0, 1, 1], [np.nan, 0, 1, 1], [0, 0, 1, 1]])
    scores = f32([0.9, 0.8, 0.7])
    np.testing.assert_array_equal(
        nms("NonMaxSuppressionV3", nan_boxes, scores, 3, f32(0.5), f32(-np.inf)), [0, 1]
    )
    np.testing.assert_array_equal(nms("NonMaxSuppressionV3", nan_boxes, scores, 3, f32(0.5), f32(0.0)), [0])


def test_nms_v4_pads_and_counts():
    idx, valid = nms(
        "NonMaxSuppressionV4",
        BOXES,
        SCORES,
        6,
        f32(0.5),
        f32(0.4),
        attrs={"pad_to_max_output_size": True},
        n=2,
    )
    np.testing.assert_array_equal(idx, [3, 0, 0, 0, 0, 0])
    assert valid.dtype == np.int32 and int(valid) == 2


def test_nms_v5_soft_nms_decays_scores():
    idx, scores, valid = nms(
        "NonMaxSuppressionV5", BOXES, SCORES, 6, f32(0.5), f32(0.0), f32(0.5), attrs={}, n=3
    )
    np.testing.assert_array_equal(idx, [3, 0, 1, 5, 2, 4])
    want = [0.95, 0.9, 0.38400355, 0.3, 0.19697244, 0.18393973]
    np.testing.assert_allclose(scores, f32(want), rtol=1e-6)
    assert int(valid) == 6


def test_nms_with_overlaps_and_errors():
    ov = f32([[1, 0.7, 0.2], [0.7, 1, 0.1], [0.2, 0.1, 1]])
    out = run_op("NonMaxSuppressionWithOverlaps", [ov, f32([0.5, 0.9, 0.4]), i32(3), f32(0.5), f32(0.0)])
    np.testing.assert_array_equal(out, [1, 2])
    with pytest.raises(InvalidArgumentError, match=re.escape("iou_threshold must be in [0, 1]")):
        nms("NonMaxSuppressionV3", BOXES, SCORES, 3, f32(1.5), f32(0.0))
    with pytest.raises(InvalidArgumentError, match="output size must be non-negative"):
        nms("NonMaxSuppressionV3", BOXES, SCORES, -1, f32(0.5), f32(0.0))
    with pytest.raises(InvalidArgumentError, match="soft_nms_sigma_val must be >= 0"):
        nms("NonMaxSuppressionV5", BOXES, SCORES, 3, f32(0.5), f32(0.0), f32(-1), n=3)
    with pytest.raises(InvalidArgumentError, match="boxes must have 4 columns"):
        nms("NonMaxSuppressionV3", BOXES[:, :3], SCORES, 3, f32(0.5), f32(0.0))


COMBINED_BOXES = f32([[[[0, 0, 1, 1]], [[0, 0.1, 1, 1.1]], [[0.5, 0.5, 1.5, 1.5]]]])
COMBINED_SCORES = f32([[[0.9, 0.1], [0.8, 0.7], [0.3, 0.6]]])


@pytest.mark.parametrize("pad_per_class", [False, True])
def test_combined_nms_per_class_then_best_overall_clipped(pad_per_class: bool):
    boxes, scores, classes, valid = run_op(
        "CombinedNonMaxSuppression",
        [COMBINED_BOXES, COMBINED_SCORES, i32(2), i32(5), f32(0.5), f32(0.2)],
        {"pad_per_class": pad_per_class, "clip_boxes": True},
        num_outputs=4,
    )
    width = 4 if pad_per_class else 5  # padded to min(max_total_size, max_per_class * classes)
    want_boxes = [[0, 0, 1, 1], [0, 0.1, 1, 1], [0.5, 0.5, 1, 1], [0.5, 0.5, 1, 1], [0, 0, 0, 0]]
    np.testing.assert_allclose(boxes, f32([want_boxes[:width]]))
    np.testing.assert_allclose(scores, f32([[0.9, 0.7, 0.6, 0.3, 0][:width]]))
    np.testing.assert_array_equal(classes, f32([[0, 1, 1, 0, 0][:width]]))
    assert valid.dtype == np.int32 and valid.tolist() == [4]


def test_combined_nms_refuses_bad_sizes():
    with pytest.raises(InvalidArgumentError, match="max_size_per_class must be positive"):
        run_op(
            "CombinedNonMaxSuppression",
            [COMBINED_BOXES, COMBINED_SCORES, i32(0), i32(5), f32(0.5), f32(0.2)],
            num_outputs=4,
        )


IMAGE = np.arange(24, dtype=np.float32).reshape(2, 3, 4, 1)
CROP_BOXES = f32([[0, 0, 1, 1], [0.5, 0.25, 1.5, 0.75], [1, 1, 0, 0]])


@pytest.mark.parametrize(
    ("method", "second"),
    [
        ("bilinear", [[16.75, 18.25], [20.75, 22.25], [-1, -1]]),
        ("nearest", [[17, 18], [21, 22], [-1, -1]]),
    ],
)
def test_crop_and_resize_samples_flips_and_extrapolates(method: str, second: list[Any]):
    out = run_op(
        "CropAndResize",
        [IMAGE, CROP_BOXES, i32([0, 1, 1]), i32([3, 2])],
        {"method": method, "extrapolation_value": -1.0},
    )
    assert out.dtype == np.float32 and out.shape == (3, 3, 2, 1)
    np.testing.assert_array_equal(out[0, :, :, 0], [[0, 3], [4, 7], [8, 11]])
    np.testing.assert_array_equal(out[1, :, :, 0], second)  # the last row lies below the image
    np.testing.assert_array_equal(out[2, :, :, 0], [[23, 20], [19, 16], [15, 12]])  # a flipped box
    one = run_op(
        "CropAndResize", [IMAGE.astype(np.uint8), f32([[0.2, 0.3, 0.6, 0.7]]), i32([1]), i32([1, 1])]
    )
    np.testing.assert_allclose(one, f32([[[[16.700000762939453]]]]), rtol=0)


def test_crop_and_resize_errors():
    with pytest.raises(OutOfRangeError, match=re.escape("box_index has values outside [0, batch_size)")):
        run_op("CropAndResize", [IMAGE, CROP_BOXES, i32([0, 2, 1]), i32([3, 2])])
    with pytest.raises(InvalidArgumentError, match="not finite"):
        run_op("CropAndResize", [IMAGE, f32([[0, 0, np.inf, 1]]), i32([0]), i32([3, 2])])
    with pytest.raises(InvalidArgumentError, match="crop dimensions must be positive"):
        run_op("CropAndResize", [IMAGE, CROP_BOXES, i32([0, 1, 1]), i32([0, 2])])


def test_extract_image_patches_with_rates_and_padding():
    x = np.arange(40, dtype=np.int32).reshape(1, 4, 5, 2)
    attrs = {"ksizes": [1, 2, 2, 1], "strides": [1, 2, 3, 1], "rates": [1, 1, 2, 1]}
    valid = run_op("ExtractImagePatches", [x], {**attrs, "padding": "VALID"})
    np.testing.assert_array_equal(
        valid, [[[[0, 1, 4, 5, 10, 11, 14, 15]], [[20, 21, 24, 25, 30, 31, 34, 35]]]]
    )
    same = run_op("ExtractImagePatches", [x], {**attrs, "padding": "SAME"})
    want = [
        [[[0, 1, 4, 5, 10, 11, 14, 15], [6, 7, 0, 0, 16, 17, 0, 0]]],
        [[[20, 21, 24, 25, 30, 31, 34, 35], [26, 27, 0, 0, 36, 37, 0, 0]]],
    ]
    np.testing.assert_array_equal(same, np.array(want).reshape(1, 2, 2, 8))
    with pytest.raises(UnimplementedError, match="Only support ksizes across space"):
        run_op("ExtractImagePatches", [x], {**attrs, "ksizes": [2, 2, 2, 1], "padding": "SAME"})
