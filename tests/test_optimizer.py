"""The graph optimizer (runtime/optimizer.py): fused TensorFlow ops appear where TensorFlow's Grappler would
write them, results stay TensorFlow's, and nothing a caller can see is fused away."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import TRACED, load_fixture_io, rewrite_config

from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.session import Session
from poolserve.runtime.timeline import Timeline

MODELS = Path(__file__).parent / "fixtures" / "models"
FIXTURES = [
    (folder, name)
    for folder in (MODELS, MODELS / "realistic")
    for name in sorted(json.loads((folder / "models.json").read_text()))
]
# fused ops each fixture must show (the transformer's attention projections are Einsums; its feed-forward
# GELU layer is a Tensordot: MatMul, Reshape, BiasAdd, GELU, which becomes one _FusedBatchMatMulV2, as do
# BERT-tiny's EinsumDense projections with their biases)
EXPECTED_FUSED = {
    "bert_tiny": {"_FusedBatchMatMulV2", "_FusedMatMul", "_FusedLayerNorm"},
    "mlp_gelu": {"_FusedMatMul"},
    "mobilenet_v2": {"_FusedConv2D", "_FusedDepthwiseConv2dNative", "_FusedMatMul"},
    "parallel_branches": {"_FusedMatMul"},
    "residual_cnn": {"_FusedConv2D", "_FusedMatMul"},
    "wide_and_deep": {"_FusedMatMul"},
    "branches": {"_FusedMatMul"},
    "conv_transpose": {"_FusedConv2D"},
    "mlp": {"_FusedMatMul"},
    "mobilenet": {"_FusedConv2D", "_FusedDepthwiseConv2dNative", "_FusedMatMul"},
    "resnet": {"_FusedConv2D", "_FusedMatMul"},
    "transformer": {"_FusedBatchMatMulV2", "_FusedLayerNorm"},
    "transformer_tokens": {"_FusedBatchMatMulV2", "_FusedMatMul", "_FusedLayerNorm"},
}
PARTITIONS = config_pb2.RunOptions(output_partition_graphs=True)


OFF = rewrite_config(disable_meta_optimizer=True)


def run(
    graph: Any, fetches: Any, feeds: Any, cfg: config_pb2.ConfigProto | None = None
) -> tuple[Any, config_pb2.RunMetadata]:
    md = config_pb2.RunMetadata()
    with Session(graph, cfg) as s:
        out = s.run(fetches, feeds, options=TRACED, run_metadata=md)
    return out, md


def ops(md: config_pb2.RunMetadata) -> Counter[str]:
    return Counter(n.op for g in md.partition_graphs for n in g.node)


def assert_tf_close(actual: Any, want: Any, what: str) -> None:
    actual = np.asarray(actual)
    assert actual.dtype == want.dtype and actual.shape == want.shape, what
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(actual, want, rtol=1e-4, atol=1e-5 * scale, err_msg=what)


@pytest.mark.parametrize(("folder", "name"), FIXTURES, ids=[n for _, n in FIXTURES])
def test_fixture_fuses_and_matches_tensorflow(folder: Path, name: str) -> None:
    spec = json.loads((folder / "models.json").read_text())[name]
    graph = Graph(load_graph_def(folder / f"{name}.pb"))
    feeds, expected = load_fixture_io(folder / f"{name}.npz")
    fetches = spec["outputs"]
    fused, md = run(graph, fetches, feeds)
    plain, md_off = run(graph, fetches, feeds, OFF)

    fused_ops = {op for op in ops(md) if op.startswith("_Fused")}
    assert fused_ops == EXPECTED_FUSED[name]
    assert not any(op.startswith("_Fused") for op in ops(md_off))
    executed = sum(len(d.node_stats) for d in md.step_stats.dev_stats)
    executed_off = sum(len(d.node_stats) for d in md_off.step_stats.dev_stats)
    assert executed < executed_off or not fused_ops
    labels = [ns.timeline_label for d in md.step_stats.dev_stats for ns in d.node_stats]
    for op in fused_ops:
        assert any(f" = {op}(" in label for label in labels), op
    for tensor, a, b in zip(fetches, fused, plain, strict=True):
        assert_tf_close(a, expected[tensor], f"{name} {tensor} (optimized)")
        assert_tf_close(a, b, f"{name} {tensor} (optimized against unoptimized)")


def test_timeline_shows_fused_ops() -> None:
    feeds, _ = load_fixture_io(MODELS / "realistic" / "mobilenet_v2.npz")
    _, md = run(Graph(load_graph_def(MODELS / "realistic" / "mobilenet_v2.pb")), "Identity:0", feeds)
    events = json.loads(Timeline(md.step_stats).generate_chrome_trace_format())["traceEvents"]
    names = Counter(e["name"] for e in events if e.get("ph") == "X")
    assert names["_FusedConv2D"] == 35 and names["_FusedDepthwiseConv2dNative"] == 17
    assert names["Relu6"] == names["Mul"] == names["Pad"] == 0  # the Pads are the convolutions' padding


# --- a small conv block, as Keras freezes it: Conv2D, batch-norm arithmetic, Relu6 -------------------------


def conv_block(b: GraphBuilder, x: str, cin: int, cout: int, rng: np.random.Generator, tag: str) -> str:
    w = b.constant(rng.standard_normal((3, 3, cin, cout)).astype(np.float32), name=f"{tag}/w")
    y = b.conv2d(x, w, name=f"{tag}/conv")
    y = b.mul(y, b.constant(rng.uniform(0.5, 2, cout).astype(np.float32), name=f"{tag}/s"), name=f"{tag}/mul")
    y = b.add(y, b.constant(rng.standard_normal(cout).astype(np.float32), name=f"{tag}/b"), name=f"{tag}/add")
    return b.unary("Relu6", y, name=f"{tag}/relu6")


def small_cnn() -> tuple[Any, str, dict[str, Any]]:
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 8, 8, 3))
    y = conv_block(b, x, 3, 4, rng, "a")
    y = conv_block(b, y, 4, 5, rng, "b")
    out = b.identity(y, name="out")
    return b.graph_def, out, {x: rng.standard_normal((2, 8, 8, 3)).astype(np.float32)}


def test_conv_block_becomes_one_fused_conv() -> None:
    graph_def, out, feeds = small_cnn()
    (got,), md = run(graph_def, [out], feeds)
    (want,), _ = run(graph_def, [out], feeds, OFF)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    executed = {ns.node_name: ns.timeline_label for d in md.step_stats.dev_stats for ns in d.node_stats}
    assert executed["a/relu6"].startswith("a/relu6 = _FusedConv2D(x, a/relu6/_folded_filter")
    assert "a/conv" not in executed and "a/mul" not in executed and "a/add" not in executed
    node = next(n for n in md.partition_graphs[0].node if n.name == "b/relu6")
    assert [s.decode() for s in node.attr["fused_ops"].list.s] == ["BiasAdd", "Relu6"]
    assert node.attr["num_args"].i == 1 and node.attr["padding"].s == b"SAME"


def test_fetched_intermediates_are_not_fused_away() -> None:
    graph_def, out, feeds = small_cnn()
    fetches = [out, "a/conv:0", "b/mul:0"]
    got, md = run(graph_def, fetches, feeds)
    want, _ = run(graph_def, fetches, feeds, OFF)
    for a, w in zip(got, want, strict=True):
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-5)
    labels = {ns.node_name: ns.timeline_label for d in md.step_stats.dev_stats for ns in d.node_stats}
    # a chain stops at a fetched tensor: a/conv runs as written; b/conv's Mul still folds into its
    # weights (a Conv2D under the Mul's name), and what reads the fetched b/mul runs unfused
    assert labels["a/conv"] == "a/conv = Conv2D(x, a/w)"
    assert labels["b/mul"].startswith("b/mul = Conv2D(a/relu6, b/mul/_folded_filter")
    assert ops(md)["_FusedConv2D"] == 0 and {"a/mul", "b/add", "b/relu6"} <= labels.keys()


def test_fed_intermediate_and_targets_are_respected() -> None:
    graph_def, out, feeds = small_cnn()
    fed = {**feeds, "a/mul:0": np.ones((2, 8, 8, 4), np.float32)}
    (got,), md = run(graph_def, [out], fed)
    (want,), _ = run(graph_def, [out], fed, OFF)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (got_t, _), md_t = run(graph_def, [out, "a/mul"], feeds)
    (want_t, _), _ = run(graph_def, [out, "a/mul"], feeds, OFF)
    np.testing.assert_allclose(got_t, want_t, rtol=1e-5, atol=1e-5)
    assert "a/mul" in {ns.node_name for d in md_t.step_stats.dev_stats for ns in d.node_stats}


def test_control_dependency_on_an_intermediate_keeps_it() -> None:
    graph_def, out, feeds = small_cnn()
    b = GraphBuilder()
    b.graph_def.CopyFrom(graph_def)
    b.op("NoOp", name="after_mul", control_inputs=["a/mul"])
    done = b.op("Identity", [out], {"T": np.float32}, name="done", control_inputs=["after_mul"])
    (got,), md = run(b.graph_def, [done], feeds)
    (want,), _ = run(b.graph_def, [done], feeds, OFF)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert "a/mul" in {ns.node_name for d in md.step_stats.dev_stats for ns in d.node_stats}


@pytest.mark.parametrize(
    ("toggles", "fused", "gone", "kept"),
    [
        ({"disable_meta_optimizer": True}, 0, set(), {"a/conv", "a/mul", "a/add", "out"}),
        ({"remapping": config_pb2.RewriterConfig.OFF}, 0, {"a/conv"}, {"a/mul", "a/add", "a/relu6"}),
        ({"arithmetic_optimization": config_pb2.RewriterConfig.OFF}, 0, set(), {"a/mul", "a/add"}),
        ({"dependency_optimization": config_pb2.RewriterConfig.OFF}, 2, {"a/conv"}, {"out"}),
    ],
)
def test_rewrite_options_switch_passes_off(
    toggles: dict[str, Any], fused: int, gone: set[str], kept: set[str]
) -> None:
    graph_def, out, feeds = small_cnn()
    b = GraphBuilder()
    b.graph_def.CopyFrom(graph_def)
    final = b.unary("Relu", out, name="final")  # "out" (an Identity) is executed, not fetched
    (got,), md = run(b.graph_def, [final], feeds, rewrite_config(**toggles))
    (want,), _ = run(b.graph_def, [final], feeds, OFF)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    names = {ns.node_name for d in md.step_stats.dev_stats for ns in d.node_stats}
    assert ops(md)["_FusedConv2D"] == fused
    assert not gone & names and kept <= names, sorted(names)


def test_identity_chains_are_removed_unless_fetched() -> None:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 3))
    i1 = b.identity(x, name="i1")
    i2 = b.identity(i1, name="i2")
    y = b.relu(i2, name="y")
    feeds = {x: np.array([[-1.0, 0.0, 2.0]], np.float32)}
    (got,), md = run(b.graph_def, [y], feeds)
    assert got.tolist() == [[0.0, 0.0, 2.0]]
    assert {ns.node_name for d in md.step_stats.dev_stats for ns in d.node_stats} == {"y"}
    (got, mid), md = run(b.graph_def, [y, i1], feeds)
    assert mid.tolist() == [[-1.0, 0.0, 2.0]]
    assert {ns.node_name for d in md.step_stats.dev_stats for ns in d.node_stats} == {"y", "i1"}


# --- matmul epilogues ---------------------------------------------------------------------------------------


def dense(b: GraphBuilder, x: str, rng: np.random.Generator, transpose_b: bool = False) -> str:
    w = rng.standard_normal((6, 5)).astype(np.float32) * 0.5
    wt = b.constant(w.T.copy() if transpose_b else w, name="w")
    y = b.matmul(x, wt, transpose_b=transpose_b, name="mm")
    return b.bias_add(y, b.constant(rng.standard_normal(5).astype(np.float32), name="bias"), name="ba")


def gelu_erf(b: GraphBuilder, y: str) -> str:
    half = b.mul(b.constant(np.float32(0.5), name="half"), y, name="g/mul")
    neg = b.mul(b.unary("Neg", y, name="g/neg"), b.constant(np.float32(0.70710677), name="g/c"), name="g/m1")
    return b.mul(half, b.unary("Erfc", neg, name="g/erfc"), name="g/out")


def gelu_tanh(b: GraphBuilder, y: str) -> str:
    cube = b.binary("Pow", y, b.constant(np.float32(3.0), name="three"), name="g/pow")
    inner = b.add(y, b.mul(b.constant(np.float32(0.044715), name="k"), cube, name="g/k3"), name="g/in")
    t = b.unary("Tanh", b.mul(b.constant(np.float32(0.7978846), name="r"), inner, name="g/r"), name="g/tanh")
    one = b.add(b.constant(np.float32(1.0), name="one"), t, name="g/1p")
    return b.mul(b.mul(b.constant(np.float32(0.5), name="h"), y, name="g/h"), one, name="g/out")


@pytest.mark.parametrize(
    ("epilogue", "fused_ops"),
    [
        (lambda b, y: b.relu(y, name="act"), ["BiasAdd", "Relu"]),
        (lambda b, y: b.unary("Sigmoid", y, name="act"), ["BiasAdd", "Sigmoid"]),
        (lambda b, y: b.unary("Elu", y, name="act"), ["BiasAdd", "Elu"]),
        (lambda b, y: b.unary("Tanh", y, name="act"), ["BiasAdd", "Tanh"]),
        (gelu_erf, ["BiasAdd", "GeluExact"]),
        (gelu_tanh, ["BiasAdd", "GeluApproximate"]),
        (lambda b, y: b.unary("Softplus", y, name="act"), ["BiasAdd"]),
    ],
)
@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_bias_activation_fuse(epilogue: Any, fused_ops: list[str], transpose_b: bool) -> None:
    rng = np.random.default_rng(1)
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 6))
    out = epilogue(b, dense(b, x, rng, transpose_b))
    feeds = {x: rng.standard_normal((4, 6)).astype(np.float32) * 3}
    (got,), md = run(b.graph_def, [out], feeds)
    (want,), _ = run(b.graph_def, [out], feeds, OFF)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    node = next(n for n in md.partition_graphs[0].node if n.op == "_FusedMatMul")
    assert [s.decode() for s in node.attr["fused_ops"].list.s] == fused_ops
    assert node.attr["transpose_b"].b == transpose_b


def tensordot_dense(b: GraphBuilder, x: str, rng: np.random.Generator, last: int | None = None) -> str:
    """Keras's Dense on [batch, 3, 6] as TensorFlow's Tensordot writes it: rows, MatMul, back to 3-D with a
    shape computed from the input's (with ``last``, [batch, last]: a Reshape that moves the channels)."""
    rows = b.reshape(x, [-1, 6], name="td/rows")
    mm = b.matmul(rows, b.constant(rng.standard_normal((6, 5)).astype(np.float32), name="w"), name="td/mm")
    dims = b.op("Shape", [x], {"T": np.float32, "out_type": np.int32}, name="td/shape")
    free = b.op(
        "GatherV2",
        [dims, b.constant(np.array([0, 1] if last is None else [0], np.int32)), b.constant(np.int32(0))],
        {"Tparams": np.int32, "Tindices": np.int32, "Taxis": np.int32, "batch_dims": 0},
        name="td/free",
    )
    tail = np.array([5 if last is None else last], np.int32)
    target = b.op(
        "ConcatV2",
        [free, b.constant(tail), b.constant(np.int32(0))],
        {"T": np.int32, "N": 2, "Tidx": np.int32},
        name="td/target",
    )
    back = b.op("Reshape", [mm, target], {"T": np.float32, "Tshape": np.int32}, name="td/back")
    bias = b.constant(rng.standard_normal(5).astype(np.float32), name="bias")
    return b.bias_add(back, bias, name="td/ba")


