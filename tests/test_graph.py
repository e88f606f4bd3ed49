import numpy as np
import pytest
from evaluate import evaluate

from poolserve.proto import graph_pb2
from poolserve.runtime.builder import GraphBuilder, attr_value
from poolserve.runtime.errors import InvalidArgumentError, NotFoundError, UnimplementedError
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.node import parse_input, parse_tensor_name
from poolserve.runtime.session import Session


def node(g, name, op, inputs=(), **attrs):
    n = g.node.add(name=name, op=op)
    n.input.extend(inputs)
    for k, v in attrs.items():
        n.attr[k].CopyFrom(attr_value(v))
    return n


def const(g, name, value):
    value = np.asarray(value, np.float32)
    return node(g, name, "Const", dtype=value.dtype, value=value)


def test_parse_inputs_and_tensor_names():
    assert parse_input("a") == ("a", 0, False)
    assert parse_input("a/b:2") == ("a/b", 2, False)
    assert parse_input("^a") == ("a", -1, True)
    assert parse_tensor_name("x") == ("x", 0)
    assert parse_tensor_name("x:3") == ("x", 3)
    for bad in ("", "^x", "x:y", ":1"):
        with pytest.raises(InvalidArgumentError, match="not a tensor name"):
            parse_tensor_name(bad)


def test_validation_errors_name_node_op_and_attr():
    g = graph_pb2.GraphDef()
    const(g, "a", 1.0)
    const(g, "a", 2.0)
    with pytest.raises(InvalidArgumentError, match="Duplicate node name in graph: 'a'"):
        Graph(g)

    g = graph_pb2.GraphDef()
    node(g, "b", "Identity", ["missing"])
    with pytest.raises(
        InvalidArgumentError, match="Node 'b' \\(op 'Identity'\\): input 'missing:0' refers to unknown node"
    ):
        Graph(g)

    g = graph_pb2.GraphDef()
    const(g, "a", 1.0)
    node(g, "b", "Identity", ["a:1"])
    with pytest.raises(
        InvalidArgumentError, match="refers to output 1 of 'a' \\(op 'Const'\\), which has 1 outputs"
    ):
        Graph(g)

    g = graph_pb2.GraphDef()
    node(g, "b", "Identity", ["^ghost"])
    with pytest.raises(InvalidArgumentError, match="control input '\\^ghost'"):
        Graph(g)

    g = graph_pb2.GraphDef()
    node(g, "m", "MatMul", transpose_a="yes")
    with pytest.raises(
        InvalidArgumentError, match="Node 'm' \\(op 'MatMul'\\): attr 'transpose_a' must be b, got s"
    ):
        Graph(g)

    g = graph_pb2.GraphDef()
    node(g, "c", "Const")
    with pytest.raises(InvalidArgumentError, match="Node 'c' \\(op 'Const'\\): attr 'value' is missing"):
        Graph(g)


def test_cycle_is_rejected():
    g = graph_pb2.GraphDef()
    node(g, "a", "Identity", ["b"])
    node(g, "b", "Identity", ["a"])
    with pytest.raises(InvalidArgumentError, match="Graph has a cycle: node 'a'"):
        Graph(g)


def test_topological_order_and_pruning():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    c = b.constant(1.0, name="c")
    y = b.add(x, c, name="y")
    z = b.add(y, c, name="z")
    unused = b.add(c, c, name="unused")
    noop = b.no_op("init", control_inputs=[unused])
    g = Graph(b.graph_def)
    pos = g.position
    assert pos["x"] < pos["y"] < pos["z"] and pos["c"] < pos["y"]
    assert [n.name for n in g.prune([g.tensor(z)])] == sorted(["x", "c", "y", "z"], key=pos.get)
    # feeding y cuts x away
    assert {n.name for n in g.prune([g.tensor(z)], feeds=[g.tensor(y)])} == {"c", "z"}
    # targets pull in control dependencies
    assert {n.name for n in g.prune([], [noop])} == {"init", "unused", "c"}
    with pytest.raises(NotFoundError, match="Node 'ghost' not found"):
        g.prune([], ["ghost"])
    with pytest.raises(NotFoundError, match="Tensor 'z:3' not found"):
        g.tensor("z:3")
    assert evaluate(g, [z], {x: 2.0}) == [4.0]


