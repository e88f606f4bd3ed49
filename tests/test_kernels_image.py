from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from evaluate import evaluate
from support import assert_close, run_op

from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError, ResourceExhaustedError
from poolserve.runtime.graph import Graph
from poolserve.runtime.kernels import KERNELS

COMBOS = [(False, False), (True, False), (False, True)]
IMG = np.array([[1, 2, 4], [8, 16, 32]], np.float32).reshape(1, 2, 3, 1)


def resize(op: str, images: Any, size: Any, align_corners: bool = False, half_pixel: bool = False) -> Any:
    attrs = {"align_corners": align_corners, "half_pixel_centers": half_pixel}
    return run_op(op, [images, np.asarray(size, np.int32)], attrs)


# --- a per-pixel reference, written from TensorFlow's formulas (float32 arithmetic) ----------------------------


def f32(x: float) -> float:
    return float(np.float32(x))


def ref_scale(in_size: int, out_size: int, align_corners: bool) -> float:
    if align_corners and out_size > 1:
        return f32(f32(in_size - 1) / f32(out_size - 1))
    return f32(f32(in_size) / f32(out_size))


def ref_bilinear(img: Any, out_h: int, out_w: int, align_corners: bool, half_pixel: bool) -> Any:
    batch, in_h, in_w, channels = img.shape
    src = img.astype(np.float32)

    def axis(i: int, in_size: int, scale: float) -> tuple[int, int, float]:
        x = f32(f32(f32(i + 0.5) * scale) - 0.5) if half_pixel else f32(i * scale)
        lo = math.floor(x)
        return max(lo, 0), min(math.ceil(x), in_size - 1), f32(x - lo)

    hs, ws = ref_scale(in_h, out_h, align_corners), ref_scale(in_w, out_w, align_corners)
    out = np.zeros((batch, out_h, out_w, channels), np.float32)
    for b in range(batch):
        for y in range(out_h):
            y0, y1, yl = axis(y, in_h, hs)
            for x in range(out_w):
                x0, x1, xl = axis(x, in_w, ws)
                for c in range(channels):
                    tl, tr, bl, br = (
                        src[b, yy, xx, c] for yy, xx in ((y0, x0), (y0, x1), (y1, x0), (y1, x1))
                    )
                    top = tl + (tr - tl) * np.float32(xl)
                    bottom = bl + (br - bl) * np.float32(xl)
                    out[b, y, x, c] = top + (bottom - top) * np.float32(yl)
    return out


def ref_nearest(img: Any, out_h: int, out_w: int, align_corners: bool, half_pixel: bool) -> Any:
    batch, in_h, in_w, channels = img.shape

    def index(i: int, in_size: int, scale: float) -> int:
        x = f32(f32(i + 0.5) * scale) if half_pixel else f32(i * scale)
        j = math.floor(x + 0.5) if align_corners else math.floor(x)  # x >= 0: roundf
        return max(min(j, in_size - 1), 0)

    hs, ws = ref_scale(in_h, out_h, align_corners), ref_scale(in_w, out_w, align_corners)
    out = np.zeros((batch, out_h, out_w, channels), img.dtype)
    for y in range(out_h):
        for x in range(out_w):
            out[:, y, x, :] = img[:, index(y, in_h, hs), index(x, in_w, ws), :]
    return out


# --- values computed by TensorFlow ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "combo", "expected"),
    [
        (
            [3, 5],
            (False, False),
            [
                [1.0, 1.600000023841858, 2.4000000953674316, 3.6000001430511475, 4.0],
                [
                    5.6666669845581055,
                    9.066666603088379,
                    13.600000381469727,
                    20.400001525878906,
                    22.666667938232422,
                ],
                [8.0, 12.800000190734863, 19.200000762939453, 28.80000114440918, 32.0],
            ],
        ),
        ([3, 5], (True, False), [[1, 1.5, 2, 3, 4], [4.5, 6.75, 9, 13.5, 18], [8, 12, 16, 24, 32]]),
        (
            [3, 5],
            (False, True),
            [
                [1.0, 1.4000000953674316, 2.0, 3.200000286102295, 4.0],
                [4.5, 6.3000006675720215, 9.0, 14.400001525878906, 18.0],
                [8.0, 11.200000762939453, 16.0, 25.60000228881836, 32.0],
            ],
        ),
        ([1, 2], (False, False), [[1.0, 3.0]]),
        ([1, 2], (True, False), [[1.0, 4.0]]),
        ([1, 2], (False, True), [[5.625, 15.75]]),
    ],
)
def test_resize_bilinear_matches_tensorflow(size: list[int], combo: tuple[bool, bool], expected: Any) -> None:
    out = resize("ResizeBilinear", IMG, size, *combo)
    want = np.array(expected, np.float32).reshape(1, *size, 1)
    np.testing.assert_array_equal(out, want)  # bit exact
    assert out.dtype == np.float32


