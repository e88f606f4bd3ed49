import numpy as np
import pytest

from poolserve.proto import attr_value_pb2, types_pb2
from poolserve.runtime.builder import GRAPH_DEF_VERSION, GraphBuilder, attr_value, shape
from poolserve.runtime.executor import Plan, run_plan_inline
from poolserve.runtime.graph import Graph
from poolserve.runtime.tensor import from_ndarray, shape_from_proto, to_ndarray


def nodes_of(b):
    return {n.name: n for n in b.graph_def.node}


def test_a_built_graph_is_valid_and_computes_what_it_says():
    w = np.array([[1, -2], [3, 4], [0, 1]], np.float32)
    bias = np.array([0.5, -10], np.float32)
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 3))
    y = b.relu(b.bias_add(b.matmul(x, b.constant(w, name="w")), b.constant(bias, name="b")), name="y")
    assert y == "y:0"
    assert b.graph_def.versions.producer == GRAPH_DEF_VERSION
    graph = Graph(b.graph_def)  # validates inputs, attrs and kernels
    xv = np.array([[1, 1, 1], [2, 0, -1]], np.float32)
    (out,) = run_plan_inline(Plan(graph, [("x", 0)], [("y", 0)]), [xv])
    np.testing.assert_array_equal(out, np.maximum(xv @ w + bias, 0))


def test_placeholders_record_dtype_and_shape():
    b = GraphBuilder()
    b.placeholder("x", np.float32, (None, 4))
    b.placeholder("i", np.int32)
    b.placeholder("s", np.float64, ())
    nodes = nodes_of(b)
    assert nodes["x"].op == "Placeholder" and not nodes["x"].input
    assert nodes["x"].attr["dtype"].type == types_pb2.DT_FLOAT
    assert shape_from_proto(nodes["x"].attr["shape"].shape) == (-1, 4)
    assert nodes["i"].attr["dtype"].type == types_pb2.DT_INT32
    assert nodes["i"].attr["shape"].shape.unknown_rank  # no dims given: unknown rank
    assert shape_from_proto(nodes["s"].attr["shape"].shape) == ()  # a scalar


@pytest.mark.parametrize(
    ("value", "dtype", "want"),
    [
        (1.5, None, np.float32),  # Python floats and float64 arrays become float32, as in tf.constant
        (np.array([1.5, 2.5]), None, np.float32),
        ([1, 2], None, np.int32),  # Python ints: int32
        (np.array([1, 2], np.int64), None, np.int64),  # an int64 array keeps its dtype
        ([1, 2], np.float64, np.float64),  # an explicit dtype wins
        (True, None, np.bool_),
    ],
)
def test_constants_encode_their_value(value, dtype, want):
    b = GraphBuilder()
    c = b.constant(value, dtype=dtype, name="c")
    node = nodes_of(b)["c"]
    assert c == "c:0" and node.op == "Const"
    assert node.attr["dtype"].type == node.attr["value"].tensor.dtype
    stored = to_ndarray(node.attr["value"].tensor)
    assert stored.dtype == want
    np.testing.assert_array_equal(stored, np.asarray(value).astype(want))
    assert b.dtype_of(c) == node.attr["dtype"].type


def test_names_are_made_unique_as_tensorflow_does():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    assert [b.add(x, x) for _ in range(3)] == ["add:0", "add_1:0", "add_2:0"]
    b.identity(x, name="id_1")
    assert b.identity(x, name="id") == "id:0"
    assert b.identity(x, name="id") == "id_2:0"  # id_1 is taken already
    with b.scope("dense"):
        assert b.matmul(x, x) == "dense/MatMul:0"
        with b.scope("inner"):
            assert b.relu(x) == "dense/inner/Relu:0"
        assert b.matmul(x, x) == "dense/MatMul_1:0"
    assert b.matmul(x, x) == "MatMul:0"  # the scope ended
    names = [n.name for n in b.graph_def.node]
    assert len(names) == len(set(names))


def test_op_writes_inputs_control_inputs_and_outputs():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (4,))
    u = b.op("Unique", [x], {"T": np.float32, "out_idx": np.int32}, name="u", num_outputs=2)
    assert u == ["u:0", "u:1"]
    s = b.op("AddV2", [u[0], u[1]], {"T": np.float32}, name="s", control_inputs=["x:0", "^u"])
    assert s == "s:0"
    n = b.no_op("n", control_inputs=[s])
    assert n == "n"  # an op with no outputs: its name
    nodes = nodes_of(b)
    # port 0 is written bare, other ports in full, control inputs with a caret, as TensorFlow does
    assert list(nodes["s"].input) == ["u", "u:1", "^x", "^u"]
    assert list(nodes["n"].input) == ["^s"]
    assert nodes["u"].attr["out_idx"].type == types_pb2.DT_INT32


