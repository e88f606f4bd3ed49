"""runtime/signature.py: a graph's default inputs and outputs, aliases replacing them, and the lookup of the
names a caller may use (public name, alias, graph tensor) with errors that list the valid names."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support import add_graph

from poolserve.proto import types_pb2
from poolserve.runtime.builder import GraphBuilder, shape
from poolserve.runtime.errors import InvalidArgumentError, NotFoundError
from poolserve.runtime.graph import Graph
from poolserve.runtime.signature import Signature, TensorSpec, default_inputs, default_outputs, tensor_spec


def io_graph() -> Any:
    """Placeholders out of alphabetical order (one of unknown rank, one with a default); terminal nodes of one
    and two outputs; a NoOp, an unused Const and an unused Placeholder that must not become outputs."""
    b = GraphBuilder()
    z = b.placeholder("z", np.float32, [None, 4, None])
    a = b.placeholder("a", np.int64, None)
    b.op(
        "PlaceholderWithDefault",
        [b.constant(np.zeros(2, np.float32), name="d0")],
        {"dtype": np.float32, "shape": shape([2])},
        name="pwd",
    )
    b.op("Unique", [a], {"T": np.int64, "out_idx": np.int64}, name="uniq", num_outputs=2)
    b.op("Relu", [z], {"T": np.float32, "_output_shapes": [shape([None, 4, None])]}, name="relu")
    b.constant(1.0, name="unused")
    b.placeholder("spare", np.bool_, [])
    b.no_op("init")
    return b.graph_def


def test_default_inputs_are_the_placeholders_in_graph_def_order() -> None:
    graph = Graph(io_graph())
    assert default_inputs(graph) == [
        TensorSpec("z", "z:0", types_pb2.DT_FLOAT, (-1, 4, -1)),
        TensorSpec("a", "a:0", types_pb2.DT_INT64, None),  # unknown rank
        TensorSpec("pwd", "pwd:0", types_pb2.DT_FLOAT, (2,)),
        TensorSpec("spare", "spare:0", types_pb2.DT_BOOL, ()),  # a scalar: rank 0, not unknown
    ]


def test_default_outputs_are_every_port_of_the_terminal_nodes() -> None:
    graph = Graph(io_graph())
    outputs = default_outputs(graph)
    assert [(s.name, s.tensor) for s in outputs] == [
        ("uniq", "uniq:0"),
        ("uniq:1", "uniq:1"),
        ("relu", "relu:0"),
    ]
    assert outputs[0].dtype == types_pb2.DT_INT64 and outputs[0].shape is None
    assert outputs[2].dtype == types_pb2.DT_FLOAT and outputs[2].shape == (-1, 4, -1)  # from _output_shapes


def test_nodes_with_consumers_are_not_outputs() -> None:
    """A node consumed by another, by data or by a control edge, is not terminal."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [3])
    r = b.relu(x, name="r")
    b.identity(r, name="last")
    b.op("Neg", [x], {"T": np.float32}, name="guarded")
    b.op("Abs", [x], {"T": np.float32}, name="after", control_inputs=["guarded"])
    assert [s.name for s in default_outputs(Graph(b.graph_def))] == ["last", "after"]


def test_dtype_found_through_an_identity_chain() -> None:
    b = GraphBuilder()
    x = b.placeholder("x", np.int16, [2])
    i1 = b.op("Identity", [x], name="i1")  # no T attr: the dtype comes from the input
    b.op("Identity", [i1], name="i2")
    graph = Graph(b.graph_def)
    assert tensor_spec(graph, "i2").dtype == types_pb2.DT_INT16
    assert [(s.name, s.dtype, s.shape) for s in default_outputs(graph)] == [("i2", types_pb2.DT_INT16, None)]


def test_tensor_spec_names_and_errors() -> None:
    graph = Graph(io_graph())
    assert tensor_spec(graph, "uniq:1") == TensorSpec("uniq:1", "uniq:1", types_pb2.DT_INT64, None)
    assert tensor_spec(graph, "uniq:0").name == "uniq"  # port 0 published as the node's name
    assert tensor_spec(graph, "relu", "activations").name == "activations"
    with pytest.raises(NotFoundError, match="no node 'nope'"):
        tensor_spec(graph, "nope:0")
    with pytest.raises(NotFoundError, match="relu:1"):
        tensor_spec(graph, "relu:1")


def test_aliases_replace_the_defaults() -> None:
    graph = Graph(add_graph())
    sig = Signature.of(graph, inputs={"in": "x"}, outputs={"double": "y:0", "final": "out"})
    assert sig.inputs == (TensorSpec("in", "x:0", types_pb2.DT_FLOAT, (-1, 3)),)
    assert [(s.name, s.tensor) for s in sig.outputs] == [("double", "y:0"), ("final", "out:0")]
    only_inputs = Signature.of(graph, inputs={"in": "x:0"})
    assert [s.name for s in only_inputs.inputs] == ["in"]
    assert only_inputs.outputs == tuple(default_outputs(graph))
    defaults = Signature.of(graph)
    assert [s.name for s in defaults.inputs] == ["x"] and [s.name for s in defaults.outputs] == ["out"]