@pytest.mark.parametrize(
    ("size", "combo", "expected"),
    [
        ([3, 5], (False, False), [[1, 1, 2, 2, 4], [1, 1, 2, 2, 4], [8, 8, 16, 16, 32]]),
        ([3, 5], (True, False), [[1, 2, 2, 4, 4], [8, 16, 16, 32, 32], [8, 16, 16, 32, 32]]),
        ([3, 5], (False, True), [[1, 1, 2, 4, 4], [8, 8, 16, 32, 32], [8, 8, 16, 32, 32]]),
        ([1, 2], (False, False), [[1, 2]]),
        ([1, 2], (True, False), [[1, 4]]),
        ([1, 2], (False, True), [[8, 32]]),
    ],
)
def test_resize_nearest_matches_tensorflow(size: list[int], combo: tuple[bool, bool], expected: Any) -> None:
    out = resize("ResizeNearestNeighbor", IMG, size, *combo)
    assert_close(out, np.array(expected, np.float32).reshape(1, *size, 1))


def test_resize_bilinear_uint8_half_pixel_matches_tensorflow() -> None:
    img = np.array([[0, 255], [100, 50]], np.uint8).reshape(1, 2, 2, 1)
    out = resize("ResizeBilinear", img, [3, 3], half_pixel=True)
    expected = [[0.0, 127.5, 255.0], [50.0, 101.25, 152.5], [100.0, 75.0, 50.0]]
    assert_close(out, np.array(expected, np.float32).reshape(1, 3, 3, 1), rtol=0, atol=0)


# --- against the reference ------------------------------------------------------------------------------------


@pytest.mark.parametrize("combo", COMBOS)
@pytest.mark.parametrize(
    ("in_hw", "out_hw"),
    [
        ((4, 5), (7, 9)),
        ((7, 9), (3, 4)),
        ((5, 3), (5, 3)),
        ((3, 8), (6, 2)),
        ((1, 1), (3, 2)),
        ((6, 7), (1, 1)),
    ],
)
def test_resize_against_reference(
    combo: tuple[bool, bool], in_hw: tuple[int, int], out_hw: tuple[int, int]
) -> None:
    rng = np.random.default_rng(sum(in_hw) * 31 + sum(out_hw))
    img = (rng.normal(size=(2, *in_hw, 3)) * 10).astype(np.float32)
    bilinear = resize("ResizeBilinear", img, out_hw, *combo)
    assert_close(bilinear, ref_bilinear(img, *out_hw, *combo), rtol=1e-6, atol=1e-5)
    nearest = resize("ResizeNearestNeighbor", img, out_hw, *combo)
    np.testing.assert_array_equal(nearest, ref_nearest(img, *out_hw, *combo))


@pytest.mark.parametrize(
    "dtype", [np.uint8, np.int8, np.int16, np.uint16, np.int32, np.int64, np.float16, np.float64]
)
def test_resize_dtypes(dtype: Any) -> None:
    rng = np.random.default_rng(3)
    img = rng.integers(0, 100, size=(1, 3, 4, 2)).astype(dtype)
    bilinear = resize("ResizeBilinear", img, [5, 3], half_pixel=True)
    assert bilinear.dtype == np.float32
    assert_close(bilinear, ref_bilinear(img, 5, 3, False, True))
    nearest = resize("ResizeNearestNeighbor", img, [5, 3], half_pixel=True)
    assert nearest.dtype == dtype
    np.testing.assert_array_equal(nearest, ref_nearest(img, 5, 3, False, True))


