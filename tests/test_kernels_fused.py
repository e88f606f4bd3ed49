"""The fused kernels' epilogues (runtime/kernels/fused_ops.py): float32 GELU from its table."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from support import rewrite_config, run_op

from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.graph import Graph
from poolserve.runtime.session import Session

F32 = np.float32
_TF_ERF = Path(__file__).parent / "fixtures" / "kernels" / "erf_float32.npz"


def fused_gelu(x: np.ndarray) -> np.ndarray:
    """_FusedMatMul with an identity filter and a zero bias: GELU of x alone."""
    eye, zero = np.eye(x.shape[1], dtype=x.dtype), np.zeros(x.shape[1], x.dtype)
    attrs = {"fused_ops": ["BiasAdd", "GeluExact"], "num_args": 1}
    return run_op("_FusedMatMul", [x, eye, zero], attrs)


def test_gelu_float32_is_within_2e_7_of_the_exact_value():
    x = np.concatenate([np.linspace(-12, 12, 240001), [8 - 2**-10, -8, 8, 1e-3, -1e-3, 5e-8]]).astype(F32)
    want = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)])
    got = fused_gelu(x.reshape(-1, 1)).reshape(-1)
    assert got.dtype == F32
    assert np.max(np.abs(got - want)) <= 2.4e-7


def test_gelu_float32_matches_tensorflow_erfc_form():
    # TensorFlow's float32 Erfc on a grid z (tools/make_erf_fixture.py) gives its GELU at x = -sqrt(2) z
    with np.load(_TF_ERF) as tf:
        z, erfc = tf["x"].astype(np.float64), tf["erfc"].astype(np.float64)
    keep = np.abs(z) <= 8
    x = (-math.sqrt(2) * z[keep]).astype(F32)
    want = 0.5 * x.astype(np.float64) * erfc[keep]
    got = fused_gelu(x.reshape(-1, 1)).reshape(-1)
    # TF's erfc errs by up to 4e-6 relative, and x was rounded to float32
    np.testing.assert_allclose(got, want, rtol=5e-6, atol=3e-7)


def test_gelu_float32_special_values():
    x = np.array([[np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0]], F32)
    got = fused_gelu(x.T).reshape(-1)
    assert np.isnan(got[0]) and got[1] == np.inf and got[3] == F32(1e30)
    assert abs(got[2]) < 1e-12 and abs(got[4]) < 1e-12 and got[5] == 0


def _fused_pointwise_session(bias_fed: bool) -> tuple[Session, str, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((1, 1, 5, 7)).astype(F32)
    bias = rng.standard_normal(7).astype(F32)
    b = GraphBuilder()
    x = b.placeholder("x", F32)
    b_in = b.placeholder("bias", F32) if bias_fed else b.constant(bias)
    attrs = {"T": F32, "strides": [1, 1, 1, 1], "padding": "SAME", "fused_ops": ["BiasAdd", "Relu6"]}
    out = b.op("_FusedConv2D", [x, b.constant(w), b_in], {**attrs, "num_args": 1}, name="op")
    return Session(Graph(b.graph_def)), out, w, bias


def _relu6_conv(x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    y = np.einsum("nhwc,co->nhwo", x.astype(np.float64), w[0, 0].astype(np.float64)) + bias
    return np.clip(y, 0, 6).astype(F32)


def test_fused_pointwise_convolution_remembers_shapes_and_still_checks_them():
    # a 1x1 convolution checks an input shape once, then runs as one matrix product (conv_ops); the
    # epilogue of a constant bias is built once (fused_ops): new shapes, a bad shape and the first shape
    # again each get the right answer or error
    sess, out, w, bias = _fused_pointwise_session(bias_fed=False)
    rng = np.random.default_rng(4)
    for shape in [(1, 3, 4, 5), (1, 3, 4, 5), (2, 6, 1, 5), (1, 3, 4, 5)]:
        x = (rng.standard_normal(shape) * 3).astype(F32)
        got = sess.run(out, {"x:0": x})
        assert got.shape == (*shape[:3], 7)
        np.testing.assert_allclose(got, _relu6_conv(x, w, bias), rtol=1e-5, atol=1e-5)
        with pytest.raises(InvalidArgumentError, match="input depth must be evenly divisible"):
            sess.run(out, {"x:0": np.ones((*shape[:3], 3), F32)})


def test_fused_convolution_reads_each_steps_bias():
    sess, out, w, _ = _fused_pointwise_session(bias_fed=True)
    x = np.random.default_rng(5).standard_normal((1, 2, 3, 5)).astype(F32)
    for shift in (0.5, 2.0, 0.5):
        bias = np.full(7, shift, F32)
        got = sess.run(out, {"x:0": x, "bias:0": bias})
        np.testing.assert_allclose(got, _relu6_conv(x, w, bias), rtol=1e-5, atol=1e-5)
    with pytest.raises(InvalidArgumentError, match="bias must be 1-D"):
        sess.run(out, {"x:0": x, "bias:0": np.ones((1, 7), F32)})


@pytest.mark.parametrize(
    ("act", "alpha"),
    [
        ("Relu", 0.0),
        ("Relu6", 0.0),
        ("Elu", 0.0),
        ("Tanh", 0.0),
        ("Sigmoid", 0.0),
        ("LeakyRelu", 0.2),
        ("LeakyRelu", 1.5),
        ("LeakyRelu", -0.5),
        ("_MklSwish", 0.0),
        ("HardSwish", 0.0),
    ],
)
@pytest.mark.parametrize(
    ("op", "shape", "filter_shape"),
    [
        ("_FusedConv2D", (1, 6, 6, 3), (3, 3, 3, 4)),  # one product, then the epilogue
        ("_FusedConv2D", (1, 66, 66, 3), (3, 3, 3, 32)),  # banded: the epilogue on each band of rows
        ("_FusedConv2D", (1, 40, 40, 8), (1, 1, 8, 16)),  # pointwise
        ("_FusedDepthwiseConv2dNative", (1, 6, 6, 4), (3, 3, 4, 1)),
        ("_FusedDepthwiseConv2dNative", (1, 70, 70, 32), (3, 3, 32, 1)),  # banded rows
        ("_FusedDepthwiseConv2dNative", (1, 40, 40, 128), (3, 3, 128, 1)),  # many channels
    ],
)
def test_a_fused_convolution_applies_its_activation_on_every_path(op, shape, filter_shape, act, alpha):
    rng = np.random.default_rng(6)
    x = rng.standard_normal(shape).astype(F32)
    w = (rng.standard_normal(filter_shape) / 3).astype(F32)
    bias = rng.standard_normal(filter_shape[2] * filter_shape[3] if "Depthwise" in op else filter_shape[3])
    plain, fused = GraphBuilder(), GraphBuilder()
    conv_op = "DepthwiseConv2dNative" if "Depthwise" in op else "Conv2D"
    conv = {"T": F32, "strides": [1, 1, 1, 1], "padding": "SAME"}
    act_attrs = {"T": F32, "alpha": alpha} if act == "LeakyRelu" else {"T": F32}
    xp = plain.placeholder("x", F32)
    y = plain.op(conv_op, [xp, plain.constant(w)], conv)
    y = plain.op("BiasAdd", [y, plain.constant(bias.astype(F32))], {"T": F32})
    if act == "_MklSwish":  # as Keras spells them
        y = plain.mul(y, plain.unary("Sigmoid", y))
    elif act == "HardSwish":
        relu6 = plain.unary("Relu6", plain.add(y, plain.constant(F32(3))))
        y = plain.mul(y, plain.binary("RealDiv", relu6, plain.constant(F32(6))))
    else:
        y = plain.op(act, [y], act_attrs)
    xf = fused.placeholder("x", F32)
    attrs = {**conv, "fused_ops": ["BiasAdd", act], "num_args": 1, "leakyrelu_alpha": alpha}
    out = fused.op(op, [xf, fused.constant(w), fused.constant(bias.astype(F32))], attrs, name="op")
    unfused = rewrite_config(remapping=config_pb2.RewriterConfig.OFF, disable_meta_optimizer=True)
    want = Session(Graph(plain.graph_def), config=unfused).run(y, {"x:0": x})
    got = Session(Graph(fused.graph_def)).run(out, {"x:0": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("act", ["_MklSwish", "HardSwish"])
def test_block_activations_on_a_strided_array(act):
    # a grouped NCHW convolution hands its epilogue a transposed array: one pass over it, not blocks
    from poolserve.runtime.kernels.fused_ops import ACTIVATIONS

    y = np.random.default_rng(8).standard_normal((70000, 3)).astype(F32)
    x = y.astype(np.float64)
    want = x / (1 + np.exp(-x)) if act == "_MklSwish" else x * np.clip(x + 3, 0, 6) / 6
    view = y.T
    assert ACTIVATIONS[act](view, 0.0) is view
    np.testing.assert_allclose(view, want.T, rtol=1e-6, atol=1e-7)


def test_fused_batch_matmul_runs_the_product_on_all_rows_then_bias_and_activation():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 5)).astype(F32)
    w = rng.standard_normal((5, 4)).astype(F32)
    bias = rng.standard_normal(4).astype(F32)
    attrs = {"fused_ops": ["BiasAdd", "GeluApproximate"], "num_args": 1, "adj_x": False, "adj_y": False}
    got = run_op("_FusedBatchMatMulV2", [x, w, bias], attrs)
    y = (x.astype(np.float64) @ w + bias).astype(F32).astype(np.float64)
    want = 0.5 * y * (1 + np.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y**3)))
    assert got.shape == (2, 3, 4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # a batched filter goes through BatchMatMulV2's broadcasting, the epilogue after it
    wb = rng.standard_normal((2, 5, 4)).astype(F32)
    got = run_op("_FusedBatchMatMulV2", [x, wb, bias], {**attrs, "fused_ops": ["BiasAdd", "Relu"]})
    np.testing.assert_allclose(got, np.maximum(np.matmul(x, wb) + bias, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ([(2, 3, 5), (5, 4), (3,)], "as many biases as the channel dimension"),
        ([(2, 3, 5), (4, 4), (4,)], "Matrix size-incompatible"),
        ([(5,), (5, 4), (4,)], "ndims must be >= 2"),
    ],
)
def test_fused_batch_matmul_errors(inputs, message):
    arrays = [np.ones(s, F32) for s in inputs]
    with pytest.raises(InvalidArgumentError, match=message):
        run_op("_FusedBatchMatMulV2", arrays, {"fused_ops": ["BiasAdd"], "num_args": 1})


@pytest.mark.parametrize(
    "shape",
    [(1, 48, 48, 16), (2, 7, 11, 3), (13, 1, 1, 97), (1, 5, 5, 300), (37, 64), (4, 128, 128, 8), (3, 1)],
)
def test_a_constant_bias_added_as_tiled_rows_is_the_broadcast_add(shape):
    from poolserve.runtime.kernels import fused_ops

    rng = np.random.default_rng(7)
    y = rng.standard_normal(shape).astype(F32)
    bias = rng.standard_normal(shape[-1]).astype(F32)
    want = y + bias
    tiles: dict[int, np.ndarray] = {}
    for _ in range(2):  # the tile is made once per output size, then reused
        got = y.copy()
        fused_ops._tiled_add(got, bias, tiles)
        np.testing.assert_array_equal(got, want)
    (tile,) = tiles.values()
    assert tile.size <= max(fused_ops._TILE_VALUES, shape[-1]) and got.size % tile.size == 0
    assert np.array_equal(tile[: shape[-1]], bias)


def test_a_fused_node_answers_right_over_more_output_sizes_than_it_keeps_tiles_for():
    sess, out, w, bias = _fused_pointwise_session(bias_fed=False)
    rng = np.random.default_rng(8)
    for rows in range(1, 40):  # 39 output sizes: the node forgets old tiles rather than grow
        x = rng.standard_normal((1, rows, 2, 5)).astype(F32)
        np.testing.assert_allclose(sess.run(out, {"x:0": x}), _relu6_conv(x, w, bias), rtol=1e-5, atol=1e-5)
