"""Optional ops (runtime/kernels/optional_ops.py): a TF1 model built with control flow v2, whose If branches
return optionals, and a ``tf.experimental.Optional`` graph, against TensorFlow's outputs
(``tools/make_optional_fixtures.py``); TensorFlow's errors for what an optional does not hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poolserve import Session, load_graph_def, load_saved_model
from poolserve.proto import attr_value_pb2, types_pb2
from poolserve.runtime.builder import GraphBuilder, shape
from poolserve.runtime.errors import InvalidArgumentError

FIXTURES = Path(__file__).parent / "fixtures" / "control_flow"
F32 = np.float32


def cases(name: str) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """case -> (inputs, outputs) TensorFlow computed, by tensor name (signature key for SavedModels)."""
    out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    with np.load(FIXTURES / f"{name}.npz") as data:
        for key in data.files:
            case, kind, tensor = key.split("/", 2)
            ins, outs = out.setdefault(case, ({}, {}))
            (ins if kind == "in" else outs)[tensor] = data[key]
    return out


def library_ops(graph_def: Any) -> set[str]:
    return {n.op for f in graph_def.library.function for n in f.node_def}


def assert_matches(got: Any, want: Any, name: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, name
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.max(np.abs(want))), err_msg=name)


@pytest.mark.parametrize("case", ["inference", "training"])
def test_tf1_batch_norm_under_control_flow_v2_saved_model(case: str) -> None:
    # the If's branches return the batch norm's intermediates as optionals; training runs the batch norm
    # in training mode (batch statistics), inference with the moving ones, so the outputs differ
    model = load_saved_model(FIXTURES / "tf1_bn_cfv2")
    ins, outs = cases("tf1_bn_cfv2")[case]
    got = model.run(ins)
    assert_matches(got["out"], outs["out"], case)
    model.close()


@pytest.mark.parametrize("case", ["inference", "training"])
def test_tf1_batch_norm_under_control_flow_v2_frozen(case: str) -> None:
    graph_def = load_graph_def(FIXTURES / "tf1_bn_cfv2.pb")
    assert "If" in {n.op for n in graph_def.node} and "OptionalFromValue" in library_ops(graph_def)
    ins, outs = cases("tf1_bn_cfv2_frozen")[case]  # inference: is_training left to its default
    with Session(graph_def) as sess:
        (got,) = sess.run(list(outs), ins)
    assert_matches(got, outs["out:0"], case)
    training, inference = (cases("tf1_bn_cfv2_frozen")[c][1]["out:0"] for c in ("training", "inference"))
    assert np.abs(training - inference).max() > 0.1


@pytest.mark.parametrize("case", ["value", "none"])
def test_optional_from_a_cond_matches_tensorflow(case: str) -> None:
    # a tf.cond returns Optional.from_value or Optional.empty; has_value picks how the value is read
    graph_def = load_graph_def(FIXTURES / "optional.pb")
    ops = {n.op for n in graph_def.node} | library_ops(graph_def)
    assert {"OptionalFromValue", "OptionalNone", "OptionalHasValue", "OptionalGetValue"} <= ops
    ins, outs = cases("optional")[case]
    with Session(graph_def) as sess:
        got = sess.run(list(outs), ins)
    for (name, want), value in zip(outs.items(), got, strict=True):
        assert value.dtype == want.dtype and value.shape == want.shape, name
        np.testing.assert_allclose(value, want, rtol=1e-6, err_msg=name)


def optional_graph(empty: bool, types: list[Any], shapes: list[Any]) -> tuple[GraphBuilder, list[str], str]:
    """x (float32 [3]) and n (int32 scalar) wrapped in an optional (or an empty one), passed through an
    Identity, then read back with these output types and shapes."""
    b = GraphBuilder()
    x = b.placeholder("x", F32, [3])
    n = b.constant(np.int32(7), name="n")
    if empty:
        opt = b.op("OptionalNone", [], {}, name="opt")
    else:
        opt = b.op("OptionalFromValue", [x, n], {"Toutput_types": [F32, np.int32]}, name="opt")
    opt = b.op("Identity", [opt], {"T": attr_value_pb2.AttrValue(type=types_pb2.DT_VARIANT)}, name="through")
    has = b.op("OptionalHasValue", [opt], {}, name="has")
    attrs = {"output_types": types, "output_shapes": [shape(s) for s in shapes]}
    values = b.op("OptionalGetValue", [opt], attrs, name="get", num_outputs=len(types))
    return b, values if isinstance(values, list) else [values], has


X = np.array([1.0, -2.0, 3.5], F32)


@pytest.mark.parametrize("x_shape", [[3], [None], None], ids=["known", "unknown_dim", "unknown_rank"])
def test_optional_get_value_returns_the_components(x_shape: Any) -> None:
    b, values, has = optional_graph(False, [F32, np.int32], [x_shape, []])
    with Session(b.graph_def) as sess:
        got_has, got_x, got_n = sess.run([has, *values], {"x:0": X})
    assert got_has.dtype == np.bool_ and bool(got_has)
    np.testing.assert_array_equal(got_x, X)
    assert got_n.dtype == np.int32 and int(got_n) == 7


def test_optional_none_has_no_value() -> None:
    b, values, has = optional_graph(True, [F32, np.int32], [[3], []])
    with Session(b.graph_def) as sess:
        assert not bool(sess.run(has, {"x:0": X}))
        with pytest.raises(InvalidArgumentError, match=r"The given optional does not have a value\."):
            sess.run(values[0], {"x:0": X})


@pytest.mark.parametrize(
    ("types", "shapes", "message"),
    [
        ([F32], [[3]], "The given optional has 2 components, expected 1"),
        (
            [np.int32, np.int32],
            [[3], []],
            r"does not match the expected type for component 0\. Expected: int32\. Actual: float\.",
        ),
        (
            [F32, np.int32],
            [[2], []],
            r"does not match the expected shape for component 0\. Expected: \[2\]\. Actual: \[3\]\.",
        ),
        (
            [F32, np.int32],
            [[None, 3], []],
            r"component 0\. Expected: \[\?,3\]\. Actual: \[3\]\.",
        ),
    ],
)
def test_optional_get_value_checks_types_and_shapes_as_tensorflow(types, shapes, message) -> None:
    # TensorFlow 2.21's messages, read from tf.raw_ops.OptionalGetValue
    b, values, _ = optional_graph(False, types, shapes)
    with Session(b.graph_def) as sess, pytest.raises(InvalidArgumentError, match=message):
        sess.run(values[0], {"x:0": X})