def test_resize_same_size_is_identity() -> None:
    img = np.arange(24, dtype=np.float32).reshape(1, 3, 4, 2)
    for combo in COMBOS:
        assert_close(resize("ResizeBilinear", img, [3, 4], *combo), img, rtol=0, atol=0)
        assert_close(resize("ResizeNearestNeighbor", img, [3, 4], *combo), img)


def test_resize_keeps_batch_and_channels_apart() -> None:
    img = np.zeros((2, 2, 2, 3), np.float32)
    img[0, ..., 0], img[1, ..., 2] = 1.0, 5.0
    out = resize("ResizeBilinear", img, [3, 3])
    assert out.shape == (2, 3, 3, 3)
    assert np.all(out[0, ..., 0] == 1) and np.all(out[1, ..., 2] == 5)
    assert not out[0, ..., 1:].any() and not out[1, ..., :2].any()


def test_resize_empty_batch() -> None:
    img = np.zeros((0, 3, 3, 2), np.uint8)
    bilinear = resize("ResizeBilinear", img, [4, 5])
    assert bilinear.shape == (0, 4, 5, 2) and bilinear.dtype == np.float32
    nearest = resize("ResizeNearestNeighbor", img, [4, 5])
    assert nearest.shape == (0, 4, 5, 2) and nearest.dtype == np.uint8


def test_resize_follows_the_size_fed_at_run_time() -> None:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, None, None, 1))
    size = b.placeholder("size", np.int32, (2,))
    out = b.op("ResizeBilinear", [x, size], {"T": np.float32, "half_pixel_centers": True})
    graph = Graph(b.graph_def)
    img = np.arange(12, dtype=np.float32).reshape(1, 3, 4, 1)
    for hw in ([6, 8], [2, 2], [6, 8], [3, 5]):
        (got,) = evaluate(graph, [out], {x: img, size: np.array(hw, np.int32)})
        assert_close(got, ref_bilinear(img, *hw, False, True))


def test_resize_kernels_are_expensive() -> None:
    assert KERNELS["ResizeBilinear"].expensive
    assert KERNELS["ResizeNearestNeighbor"].expensive


# --- errors ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["ResizeBilinear", "ResizeNearestNeighbor"])
def test_align_corners_with_half_pixel_centers_is_an_error(op: str) -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"If half_pixel_centers is True, align_corners must be False\."
    ):
        resize(op, IMG, [3, 3], align_corners=True, half_pixel=True)


