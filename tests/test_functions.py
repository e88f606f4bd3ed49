"""Inlining function calls: TF's ``node:output_arg:index`` naming, nested calls, control edges."""

from __future__ import annotations

import numpy as np
import pytest

from poolserve.proto import attr_value_pb2, function_pb2, graph_pb2, node_def_pb2, op_def_pb2, types_pb2
from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.runtime.functions import (
    FunctionLibrary,
    add_default_attrs,
    inline_functions,
    prune_graph_def,
    uses_functions,
)
from poolserve.runtime.graph import Graph
from poolserve.runtime.session import Session
from poolserve.runtime.tensor import from_ndarray

F = types_pb2.DT_FLOAT


def node(
    name: str, op: str, inputs: list[str] = (), **attrs: attr_value_pb2.AttrValue
) -> node_def_pb2.NodeDef:  # type: ignore[assignment]
    nd = node_def_pb2.NodeDef(name=name, op=op, input=list(inputs))
    for k, v in attrs.items():
        nd.attr[k].CopyFrom(v)
    return nd


def t(dtype: int = F) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(type=dtype)


def types(*dtypes: int) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(type=list(dtypes)))


def call(name: str, fname: str, inputs: list[str], n_in: int, n_out: int) -> node_def_pb2.NodeDef:
    return node(
        name,
        "StatefulPartitionedCall",
        inputs,
        f=attr_value_pb2.AttrValue(func=attr_value_pb2.NameAttrList(name=fname)),
        Tin=types(*[F] * n_in),
        Tout=types(*[F] * n_out),
    )


def function(
    name: str, ins: list[str], outs: dict[str, str], nodes: list[node_def_pb2.NodeDef]
) -> function_pb2.FunctionDef:
    fdef = function_pb2.FunctionDef()
    fdef.signature.name = name
    fdef.signature.input_arg.extend(op_def_pb2.OpDef.ArgDef(name=a, type=F) for a in ins)
    fdef.signature.output_arg.extend(op_def_pb2.OpDef.ArgDef(name=o, type=F) for o in outs)
    fdef.node_def.extend(nodes)
    fdef.ret.update(outs)
    return fdef


def graph() -> graph_pb2.GraphDef:
    g = graph_pb2.GraphDef()
    g.node.extend(
        [
            node("x", "Placeholder", dtype=t()),
            node("gate", "NoOp"),
            call("outer", "outer_fn", ["x", "^gate"], 1, 2),
            node("sum", "AddV2", ["outer:0", "outer:1"], T=t()),
        ]
    )
    # outer_fn(a) = (inner_fn(a)[1], a * 2); inner_fn(b) = (b, b + 1) through a two-output Unique-free op
    two = node("two", "Const", dtype=t(), value=attr_value_pb2.AttrValue(tensor=from_ndarray(np.float32(2))))
    g.library.function.extend(
        [
            function(
                "outer_fn",
                ["a"],
                {"first": "inner:output:1", "second": "mul:z:0"},
                [
                    call("inner", "inner_fn", ["a"], 1, 2),
                    two,
                    node("mul", "Mul", ["a", "two:output:0"], T=t()),
                ],
            ),
            function(
                "inner_fn",
                ["b"],
                {"same": "id:output:0", "plus": "add:z:0"},
                [
                    node(
                        "one",
                        "Const",
                        dtype=t(),
                        value=attr_value_pb2.AttrValue(tensor=from_ndarray(np.float32(1))),
                    ),
                    node("id", "Identity", ["b"], T=t()),
                    node("add", "AddV2", ["b", "one:output:0"], T=t()),
                ],
            ),
        ]
    )
    return g


def test_nested_calls_inline_and_run() -> None:
    inlined = inline_functions(graph())
    names = {n.name: n for n in inlined.node}
    assert names["outer"].op == "IdentityN"
    assert list(names["outer/mul"].input) == ["x", "outer/two:0"]
    assert list(names["outer/inner/add"].input) == ["x", "outer/inner/one:0"]
    # the call's control input reaches the body's input-less nodes
    assert "^outer/input_control_node" in names["outer/two"].input
    assert list(names["outer/input_control_node"].input) == ["^gate"]
    with Session(Graph(inlined)) as sess:
        out = sess.run(["outer:0", "outer:1", "sum:0"], {"x:0": np.float32([1.0, 3.0])})
    np.testing.assert_allclose(out[0], [2.0, 4.0])
    np.testing.assert_allclose(out[1], [2.0, 6.0])
    np.testing.assert_allclose(out[2], [4.0, 10.0])


def test_output_arg_ports_come_from_op_defs() -> None:
    g = graph()
    # a function whose body reads port 1 of a two-output-arg op by its arg name
    g.library.function[1].node_def.append(node("split", "Unique", ["b"], T=t()))
    g.library.function[1].ret["same"] = "split:idx:0"
    names = {n.name: n for n in inline_functions(g).node}
    assert names["outer/inner"].input[0] == "outer/inner/split:1"
    op = op_def_pb2.OpDef(name="Unique")
    op.output_arg.extend([op_def_pb2.OpDef.ArgDef(name="idx"), op_def_pb2.OpDef.ArgDef(name="y")])
    names = {n.name: n for n in inline_functions(g, {"Unique": op}).node}
    assert names["outer/inner"].input[0] == "outer/inner/split:0"


def test_bad_refs_and_placeholders() -> None:
    g = graph()
    g.library.function[1].ret["same"] = "nothere:output:0"
    with pytest.raises(InvalidArgumentError, match="refers to no node of the function"):
        inline_functions(g)
    g = graph()
    g.library.function[1].node_def[1].attr["T"].CopyFrom(attr_value_pb2.AttrValue(placeholder="T"))
    with pytest.raises(UnimplementedError, match="placeholder"):
        inline_functions(g)
    g = graph()
    del g.library.function[1:]
    with pytest.raises(InvalidArgumentError, match="calls function 'inner_fn', which the graph lacks"):
        inline_functions(g)


def test_default_attrs_and_pruning() -> None:
    g = graph()
    op = op_def_pb2.OpDef(name="Mul")
    op.attr.add(name="fancy", type="bool", default_value=attr_value_pb2.AttrValue(b=True))
    add_default_attrs(g, {"Mul": op})
    assert g.library.function[0].node_def[2].attr["fancy"].b
    pruned = prune_graph_def(g, ["outer:1"])
    assert [n.name for n in pruned.node] == ["x", "gate", "outer"]


def test_function_graph_is_one_inlined_call_fed_by_placeholders() -> None:
    g = graph()
    library = FunctionLibrary(g.library)
    body, args, results = library.function_graph("outer_fn")
    assert (args, results) == (["a"], 2)
    names = {n.name: n for n in body.node}
    assert names["a"].op == "Placeholder" and names["a"].attr["dtype"].type == F
    assert names["outer_fn"].op == "IdentityN"
    assert list(names["outer_fn/mul"].input) == ["a", "outer_fn/two:0"]
    assert "outer_fn/inner/add" in names  # the call inside the body is inlined
    with Session(Graph(body, library)) as sess:
        out = sess.run(["outer_fn:0", "outer_fn:1"], {"a:0": np.float32([1.0])})
    np.testing.assert_allclose(out, [[2.0], [2.0]])
    g.library.function[0].signature.input_arg[0].type = 0
    g.library.function[0].signature.input_arg[0].type_attr = "T"
    with pytest.raises(UnimplementedError, match="arg 'a' has no fixed type"):
        FunctionLibrary(g.library).function_graph("outer_fn")
    assert not uses_functions(g)
    g.node.add(name="loop", op="StatelessWhile")
    assert uses_functions(g)