@pytest.mark.parametrize(
    ("epilogue", "fused_ops"),
    [(gelu_erf, ["BiasAdd", "GeluExact"]), (lambda b, y: b.relu(y), ["BiasAdd", "Relu"])],
)
def test_matmul_reshape_bias_activation_fuse(epilogue: Any, fused_ops: list[str]) -> None:
    rng = np.random.default_rng(5)
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 3, 6))
    out = epilogue(b, tensordot_dense(b, x, rng))
    feeds = {x: rng.standard_normal((2, 3, 6)).astype(np.float32) * 3}
    (got,), md = run(b.graph_def, [out], feeds)
    (want,), md_off = run(b.graph_def, [out], feeds, OFF)
    assert got.shape == want.shape == (2, 3, 5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    nodes = {n.name: n for n in md.partition_graphs[0].node}
    fused = nodes["td/mm"]
    assert fused.op == "_FusedMatMul"
    assert [s.decode() for s in fused.attr["fused_ops"].list.s] == fused_ops
    # the Reshape now follows the fused product, under the name of the last node it replaces
    sink = out.split(":")[0]
    assert nodes[sink].op == "Reshape" and list(nodes[sink].input) == ["td/mm", "td/target"]
    assert "td/back" not in nodes and "td/ba" not in nodes and ops(md)["Erfc"] == 0


def test_reshape_that_moves_channels_is_not_fused() -> None:
    # the product's [6, 5] reshaped to [2, 15]: TensorFlow's BiasAdd refuses 5 biases for 15 channels, and
    # so must the optimized graph (fused before the Reshape, the bias would be added to the wrong values)
    rng = np.random.default_rng(6)
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 3, 6))
    out = b.relu(tensordot_dense(b, x, rng, last=15), name="act")
    feeds = {x: rng.standard_normal((2, 3, 6)).astype(np.float32)}
    for cfg in (None, OFF):
        with pytest.raises(InvalidArgumentError, match="as many biases as the last dimension"):
            run(b.graph_def, [out], feeds, cfg)


