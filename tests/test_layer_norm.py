"""Layer norm fusion (runtime/layer_norm_fusion.py) and its kernel, ``_FusedLayerNorm`` (kernels/fused_ops.py):
the ops Keras and ``tf.nn`` write become one node, whose values stay TensorFlow's (committed by
tools/make_layer_norm_fixture.py), and nothing a caller can see is fused away."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import TRACED, rewrite_config, run_op

from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.session import Session

FIXTURE = Path(__file__).parent / "fixtures" / "kernels" / "layer_norm"


def run(graph: Any, fetches: Any, feeds: Any, cfg: Any = None) -> tuple[Any, Counter[str]]:
    md = config_pb2.RunMetadata()
    with Session(graph, cfg) as s:
        out = s.run(fetches, feeds, options=TRACED, run_metadata=md)
    return out, Counter(n.op for g in md.partition_graphs for n in g.node)


def fixture() -> tuple[Graph, dict[str, Any], dict[str, Any]]:
    with np.load(FIXTURE.with_suffix(".npz")) as data:
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
        want = {k[4:]: data[k] for k in data.files if k.startswith("out:")}
    return Graph(load_graph_def(FIXTURE.with_suffix(".pb"))), feeds, want


@pytest.mark.parametrize(
    ("cfg", "fused"),
    [
        (None, 5),
        (rewrite_config(remapping=config_pb2.RewriterConfig.OFF), 0),
        (rewrite_config(disable_meta_optimizer=True), 0),
    ],
    ids=["default", "remapping_off", "optimizer_off"],
)
def test_keras_and_tf_nn_layer_norms_fuse_and_match_tensorflow(cfg: Any, fused: int) -> None:
    # Keras over the last axis (with scale and offset, without offset, without scale), over two axes, and
    # tf.nn.moments + tf.nn.batch_normalization; inputs far from zero, where a late mean loses digits
    graph, feeds, want = fixture()
    got, ops = run(graph, list(want), feeds, cfg)
    assert ops["_FusedLayerNorm"] == fused
    if fused:
        assert ops["Mean"] == ops["Rsqrt"] == ops["SquaredDifference"] == ops["Mul"] == 0
    for (name, w), g in zip(want.items(), got, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * float(np.max(np.abs(w))), err_msg=name)


def test_fetched_statistics_are_not_fused_away() -> None:
    graph, feeds, want = fixture()
    mean, rsqrt = "layer_normalization_1/moments/mean:0", "layer_normalization_1/Rsqrt:0"
    fetches = [*want, mean, rsqrt]
    got, ops = run(graph, fetches, feeds)
    assert ops["_FusedLayerNorm"] == 4  # the other four still fuse
    plain, _ = run(graph, fetches, feeds, rewrite_config(disable_meta_optimizer=True))
    for name, a, b in zip(fetches, got, plain, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=name)


def layer_norm_graph(tail: str) -> tuple[Any, str, dict[str, Any]]:
    """x -> moments -> rsqrt -> a tail: "affine" (a layer norm) or "square" (not one: x * x * rsqrt)."""
    rng = np.random.default_rng(5)
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 8))
    axes = b.constant(np.array([-1], np.int32), name="axes")
    reduce = {"keep_dims": True, "T": np.float32, "Tidx": np.int32}
    mean = b.op("Mean", [x, axes], reduce, name="mean")
    sq = b.op("SquaredDifference", [x, mean], {"T": np.float32}, name="sqdiff")
    var = b.op("Mean", [sq, axes], reduce, name="variance")
    eps = b.add(var, b.constant(np.float32(1e-3), name="eps"), name="add_eps")
    r = b.unary("Rsqrt", eps, name="rsqrt")
    gamma = b.constant(rng.uniform(0.5, 1.5, 8).astype(np.float32), name="gamma")
    if tail == "affine":
        m = b.mul(r, gamma, name="m")
        centered = b.op("Sub", [x, mean], {"T": np.float32}, name="centered")
        out = b.mul(centered, m, name="out")
    else:
        out = b.mul(b.mul(x, x, name="xx"), r, name="out")
    return b.graph_def, out, {x: rng.standard_normal((3, 8)).astype(np.float32) * 4 + 2}


@pytest.mark.parametrize(("tail", "fused"), [("affine", 1), ("square", 0)])
def test_only_an_affine_tail_fuses(tail: str, fused: int) -> None:
    graph_def, out, feeds = layer_norm_graph(tail)
    (got,), ops = run(graph_def, [out], feeds)
    (want,), _ = run(graph_def, [out], feeds, rewrite_config(disable_meta_optimizer=True))
    assert ops["_FusedLayerNorm"] == fused
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _layer_norm64(x: Any, gamma: Any, beta: Any, axes: tuple[int, ...], epsilon: float) -> Any:
    x = x.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + epsilon) * gamma + beta


@pytest.mark.parametrize(
    ("shape", "axes", "affine"),
    [
        ((2, 9, 48), (-1,), (48,)),  # rows summed by a matrix product
        ((48,), (0,), (48,)),
        ((3, 5, 6), (1, 2), (5, 6)),  # two axes: numpy's reductions
        ((2, 9, 48), (1,), (9, 1)),  # not the last axis
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_layer_norm_kernel_matches_float64(shape: Any, axes: Any, affine: Any, dtype: Any) -> None:
    rng = np.random.default_rng(7)
    x = (30.0 + 3.0 * rng.standard_normal(shape)).astype(dtype)  # off zero: the mean must be exact enough
    gamma = rng.standard_normal(affine).astype(dtype)
    beta = rng.standard_normal(affine).astype(dtype)
    attrs = {"axes": list(axes), "epsilon": 1e-3, "T": dtype}
    got = run_op("_FusedLayerNorm", [x, gamma, beta], attrs)
    assert got.dtype == dtype and got.shape == shape
    tol = 2e-5 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(got, _layer_norm64(x, gamma, beta, axes, 1e-3), rtol=tol, atol=tol)
