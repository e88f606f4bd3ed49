"""v1 control flow (Switch, Merge, Enter, Exit, NextIteration, LoopCond) on TF1 graphs made by TensorFlow
(``tools/make_control_flow_fixtures.py``); step_stats of traced loops and functions; memory by live bytes."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support import gate_op, sleep_op, v1_while

from poolserve import RunMetadata, RunOptions, Session, load_graph_def
from poolserve.proto import config_pb2, graph_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    ResourceExhaustedError,
)
from poolserve.runtime.graph import Graph
from poolserve.runtime.metadata import step_peak_bytes

FIXTURES = Path(__file__).parent / "fixtures" / "control_flow"
V1 = ("v1_cond", "v1_while", "v1_nested", "v1_cond_in_while", "v1_loop_in_cond")
FULL_TRACE = config_pb2.RunOptions.FULL_TRACE


def cases(name: str) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    with np.load(FIXTURES / f"{name}.npz") as data:
        for key in data.files:
            case, kind, tensor = key.split("/", 2)
            ins, outs = out.setdefault(case, ({}, {}))
            (ins if kind == "in" else outs)[tensor] = data[key]
    return out


CASES = [(name, case) for name in V1 for case in sorted(cases(name))]


@pytest.mark.parametrize(("name", "case"), CASES)
def test_v1_graphs_match_tensorflow(name: str, case: str) -> None:
    graph_def = load_graph_def(FIXTURES / f"{name}.pb")
    ops = {n.op for n in graph_def.node}
    assert {"Switch", "Merge"} <= ops and not ops & {"If", "StatelessIf", "While", "StatelessWhile"}
    ins, outs = cases(name)[case]
    with Session(graph_def) as sess:
        got = sess.run(list(outs), ins)
    for (tensor, want), value in zip(outs.items(), got, strict=True):
        assert value.dtype == want.dtype, tensor
        if want.dtype.kind in "iub":
            np.testing.assert_array_equal(value, want, err_msg=f"{name}/{case} {tensor}")
        else:
            np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-5, err_msg=f"{name}/{case} {tensor}")


def test_v1_fixtures_cover_loops_and_branches() -> None:
    loops = cases("v1_while")
    assert [int(loops[c][1]["i:0"]) for c in ("zero", "one", "many")] == [0, 1, 300]
    assert {"Enter", "Exit", "NextIteration", "LoopCond"} <= {
        n.op for n in load_graph_def(FIXTURES / "v1_nested.pb").node
    }
    # Collatz steps: 1 -> 0, 6 -> 8, 27 -> 111
    collatz = cases("v1_cond_in_while")
    assert [int(collatz[c][1]["steps:0"]) for c in ("from1", "from6", "from27")] == [0, 8, 111]
    skip = cases("v1_loop_in_cond")["skip"]
    np.testing.assert_allclose(skip[1]["out:0"], skip[0]["x:0"] - 1.0)  # the loop's frame was dead


def test_parallel_iterations_one_runs_iterations_in_turn() -> None:
    graph_def = load_graph_def(FIXTURES / "v1_nested.pb")
    for nd in graph_def.node:
        if nd.op == "Enter":
            nd.attr["parallel_iterations"].i = 1
    ins, outs = cases("v1_nested")["five"]
    with Session(graph_def) as sess:
        np.testing.assert_allclose(sess.run("out:0", ins), outs["out:0"], rtol=1e-5)


def test_fetching_a_dead_tensor_fails() -> None:
    ins, _ = cases("v1_cond")["else"]
    with Session(load_graph_def(FIXTURES / "v1_cond.pb")) as sess:
        with pytest.raises(InvalidArgumentError, match=r"'cond/mul:0' is dead"):
            sess.run("cond/mul:0", ins)
        assert sess.run("cond/sub:0", ins).shape == (3, 4)


def test_pruning_keeps_a_loops_back_edges() -> None:
    with Session(load_graph_def(FIXTURES / "v1_while.pb")) as sess:
        # the counter alone: x's loop variable is pruned away, with its Enter, and x need not be fed
        assert sess.run("i:0", {"n:0": np.int32(7)}) == 7
        plan = next(iter(sess._calls.plans.values()))
        names = {pn.name for pn in plan.nodes}
        assert "while/NextIteration" in names and "while/Enter_1" not in names


def test_switch_needs_a_scalar_predicate() -> None:
    graph_def = load_graph_def(FIXTURES / "v1_cond.pb")
    for nd in graph_def.node:
        if nd.name == "cond/Relu/Switch":
            del nd.input[1:]
            nd.input.append("x")  # a matrix where a scalar bool belongs
    ins, _ = cases("v1_cond")["then"]
    pattern = r"(?s)second input must be a scalar.*cond/Relu/Switch"
    with Session(graph_def) as sess, pytest.raises(InvalidArgumentError, match=pattern):
        sess.run("out:0", ins)


def test_only_next_iteration_may_close_a_cycle() -> None:
    graph_def = load_graph_def(FIXTURES / "v1_while.pb")
    Graph(graph_def)  # the loop's back edges are fine
    for nd in graph_def.node:
        if nd.op == "NextIteration":
            nd.op = "Identity"
    with pytest.raises(InvalidArgumentError, match="Graph has a cycle"):
        Graph(graph_def)


@pytest.mark.parametrize("pool", [None, -1])
def test_deadline_stops_a_v1_loop_between_iterations(pool: int | None) -> None:
    x = np.ones((2, 4), np.float32)
    options = RunOptions(timeout_in_ms=150)
    if pool is not None:
        options.inter_op_thread_pool = pool
    with Session(load_graph_def(FIXTURES / "v1_while.pb")) as sess:
        start = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            sess.run("y:0", {"x:0": x, "n:0": np.int32(2**30)}, options=options)
        assert time.monotonic() - start < 3.0
        assert sess.steps_running == 0
        assert sess.run("i:0", {"x:0": x, "n:0": np.int32(3)}) == 3


def test_step_stats_list_each_iteration_of_a_v1_loop() -> None:
    ins, _ = cases("v1_while")["one"]
    ins = {**ins, "n:0": np.int32(4)}
    meta = RunMetadata()
    with Session(load_graph_def(FIXTURES / "v1_while.pb")) as sess:
        sess.run("y:0", ins, options=RunOptions(trace_level=FULL_TRACE), run_metadata=meta)
    names = [ns.node_name for ns in meta.step_stats.dev_stats[0].node_stats]
    assert names.count("while/Sin") == 4 and names.count("while/Merge_1") == 5
    assert names.count("while/Exit_1") == 1 and "y" in names


def test_step_stats_name_nodes_inside_functions() -> None:
    ins, _ = cases("nested")["five"]
    meta = RunMetadata()
    with Session(load_graph_def(FIXTURES / "nested.pb")) as sess:
        sess.run("Identity:0", ins, options=RunOptions(trace_level=FULL_TRACE), run_metadata=meta)
    stats = meta.step_stats.dev_stats[0].node_stats
    names = [ns.node_name for ns in stats]
    (loop,) = [n.name for n in load_graph_def(FIXTURES / "nested.pb").node if n.op == "StatelessWhile"]
    inner = [n for n in names if n.startswith(loop + "/")]
    # the body ran 5 times: its inner loop's Cos 0+1+2+3+4 times, named under both loops
    cos = [n for n in inner if n.endswith("/Cos")]
    assert len(cos) == 10 and all(n.count("/") >= 3 for n in cos)
    labels = {ns.node_name: ns.timeline_label for ns in stats}
    assert labels[cos[0]].startswith(loop + "/") and " = Cos(" in labels[cos[0]]


def relu_chain(length: int, mb: int = 2) -> tuple[graph_pb2.GraphDef, str]:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None,))
    t = x
    for i in range(length):
        t = b.op("Relu", [t], {"T": np.float32}, name=f"relu{i}")
    return b.graph_def, f"relu{length - 1}:0"


def test_memory_limit_counts_live_bytes() -> None:
    graph_def, out = relu_chain(6)
    x = np.ones(2 * 1024 * 1024 // 4, np.float32)  # 2 MB per tensor: at most two alive at once
    with Session(graph_def, memory_limit_bytes=5 * 1024 * 1024) as sess:
        meta = RunMetadata()
        result = sess.run(out, {"x:0": x}, options=RunOptions(trace_level=FULL_TRACE), run_metadata=meta)
        assert result.shape == x.shape
        assert step_peak_bytes(meta.step_stats) == 4 * 1024 * 1024
        sess.run(out, {"x:0": x})  # untraced, limited
    # each Relu could write into its dying input (tests/test_inplace.py): without that, two tensors are live
    no_reuse = config_pb2.ConfigProto()
    no_reuse.graph_options.rewrite_options.memory_optimization = config_pb2.RewriterConfig.NO_MEM_OPT
    with Session(graph_def, no_reuse, memory_limit_bytes=3 * 1024 * 1024) as sess:
        opts = RunOptions(report_tensor_allocations_upon_oom=True)
        with pytest.raises(ResourceExhaustedError, match=r"live tensors would take 4194304 bytes") as e:
            sess.run(out, {"x:0": x}, options=opts)
        assert e.value.node_name == "relu1"
        # the report lists what is alive: relu0, not the refused relu1
        assert "2.0MiB from relu0" in e.value.message and "from relu1" not in e.value.message


def test_peak_counts_a_loop_and_its_result() -> None:
    ins, _ = cases("v1_while")["many"]
    meta = RunMetadata()
    with Session(load_graph_def(FIXTURES / "v1_while.pb"), memory_limit_bytes=1 << 20) as sess:
        sess.run("y:0", ins, options=RunOptions(trace_level=FULL_TRACE), run_metadata=meta)
    # tensors made inside the loop are counted as they are made, then dropped with their iteration
    assert 32 <= step_peak_bytes(meta.step_stats) < 1024


def test_independent_expensive_nodes_in_a_loop_body_run_at_once() -> None:
    """As TensorFlow's executor runs a frame's ready nodes in parallel: both gates of an iteration are running
    before either is opened, on two threads."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    n = b.placeholder("n", np.int32, ())
    gates = []

    def body(i: str, xs: list[str], _: list[str]) -> list[str]:
        left, g1 = gate_op(b, xs[0], "loop_gate_a")
        right, g2 = gate_op(b, xs[0], "loop_gate_b")
        gates.extend([g1, g2])
        return [b.add(left, right, name="join")]

    (y,) = v1_while(b, n, [(x, np.float32)], [], body)
    result: list[Any] = []
    meta = RunMetadata()
    with Session(b.graph_def) as sess:
        run = threading.Thread(
            target=lambda: result.append(
                sess.run(
                    y,
                    {"x:0": np.float32(1.5), "n:0": np.int32(3)},
                    options=RunOptions(trace_level=FULL_TRACE),
                    run_metadata=meta,
                )
            )
        )
        run.start()
        try:
            assert gates[0].started.wait(5) and gates[1].started.wait(5)
            assert not result
        finally:
            for g in gates:
                g.open()
            run.join(10)
    assert result == [1.5 * 2**3]
    names = [ns.node_name for ns in meta.step_stats.dev_stats[0].node_stats]
    assert names.count("loop_gate_a") == 3 and names.count("loop_gate_b") == 3


def test_a_loop_on_the_callers_thread_runs_its_nodes_in_turn() -> None:
    """``inter_op_thread_pool = -1``: one thread runs the whole loop, as before."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())

    def body(i: str, xs: list[str], _: list[str]) -> list[str]:
        left = sleep_op(b, xs[0], 0.0, "turn_a")
        right = sleep_op(b, xs[0], 0.0, "turn_b")
        return [b.add(left, right)]

    (y,) = v1_while(b, b.constant(np.int32(4)), [(x, np.float32)], [], body)
    meta = RunMetadata()
    options = RunOptions(trace_level=FULL_TRACE, inter_op_thread_pool=-1)
    with Session(b.graph_def) as sess:
        assert sess.run(y, {"x:0": np.float32(1.0)}, options=options, run_metadata=meta) == 16.0
    stats = meta.step_stats.dev_stats[0].node_stats
    assert len({ns.thread_id for ns in stats}) == 1