def test_gelu_lookalike_is_not_fused() -> None:
    rng = np.random.default_rng(2)
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 6))
    y = dense(b, x, rng)
    # 0.5 * x * erfc(-x): not GELU (the scale inside erfc is missing)
    out = b.mul(b.mul(b.constant(np.float32(0.5)), y), b.unary("Erfc", b.unary("Neg", y)), name="out")
    (_,), md = run(b.graph_def, [out], {x: np.ones((2, 6), np.float32)})
    node = next(n for n in md.partition_graphs[0].node if n.op == "_FusedMatMul")
    assert [s.decode() for s in node.attr["fused_ops"].list.s] == ["BiasAdd"]


# --- swish, as Keras writes it --------------------------------------------------------------------------


def swish(b: GraphBuilder, y: str, beta: float | None = 1.0, wrapper: bool = True) -> str:
    """Keras 3's swish: ``y * sigmoid(beta * y)`` and the IdentityN of its custom gradient; with ``beta``
    None, ``tf.nn.silu``'s Sigmoid and Mul alone."""
    gate = y
    if beta is not None:
        beta_t = b.constant(np.float32(beta), name="sw/beta")
        gate = b.mul(beta_t, y, name="sw/mul")
    out = b.mul(y, b.unary("Sigmoid", gate, name="sw/sigmoid"), name="sw/mul_1")
    if wrapper and beta is not None:
        f32 = np.float32
        return b.op("IdentityN", [out, y, beta_t], {"T": [f32, f32, f32]}, name="sw/idn", num_outputs=3)[0]
    return out