@pytest.mark.parametrize(
    ("inputs", "outputs", "fragment"),
    [
        ({"bad": "zzz:0"}, None, r"^input 'bad': .*no node 'zzz'"),
        ({"in": "x:2"}, None, r"^input 'in': .*'x:2'"),
        (None, {"ghost": "out:1"}, r"^output 'ghost': .*'out:1'"),
        (None, {"weird": "out:abc"}, r"^output 'weird': .*not a tensor name"),
    ],
)
def test_an_alias_naming_no_tensor_is_an_error_naming_the_alias(
    inputs: dict[str, str] | None, outputs: dict[str, str] | None, fragment: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=fragment):
        Signature.of(Graph(add_graph()), inputs, outputs)


def test_lookup_by_public_name_alias_and_graph_tensor() -> None:
    sig = Signature.of(Graph(add_graph()), inputs={"in": "x"}, outputs={"double": "y:0"})
    published = sig.inputs[0]
    assert sig.input("in") is published
    # the graph tensor behind an alias maps back to the published spec, in either spelling
    assert sig.input("x") is published
    assert sig.input("x:0") is published
    assert sig.output("double") is sig.outputs[0]
    assert sig.output("y") is sig.outputs[0]
    # any other graph tensor works too, under the name the caller used
    assert sig.output("mul") == TensorSpec("mul", "mul:0", types_pb2.DT_FLOAT, None)
    assert sig.output("mul:0").tensor == "mul:0"
    defaults = Signature.of(Graph(add_graph()))
    assert defaults.input("x:0") is defaults.inputs[0] and defaults.inputs[0].name == "x"


def test_an_alias_comes_before_a_graph_tensor_of_the_same_name() -> None:
    sig = Signature.of(Graph(add_graph()), outputs={"y": "out:0"})
    assert sig.output("y").tensor == "out:0"
    assert sig.output("y:0").tensor == "y:0"  # the graph's own tensor, still reachable by its full name


@pytest.mark.parametrize("name", ["nope", "nope:0", "x:5", "x:abc", "^x", ""])
def test_an_unknown_name_lists_the_valid_ones(name: str) -> None:
    b = GraphBuilder()
    b.identity(b.placeholder("x", np.float32, [1]), name="out")
    b.placeholder("b", np.float32, [1])
    sig = Signature.of(Graph(b.graph_def), inputs={"second": "b", "first": "x"})
    with pytest.raises(InvalidArgumentError) as info:
        sig.input(name)
    message = str(info.value)
    assert f"no input '{name}'; its inputs are: first, second (a graph tensor name" in message


def test_an_unknown_output_lists_the_outputs_and_no_inputs_says_none() -> None:
    b = GraphBuilder()
    b.constant(1.0, name="c")
    b.identity("c:0", name="out")
    sig = Signature.of(Graph(b.graph_def))
    assert sig.inputs == ()
    with pytest.raises(InvalidArgumentError, match=r"no input 'q'; its inputs are: \(none\)"):
        sig.input("q")
    with pytest.raises(InvalidArgumentError, match=r"no output 'q'; its outputs are: out \("):
        sig.output("q")


def test_second_outputs_of_multi_output_ops_have_their_own_dtype():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None])
    k = b.constant(np.int32(2), name="k")
    b.op("TopKV2", [x, k], {"T": np.float32, "sorted": True}, name="top", num_outputs=2)
    b.op("Unique", [x], {"T": np.float32, "out_idx": np.int64}, name="uniq", num_outputs=2)
    graph = Graph(b.graph_def)
    assert tensor_spec(graph, "top:0").dtype == types_pb2.DT_FLOAT
    assert tensor_spec(graph, "top:1").dtype == types_pb2.DT_INT32
    assert tensor_spec(graph, "uniq:1").dtype == types_pb2.DT_INT64


def test_output_dtypes_come_from_the_ops_definition():
    # a comparison's T is its inputs' dtype: its output is bool (runtime/op_types.py)
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None])
    b.op("Greater", [x, x], {"T": np.float32}, name="gt")
    b.op("ResizeBilinear", [x, b.constant(np.array([2, 2], np.int32))], {"T": np.uint8}, name="resized")
    graph = Graph(b.graph_def)
    assert tensor_spec(graph, "gt").dtype == types_pb2.DT_BOOL
    assert tensor_spec(graph, "resized").dtype == types_pb2.DT_FLOAT
