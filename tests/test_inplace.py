"""Buffer reuse of elementwise nodes (runtime/inplace.py): results unchanged, dying buffers reused, and
nothing the caller or another tensor can see is ever written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import load_fixture_io, rewrite_config

from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.callables import SerialProgram
from poolserve.runtime.errors import ResourceExhaustedError
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.inplace import _BINARY, _UNARY, REUSE_MIN_BYTES, _binary, _unary
from poolserve.runtime.session import Session

REALISTIC = Path(__file__).parent / "fixtures" / "models" / "realistic"
NO_REUSE = rewrite_config(memory_optimization=config_pb2.RewriterConfig.NO_MEM_OPT)
F32 = {"T": np.float32}
X = np.random.default_rng(0).standard_normal((128, 512)).astype(np.float32)  # 256 KiB


def chain() -> tuple[Graph, str, str]:
    """x -> Mul(x, 2) -> Relu -> AddV2(., 1): each node's input dies at it."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, X.shape)
    two = b.constant(np.float32(2.0), name="two")
    one = b.constant(np.float32(1.0), name="one")
    m = b.op("Mul", [x, two], F32, name="m")
    r = b.op("Relu", [m], F32, name="r")
    a = b.op("AddV2", [one, r], F32, name="a")
    return Graph(b.graph_def), x, a


def donations(session: Session) -> dict[str, tuple[int, ...]]:
    return {pn.name: pn.donate for plan in session._calls.plans.values() for pn in plan.nodes if pn.donate}


def test_plan_marks_dying_inputs_and_config_switches_it_off() -> None:
    graph, x, a = chain()
    with Session(graph) as s:
        out = s.run(a, {x: X})
        assert set(donations(s)) == {"r", "a"}  # Mul's input is a feed
    with Session(graph, NO_REUSE) as s:
        plain = s.run(a, {x: X})
        assert donations(s) == {}
    with Session(graph, rewrite_config(disable_meta_optimizer=True)) as s:
        s.run(a, {x: X})
        assert donations(s) == {}
    np.testing.assert_array_equal(out, plain)
    np.testing.assert_array_equal(out, np.maximum(X * 2, 0) + 1)


def test_reused_buffers_lower_the_step_peak() -> None:
    """Without reuse each node holds its input and output (2 tensors live); with it, one buffer does.
    A limit of 1.5 tensors tells them apart."""
    graph, x, a = chain()
    limit = int(1.5 * X.nbytes)
    with Session(graph, memory_limit_bytes=limit) as s:
        for _ in range(2):
            np.testing.assert_array_equal(s.run(a, {x: X}), np.maximum(X * 2, 0) + 1)
    with (
        Session(graph, NO_REUSE, memory_limit_bytes=limit) as s,
        pytest.raises(ResourceExhaustedError, match="node r"),
    ):
        s.run(a, {x: X})


def test_callable_serial_runner_reuses_too() -> None:
    graph, x, a = chain()
    limit = int(1.5 * X.nbytes)
    with Session(graph, memory_limit_bytes=limit) as s:
        call = s.make_callable(a, [x])
        np.testing.assert_array_equal(call(X), np.maximum(X * 2, 0) + 1)
        plan = next(iter(s._calls.plans.values()))
        assert any(donate for *_, donate in SerialProgram(plan).code)


def test_fed_and_fetched_tensors_are_never_written() -> None:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, X.shape)
    two = b.constant(np.float32(2.0), name="two")
    neg = b.op("Neg", [x], F32, name="neg")  # reads a feed
    m = b.op("Mul", [neg, two], F32, name="m")  # fetched, and read once
    r = b.op("Relu", [m], F32, name="r")
    fed = X.copy()
    with Session(Graph(b.graph_def)) as s:
        got_m, got_r, got_neg = s.run([m, r, neg], {x: fed})
        assert "r" not in donations(s) and "neg" not in donations(s)
    np.testing.assert_array_equal(fed, X)
    np.testing.assert_array_equal(got_m, -X * 2)
    np.testing.assert_array_equal(got_r, np.maximum(-X * 2, 0))
    assert not np.shares_memory(got_m, got_r)