def swish_product(kind: str, rng: np.random.Generator) -> tuple[GraphBuilder, str, Any]:
    """A placeholder and a Conv2D, DepthwiseConv2dNative or MatMul with its bias."""
    b = GraphBuilder()
    if kind == "matmul":
        x = b.placeholder("x", np.float32, (None, 6))
        return b, dense(b, x, rng), {x: rng.standard_normal((4, 6)).astype(np.float32) * 4}
    x = b.placeholder("x", np.float32, (None, 5, 5, 3))
    attrs = {"T": np.float32, "strides": [1, 1, 1, 1], "padding": "SAME", "data_format": "NHWC"}
    op = "Conv2D" if kind == "conv" else "DepthwiseConv2dNative"
    w = b.constant(rng.standard_normal((3, 3, 3, 4 if kind == "conv" else 1)).astype(np.float32), name="w")
    y = b.op(op, [x, w], attrs, name="product")
    channels = 4 if kind == "conv" else 3
    y = b.bias_add(y, b.constant(rng.standard_normal(channels).astype(np.float32), name="bias"), name="ba")
    return b, y, {x: rng.standard_normal((2, 5, 5, 3)).astype(np.float32) * 4}


@pytest.mark.parametrize("kind", ["conv", "depthwise", "matmul"])
@pytest.mark.parametrize("spelling", ["keras3", "silu"])
def test_keras_swish_fuses_into_the_product(kind: str, spelling: str) -> None:
    b, y, feeds = swish_product(kind, np.random.default_rng(11))
    out = b.identity(swish(b, y, 1.0 if spelling == "keras3" else None), name="out")
    (got,), md = run(b.graph_def, [out], feeds)
    (want,), _ = run(b.graph_def, [out], feeds, OFF)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    fused = [n for n in md.partition_graphs[0].node if n.op.startswith("_Fused")]
    assert len(fused) == 1 and [s.decode() for s in fused[0].attr["fused_ops"].list.s] == [
        "BiasAdd",
        "_MklSwish",
    ]
    # the fused node takes the name of what its consumers read: the IdentityN, or the last Mul
    assert fused[0].name == ("sw/idn" if spelling == "keras3" else "sw/mul_1")
    assert ops(md)["Sigmoid"] == ops(md)["Mul"] == ops(md)["IdentityN"] == 0


