"""BatchNormWithGlobalNormalization, CumulativeLogsumexp, DecodeRaw, the losses, Cross and
HistogramFixedWidth. Expected values are TensorFlow 2.21's (tf.raw_ops on the same inputs; the batch norm
from a version-8 GraphDef, as TensorFlow builds it no more); tools/op_fuzz_misc.py compares the kernels
with TensorFlow on random cases."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from support import assert_close, run_op

from poolserve.runtime.errors import FailedPreconditionError, InvalidArgumentError


def fails(
    op: str, inputs: list[Any], message: str, attrs: dict[str, Any] | None = None, outputs: int = 1
) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        run_op(op, inputs, attrs, num_outputs=outputs)


# --- BatchNormWithGlobalNormalization -----------------------------------------------------------------------

T = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4) / 7
BN_PARAMS = [
    np.array([0.5, 1, -1, 2], np.float32),  # mean
    np.array([1, 4, 0.25, 0], np.float32),  # variance
    np.array([0.1, 0.2, 0.3, 0.4], np.float32),  # beta
    np.array([2, -1, 0.5, 3], np.float32),  # gamma
]


def batch_norm(t: Any, params: list[Any], epsilon: float, scaled: bool) -> Any:
    attrs = {"variance_epsilon": epsilon, "scale_after_normalization": scaled}
    return run_op("BatchNormWithGlobalNormalization", [t, *params], attrs)


def test_batch_norm_with_global_normalization():
    y = batch_norm(T, BN_PARAMS, 0.001, True)
    assert y.dtype == np.float32 and y.shape == (1, 2, 3, 4)
    assert_close(y[0, 0, 0], np.array([-0.89950037, 0.62851787, 1.5831506, -148.6788], np.float32))
    assert_close(y[0, 1, 2], np.array([4.8119307, -0.79987508, 4.4345965, 122.37357], np.float32))
    unscaled = batch_norm(T, BN_PARAMS, 0.5, False)
    assert_close(unscaled[0, 0, 0], np.array([-0.30824828, -0.20406105, 1.784615, -1.8223356], np.float32))
    half = batch_norm(T.astype(np.float16), [p.astype(np.float16) for p in BN_PARAMS], 0.001, True)
    assert_close(half[0, 0, 0], np.array([-0.8999, 0.6289, 1.582, -148.8], np.float16), rtol=2e-3)


def test_batch_norm_refusals():
    attrs = {"variance_epsilon": 0.001, "scale_after_normalization": True}
    fails("BatchNormWithGlobalNormalization", [T[0], *BN_PARAMS], "input must be 4-dimensional[2,3,4]", attrs)
    bad_var = [BN_PARAMS[0], BN_PARAMS[1].reshape(1, 4), *BN_PARAMS[2:]]
    fails("BatchNormWithGlobalNormalization", [T, *bad_var], "var must be 1-dimensional[1,4]", attrs)
    # TensorFlow reads past a short parameter; poolserve refuses it
    short = [BN_PARAMS[0][:3], *BN_PARAMS[1:]]
    fails(
        "BatchNormWithGlobalNormalization", [T, *short], "mean must have the same number of elements", attrs
    )


# --- CumulativeLogsumexp ------------------------------------------------------------------------------------

V = np.array([[0.0, 1.0, -np.inf, 2.0], [1000.0, 1000.0, -1000.0, 3.0]])


def logsumexp(x: Any, axis: int, exclusive: bool = False, reverse: bool = False) -> Any:
    return run_op("CumulativeLogsumexp", [x, np.int32(axis)], {"exclusive": exclusive, "reverse": reverse})


def test_cumulative_logsumexp():
    assert_close(
        logsumexp(V, 1),
        [
            [0.0, 1.3132616875182228, 1.3132616875182228, 2.40760596444438],
            [1000.0, 1000.6931471805599, 1000.6931471805599, 1000.6931471805599],
        ],
    )
    assert_close(
        logsumexp(V, 1, exclusive=True),
        [
            [-np.inf, 0.0, 1.3132616875182228, 1.3132616875182228],
            [-np.inf, 1000.0, 1000.6931471805599, 1000.6931471805599],
        ],
    )
    assert_close(
        logsumexp(V, -1, reverse=True),
        [[2.4076059644443806, 2.313261687518223, 2.0, 2.0], [1000.6931471805599, 1000.0, 3.0, 3.0]],
    )
    assert_close(
        logsumexp(V, 0, exclusive=True, reverse=True), [[1000.0, 1000.0, -1000.0, 3.0], [-np.inf] * 4]
    )
    assert_close(
        logsumexp(V[:, :2].astype(np.float16), 1),
        np.array([[0.0, 1.3134765625], [1000.0, 1000.5]], np.float16),
    )
    # TensorFlow names the axis after adding the rank
    fails("CumulativeLogsumexp", [V, np.int32(-3)], "Expected scan axis in the range [-2, 2), but got -1", {})


# --- DecodeRaw ----------------------------------------------------------------------------------------------


def decode(strings: list[bytes], out_type: Any, little_endian: bool = True) -> Any:
    arr = np.array(strings, dtype=object)
    return run_op("DecodeRaw", [arr], {"out_type": out_type, "little_endian": little_endian})


def test_decode_raw_reads_each_string_as_a_row():
    shorts = [b"\x01\x00\x02\x00", b"\xff\xff\x00\x80"]
    assert_close(decode(shorts, np.int16), np.array([[1, 2], [-1, -32768]], np.int16))
    assert_close(decode(shorts, np.int16, False), np.array([[256, 512], [-1, 128]], np.int16))
    assert_close(
        decode([b"\x00\x00\x80\x3f\x00\x00\x00\xc0"], np.float32), np.array([[1.0, -2.0]], np.float32)
    )
    assert_close(
        decode([b"\x00\x00\x80\x3f\x00\x00\x00\xc0"], np.complex64), np.array([[1 - 2j]], np.complex64)
    )
    big = decode([b"\x3f\x80\x00\x00\xc0\x00\x00\x00"], np.complex64, False)
    assert_close(big, np.array([[1 - 2j]], np.complex64))
    assert decode([], np.float64).shape == (0, 0)


def test_decode_raw_refusals():
    fails(
        "DecodeRaw",
        [np.array([b"abcd", b"abc"], object)],
        "but element 1 has size 4 != 3",
        {"out_type": np.uint8},
    )
    fails(
        "DecodeRaw",
        [np.array([b"abc"], object)],
        "Input to DecodeRaw has length 3 that is not a multiple of 4, the size of float",
        {"out_type": np.float32},
    )


# --- losses -------------------------------------------------------------------------------------------------

LOGITS = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, -np.inf]], np.float32)
LABELS = np.array([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]], np.float32)
BACKPROP_ROW_0 = [0.09003057330846786, -0.2552715241909027, 0.16524094343185425]


def test_l2_loss():
    assert_close(run_op("L2Loss", [np.array([[1.0, -2.0], [3.0, 0.5]], np.float32)]), np.float32(7.125))
    assert_close(run_op("L2Loss", [np.zeros(0)]), np.float64(0.0))
    # half squares overflow as TensorFlow's do
    assert_close(run_op("L2Loss", [np.array([300.0, 2.0], np.float16)]), np.float16(np.inf))
    assert_close(run_op("L2Loss", [np.array([200.0] * 3, np.float16)]), np.float16(60000.0))


def test_softmax_cross_entropy_with_logits():
    loss, backprop = run_op("SoftmaxCrossEntropyWithLogits", [LOGITS, LABELS], num_outputs=2)
    # a zero label on a -inf logit: NaN, as in TensorFlow
    assert_close(loss, np.array([0.9076058864593506, np.nan], np.float32))
    assert_close(backprop, np.array([BACKPROP_ROW_0, [-0.5, 0.5, 0.0]], np.float32))
    loss, backprop = run_op("SoftmaxCrossEntropyWithLogits", [LOGITS[:1], LABELS], num_outputs=2)
    assert_close(loss, np.array([0.9076058864593506, 2.4076058864593506], np.float32))
    assert_close(
        backprop[1], np.array([-0.9099694490432739, 0.2447284758090973, 0.6652409434318542], np.float32)
    )
    loss, backprop = run_op(
        "SoftmaxCrossEntropyWithLogits",
        [np.zeros((3, 0), np.float32), np.zeros((3, 0), np.float32)],
        num_outputs=2,
    )
    assert_close(loss, np.zeros(3, np.float32))
    assert backprop.shape == (3, 0)
    fails(
        "SoftmaxCrossEntropyWithLogits",
        [LOGITS, LABELS[:, :2]],
        "logits and labels must be broadcastable",
        {},
        2,
    )


def test_sparse_softmax_cross_entropy_with_logits():
    attrs = {"Tlabels": np.int64}
    loss, backprop = run_op(
        "SparseSoftmaxCrossEntropyWithLogits", [LOGITS, np.array([2, 1], np.int64)], attrs, num_outputs=2
    )
    assert_close(loss, np.array([0.40760594606399536, 0.6931471824645996], np.float32))
    assert_close(
        backprop,
        np.array(
            [[0.09003057330846786, 0.2447284758090973, -0.33475905656814575], [0.5, -0.5, 0.0]], np.float32
        ),
    )
    message = "Received a label value of 3 which is outside the valid range of [0, 3).  Label values: 0 3"
    fails("SparseSoftmaxCrossEntropyWithLogits", [LOGITS, np.array([0, 3], np.int64)], message, attrs, 2)
    fails(
        "SparseSoftmaxCrossEntropyWithLogits",
        [np.zeros((0, 0), np.float32), np.zeros(0, np.int64)],
        "Must have at least one class, but got logits shape [0,0]",
        attrs,
        2,
    )


# --- Cross and HistogramFixedWidth --------------------------------------------------------------------------


def test_cross():
    a = np.array([[1, 0, 0], [1, 2, 3]], np.int32)
    b = np.array([[0, 1, 0], [4, 5, 6]], np.int32)
    assert_close(run_op("Cross", [a, b]), np.array([[0, 0, 1], [-3, 6, -3]], np.int32))
    fails("Cross", [np.zeros((2, 3)), np.zeros((3, 3))], "Both inputs must be of same shape: [2,3] vs. [3,3]")
    with pytest.raises(FailedPreconditionError, match="only defined for 3-element vectors"):
        run_op("Cross", [np.zeros((2, 2)), np.zeros((2, 2))])


def histogram(values: Any, value_range: Any, nbins: int, dtype: Any = np.int32) -> Any:
    return run_op("HistogramFixedWidth", [values, value_range, np.int32(nbins)], {"dtype": dtype})


def test_histogram_fixed_width():
    counts = histogram(np.array([-1.0, 0.0, 0.5, 1.5, 2.0, 9.0]), np.array([0.0, 2.0]), 4)
    assert_close(counts, np.array([2, 1, 0, 3], np.int32))
    # the bin width is 3.5 / 6 - (-0.5 / 6), a little over 2/3: 1.5 lands in bin 2, not 3
    edge = histogram(np.array([1.5], np.float32), np.array([-0.5, 3.5], np.float32), 6, np.int64)
    assert_close(edge, np.array([0, 0, 1, 0, 0, 0], np.int64))
    ints = histogram(np.array([[3, -7], [100, 5]], np.int32), np.array([0, 10], np.int32), 5)
    assert_close(ints, np.array([1, 1, 1, 0, 1], np.int32))
    fails(
        "HistogramFixedWidth",
        [np.zeros(1), np.array([1.0, 1.0]), np.int32(3)],
        "but got '[1, 1]'",
        {"dtype": np.int32},
    )
    fails(
        "HistogramFixedWidth",
        [np.zeros(1), np.array([0.5, 0.25]), np.int32(3)],
        "but got '[0.5, 0.25]'",
        {"dtype": np.int32},
    )
    fails(
        "HistogramFixedWidth",
        [np.zeros(1), np.array([0.0, 1.0]), np.int32(0)],
        "but got '0'",
        {"dtype": np.int32},
    )
    fails(
        "HistogramFixedWidth",
        [np.array([np.nan]), np.array([0.0, 1.0]), np.int32(2)],
        "must not contain NaN",
        {"dtype": np.int32},
    )
