"""Functional control flow (If, While, calls inside their bodies) on graphs and a SavedModel made by
TensorFlow (``tools/make_control_flow_fixtures.py``): TF's outputs, loops stopped by deadlines, errors."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poolserve import RunMetadata, RunOptions, Session, load_graph_def, load_saved_model
from poolserve.proto import attr_value_pb2, function_pb2, graph_pb2, node_def_pb2, op_def_pb2, types_pb2
from poolserve.runtime.errors import CancelledError, DeadlineExceededError, InvalidArgumentError
from poolserve.runtime.functions import inline_functions
from poolserve.runtime.graph import Graph
from poolserve.runtime.kernels.functional_ops import truthy
from poolserve.runtime.tensor import from_ndarray
from poolserve.runtime.timeline import parse_label

FIXTURES = Path(__file__).parent / "fixtures" / "control_flow"
F, I32 = types_pb2.DT_FLOAT, types_pb2.DT_INT32


def cases(name: str) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """case -> (inputs, outputs) TensorFlow computed, by tensor name (signature key for SavedModels)."""
    out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    with np.load(FIXTURES / f"{name}.npz") as data:
        for key in data.files:
            case, kind, tensor = key.split("/", 2)
            ins, outs = out.setdefault(case, ({}, {}))
            (ins if kind == "in" else outs)[tensor] = data[key]
    return out


GRAPH_CASES = [(name, case) for name in ("cond", "while", "nested") for case in sorted(cases(name))]


@pytest.mark.parametrize(("name", "case"), GRAPH_CASES)
def test_graphs_match_tensorflow(name: str, case: str) -> None:
    graph_def = load_graph_def(FIXTURES / f"{name}.pb")
    assert {"StatelessIf", "StatelessWhile"} & {n.op for n in graph_def.node}
    ins, outs = cases(name)[case]
    with Session(graph_def) as sess:
        got = sess.run(list(outs), ins)
    for (tensor, want), value in zip(outs.items(), got, strict=True):
        assert value.dtype == want.dtype, tensor
        np.testing.assert_allclose(value, want, atol=1e-4, err_msg=f"{name}/{case} {tensor}")


@pytest.mark.parametrize("name", ["cond", "while", "nested"])
def test_partition_graphs_carry_the_function_library(name: str) -> None:
    """TensorFlow's partition graphs hold the graph's function library (Graph::ToGraphDef), so an If or
    While in them names functions the graph has; ours had none, and ran again they failed."""
    ins, outs = next(iter(cases(name).values()))
    md = RunMetadata()
    with Session(load_graph_def(FIXTURES / f"{name}.pb")) as sess:
        want = sess.run(list(outs), ins, options=RunOptions(output_partition_graphs=True), run_metadata=md)
    (partition,) = md.partition_graphs
    assert partition.library.function
    with Session(partition) as again:
        got = again.run(list(outs), ins)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_function_bodys_labels_name_its_inputs_as_step_stats_name_them() -> None:
    """A node run in a While's body is named under its caller in step_stats
    ("while/while_body_36/while/add_1"); the inputs in its label are now too, so that a timeline joins it
    to the body nodes it reads (its label read "AddV2(while_body_36/while/mul, ...)", a name no node had)."""
    ins, outs = cases("while")["many"]
    md = RunMetadata()
    with Session(load_graph_def(FIXTURES / "while.pb")) as sess:
        sess.run(list(outs), ins, options=RunOptions(trace_level=RunOptions.FULL_TRACE), run_metadata=md)
    nodes = [ns for d in md.step_stats.dev_stats for ns in d.node_stats]
    names = {ns.node_name for ns in nodes}
    (label,) = {ns.timeline_label for ns in nodes if ns.node_name.endswith("/while/add_1")}
    _, op, inputs = parse_label(label)
    assert op == "AddV2" and len(inputs) == 2 and all(i in names for i in inputs), label


def test_fixtures_cover_both_branches_and_loop_counts() -> None:
    cond = cases("cond")
    # the else branch is tanh(x) - 1 < 0 everywhere; the then branch 2 * relu(x) >= 0
    assert (cond["then"][1]["Identity:0"] >= 0).all() and (cond["else"][1]["Identity:0"] < 0).all()
    loops = cases("while")
    assert [int(loops[c][1]["Identity:0"]) for c in ("zero", "one", "many")] == [0, 1, 300]
    np.testing.assert_array_equal(loops["zero"][1]["Identity_1:0"], loops["zero"][0]["x:0"])


def test_saved_model_with_if_and_while_reading_variables() -> None:
    model = load_saved_model(FIXTURES / "loop_model")
    ops = {n.op for n in model.session.graph.nodes.values()}
    assert {"If", "While"} <= ops and "StatefulPartitionedCall" not in ops
    for case, (ins, outs) in cases("loop_model").items():
        got = model.run(ins)
        for key, want in outs.items():
            np.testing.assert_allclose(got[key], want, atol=1e-4, err_msg=f"{case} {key}")
    model.close()


@pytest.mark.parametrize("pool", [None, -1])
@pytest.mark.parametrize("name", ["while", "nested"])
def test_deadline_stops_a_loop_between_iterations(name: str, pool: int | None) -> None:
    graph_def = load_graph_def(FIXTURES / f"{name}.pb")
    x = np.ones((2, 4) if name == "while" else (3,), np.float32)
    options = RunOptions(timeout_in_ms=150)
    if pool is not None:
        options.inter_op_thread_pool = pool
    with Session(graph_def) as sess:
        fetch = "Identity_1:0" if name == "while" else "Identity:0"
        start = time.monotonic()
        with pytest.raises(DeadlineExceededError, match="150 ms"):
            sess.run(fetch, {"x:0": x, "n:0": np.int32(2**30)}, options=options)
        assert time.monotonic() - start < 3.0
        # the loop itself stopped: nothing of the step runs on
        assert sess.steps_running == 0
        # and the session still runs loops to completion
        assert sess.run(fetch, {"x:0": x, "n:0": np.int32(2)}).shape == x.shape


def test_deadline_stops_a_loop_in_arun() -> None:
    async def run(sess: Session) -> None:
        feeds = {"x:0": np.ones((1, 4), np.float32), "n:0": np.int32(2**30)}
        await sess.arun("Identity_1:0", feeds, options=RunOptions(timeout_in_ms=100))

    with Session(load_graph_def(FIXTURES / "while.pb")) as sess:
        with pytest.raises(DeadlineExceededError):
            asyncio.run(run(sess))
        deadline = time.monotonic() + 2.0
        while sess.steps_running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sess.steps_running == 0


@pytest.mark.parametrize(
    ("fixture", "fetch"), [("while.pb", "Identity_1:0"), ("v1_while.pb", "y:0")], ids=["While", "v1 loop"]
)
def test_closing_the_session_stops_a_loop(fixture: str, fetch: str) -> None:
    sess = Session(load_graph_def(FIXTURES / fixture))
    errors: list[BaseException] = []

    def run() -> None:
        try:
            sess.run(fetch, {"x:0": np.ones((1, 4), np.float32), "n:0": np.int32(2**30)})
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 5.0
    while not sess.steps_running and time.monotonic() < deadline:
        time.sleep(0.005)
    sess.close()
    thread.join(5.0)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], CancelledError)


def test_missing_function_names_the_node() -> None:
    graph_def = load_graph_def(FIXTURES / "cond.pb")
    (if_node,) = [n for n in graph_def.node if n.op == "StatelessIf"]
    if_node.attr["else_branch"].func.name = "no_such_branch"
    with pytest.raises(
        InvalidArgumentError,
        match=r"Node 'cond' \(op 'StatelessIf'\): attr 'else_branch' names function 'no_such_branch', which "
        "the graph's function library lacks",
    ):
        Graph(graph_def)


# --- hand-made graphs ----------------------------------------------------------------------------------


def _node(name: str, op: str, inputs: list[str], **attrs: attr_value_pb2.AttrValue) -> node_def_pb2.NodeDef:
    nd = node_def_pb2.NodeDef(name=name, op=op, input=inputs)
    for k, v in attrs.items():
        nd.attr[k].CopyFrom(v)
    return nd


def _types(*dtypes: int) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(type=list(dtypes)))


def _func(name: str) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(func=attr_value_pb2.NameAttrList(name=name))


def _function(name: str, ins: list[str], ret: dict[str, str], nodes: list[node_def_pb2.NodeDef]) -> Any:
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = name
    fdef.signature.input_arg.extend(op_def_pb2.OpDef.ArgDef(name=a, type=F) for a in ins)
    fdef.signature.output_arg.extend(op_def_pb2.OpDef.ArgDef(name=o, type=F) for o in ret)
    fdef.node_def.extend(nodes)
    fdef.ret.update(ret)
    return fdef


def _if_graph(cond_dtype: int) -> graph_pb2.GraphDef:
    g = graph_pb2.GraphDef()
    t = attr_value_pb2.AttrValue(type=F)
    g.node.extend(
        [
            _node("c", "Placeholder", [], dtype=attr_value_pb2.AttrValue(type=cond_dtype)),
            _node("x", "Placeholder", [], dtype=t),
            _node(
                "if",
                "If",
                ["c", "x"],
                Tin=_types(F),
                Tout=_types(F),
                then_branch=_func("neg"),
                else_branch=_func("call_twice"),
            ),
        ]
    )
    g.library.function.extend(
        [
            _function("neg", ["a"], {"out": "n:y:0"}, [_node("n", "Neg", ["a"], T=t)]),
            # a call inside a branch body: inlined when the branch is compiled
            _function(
                "call_twice",
                ["b"],
                {"out": "c:output:0"},
                [
                    _node(
                        "c", "StatefulPartitionedCall", ["b"], f=_func("twice"), Tin=_types(F), Tout=_types(F)
                    )
                ],
            ),
            _function("twice", ["v"], {"out": "m:z:0"}, [_node("m", "AddV2", ["v", "v"], T=t)]),
        ]
    )
    return g


@pytest.mark.parametrize(
    ("cond_dtype", "cond", "branch"),
    [
        (types_pb2.DT_BOOL, True, "then"),
        (I32, 0, "else"),
        (I32, -3, "then"),
        (types_pb2.DT_STRING, b"", "else"),
        (types_pb2.DT_STRING, b"yes", "then"),
        (F, np.zeros((0,), np.float32), "else"),
        (F, np.zeros((2,), np.float32), "then"),  # a non-scalar is true when it has elements
    ],
)
def test_if_condition_follows_tensorflow_truthiness(cond_dtype: int, cond: Any, branch: str) -> None:
    x = np.float32([1.5, -2.0])
    with Session(_if_graph(cond_dtype)) as sess:
        value = np.empty((), object) if isinstance(cond, bytes) else cond
        if isinstance(cond, bytes):
            value[()] = cond
        got = sess.run("if:0", {"c:0": value, "x:0": x})
    np.testing.assert_array_equal(got, -x if branch == "then" else 2 * x)


def test_truthy() -> None:
    assert truthy(np.bool_(True)) and not truthy(np.float32(0.0)) and truthy(np.int64(7))
    assert truthy(np.array(b"s", object)) and not truthy(np.array(b"", object))
    assert truthy(np.zeros((1, 1))) and not truthy(np.ones((0, 3)))


def test_a_call_left_in_the_graph_runs_as_inlined() -> None:
    """StatefulPartitionedCall with a control input, in a graph loaded without inlining."""
    graph_def = graph_pb2.GraphDef()
    t = attr_value_pb2.AttrValue(type=F)
    two = from_ndarray(np.float32(2.0))
    graph_def.node.extend(
        [
            _node("x", "Placeholder", [], dtype=t),
            _node("gate", "NoOp", []),
            _node(
                "call",
                "StatefulPartitionedCall",
                ["x", "^gate"],
                f=_func("f"),
                Tin=_types(F),
                Tout=_types(F, F),
            ),
        ]
    )
    graph_def.library.function.append(
        _function(
            "f",
            ["a"],
            {"p": "m:z:0", "q": "a"},
            [
                _node("two", "Const", [], dtype=t, value=attr_value_pb2.AttrValue(tensor=two)),
                _node("m", "Mul", ["a", "two:output:0"], T=t),
            ],
        )
    )
    x = np.float32([1.0, 3.0])
    with Session(graph_def) as sess:
        direct = sess.run(["call:0", "call:1"], {"x:0": x})
    with Session(inline_functions(graph_def)) as sess:
        inlined = sess.run(["call:0", "call:1"], {"x:0": x})
    for a, b in zip(direct, inlined, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(direct[0], 2 * x)


def test_a_failure_inside_a_branch_names_the_inner_node_then_the_caller() -> None:
    graph_def = _if_graph(types_pb2.DT_BOOL)
    neg = graph_def.library.function[0]
    neg.node_def.append(_node("chk", "CheckNumerics", ["n:y:0"], T=attr_value_pb2.AttrValue(type=F)))
    neg.ret["out"] = "chk:output:0"
    with Session(graph_def) as sess:
        np.testing.assert_array_equal(sess.run("if:0", {"c:0": True, "x:0": np.float32([1.0])}), [-1.0])
        with pytest.raises(InvalidArgumentError) as info:
            sess.run("if:0", {"c:0": True, "x:0": np.float32([np.nan])})
    assert info.value.node_name == "neg/chk"
    assert info.value.message.endswith("[[{{node neg/chk}}]]\n\t [[{{node if}}]]")


def test_a_function_calling_itself_is_an_error_not_a_hang() -> None:
    graph_def = _if_graph(types_pb2.DT_BOOL)
    t = attr_value_pb2.AttrValue(type=F)
    graph_def.library.function[0].node_def.append(
        _node(
            "again",
            "If",
            ["a", "a"],
            Tin=_types(F),
            Tout=_types(F),
            then_branch=_func("neg"),
            else_branch=_func("neg"),
            Tcond=t,
        )
    )
    with pytest.raises(InvalidArgumentError, match="function 'neg' calls itself"):
        Graph(graph_def)


def test_extend_keeps_the_function_library() -> None:
    with Session(load_graph_def(FIXTURES / "cond.pb")) as sess:
        library = sess.graph.library
        extra = graph_pb2.GraphDef()
        extra.node.append(
            _node("double", "AddV2", ["Identity", "Identity"], T=attr_value_pb2.AttrValue(type=F))
        )
        sess.extend(extra)
        assert sess.graph.library is library  # compiled branches are reused
        x = np.ones((1, 4), np.float32)
        np.testing.assert_allclose(sess.run("double:0", {"x:0": x, "t:0": np.float32(0.0)}), 4 * x)