@pytest.mark.parametrize("case", ["beta 2", "x read again", "sigmoid fetched", "gradient port read"])
def test_what_is_not_a_plain_swish_stays_unfused(case: str) -> None:
    b, y, feeds = swish_product("conv", np.random.default_rng(12))
    out = swish(b, y, 2.0 if case == "beta 2" else 1.0)
    fetches = [out]
    if case == "x read again":
        fetches.append(b.relu(y, name="other"))
    elif case == "sigmoid fetched":
        fetches.append("sw/sigmoid:0")
    elif case == "gradient port read":
        fetches.append(b.relu("sw/idn:1", name="other"))
    got, md = run(b.graph_def, fetches, feeds)
    want, _ = run(b.graph_def, fetches, feeds, OFF)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    fused = [n for n in md.partition_graphs[0].node if n.op.startswith("_Fused")]
    assert [s.decode() for s in fused[0].attr["fused_ops"].list.s] == ["BiasAdd"]
    assert ops(md)["Sigmoid"] == 1


def test_fused_swish_keeps_its_limits() -> None:
    # y / (1 + exp(-y)): what x * sigmoid(x) gives at the ends of float32 and beyond
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 1))
    out = b.identity(
        swish(
            b,
            b.bias_add(
                b.matmul(x, b.constant(np.ones((1, 1), np.float32))), b.constant(np.zeros(1, np.float32))
            ),
        ),
        name="out",
    )
    values = np.array(
        [[-np.inf], [-1e4], [-100.0], [-20.0], [0.0], [3.0], [100.0], [np.inf], [np.nan]], np.float32
    )
    (got,), md = run(b.graph_def, [out], {x: values})
    assert ops(md)["Sigmoid"] == 0
    with np.errstate(over="ignore", invalid="ignore"):
        exact = values.astype(np.float64) / (1.0 + np.exp(-values.astype(np.float64)))
    finite = np.isfinite(exact)
    np.testing.assert_allclose(got[finite], exact[finite], rtol=1e-6, atol=1e-30)
    assert np.isnan(got[0, 0]) and got[7, 0] == np.inf and np.isnan(got[8, 0])


