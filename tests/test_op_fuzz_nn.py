"""Regressions found by differential fuzzing of the nn, conv and image kernels (tools/op_fuzz_nn.py).

Expected values are TensorFlow 2.21's (CPU), written out."""

import numpy as np
import pytest
from support import assert_close, run_op

from poolserve.runtime.errors import InvalidArgumentError

F16, F32, F64 = np.float16, np.float32, np.float64
INF, NAN = np.inf, np.nan


# --- matrix products and einsum ----------------------------------------------------------------------------


def test_leaky_relu_scalar_and_alpha_rounding_to_zero_in_half():
    assert_close(run_op("LeakyRelu", [np.array(-2.0, F32)], {"alpha": 0.1}), np.array(-0.2, F32))
    # 1e-8 is 0 in half: x > 0 ? x : 0 * x, not max(x, 0 * x) (NaN for inf)
    x = np.array([INF, -1.0, 2.0], F16)
    assert_close(run_op("LeakyRelu", [x], {"alpha": 1e-8}), np.array([INF, -0.0, 2.0], F16))


def test_batch_matmul_empty_batch_against_matrix():
    x, y = np.zeros((3, 0, 0), np.int64), np.zeros((0, 2), np.int64)
    attrs = {"adj_x": True, "Tout": np.int64}
    assert_close(run_op("BatchMatMulV3", [x, y], attrs), np.zeros((3, 0, 2), np.int64))


def test_einsum_ellipsis_of_zero_against_one():
    x, y = np.zeros((1, 0), F32), np.ones((1, 1), F32)
    got = run_op("Einsum", [x, y], {"equation": "i...,i...->...", "N": 2})
    assert_close(got, np.zeros((0,), F32))


@pytest.mark.parametrize(
    ("equation", "shapes", "expected"),
    [
        ("i->ii", [(3,)], np.diag([1.0, 2.0, 3.0])),
        (
            "ij,j->iji",
            [(2, 3), (3,)],
            np.array([1, 0, 4, 0, 9, 0, 0, 4, 0, 10, 0, 18], F32).reshape(2, 3, 2),
        ),
        (
            "...i->...ii",
            [(2, 3)],
            np.array([1, 0, 0, 0, 2, 0, 0, 0, 3, 4, 0, 0, 0, 5, 0, 0, 0, 6], F32).reshape(2, 3, 3),
        ),
        ("i,i->ii", [(3,), (3,)], np.diag([1.0, 4.0, 9.0])),
    ],
)
def test_einsum_repeated_output_label_fills_a_diagonal(equation, shapes, expected):
    inputs = [np.arange(1, int(np.prod(s)) + 1, dtype=F32).reshape(s) for s in shapes]
    got = run_op("Einsum", inputs, {"equation": equation, "N": len(inputs)})
    assert_close(got, expected.astype(F32))


# --- normalization -----------------------------------------------------------------------------------------


def test_fused_batch_norm_v3_reserve_space_3_shape():
    c = np.ones(2, F32)
    attrs = {"is_training": False}
    got = run_op("FusedBatchNormV3", [np.ones((1, 2, 2, 2), F32), c, c, c, c], attrs, num_outputs=6)
    assert got[5].shape == (0,) and got[5].dtype == F32
    got = run_op("FusedBatchNormV3", [np.ones((1, 1, 2, 2, 2), F32), c, c, c, c], attrs, num_outputs=6)
    assert got[5].shape == ()


# --- pooling -----------------------------------------------------------------------------------------------


def test_max_pool_explicit_padding_must_be_smaller_than_the_window():
    attrs = {"ksize": [1, 2, 3, 1], "strides": [1, 1, 2, 1], "padding": "EXPLICIT"}
    x = np.ones((1, 3, 7, 2), np.int16)
    with pytest.raises(
        InvalidArgumentError, match="Top padding 2 needs to be smaller than the window size 2"
    ):
        run_op("MaxPool", [x], {**attrs, "explicit_paddings": [0, 0, 2, 0, 2, 0, 0, 0]})
    with pytest.raises(
        InvalidArgumentError, match="Right padding 3 needs to be smaller than the window size 3"
    ):
        run_op("MaxPool", [x], {**attrs, "explicit_paddings": [0, 0, 1, 1, 2, 3, 0, 0]})


def test_max_pool_half_starts_from_minus_infinity_but_v2_and_explicit_do_not():
    x = np.array([-INF, -INF, 1, -INF], F16).reshape(1, 1, 4, 1)
    window = {"ksize": [1, 1, 2, 1], "strides": [1, 1, 1, 1]}
    got = run_op("MaxPool", [x], {**window, "padding": "SAME"})
    assert_close(got, np.array([-INF, 1, 1, -INF], F16).reshape(1, 1, 4, 1))
    got = run_op(
        "MaxPool", [x], {**window, "padding": "EXPLICIT", "explicit_paddings": [0, 0, 0, 0, 1, 1, 0, 0]}
    )
    assert_close(got, np.array([-65504, -65504, 1, 1, -65504], F16).reshape(1, 1, 5, 1))
    sizes = [np.array([1, 1, 2, 1], np.int32), np.array([1, 1, 1, 1], np.int32)]
    got = run_op("MaxPoolV2", [x, *sizes], {"padding": "VALID"})
    assert_close(got, np.array([-65504, 1, 1], F16).reshape(1, 1, 3, 1))


def test_depthwise_max_pool_keeps_the_first_value_unless_a_later_one_is_greater():
    x = np.array([-INF, NAN, 1, -INF, -INF, -INF, NAN, NAN, 3, NAN, NAN, 2], F32).reshape(1, 1, 1, 12)
    got = run_op("MaxPool", [x], {"ksize": [1, 1, 1, 2], "strides": [1, 1, 1, 2], "padding": "VALID"})
    assert_close(got, np.array([-INF, 1, -INF, NAN, 3, NAN], F32).reshape(1, 1, 1, 6))