def test_typed_ops_carry_the_dtype_of_their_first_input():
    b = GraphBuilder()
    i = b.placeholder("i", np.int32, (2,))
    f = b.placeholder("f", np.float64, (2,))
    s = b.add(i, i, name="s")
    r = b.relu(s, name="r")
    m = b.mul(f, f, name="m")
    nodes = nodes_of(b)
    assert nodes["s"].attr["T"].type == nodes["r"].attr["T"].type == types_pb2.DT_INT32
    assert nodes["m"].attr["T"].type == types_pb2.DT_DOUBLE
    assert (b.dtype_of(r), b.dtype_of(m)) == (types_pb2.DT_INT32, types_pb2.DT_DOUBLE)
    assert b.dtype_of("unknown:0") == types_pb2.DT_FLOAT  # untyped tensors are taken as float


def test_reshape_softmax_and_conv2d_attrs():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (1, 4, 4, 1))
    k = b.constant(np.ones((2, 2, 1, 1), np.float32), name="k")
    c = b.conv2d(x, k, strides=(1, 2, 2, 1), padding="VALID")
    r = b.reshape(c, [1, 4], name="flat")
    b.softmax(r, name="sm")
    nodes = nodes_of(b)
    conv = nodes["Conv2D"]
    assert list(conv.attr["strides"].list.i) == [1, 2, 2, 1]
    assert conv.attr["padding"].s == b"VALID" and conv.attr["data_format"].s == b"NHWC"
    assert list(conv.attr["dilations"].list.i) == [1, 1, 1, 1]
    assert list(nodes["flat"].input) == ["Conv2D", "flat/shape"]
    np.testing.assert_array_equal(to_ndarray(nodes["flat/shape"].attr["value"].tensor), [1, 4])
    assert nodes["flat"].attr["Tshape"].type == types_pb2.DT_INT32
    (out,) = run_plan_inline(
        Plan(Graph(b.graph_def), [("x", 0)], [("sm", 0)]),
        [np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1)],
    )
    sums = np.array([10, 18, 42, 50], np.float32)  # 2x2 windows of 0..15, stride 2
    e = np.exp(sums - sums.max())
    np.testing.assert_allclose(out, [e / e.sum()], rtol=1e-6)


def test_shape_values():
    assert shape(None).unknown_rank
    assert shape_from_proto(shape([None, 3])) == (-1, 3)
    assert shape_from_proto(shape([])) == ()


@pytest.mark.parametrize(
    ("value", "field", "want"),
    [
        (True, "b", True),  # a bool is not taken for an int
        (7, "i", 7),
        (0.25, "f", 0.25),
        ("SAME", "s", b"SAME"),
        (b"\x00raw", "s", b"\x00raw"),
        (np.float32, "type", types_pb2.DT_FLOAT),
        (np.dtype(np.int64), "type", types_pb2.DT_INT64),
    ],
)
def test_attr_value_scalars(value, field, want):
    v = attr_value(value)
    assert v.WhichOneof("value") == field and getattr(v, field) == want


def test_attr_value_messages():
    s = shape([2, None])
    assert attr_value(s).shape == s
    arr = np.array([[1, 2]], np.int32)
    np.testing.assert_array_equal(to_ndarray(attr_value(arr).tensor), arr)
    proto = from_ndarray(np.float32(3))
    assert attr_value(proto).tensor == proto
    given = attr_value_pb2.AttrValue(i=3)
    assert attr_value(given) is given


@pytest.mark.parametrize(
    ("value", "field", "want"),
    [
        ([1, 2], "i", [1, 2]),
        ([True, False], "b", [True, False]),
        ([0.5], "f", [0.5]),
        (["a", b"b"], "s", [b"a", b"b"]),
        ((np.int32, np.dtype(np.float32)), "type", [types_pb2.DT_INT32, types_pb2.DT_FLOAT]),
        ([shape([1]), shape(None)], "shape", [shape([1]), shape(None)]),
    ],
)
def test_attr_value_lists(value, field, want):
    v = attr_value(value)
    assert v.WhichOneof("value") == "list"
    assert list(getattr(v.list, field)) == want
    others = {"i", "b", "f", "s", "type", "shape"} - {field}
    assert all(not getattr(v.list, f) for f in others)


def test_attr_value_empty_list_is_still_a_list():
    v = attr_value([])
    assert v.WhichOneof("value") == "list" and v.list == attr_value_pb2.AttrValue.ListValue()


def test_attr_value_refuses_what_it_cannot_encode():
    with pytest.raises(TypeError, match=r"cannot encode \{1: 2\} as an attr"):
        attr_value({1: 2})
    with pytest.raises(TypeError, match=r"cannot encode list item None as an attr"):
        attr_value([1, None])
