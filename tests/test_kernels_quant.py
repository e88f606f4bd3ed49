"""Fake quantization, QuantizeAndDequantize, QuantizeV2 and Dequantize. Expected values are TensorFlow
2.21's (tf.raw_ops on the same inputs); tools/op_fuzz_quant.py compares the kernels with TensorFlow on
random cases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from evaluate import evaluate
from support import assert_close, run_op

from poolserve import Session, load_graph_def
from poolserve.proto import attr_value_pb2, types_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.runtime.graph import Graph

NAN = np.nan
X = np.array([[-1.0, 0.3, 2.5, -3.9969034], [NAN, 7.0, -9.0, 0.0]], np.float32)


def f32(*rows: Any) -> Any:
    return np.array(rows, np.float32)


def test_fake_quant_args_nudges_the_range_and_rounds_as_tensorflow():
    # -3.9969034 lies a hair under a half step: TensorFlow's arithmetic (an inverse scale computed
    # afresh, the zero point subtracted after scaling) rounds it up
    out = run_op(
        "FakeQuantWithMinMaxArgs", [X], {"min": -5.90701457840441, "max": 4.993630893855389, "num_bits": 4}
    )
    assert_close(
        out, f32([-0.72670966, 0.0, 2.180129, -3.6335483], [NAN, 5.0869675, -5.8136773, 0.0]), atol=0
    )
    narrow = run_op(
        "FakeQuantWithMinMaxArgs", [X], {"min": -6.0, "max": 6.0, "num_bits": 8, "narrow_range": True}
    )
    assert_close(narrow, f32([-0.992126, 0.28346455, 2.503937, -4.015748], [NAN, 6.0, -6.0, 0.0]), atol=0)
    with pytest.raises(InvalidArgumentError, match="min has to be smaller than max"):
        run_op("FakeQuantWithMinMaxArgs", [X], {"min": 6.0, "max": 6.0})
    with pytest.raises(InvalidArgumentError, match="num_bits must be between 2 and 16"):
        run_op("FakeQuantWithMinMaxArgs", [X], {"num_bits": 1})


def test_fake_quant_vars_and_per_channel():
    out = run_op("FakeQuantWithMinMaxVars", [X, np.float32(-1.0), np.float32(1.0)], {"num_bits": 16})
    want = f32([-0.99998474, 0.29999238, 0.99998474, -1.0000153], [NAN, 0.99998474, -1.0000153, 0.0])
    assert_close(out, want, atol=0)
    # min == max == 0 is all zeros, even for NaN
    assert_close(run_op("FakeQuantWithMinMaxVars", [X, np.float32(0), np.float32(0)]), np.zeros_like(X))
    lo, hi = f32(-6.0, -1.0, 0.5, 0.0), f32(6.0, 1.0, 3.0, 0.0)
    per = run_op("FakeQuantWithMinMaxVarsPerChannel", [X, lo, hi])
    assert_close(per, f32([-0.9882353, 0.29803923, 2.5, 0.0], [NAN, 1.0039216, 0.0, 0.0]), atol=0)
    with pytest.raises(InvalidArgumentError, match="`min` must be rank 0 but is rank 1"):
        run_op("FakeQuantWithMinMaxVars", [X, f32(-1.0), np.float32(1.0)])
    with pytest.raises(InvalidArgumentError, match="min has incorrect size, expected 4 was 3"):
        run_op("FakeQuantWithMinMaxVarsPerChannel", [X, lo[:3], hi])


XQ = f32([-1.0, 0.3, 2.5], [0.1, 7.0, -9.0])


def test_quantize_and_dequantize_ranges_rounding_and_axes():
    zero = np.float32(0)
    per_row = run_op("QuantizeAndDequantizeV2", [XQ, zero, zero], {"axis": 0})
    assert_close(per_row, f32([-1.003937, 0.2952756, 2.5], [0.0703125, 7.03125, -9.0]))
    half_up = run_op(
        "QuantizeAndDequantizeV4",
        [XQ, np.float32(-2), np.float32(3)],
        {"range_given": True, "num_bits": 4, "round_mode": "HALF_UP"},
    )
    assert_close(half_up, f32([-0.85714287, 0.42857143, 2.5714285], [0.0, 3.0, -3.4285715]))
    unsigned = run_op(
        "QuantizeAndDequantizeV3",
        [XQ, f32(0, 0, 0), f32(1, 8, 2), np.int32(3)],
        {"signed_input": False, "axis": 1},
    )
    assert_close(unsigned, f32([0.0, 0.0, 2.0], [0.14285715, 6.8571434, 0.0]))
    with pytest.raises(InvalidArgumentError, match="Invalid range: input_min 6 > input_max -6"):
        run_op("QuantizeAndDequantizeV2", [XQ, np.float32(6), np.float32(-6)], {"range_given": True})
    # TensorFlow 2.21's V2 and V4 take a given range as scalars only
    with pytest.raises(InvalidArgumentError, match="input_min must be a scalar"):
        run_op(
            "QuantizeAndDequantizeV2", [XQ, f32(-1, -1, -1), f32(1, 1, 1)], {"range_given": True, "axis": 1}
        )
    with pytest.raises(InvalidArgumentError, match="num_bits is out of range: 63"):
        run_op("QuantizeAndDequantizeV3", [XQ, zero, zero, np.int32(63)], {"signed_input": False})
    with pytest.raises(InvalidArgumentError, match="Axis requested is larger than input dimensions"):
        run_op("QuantizeAndDequantizeV3", [np.float32(1), zero, zero, np.int32(8)])


def qtype(code: int) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(type=code)


@pytest.mark.parametrize(
    ("code", "mode", "quantized", "lo", "hi", "back"),
    [
        (
            types_pb2.DT_QINT8,
            "MIN_COMBINED",
            [[-22, 6, 53], [2, 127, -128]],
            -6.0,
            6.0,
            [[-1.0117645, 0.30588245, 2.5176468], [0.11764717, 6.0, -6.0]],
        ),
        (
            types_pb2.DT_QUINT8,
            "MIN_FIRST",
            [[107, 134, 181], [130, 255, 0]],
            -6.0,
            6.0,
            [[-0.9882355, 0.28235292, 2.4941173], [0.09411764, 5.9764705, -6.0235295]],
        ),
        (
            types_pb2.DT_QINT8,
            "SCALED",
            [[-21, 6, 53], [2, 127, -128]],
            -6.047244,
            6.0,
            [[-0.992126, 0.28346455, 2.503937], [0.09448819, 6.0, -6.047244]],
        ),
        (
            types_pb2.DT_QUINT16,
            "MIN_COMBINED",
            [[27306, 34406, 46421], [33314, 65535, 0]],
            -6.0,
            6.0,
            [[-1.0000458, 0.30002308, 2.5000687], [0.10006857, 6.0, -6.0]],
        ),
    ],
)
def test_quantize_v2_then_dequantize(
    code: int, mode: str, quantized: list[list[int]], lo: float, hi: float, back: list[list[float]]
) -> None:
    # the quantized tensor never leaves the graph: poolserve's dtypes have no qint8, so it cannot be fetched
    # as one; the fetched QuantizeV2 output is its integer twin
    b = GraphBuilder()
    x = b.constant(XQ, name="x")
    attrs = {"T": qtype(code), "mode": mode}
    q = b.op("QuantizeV2", [x, b.constant(np.float32(-6)), b.constant(np.float32(6))], attrs, num_outputs=3)
    out = b.op("Dequantize", [q[0], q[1], q[2]], {"T": qtype(code), "mode": mode})
    got_q, got_lo, got_hi, got = evaluate(Graph(b.graph_def), [q[0], q[1], q[2], out], {})
    np.testing.assert_array_equal(got_q, quantized)
    assert (float(got_lo), float(got_hi)) == (np.float32(lo), np.float32(hi))
    assert_close(got, f32(*back))


def test_quantize_v2_per_axis_and_errors():
    lo, hi = f32(-1, -7, -9), f32(1, 7, 3)
    attrs = {
        "T": qtype(types_pb2.DT_QINT8),
        "mode": "SCALED",
        "round_mode": "HALF_TO_EVEN",
        "narrow_range": True,
        "axis": 1,
    }
    q, out_lo, out_hi = run_op("QuantizeV2", [XQ, lo, hi], attrs, num_outputs=3)
    np.testing.assert_array_equal(q, [[-127, 5, 35], [13, 127, -127]])
    assert_close(out_lo, f32(-1, -7, -9))
    assert_close(out_hi, f32(1, 7, 9))
    back = run_op(
        "Dequantize",
        [q, out_lo, out_hi],
        {"T": attrs["T"], "mode": "SCALED", "narrow_range": True, "axis": 1},
    )
    assert_close(back, f32([-1.0, 0.27559054, 2.480315], [0.1023622, 7.0, -9.0]))
    with pytest.raises(InvalidArgumentError, match="only supported for mode 'SCALED'"):
        run_op("QuantizeV2", [XQ, lo, hi], {"T": attrs["T"], "round_mode": "HALF_TO_EVEN"}, num_outputs=3)
    with pytest.raises(InvalidArgumentError, match="input_max_range must be larger than input_min_range"):
        run_op("QuantizeV2", [XQ, np.float32(1), np.float32(-1)], {"T": attrs["T"]}, num_outputs=3)
    with pytest.raises(UnimplementedError, match="MIN_FIRST mode is not implemented"):
        run_op("QuantizeV2", [XQ, lo, hi], {"T": attrs["T"], "mode": "MIN_FIRST", "axis": 1}, num_outputs=3)


def test_a_graph_with_quantized_const_weights_matches_tensorflow():
    """quint8 and qint8 Const weights (graph_transforms' quantize_weights) dequantized before use
    (tools/make_quantized_weights_fixture.py)."""
    graph = load_graph_def(Path(__file__).parent / "fixtures" / "models" / "quantized_weights.pb")
    with Session(graph) as sess:
        z = sess.run("z:0", {"x:0": np.array([[1.0, 2.0]], np.float32)})
    np.testing.assert_allclose(z, [[2.9763779640197754, -2.8076887130737305, 0.7991663217544556]], rtol=1e-6)