def hard_swish(b: GraphBuilder, y: str, six: float = 6.0) -> str:
    """Keras's hard_swish: ``y * (relu6(y + 3) / 6)``."""
    r = b.unary(
        "Relu6", b.add(y, b.constant(np.float32(3.0), name="hs/three"), name="hs/add"), name="hs/relu6"
    )
    ratio = b.binary("RealDiv", r, b.constant(np.float32(six), name="hs/six"), name="hs/truediv")
    return b.mul(y, ratio, name="hs/mul")


@pytest.mark.parametrize("kind", ["conv", "depthwise", "matmul"])
def test_hard_swish_fuses_into_the_product(kind: str) -> None:
    b, y, feeds = swish_product(kind, np.random.default_rng(13))
    out = b.identity(hard_swish(b, y), name="out")
    (got,), md = run(b.graph_def, [out], feeds)
    (want,), _ = run(b.graph_def, [out], feeds, OFF)
    np.testing.assert_array_equal(got, want)  # the graph's own order of operations
    fused = [n for n in md.partition_graphs[0].node if n.op.startswith("_Fused")]
    assert len(fused) == 1 and [s.decode() for s in fused[0].attr["fused_ops"].list.s] == [
        "BiasAdd",
        "HardSwish",
    ]
    assert fused[0].name == "hs/mul" and ops(md)["Relu6"] == ops(md)["RealDiv"] == 0


