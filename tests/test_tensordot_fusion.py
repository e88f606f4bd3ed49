"""The Tensordot pass of the graph optimizer (runtime/tensordot_fusion.py): Keras's Dense on a 3-D input, as
TensorFlow's Tensordot writes it, runs as one BatchMatMulV2 with the same results and errors."""

from __future__ import annotations

import numpy as np
import pytest
from support import rewrite_config, run_traced

from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError

F32 = np.float32
I32 = np.int32
SHAPE_OPS = ("Shape", "GatherV2", "Prod", "Pack", "ConcatV2", "Transpose", "MatMul", "Reshape")


def _i32(b: GraphBuilder, value: list[int] | int) -> str:
    return b.constant(np.array(value, I32))


def keras_tensordot(b: GraphBuilder, x: str, w: np.ndarray, perm: list[int] | None = None) -> str:
    """``tf.tensordot(x, w, [[2], [0]])`` on a rank-3 ``x`` as TensorFlow 2 writes it (Keras's Dense)."""
    shape = b.op("Shape", [x], {"T": F32, "out_type": I32}, name="td/Shape")

    def gather(indices: list[int], name: str) -> str:
        attrs = {"Tparams": I32, "Tindices": I32, "Taxis": I32, "batch_dims": 0}
        return b.op("GatherV2", [shape, _i32(b, indices), _i32(b, 0)], attrs, name=name)

    def prod(t: str, name: str) -> str:
        return b.op("Prod", [t, _i32(b, 0)], {"T": I32, "Tidx": I32, "keep_dims": False}, name=name)

    free = gather([0, 1], "td/GatherV2")
    axes = gather([2], "td/GatherV2_1")
    stack = b.op("Pack", [prod(free, "td/Prod"), prod(axes, "td/Prod_1")], {"T": I32, "N": 2, "axis": 0})
    t = b.op("Transpose", [x, _i32(b, perm or [0, 1, 2])], {"T": F32, "Tperm": I32}, name="td/transpose")
    rows = b.op("Reshape", [t, stack], {"T": F32, "Tshape": I32}, name="td/Reshape")
    mm = b.matmul(rows, b.constant(w, name="w"), name="td/MatMul")
    target = b.op(
        "ConcatV2",
        [free, _i32(b, [w.shape[1]]), _i32(b, 0)],
        {"T": I32, "N": 2, "Tidx": I32},
        name="td/concat",
    )
    return b.op("Reshape", [mm, target], {"T": F32, "Tshape": I32}, name="td/back")


def dense_graph(perm: list[int] | None = None) -> tuple[GraphBuilder, str, str, np.ndarray]:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((6, 5)).astype(F32)
    b = GraphBuilder()
    x = b.placeholder("x", F32, (None, None, 6))
    y = keras_tensordot(b, x, w, perm)
    out = b.bias_add(y, b.constant(rng.standard_normal(5).astype(F32)), name="out")
    return b, x, out, w


OFF = rewrite_config(disable_meta_optimizer=True)


def test_keras_tensordot_runs_as_one_batch_matmul() -> None:
    b, x, out, w = dense_graph()
    rng = np.random.default_rng(8)
    for rows in (2, 5):  # the batch is only known at run time
        feed = {x: rng.standard_normal((rows, 3, 6)).astype(F32)}
        (got,), ops, nodes = run_traced(b, [out], feed)
        (want,), ops_off, _ = run_traced(b, [out], feed, OFF)
        assert got.shape == want.shape == (rows, 3, 5)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        # the product (then with its bias: runtime/batch_matmul_fusion.py) takes the name of the last node
        # it replaces; the shape nodes leave the plan
        assert nodes["out"].op == "_FusedBatchMatMulV2" and list(nodes["out"].input)[:2] == ["x", "w"]
        assert all(ops[op] == 0 for op in SHAPE_OPS) and "td/back" not in nodes
        assert all(ops_off[op] >= 1 for op in SHAPE_OPS)


def test_tensordot_without_a_bias_stays_a_batch_matmul() -> None:
    rng = np.random.default_rng(10)
    w = rng.standard_normal((6, 5)).astype(F32)
    b = GraphBuilder()
    x = b.placeholder("x", F32, (None, None, 6))
    out = b.relu(keras_tensordot(b, x, w), name="out")
    feed = {x: rng.standard_normal((2, 3, 6)).astype(F32)}
    (got,), ops, nodes = run_traced(b, [out], feed)
    (want,), _, _ = run_traced(b, [out], feed, OFF)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert nodes["td/back"].op == "BatchMatMulV2" and list(nodes["td/back"].input) == ["x", "w"]
    assert all(ops[op] == 0 for op in SHAPE_OPS) and ops["_FusedBatchMatMulV2"] == 0


def test_wrong_depth_is_refused_with_and_without_the_pass() -> None:
    b, x, out, _ = dense_graph()
    feed = {x: np.ones((2, 4, 3), F32)}  # the last dimension is 3, the filter wants 6
    for cfg in (None, OFF):
        with pytest.raises(InvalidArgumentError):
            run_traced(b, [out], feed, cfg)


@pytest.mark.parametrize("case", ["fetched", "permuted", "remapping off"])
def test_tensordot_is_kept_when_it_must_be(case: str) -> None:
    b, x, out, _ = dense_graph(perm=[1, 0, 2] if case == "permuted" else None)
    fetches = [out, "td/MatMul:0"] if case == "fetched" else [out]
    cfg = rewrite_config(remapping=config_pb2.RewriterConfig.OFF) if case == "remapping off" else None
    feed = {x: np.random.default_rng(9).standard_normal((3, 3, 6)).astype(F32)}
    got, ops, nodes = run_traced(b, fetches, feed, cfg)
    want, _, _ = run_traced(b, fetches, feed, OFF)
    for g, e in zip(got, want, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)
    assert ops["BatchMatMulV2"] == 0 and nodes["td/back"].op == "Reshape"