@pytest.mark.parametrize(
    ("op", "why"),
    [
        ("XlaCallModule", "StableHLO module .* native_serialization=False"),
        ("XlaDotV2", "XLA operation .* no CPU kernel"),
        ("TPUPartitionedCall", "TPU cores"),
    ],
)
def test_an_op_only_xla_runs_is_refused_saying_why(op, why):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [2])
    g = b.graph_def
    g.node.add(name="m", op=op, input=[x.split(":")[0]])
    with Session(g) as s, pytest.raises(UnimplementedError, match=f"Op type not registered '{op}' .*{why}"):
        s.run("m:0", {"x:0": [1.0, 2.0]})


def test_load_binary_and_text(tmp_path):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (2,))
    b.add(x, b.constant([1.0, 2.0]), name="y")
    (tmp_path / "g.pb").write_bytes(b.graph_def.SerializeToString())
    from google.protobuf import text_format

    (tmp_path / "g.pbtxt").write_text(text_format.MessageToString(b.graph_def))
    assert load_graph_def(tmp_path / "g.pb") == load_graph_def(tmp_path / "g.pbtxt") == b.graph_def
    (tmp_path / "bad.pb").write_bytes(b"\xff\xff\xff garbage")
    with pytest.raises(InvalidArgumentError, match="not a valid binary GraphDef"):
        load_graph_def(tmp_path / "bad.pb")
    (tmp_path / "bad.pbtxt").write_text("node { name: ")
    with pytest.raises(InvalidArgumentError, match="not a valid text GraphDef"):
        load_graph_def(tmp_path / "bad.pbtxt")
    with pytest.raises(NotFoundError, match="not found"):
        load_graph_def(tmp_path / "nope.pb")


def test_unknown_fields_are_kept():
    b = GraphBuilder()
    b.constant(1.0, name="c")
    data = b.graph_def.SerializeToString(deterministic=True)
    # field 5 of GraphDef (debug_info) is not declared here: it must survive a parse and re-serialization
    unknown = b"\x2a\x02\x0a\x00"
    g = graph_pb2.GraphDef()
    g.ParseFromString(data + unknown)
    assert g.SerializeToString(deterministic=True) == data + unknown
    Graph(g)


def test_a_node_poolserve_cannot_run_fails_only_the_steps_that_need_it():
    # TensorFlow makes kernels per pruned graph: an unknown op or a dtype numpy cannot hold (float8) in a
    # part of the graph a step does not run (a training branch, another signature) is no error for it
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    b.add(x, b.constant(1.0), name="y")
    g = b.graph_def
    g.node.add(name="f", op="FrobnicateV7", input=["x"])
    g.node.add(name="uses_f", op="Identity", input=["f:2"]).attr["T"].type = 1
    cast = g.node.add(name="f8", op="Cast", input=["x"])
    cast.attr["SrcT"].type, cast.attr["DstT"].type = 1, 24  # float32 -> float8_e5m2
    graph = Graph(g)
    assert graph.num_outputs["f"] == 3  # as many as its consumers read
    assert sorted(graph.unavailable) == ["f", "f8"]
    with Session(g) as s:
        np.testing.assert_array_equal(s.run("y:0", {"x:0": [[1, 2, 3]]}), [[2, 3, 4]])
        with pytest.raises(UnimplementedError, match="Op type not registered 'FrobnicateV7' \\(node 'f'\\)"):
            s.run("uses_f:0", {"x:0": [[1, 2, 3]]})
        with pytest.raises(
            UnimplementedError, match="Node 'f8' \\(op 'Cast'\\): attr 'DstT': Data type float8_e5m2"
        ):
            s.run("f8:0", {"x:0": [[1, 2, 3]]})
        np.testing.assert_array_equal(s.run("y:0", {"x:0": [[0, 0, 0]]}), [[1, 1, 1]])
    # bad attrs are still refused when the graph is read, as TensorFlow's importer refuses them
    bad = graph_pb2.GraphDef()
    node(bad, "m", "MatMul", transpose_a="yes")
    with pytest.raises(InvalidArgumentError, match="attr 'transpose_a' must be b"):
        Graph(bad)