def test_hard_swish_lookalike_is_not_fused() -> None:
    b, y, feeds = swish_product("conv", np.random.default_rng(14))
    out = b.identity(hard_swish(b, y, six=5.0), name="out")
    (got,), md = run(b.graph_def, [out], feeds)
    (want,), _ = run(b.graph_def, [out], feeds, OFF)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    fused = [n for n in md.partition_graphs[0].node if n.op.startswith("_Fused")]
    assert [s.decode() for s in fused[0].attr["fused_ops"].list.s] == ["BiasAdd"]
    assert ops(md)["Relu6"] == 1


def test_fused_batch_norm_folds_into_depthwise_conv() -> None:
    rng = np.random.default_rng(3)
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 6, 6, 3))
    w = b.constant(rng.standard_normal((3, 3, 3, 2)).astype(np.float32), name="w")
    attrs = {"T": np.float32, "strides": [1, 2, 2, 1], "padding": "SAME", "data_format": "NHWC"}
    y = b.op("DepthwiseConv2dNative", [x, w], attrs, name="dw")
    params = [b.constant(rng.uniform(0.5, 1.5, 6).astype(np.float32), name=f"p{i}") for i in range(4)]
    bn = b.op(
        "FusedBatchNormV3",
        [y, *params],
        {"T": np.float32, "U": np.float32, "epsilon": 0.001, "is_training": False, "data_format": "NHWC"},
        name="bn",
        num_outputs=6,
    )
    out = b.unary("Relu", bn[0], name="act")
    feeds = {x: rng.standard_normal((2, 6, 6, 3)).astype(np.float32)}
    (got,), md = run(b.graph_def, [out], feeds)
    (want,), _ = run(b.graph_def, [out], feeds, OFF)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert ops(md)["_FusedDepthwiseConv2dNative"] == 1 and ops(md)["FusedBatchNormV3"] == 0


def test_fused_conv_with_batch_norm_args_runs_as_tensorflow_writes_it() -> None:
    """A graph Grappler already rewrote: _FusedConv2D with fused_ops [FusedBatchNorm, Relu]."""
    rng = np.random.default_rng(4)
    xv = rng.standard_normal((1, 5, 5, 2)).astype(np.float32)
    wv = rng.standard_normal((3, 3, 2, 3)).astype(np.float32)
    scale, offset, mean = (rng.standard_normal(3).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2, 3).astype(np.float32)
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 5, 5, 2))
    args = [
        b.constant(v, name=n) for v, n in ((wv, "w"), (scale, "s"), (offset, "o"), (mean, "m"), (var, "v"))
    ]
    attrs = {
        "T": np.float32,
        "num_args": 4,
        "strides": [1, 1, 1, 1],
        "padding": "VALID",
        "fused_ops": ["FusedBatchNorm", "Relu"],
        "epsilon": 0.01,
    }
    out = b.op("_FusedConv2D", [x, *args], attrs, name="fused")
    (got,), _ = run(b.graph_def, [out], {x: xv}, OFF)
    conv = np.zeros((1, 3, 3, 3), np.float64)
    for i in range(3):
        for j in range(3):
            conv[0, i, j] = np.einsum("hwc,hwco->o", xv[0, i : i + 3, j : j + 3], wv)
    want = np.maximum((conv - mean) * scale / np.sqrt(var + 0.01) + offset, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_noop_waiting_for_constants_is_dropped_but_one_ordering_work_stays() -> None:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 2))
    w = b.identity(b.constant(np.ones((2, 2), np.float32), name="w_resource"), name="w_read")
    waits_for_constants = b.no_op("NoOp", control_inputs=[w])
    y = b.matmul(x, w, name="mm")
    orders_work = b.no_op("after_mm", control_inputs=[y])
    out = b.op(
        "Identity", [y], {"T": np.float32}, name="out", control_inputs=[waits_for_constants, orders_work]
    )
    feeds = {x: np.ones((1, 2), np.float32)}
    (got,), md = run(b.graph_def, [out], feeds)
    assert got.tolist() == [[2.0, 2.0]]
    assert {ns.node_name for d in md.step_stats.dev_stats for ns in d.node_stats} == {"mm", "after_mm", "out"}
    off = rewrite_config(dependency_optimization=config_pb2.RewriterConfig.OFF)
    (_,), md = run(b.graph_def, [out], feeds, off)
    assert "NoOp" in {ns.node_name for d in md.step_stats.dev_stats for ns in d.node_stats}


