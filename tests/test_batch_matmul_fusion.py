"""The BatchMatMulV2 pass of the graph optimizer (runtime/batch_matmul_fusion.py): a batch product by a
constant matrix and its per-channel bias (and activation) run as one _FusedBatchMatMulV2, with the same
results and errors, and only where nothing else reads what it absorbs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import support
from support import rewrite_config
from test_optimizer import gelu_erf

from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError

F32 = np.float32
I32 = np.int32
OFF = rewrite_config(disable_meta_optimizer=True)
RNG = np.random.default_rng(11)


def run_traced(
    graph: Any, fetches: list[str], feeds: dict[str, Any], cfg: config_pb2.ConfigProto | None = None
) -> tuple[list[np.ndarray], Counter[str], dict[str, Any]]:
    md = config_pb2.RunMetadata()
    got, ops, nodes = support.run_traced(graph, fetches, feeds, cfg, md)
    labels = [ns.timeline_label for d in md.step_stats.dev_stats for ns in d.node_stats]
    for n in nodes.values():  # what the partition graph shows is what ran, under the same names
        if n.op == "_FusedBatchMatMulV2":
            assert any(label.startswith(f"{n.name} = _FusedBatchMatMulV2(") for label in labels)
    return got, ops, nodes


def product(b: GraphBuilder, depth: int = 6, width: int = 4, **attrs: Any) -> tuple[str, str]:
    x = b.placeholder("x", F32, (None, 3, None))
    w = b.constant(RNG.standard_normal((depth, width)).astype(F32), name="w")
    bmm = b.op("BatchMatMulV2", [x, w], {"T": F32, "adj_x": False, "adj_y": False, **attrs}, name="bmm")
    return x, bmm


def feed(x: str, rows: int = 2, depth: int = 6) -> dict[str, np.ndarray]:
    return {x: (RNG.standard_normal((rows, 3, depth)) * 2).astype(F32)}


def bias_add(b: GraphBuilder, y: str) -> str:
    return b.bias_add(y, b.constant(RNG.standard_normal(4).astype(F32), name="bias"), name="add")


def add_v2(b: GraphBuilder, y: str) -> str:
    return b.op(
        "AddV2", [b.constant(RNG.standard_normal(4).astype(F32), name="bias"), y], {"T": F32}, name="add"
    )


def check_same(graph: Any, fetches: list[str], feeds: dict[str, Any]) -> tuple[Counter[str], dict[str, Any]]:
    got, ops, nodes = run_traced(graph, fetches, feeds)
    want, _, _ = run_traced(graph, fetches, feeds, OFF)
    for g, e in zip(got, want, strict=True):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    return ops, nodes


@pytest.mark.parametrize(
    ("add", "act", "fused_ops"),
    [
        (bias_add, None, ["BiasAdd"]),
        (add_v2, None, ["BiasAdd"]),
        (bias_add, lambda b, y: b.relu(y, name="act"), ["BiasAdd", "Relu"]),
        (add_v2, gelu_erf, ["BiasAdd", "GeluExact"]),
    ],
)
def test_product_bias_and_activation_become_one_node(add: Any, act: Any, fused_ops: list[str]) -> None:
    b = GraphBuilder()
    x, bmm = product(b)
    out = add(b, bmm)
    out = act(b, out) if act is not None else out
    for rows in (1, 5):  # the batch is only known at run time
        ops, nodes = check_same(b.graph_def, [out], feed(x, rows))
        fused = nodes[out.split(":")[0]]  # named as the last node it replaces
        assert fused.op == "_FusedBatchMatMulV2" and list(fused.input) == ["x", "w", "bias"]
        assert [s.decode() for s in fused.attr["fused_ops"].list.s] == fused_ops
        assert ops["BatchMatMulV2"] == ops["BiasAdd"] == ops["AddV2"] == ops["Erfc"] == 0


def test_bias_after_a_reshape_that_splits_the_channels() -> None:
    # EinsumDense's projection: the product's 4 channels reshaped to [2, 2] (heads, depth), a [2, 2] bias
    b = GraphBuilder()
    x, bmm = product(b)
    split = b.op("Reshape", [bmm, b.constant(np.array([-1, 3, 2, 2], I32))], {"T": F32}, name="split")
    bias = b.constant(RNG.standard_normal((2, 2)).astype(F32), name="bias")
    out = b.op("AddV2", [split, bias], {"T": F32}, name="add")
    ops, nodes = check_same(b.graph_def, [out], feed(x, 3))
    assert nodes["bmm"].op == "_FusedBatchMatMulV2" and list(nodes["bmm"].input)[:2] == ["x", "w"]
    assert nodes["add"].op == "Reshape" and nodes["add"].input[0] == "bmm"
    assert ops["AddV2"] == 0 and "split" not in nodes


def graph_kept(case: str) -> tuple[Any, list[str], dict[str, Any], config_pb2.ConfigProto | None]:
    b = GraphBuilder()
    x, bmm = product(b, adj_y=False)
    cfg = None
    fetches_extra: list[str] = []
    if case == "matrix bias":  # a [3, 4] addend is no per-channel bias
        out = b.op("AddV2", [bmm, b.constant(RNG.standard_normal((3, 4)).astype(F32))], {"T": F32})
    elif case == "fed filter":
        b = GraphBuilder()
        x = b.placeholder("x", F32, (None, 3, 6))
        w = b.placeholder("w", F32, (6, 4))
        bmm = b.op("BatchMatMulV2", [x, w], {"T": F32}, name="bmm")
        out = bias_add(b, bmm)
        return b.graph_def, [out], {**feed(x), w: RNG.standard_normal((6, 4)).astype(F32)}, None
    elif case == "split bias mismatch":  # channels reshaped to [2, 2], bias [1, 2] broadcasting
        split = b.op("Reshape", [bmm, b.constant(np.array([-1, 3, 2, 2], I32))], {"T": F32}, name="split")
        out = b.op("AddV2", [split, b.constant(RNG.standard_normal((1, 2)).astype(F32))], {"T": F32})
    else:
        out = bias_add(b, bmm)
        if case == "fetched":
            fetches_extra = [bmm]
        elif case == "remapping off":
            cfg = rewrite_config(remapping=config_pb2.RewriterConfig.OFF)
    return b.graph_def, [out, *fetches_extra], feed(x), cfg


@pytest.mark.parametrize(
    "case", ["matrix bias", "fed filter", "split bias mismatch", "fetched", "remapping off"]
)
def test_product_is_kept_when_it_must_be(case: str) -> None:
    graph, fetches, feeds, cfg = graph_kept(case)
    got, ops, _ = run_traced(graph, fetches, feeds, cfg)
    want, _, _ = run_traced(graph, fetches, feeds, OFF)
    for g, e in zip(got, want, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)
    assert ops["_FusedBatchMatMulV2"] == 0 and ops["BatchMatMulV2"] == 1


@pytest.mark.parametrize("build", [bias_add, add_v2])
def test_wrong_depth_is_refused_with_and_without_the_pass(build: Callable[[GraphBuilder, str], str]) -> None:
    b = GraphBuilder()
    x, bmm = product(b)
    out = build(b, bmm)
    for cfg in (None, OFF):
        with pytest.raises(InvalidArgumentError, match="Matrix size-incompatible"):
            run_traced(b.graph_def, [out], feed(x, 2, depth=5), cfg)
