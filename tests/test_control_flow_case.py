"""``tf.switch_case``: the functional ``Case``/``StatelessCase`` (runtime/kernels/functional_ops.py) and the v1
``_SwitchN`` it is lowered to (runtime/kernels/control_flow_ops.py, routed by runtime/frames.py), on graphs
and a SavedModel made by TensorFlow (``tools/make_case_fixtures.py``): TensorFlow's outputs for every branch
and for indices out of range (the last branch), dead branches, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poolserve import Session, load_graph_def, load_saved_model
from poolserve.proto import graph_pb2
from poolserve.runtime.errors import InvalidArgumentError

FIXTURES = Path(__file__).parent / "fixtures" / "control_flow"
INDEX_CASES = ["b0", "b1", "b2", "negative", "past_end", "far"]


def cases(name: str) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """case -> (inputs, outputs) TensorFlow computed, by tensor name (signature key for SavedModels)."""
    out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    with np.load(FIXTURES / f"{name}.npz") as data:
        for key in data.files:
            case, kind, tensor = key.split("/", 2)
            ins, outs = out.setdefault(case, ({}, {}))
            (ins if kind == "in" else outs)[tensor] = data[key]
    return out


def ops(graph_def: graph_pb2.GraphDef) -> set[str]:
    return {n.op for n in graph_def.node}


def assert_outputs(got: list[Any], want: dict[str, Any], label: str) -> None:
    for (tensor, w), value in zip(want.items(), got, strict=True):
        assert value.dtype == w.dtype and value.shape == w.shape, f"{label} {tensor}"
        np.testing.assert_allclose(value, w, rtol=1e-6, atol=1e-6, err_msg=f"{label} {tensor}")


@pytest.mark.parametrize("name", ["case", "case_lowered"])
@pytest.mark.parametrize("case", INDEX_CASES)
def test_switch_case_matches_tensorflow(name: str, case: str) -> None:
    # "case": StatelessCase running branch functions; "case_lowered": _SwitchN into each branch, Merge out
    graph_def = load_graph_def(FIXTURES / f"{name}.pb")
    if name == "case":
        assert "StatelessCase" in ops(graph_def) and "_SwitchN" not in ops(graph_def)
    else:
        assert {"_SwitchN", "Merge"} <= ops(graph_def) and "StatelessCase" not in ops(graph_def)
    ins, outs = cases(name)[case]
    with Session(graph_def) as sess:
        got = sess.run(list(outs), ins)
    assert_outputs(got, outs, f"{name}/{case}")


def test_out_of_range_indices_run_the_last_branch() -> None:
    # what TensorFlow's fixture shows and both forms reproduce: -1, 3 and 1000 all run branch 2 (sin(x))
    all_cases = cases("case")
    last = all_cases["b2"][1]
    for case in ("negative", "past_end", "far"):
        for tensor, want in all_cases[case][1].items():
            np.testing.assert_array_equal(want, last[tensor])
    x = all_cases["b2"][0]["x:0"]
    np.testing.assert_allclose(last["Identity:0"], np.sin(x), rtol=1e-6)


@pytest.mark.parametrize("case", ["zero", "one", "seven"])
def test_lowered_switch_case_inside_a_loop_matches_tensorflow(case: str) -> None:
    # _SwitchN in a while loop's frame: each iteration takes the branch of its counter mod 3
    graph_def = load_graph_def(FIXTURES / "case_in_loop.pb")
    assert {"_SwitchN", "Enter", "NextIteration", "Exit"} <= ops(graph_def)
    ins, outs = cases("case_in_loop")[case]
    with Session(graph_def) as sess:
        got = sess.run(list(outs), ins)
    assert_outputs(got, outs, case)


def test_case_saved_model_with_branches_reading_variables() -> None:
    model = load_saved_model(FIXTURES / "case_model")
    assert "Case" in {n.op for n in model.session.graph.nodes.values()}
    for case, (ins, outs) in cases("case_model").items():
        got = model.run(ins)
        assert_outputs([got["y"]], outs, case)
    model.close()


def test_lowered_branches_not_taken_are_dead() -> None:
    graph_def = load_graph_def(FIXTURES / "case_lowered.pb")
    ins = cases("case_lowered")["b1"][0]
    taken = "Func/switch_case/indexed_case/branch1/_1/output/_18:0"
    not_taken = "Func/switch_case/indexed_case/branch0/_0/output/_13:0"
    with Session(graph_def) as sess:
        x = ins["x:0"]
        np.testing.assert_allclose(sess.run(taken, ins), x * x, rtol=1e-6)
        with pytest.raises(InvalidArgumentError, match="is dead"):
            sess.run(not_taken, ins)


def unshaped(name: str) -> graph_pb2.GraphDef:
    """The fixture graph with the branch index's Placeholder of unknown shape, so a non-scalar can be fed."""
    graph_def = load_graph_def(FIXTURES / f"{name}.pb")
    for node in graph_def.node:
        if node.name == "branch":
            node.attr["shape"].shape.unknown_rank = True
            del node.attr["shape"].shape.dim[:]
    return graph_def


@pytest.mark.parametrize(
    ("name", "message"),
    [
        # TensorFlow 2.21's messages: the Case kernel's, and the _SwitchN kernel's (Switch's wording)
        ("case", "branch_index must be scalar"),
        ("case_lowered", r"The second input must be a scalar, but it has shape \[1,1\]"),
    ],
)
def test_a_branch_index_that_is_not_a_scalar_fails(name: str, message: str) -> None:
    ins = dict(cases(name)["b0"][0])
    ins["branch:0"] = np.array([[1]], np.int32)
    with Session(unshaped(name)) as sess, pytest.raises(InvalidArgumentError, match=message):
        sess.run("Identity:0", ins)


def test_case_without_branches_is_refused_when_loaded() -> None:
    graph_def = load_graph_def(FIXTURES / "case.pb")
    node = next(n for n in graph_def.node if n.op == "StatelessCase")
    del node.attr["branches"].list.func[:]
    with (
        pytest.raises(InvalidArgumentError, match="attr 'branches' must list at least one function"),
        Session(graph_def) as sess,
    ):
        sess.run("Identity:0", cases("case")["b0"][0])