@pytest.mark.parametrize("op", ["ResizeBilinear", "ResizeNearestNeighbor"])
@pytest.mark.parametrize(
    ("images", "size", "message"),
    [
        (IMG[0], [3, 3], r"input must be 4-dimensional\[2,3,1\]"),
        (IMG, [3, 3, 3], r"shape_t must have two elements\[3\]"),
        (IMG, [[3, 3]], r"shape_t must be 1-dimensional\[1,2\]"),
        (IMG, [0, 3], "output dimensions must be positive"),
        (IMG, [3, -1], "output dimensions must be positive"),
        (np.zeros((1, 2, 2, 0), np.float32), [3, 3], "image must have at least one channel"),
        (np.zeros((1, 0, 2, 1), np.float32), [3, 3], "input image must be of non-zero size"),
    ],
)
def test_resize_bad_inputs(op: str, images: Any, size: Any, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as info:
        resize(op, images, size)
    assert info.value.node_name == "op"


def test_resize_refuses_types_tensorflow_does_not_register() -> None:
    with pytest.raises(InvalidArgumentError, match="Value for attr 'T' of bool is not in the list"):
        run_op("ResizeNearestNeighbor", [IMG.astype(bool), np.array([2, 2], np.int32)], {"T": np.bool_})


@pytest.mark.parametrize("op", ["ResizeBilinear", "ResizeNearestNeighbor"])
def test_resize_to_an_impossible_size_fails_before_allocating(op: str) -> None:
    rgb = np.zeros((1, 2, 2, 3), np.float32)
    with pytest.raises(InvalidArgumentError, match=r"overflow: output shape \[1,2147483647,2147483647,3\]"):
        resize(op, rgb, [2**31 - 1, 2**31 - 1])
    with pytest.raises(
        ResourceExhaustedError, match=r"OOM when allocating tensor with shape\[1,2147483647,2147483647,1\]"
    ):
        resize(op, IMG, [2**31 - 1, 2**31 - 1])


# --- bicubic and area: values TensorFlow 2.21 gave (tf.raw_ops on the same image) ---------------------------

RAMP = (np.arange(12).reshape(1, 3, 4, 1) ** 1.5).astype(np.float32)


@pytest.mark.parametrize(
    ("half_pixel", "align", "want"),
    [
        (True, False, [-0.5276006, 0.9926836, 3.9509904, 2.3230274, 4.9818864, 8.773168, 8.324143, 12.898453,
                       18.122778, 18.263784, 24.023735, 30.29888, 24.189499, 30.518213, 37.327896]),
        (False, False, [0.0, 1.5547347, 4.553023, 3.3132856, 6.4505086, 10.568186, 11.345628, 16.33356,
                        21.87608, 20.24249, 26.069494, 32.404312, 24.206661, 30.423534, 37.121758]),
        (False, True, [0.0, 1.7859893, 5.1961522, 2.6286798, 5.7958627, 10.1742115, 8.0, 12.878358,
                       18.52026, 16.063707, 22.11193, 28.750702, 22.627417, 29.265682, 36.482872]),
    ],
)  # fmt: skip
def test_resize_bicubic_keys_or_legacy_cubic(half_pixel, align, want):
    attrs = {"half_pixel_centers": half_pixel, "align_corners": align}
    out = run_op("ResizeBicubic", [RAMP, np.array([5, 3], np.int32)], attrs)
    assert out.dtype == np.float32 and out.shape == (1, 5, 3, 1)
    np.testing.assert_allclose(out.ravel(), want, rtol=2e-6, atol=2e-6)


def test_resize_area_averages_the_cells_each_pixel_covers():
    size = np.array([2, 3], np.int32)
    out = run_op("ResizeArea", [RAMP, size], {"align_corners": False})
    np.testing.assert_allclose(
        out.ravel(), [3.0983617, 5.5890226, 8.92429, 18.745403, 23.853806, 29.366707], rtol=2e-6
    )
    out = run_op("ResizeArea", [RAMP, size], {"align_corners": True})
    np.testing.assert_allclose(
        out.ravel(), [4.6967235, 7.8718452, 11.858207, 24.084946, 30.081852, 36.482872], rtol=2e-6
    )
    # one pixel stretched by align_corners: that pixel
    col = np.arange(1, 11, dtype=np.float32).reshape(1, 5, 1, 2)
    out = run_op("ResizeArea", [col, np.array([5, 3], np.int32)], {"align_corners": True})
    np.testing.assert_array_equal(out[0, :, 1], col[0, :, 0])


# --- color: values TensorFlow 2.21 gave ---------------------------------------------------------------------

COLORS = np.array([[0.2, 0.4, 0.6], [0.5, 0.5, 0.5], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], np.float32)


def test_rgb_hsv_conversions():
    hsv = run_op("RGBToHSV", [COLORS])
    want = [[0.58333337, 0.6666667, 0.6], [0.0, 0.0, 0.5], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
    np.testing.assert_allclose(hsv, want, rtol=1e-6)
    rgb = run_op("HSVToRGB", [np.array([[0.9, 0.5, 0.8]], np.float32)])
    np.testing.assert_allclose(rgb, [[0.8, 0.4, 0.64000016]], rtol=1e-6)
    with pytest.raises(InvalidArgumentError, match="3 channels"):
        run_op("RGBToHSV", [np.zeros((2, 4), np.float32)])


def test_contrast_and_saturation():
    img = COLORS.reshape(1, 2, 2, 3)
    contrast = run_op("AdjustContrastv2", [img, np.float32(2.0)])
    want = [-0.025, 0.575, 0.925, 0.575, 0.775, 0.725, 1.575, -0.225, -0.275, -0.425, -0.225, -0.275]
    np.testing.assert_allclose(contrast.ravel(), want, rtol=1e-5, atol=1e-6)
    saturation = run_op("AdjustSaturation", [img, np.float32(0.5)])
    np.testing.assert_allclose(
        saturation.ravel(), [0.4, 0.5, 0.6, 0.5, 0.5, 0.5, 1.0, 0.5, 0.5, 0, 0, 0], atol=1e-6
    )


# --- projective transforms: values TensorFlow 2.21 gave ------------------------------------------------------


def _shift(t: float, mode: str) -> float:
    """The pixel a translation by t picks from [0, 1, 2, 3] (nearest), by fill mode."""
    img = np.arange(4, dtype=np.float32).reshape(1, 1, 4, 1)
    tr = np.array([[1, 0, t, 0, 1, 0, 0, 0]], np.float32)
    attrs = {"interpolation": "NEAREST", "fill_mode": mode}
    out = run_op("ImageProjectiveTransformV3", [img, tr, np.array([1, 1], np.int32), np.float32(-1)], attrs)
    return float(out.ravel()[0])


def test_projective_transform_fill_modes():
    shifts = [-9.0, -3.0, -2.5, -1.5, -0.5, 0.5, 3.5, 5.5, 6.0, 8.5]
    wrap = [3, 3, 2, 3, 3, 1, 0, 2, 0, 1]  # TensorFlow's WRAP, its len - 1 period included
    reflect = [0, 2, 2, 1, 0, 1, 3, 2, 1, 1]
    assert [_shift(t, "WRAP") for t in shifts] == wrap
    assert [_shift(t, "REFLECT") for t in shifts] == reflect
    assert [_shift(t, "CONSTANT") for t in (-1.0, 3.6)] == [-1.0, -1.0]
    assert [_shift(t, "NEAREST") for t in (-7.0, 9.0)] == [0.0, 3.0]


def test_projective_transform_bilinear():
    img = np.arange(12, dtype=np.float32).reshape(1, 3, 4, 1)
    tr = np.array([[0.9, 0.2, 0.7, -0.1, 1.1, -0.4, 0.02, 0.01]], np.float32)
    args = [img, tr, np.array([2, 3], np.int32), np.float32(-1)]
    constant = run_op(
        "ImageProjectiveTransformV3", args, {"interpolation": "BILINEAR", "fill_mode": "CONSTANT"}
    )
    np.testing.assert_allclose(
        constant.ravel(), [0.02, 0.30949625, 0.44008863, 3.6633663, 4.0776701, 4.4761906], rtol=1e-5
    )
    nearest = run_op(
        "ImageProjectiveTransformV3", args, {"interpolation": "BILINEAR", "fill_mode": "NEAREST"}
    )
    np.testing.assert_allclose(
        nearest.ravel(), [0.7, 1.5686274, 2.4038463, 3.6633663, 4.0776701, 4.4761906], rtol=1e-5
    )


# --- ScaleAndTranslate: values TensorFlow 2.21 gave ----------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "antialias", "want"),
    [
        ("lanczos3", True, [0.219285, 1.074951, 2.167933, 3.188725, 4.597682, 6.113276, 6.686151, 9.604118,
                            11.347954, 13.143626, 14.586651, 16.510046, 18.495865, 19.233227, 29.567476,
                            31.850792, 34.146034, 35.94632, 38.31068, 40.721363, 41.611221]),
        ("mitchellcubic", False, [0.315926, 1.076818, 2.069965, 3.217472, 4.481328, 5.865671, 6.36805,
                                  11.207424, 12.888046, 14.585947, 16.324078, 18.114906, 19.986334, 20.6616,
                                  28.98385, 31.062229, 33.132088, 35.224049, 37.354729, 39.558441, 40.352596]),
    ],
)  # fmt: skip
def test_scale_and_translate(kind, antialias, want):
    img = (np.arange(20).reshape(1, 4, 5, 1) ** 1.3).astype(np.float32)
    scale, shift = np.array([0.75, 1.4], np.float32), np.array([0.2, -0.5], np.float32)
    attrs = {"kernel_type": kind, "antialias": antialias}
    out = run_op("ScaleAndTranslate", [img, np.array([3, 7], np.int32), scale, shift], attrs)
    assert out.shape == (1, 3, 7, 1) and out.dtype == np.float32
    np.testing.assert_allclose(out.ravel(), want, rtol=2e-6, atol=2e-6)
    with pytest.raises(InvalidArgumentError, match="Scale must be greater than zero"):
        run_op("ScaleAndTranslate", [img, np.array([3, 7], np.int32), -scale, shift], attrs)