@pytest.mark.parametrize("case", ["float16", "nchw", "full_tensor_scale", "scale_before_product"])
def test_what_is_not_per_channel_arithmetic_on_a_product_is_left_alone(case: str) -> None:
    rng = np.random.default_rng(5)
    dtype = np.float16 if case == "float16" else np.float32
    b = GraphBuilder()
    shape = (None, 3, 4, 4) if case == "nchw" else (None, 4, 4, 3)
    x = b.placeholder("x", dtype, shape)
    w = b.constant(rng.standard_normal((3, 3, 3, 2)).astype(dtype), name="w")
    conv_in = x
    if case == "scale_before_product":
        conv_in = b.mul(x, b.constant(np.full(3, 2, dtype), name="pre"), name="pre_mul")
    y = b.conv2d(conv_in, w, data_format="NCHW" if case == "nchw" else "NHWC", name="conv")
    scale = rng.uniform(0.5, 2, (1, 4, 4, 2) if case == "full_tensor_scale" else (2,)).astype(dtype)
    if case == "nchw":
        scale = scale.reshape(2, 1, 1)
    y = b.mul(y, b.constant(scale, name="s"), name="mul")
    out = b.unary("Relu", y, name="act")
    feeds = {x: rng.standard_normal((2, *shape[1:])).astype(dtype)}
    (got,), md = run(b.graph_def, [out], feeds)
    (want,), _ = run(b.graph_def, [out], feeds, OFF)
    np.testing.assert_allclose(got, want, rtol=1e-3 if case == "float16" else 1e-5, atol=1e-3)
    names = {ns.node_name for d in md.step_stats.dev_stats for ns in d.node_stats}
    if case == "scale_before_product":
        assert "pre_mul" in names and ops(md)["_FusedConv2D"] == 1  # only what follows the product folds
    else:
        assert {"conv", "mul", "act"} <= names and not any(op.startswith("_Fused") for op in ops(md))


def test_pow_by_a_constant_three_runs_as_x_times_its_square() -> None:
    """Grappler's ConvertPow: float16 x ** 3 (tanh-GELU's) is x * Square(x), two roundings; TensorFlow 2.21's
    answers for these inputs in a graph, where pow rounded once gives -4.125, 0.594, 3.355 and -15.01."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float16, [None])
    b.op("Pow", [x, b.constant(np.float16(3))], {"T": np.float16}, name="cube")
    feeds = {"x:0": np.array([-1.604, 0.841, 1.497, -2.467], np.float16)}
    (got,), _ = run(b.graph_def, ["cube:0"], feeds)
    assert got.tolist() == np.array([-4.12, 0.5947, 3.357, -15.016], np.float16).tolist()
    (plain,), _ = run(
        b.graph_def, ["cube:0"], feeds, rewrite_config(arithmetic_optimization=config_pb2.RewriterConfig.OFF)
    )
    assert plain.tolist() == np.array([-4.125, 0.594, 3.355, -15.01], np.float16).tolist()