@pytest.mark.parametrize("view", ["Reshape", "Identity", "StridedSlice", "Transpose"])
def test_views_of_live_tensors_are_never_overwritten(view: str) -> None:
    """``m`` is fetched; the elementwise node reads a view of it (or the same array under another name)."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, X.shape)
    two = b.constant(np.float32(2.0), name="two")
    m = b.op("Mul", [x, two], F32, name="m")
    if view == "Reshape":
        shape = b.constant(np.array([512, 128], np.int32), name="shape")
        v = b.op("Reshape", [m, shape], {"T": np.float32, "Tshape": np.int32}, name="v")
        want = np.maximum((X * 2).reshape(512, 128), 0)
    elif view == "Identity":
        v = b.op("Identity", [m], F32, name="v")
        want = np.maximum(X * 2, 0)
    elif view == "Transpose":
        perm = b.constant(np.array([1, 0], np.int32), name="perm")
        v = b.op("Transpose", [m, perm], {"T": np.float32, "Tperm": np.int32}, name="v")
        want = np.maximum((X * 2).T, 0)
    else:
        ints = {"T": np.float32, "Index": np.int32}
        begin = b.constant(np.array([0, 0], np.int32), name="begin")
        end = b.constant(np.array([128, 512], np.int32), name="end")
        step = b.constant(np.array([1, 1], np.int32), name="step")
        v = b.op("StridedSlice", [m, begin, end, step], ints, name="v")
        want = np.maximum(X * 2, 0)
    r = b.op("Relu", [v], F32, name="r")
    with Session(Graph(b.graph_def)) as s:
        for _ in range(2):
            got_m, got_r = s.run([m, r], {x: X})
            np.testing.assert_array_equal(got_m, X * 2)
            np.testing.assert_array_equal(got_r, want)
            assert not np.shares_memory(got_m, got_r)


@pytest.mark.parametrize("op", ["Relu", "Neg", "Tanh"])
def test_kernel_does_not_write_an_array_something_else_holds(op: str) -> None:
    fn, kinds = _UNARY[op]
    calls: list[str] = []

    def fallback(ctx: Any, inputs: list[Any]) -> tuple[Any, ...]:
        calls.append("ordinary")
        return (fn(inputs[0]),)

    compute = _unary(fn, kinds, fallback)
    held = X.copy()
    out = compute(None, [held])  # type: ignore[arg-type]
    assert out[0] is not held and calls == ["ordinary"]
    np.testing.assert_array_equal(held, X)
    view = X.copy()[:, :256]  # not its own data
    compute(None, [view])  # type: ignore[arg-type]
    assert calls == ["ordinary"] * 2
    base = X.copy()
    compute(None, [base.reshape(512, 128)])  # type: ignore[arg-type]
    assert calls == ["ordinary"] * 3  # a whole-buffer view, but its base is held here
    np.testing.assert_array_equal(base, X)
    result = compute(None, [X.copy()])  # type: ignore[arg-type]
    assert calls == ["ordinary"] * 3  # sole holder: written in place
    compute(None, [X.copy().reshape(512, 128)])  # type: ignore[arg-type]
    assert calls == ["ordinary"] * 3  # a view of a whole buffer only it holds (a reshaped product)
    np.testing.assert_allclose(result[0], fallback(None, [X])[0], rtol=1e-6)


def test_binary_kernel_only_writes_a_sole_operand_of_the_output_shape() -> None:
    fn = _BINARY["Sub"]
    calls: list[str] = []

    def fallback(ctx: Any, inputs: list[Any]) -> tuple[Any, ...]:
        calls.append("ordinary")
        return (fn(*inputs),)

    compute = _binary(fn, (0, 1), fallback)
    row = np.ones((1, 512), np.float32)
    out = compute(None, [np.ones((1, 512), np.float32), X.copy()])  # type: ignore[arg-type]
    assert calls == []  # the second operand, of the output's shape, took the result
    np.testing.assert_array_equal(out[0], 1 - X)
    out = compute(None, [row, X.astype(np.float64)])  # type: ignore[arg-type]
    assert calls == ["ordinary"] and out[0].dtype == np.float64  # mixed types: numpy's promotion
    held = X.copy()
    compute(None, [held, row])  # type: ignore[arg-type]
    assert calls == ["ordinary"] * 2
    np.testing.assert_array_equal(held, X)


def test_small_arrays_get_a_fresh_output() -> None:
    # below REUSE_MIN_BYTES the checks cost more than numpy's allocation: 200 elementwise nodes on [1, 256]
    # took 579 us with reuse against 458 without it
    calls: list[str] = []
    relu, kinds = _UNARY["Relu"]

    def ordinary(ctx: Any, inputs: list[Any]) -> tuple[Any, ...]:
        calls.append("ordinary")
        return (relu(inputs[0]),)

    unary = _unary(relu, kinds, ordinary)
    small = np.ones((1, REUSE_MIN_BYTES // 8), np.float32)  # half the size, and only the list holds it
    assert unary(None, [small.copy()])[0].shape == small.shape  # type: ignore[arg-type]
    assert calls == ["ordinary"]
    assert unary(None, [np.ones((2, REUSE_MIN_BYTES // 8), np.float32)]) and calls == ["ordinary"]  # type: ignore[arg-type]
    add = _BINARY["AddV2"]
    binary = _binary(add, (0,), lambda ctx, inputs: (calls.append("ordinary"), (add(*inputs),))[1])
    binary(None, [small.copy(), small])  # type: ignore[arg-type]
    assert calls == ["ordinary"] * 2


@pytest.mark.parametrize("name", ["mobilenet_v2", "residual_cnn", "bert_tiny", "mlp_gelu"])
def test_realistic_fixtures_give_the_same_outputs(name: str) -> None:
    spec = json.loads((REALISTIC / "models.json").read_text())[name]
    graph = Graph(load_graph_def(REALISTIC / f"{name}.pb"))
    feeds, expected = load_fixture_io(REALISTIC / f"{name}.npz")
    fetches = spec["outputs"]
    with Session(graph) as s:
        reused = [s.run(fetches, feeds) for _ in range(2)]
        marked = donations(s)
    with Session(graph, NO_REUSE) as s:
        plain = s.run(fetches, feeds)
    assert marked or name == "mlp_gelu", name
    for tensor, want, got_plain in zip(fetches, [expected[t] for t in fetches], plain, strict=True):
        for got in reused:
            i = fetches.index(tensor)
            np.testing.assert_array_equal(got[i], got_plain)
            scale = max(1.0, float(np.max(np.abs(want))))
            np.testing.assert_allclose(got[i], want, rtol=1e-4, atol=1e-5 * scale)
