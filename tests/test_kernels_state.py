from __future__ import annotations

import copy
import pickle
from typing import Any

import numpy as np
import pytest
from evaluate import evaluate
from support import assert_close

from poolserve.proto import attr_value_pb2, types_pb2
from poolserve.runtime.builder import GraphBuilder, shape
from poolserve.runtime.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from poolserve.runtime.graph import Graph
from poolserve.runtime.kernels import KERNELS, ResourceContainer
from poolserve.runtime.kernels.state_ops import REF_VARIABLES, UninitializedValue, VariableHandle

FLOAT = types_pb2.DT_FLOAT
INT32 = types_pb2.DT_INT32


def variable(
    b: GraphBuilder,
    name: str,
    dims: Any = (2,),
    dtype: int = FLOAT,
    container: str = "",
    shared_name: str = "",
) -> str:
    attrs = {"shape": shape(dims), "dtype": _type(dtype), "container": container, "shared_name": shared_name}
    return str(b.op("VariableV2", [], attrs, name=name))


def handle(b: GraphBuilder, name: str, shared_name: str = "", container: str = "", dtype: int = FLOAT) -> str:
    attrs = {"shape": shape([2]), "dtype": _type(dtype), "container": container, "shared_name": shared_name}
    return str(b.op("VarHandleOp", [], attrs, name=name))


def _type(code: int) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(type=code)  # type: ignore[arg-type]


def ref_op(b: GraphBuilder, op: str, var: str, value: str, name: str, **attrs: Any) -> str:
    return str(b.op(op, [var, value], {"T": _type(b.dtype_of(value)), **attrs}, name=name))


def resource_op(b: GraphBuilder, op: str, h: str, value: str, name: str, **attrs: Any) -> str:
    b.op(op, [h, value], {"dtype": _type(b.dtype_of(value)), **attrs}, name=name)
    return name


def read(b: GraphBuilder, h: str, name: str, dtype: int = FLOAT) -> str:
    return str(b.op("ReadVariableOp", [h], {"dtype": _type(dtype)}, name=name))


def run(graph: Graph, resources: ResourceContainer, fetches: Any = (), targets: Any = ()) -> list[Any]:
    return evaluate(graph, list(fetches), targets=list(targets), resources=resources)


# --- reference variables (VariableV2) -------------------------------------------------------------------------


def ref_graph() -> tuple[Graph, dict[str, str]]:
    b = GraphBuilder()
    v = variable(b, "v")
    t: dict[str, str] = {"v": v}
    t["init"] = ref_op(b, "Assign", v, b.constant(np.array([1.0, 2.0], np.float32)), "v/Assign")
    t["read"] = b.identity(v, name="v/read")
    t["plus"] = b.add(t["read"], b.constant(np.float32(1)), name="plus")
    t["add"] = ref_op(b, "AssignAdd", v, b.constant(np.array([10.0, 20.0], np.float32)), "add")
    t["sub"] = ref_op(b, "AssignSub", v, b.constant(np.array([1.0, 1.0], np.float32)), "sub")
    three = b.constant(np.array([1.0, 2.0, 3.0], np.float32), name="three")
    t["assign3"] = ref_op(b, "Assign", v, three, "assign3")
    t["assign3_free"] = ref_op(b, "Assign", v, three, "assign3_free", validate_shape=False)
    t["add3"] = ref_op(b, "AssignAdd", v, three, "add3")
    t["is_init"] = b.op("IsVariableInitialized", [v], {"dtype": _type(FLOAT)}, name="is_init")
    return Graph(b.graph_def), t


def test_assign_then_read() -> None:
    graph, t = ref_graph()
    res = ResourceContainer()
    (init,) = run(graph, res, [t["init"]])
    assert_close(init, np.array([1.0, 2.0], np.float32))
    v, read, plus = run(graph, res, [t["v"], t["read"], t["plus"]])
    assert_close(v, np.array([1.0, 2.0], np.float32))
    assert_close(read, np.array([1.0, 2.0], np.float32))
    assert_close(plus, np.array([2.0, 3.0], np.float32))
    assert list(res.values) == [REF_VARIABLES, ("", "v")]


def test_reading_an_uninitialized_variable_fails() -> None:
    graph, t = ref_graph()
    res = ResourceContainer()
    with pytest.raises(FailedPreconditionError, match="Attempting to use uninitialized value v") as info:
        run(graph, res, [t["plus"]])
    assert info.value.node_name == "plus"
    (fetched,) = run(graph, res, [t["v"]])
    assert isinstance(fetched, UninitializedValue)
    with pytest.raises(FailedPreconditionError, match="uninitialized value v"):
        np.asarray(fetched)


def test_uninitialized_value_refuses_every_use() -> None:
    value = UninitializedValue("w")
    for use in (
        lambda: value.shape,
        lambda: value.dtype,
        lambda: np.add(value, 1),
        lambda: np.ones(2) + value,
        lambda: np.concatenate([value]),
        lambda: bool(value),
        lambda: value[0],
    ):
        with pytest.raises(FailedPreconditionError, match="Attempting to use uninitialized value w"):
            use()
    assert repr(value) == "<uninitialized value of variable w>"
    # a copy or an unpickled value is still the same refusal, naming the same variable
    for twin in (copy.copy(value), pickle.loads(pickle.dumps(value))):
        assert isinstance(twin, UninitializedValue) and twin is not value and repr(twin) == repr(value)
        with pytest.raises(FailedPreconditionError, match="Attempting to use uninitialized value w"):
            np.asarray(twin)


def test_is_variable_initialized() -> None:
    graph, t = ref_graph()
    res = ResourceContainer()
    (before,) = run(graph, res, [t["is_init"]])
    assert before.dtype == np.bool_ and before.shape == () and not before
    run(graph, res, targets=["v/Assign"])
    (after,) = run(graph, res, [t["is_init"]])
    assert after


def test_assign_add_and_sub() -> None:
    graph, t = ref_graph()
    res = ResourceContainer()
    run(graph, res, targets=["v/Assign"])
    (added,) = run(graph, res, [t["add"]])
    assert_close(added, np.array([11.0, 22.0], np.float32))
    (subbed,) = run(graph, res, [t["sub"]])
    assert_close(subbed, np.array([10.0, 21.0], np.float32))
    (v,) = run(graph, res, [t["v"]])
    assert_close(v, np.array([10.0, 21.0], np.float32))
    assert_close(added, np.array([11.0, 22.0], np.float32))  # earlier results are not overwritten


def test_assign_add_on_uninitialized_variable() -> None:
    graph, t = ref_graph()
    with pytest.raises(FailedPreconditionError, match="Attempting to use uninitialized value v") as info:
        run(graph, ResourceContainer(), [t["add"]])
    assert info.value.node_name == "add"


def test_assign_validates_shape() -> None:
    graph, t = ref_graph()
    res = ResourceContainer()
    # Uninitialized: compared with the shape attr, as TensorFlow does.
    with pytest.raises(InvalidArgumentError, match=r"lhs shape= \[2\] rhs shape= \[3\]"):
        run(graph, res, [t["assign3"]])
    run(graph, res, targets=["v/Assign"])
    with pytest.raises(InvalidArgumentError, match=r"Assign requires shapes of both tensors to match"):
        run(graph, res, [t["assign3"]])
    (free,) = run(graph, res, [t["assign3_free"]])
    assert_close(free, np.array([1.0, 2.0, 3.0], np.float32))
    (v,) = run(graph, res, [t["v"]])
    assert_close(v, np.array([1.0, 2.0, 3.0], np.float32))  # what assign3_free stored
    # Now the variable has 3 elements: validate_shape compares with that.
    run(graph, res, [t["assign3"]])
    with pytest.raises(InvalidArgumentError, match="Parameters and update must be the same size"):
        run(graph, res, [t["add"]])
    (added,) = run(graph, res, [t["add3"]])
    assert_close(added, np.array([2.0, 4.0, 6.0], np.float32))


def test_unknown_shape_attr_validates_as_scalar() -> None:
    b = GraphBuilder()
    v = variable(b, "u", dims=None)
    ref_op(b, "Assign", v, b.constant(np.array([1.0, 2.0], np.float32)), "a")
    with pytest.raises(InvalidArgumentError, match=r"lhs shape= \[\] rhs shape= \[2\]"):
        run(Graph(b.graph_def), ResourceContainer(), targets=["a"])


def test_stored_values_are_private_and_read_only() -> None:
    b = GraphBuilder()
    v = variable(b, "v")
    x = b.placeholder("x", np.float32, (2,))
    ref_op(b, "Assign", v, x, "a")
    graph = Graph(b.graph_def)
    res = ResourceContainer()
    fed = np.array([1.0, 2.0], np.float32)
    evaluate(graph, [], {x: fed}, targets=["a"], resources=res)
    fed[0] = 99.0
    (value,) = run(graph, res, [v])
    assert_close(value, np.array([1.0, 2.0], np.float32))
    assert not value.flags.writeable


def test_integer_assign_add_wraps() -> None:
    b = GraphBuilder()
    v = variable(b, "n", dtype=INT32)
    ref_op(b, "Assign", v, b.constant(np.array([2**31 - 1, 5], np.int32)), "init")
    add = ref_op(b, "AssignAdd", v, b.constant(np.array([1, 1], np.int32)), "add")
    graph, res = Graph(b.graph_def), ResourceContainer()
    run(graph, res, targets=["init"])
    (out,) = run(graph, res, [add])
    assert_close(out, np.array([-(2**31), 6], np.int32))


def test_assign_of_another_dtype_is_refused() -> None:
    b = GraphBuilder()
    v = variable(b, "v")
    ref_op(b, "Assign", v, b.constant(np.array([1, 2], np.int32)), "a")
    with pytest.raises(InvalidArgumentError, match="Assign expects a value of type float32, got int32"):
        run(Graph(b.graph_def), ResourceContainer(), targets=["a"])


def test_scalar_variable() -> None:
    b = GraphBuilder()
    v = variable(b, "s", dims=())
    ref_op(b, "Assign", v, b.constant(np.float32(1.5)), "init")
    add = ref_op(b, "AssignAdd", v, b.constant(np.float32(2.0)), "add")
    graph, res = Graph(b.graph_def), ResourceContainer()
    run(graph, res, targets=["init"])
    (out,) = run(graph, res, [add])
    assert isinstance(out, np.ndarray) and out.shape == () and out == np.float32(3.5)


def test_shared_name_and_container_attrs() -> None:
    b = GraphBuilder()
    s1 = variable(b, "s1", dims=(1,), shared_name="shared")
    s2 = variable(b, "s2", dims=(1,), shared_name="shared")
    c1 = variable(b, "c1", dims=(1,), container="one", shared_name="w")
    c2 = variable(b, "c2", dims=(1,), container="two", shared_name="w")
    ref_op(b, "Assign", s1, b.constant(np.array([7.0], np.float32)), "init_s1")
    ref_op(b, "Assign", c1, b.constant(np.array([1.0], np.float32)), "init_c1")
    ref_op(b, "Assign", c2, b.constant(np.array([2.0], np.float32)), "init_c2")
    add_s2 = ref_op(b, "AssignAdd", s2, b.constant(np.array([1.0], np.float32)), "add_s2")
    graph, res = Graph(b.graph_def), ResourceContainer()
    run(graph, res, targets=["init_s1", "init_c1", "init_c2"])
    s2_value, c1_value, c2_value = run(graph, res, [s2, c1, c2])
    assert_close(s2_value, np.array([7.0], np.float32))  # s1 and s2 are one variable
    assert_close(c1_value, np.array([1.0], np.float32))
    assert_close(c2_value, np.array([2.0], np.float32))
    run(graph, res, [add_s2])
    (s1_value,) = run(graph, res, [s1])
    assert_close(s1_value, np.array([8.0], np.float32))
    assert {k for k in res.values if k != REF_VARIABLES} == {("", "shared"), ("one", "w"), ("two", "w")}


def test_assign_needs_a_variable_as_first_input() -> None:
    b = GraphBuilder()
    v = variable(b, "v")
    ref_op(b, "Assign", b.identity(v, name="ident"), b.constant(np.array([1.0, 2.0], np.float32)), "a")
    with pytest.raises(
        InvalidArgumentError, match="must be fed by a VariableV2 node directly; input 'ident'"
    ):
        run(Graph(b.graph_def), ResourceContainer(), targets=["a"])


def test_variables_of_separate_sessions_are_independent() -> None:
    graph, t = ref_graph()
    first, second = ResourceContainer(), ResourceContainer()
    run(graph, first, targets=["v/Assign"])
    run(graph, first, [t["add"]])
    with pytest.raises(FailedPreconditionError):
        run(graph, second, [t["plus"]])
    run(graph, second, targets=["v/Assign"])
    (v1,) = run(graph, first, [t["v"]])
    (v2,) = run(graph, second, [t["v"]])
    assert_close(v1, np.array([11.0, 22.0], np.float32))
    assert_close(v2, np.array([1.0, 2.0], np.float32))


# --- resource variables ---------------------------------------------------------------------------------------


def resource_graph() -> tuple[Graph, dict[str, str]]:
    b = GraphBuilder()
    h = handle(b, "h", shared_name="r")
    t: dict[str, str] = {"h": h}
    t["init"] = resource_op(b, "AssignVariableOp", h, b.constant(np.array([1.0, 2.0], np.float32)), "init")
    t["read"] = read(b, h, "read")
    t["add"] = resource_op(b, "AssignAddVariableOp", h, b.constant(np.array([1.0, 1.0], np.float32)), "add")
    t["sub"] = resource_op(b, "AssignSubVariableOp", h, b.constant(np.array([0.5, 0.5], np.float32)), "sub")
    three = b.constant(np.array([1.0, 2.0, 3.0], np.float32), name="three")
    t["assign3"] = resource_op(b, "AssignVariableOp", h, three, "assign3")
    t["assign3_checked"] = resource_op(
        b, "AssignVariableOp", h, three, "assign3_checked", validate_shape=True
    )
    t["add3"] = resource_op(b, "AssignAddVariableOp", h, three, "add3")
    t["is_init"] = b.op("VarIsInitializedOp", [h], {}, name="is_init")
    hi = handle(b, "hi", shared_name="r", dtype=INT32)
    ints = b.constant(np.array([1, 1], np.int32), name="ints")
    t["assign_int"] = resource_op(b, "AssignVariableOp", hi, ints, "assign_int")
    t["add_int"] = resource_op(b, "AssignAddVariableOp", hi, ints, "add_int")
    t["read_int"] = read(b, hi, "read_int", INT32)
    return Graph(b.graph_def), t


def test_var_handle_op_outputs_a_handle() -> None:
    graph, t = resource_graph()
    (h,) = run(graph, ResourceContainer(), [t["h"]])
    assert isinstance(h, np.ndarray) and h.shape == () and h.dtype == object
    assert h.item() == VariableHandle("", "r", FLOAT, (2,))
    with pytest.raises(AttributeError):
        h.item().name = "other"  # type: ignore[misc]


def test_resource_variable_init_read_assign_add() -> None:
    graph, t = resource_graph()
    res = ResourceContainer()
    (before,) = run(graph, res, [t["is_init"]])
    assert before.dtype == np.bool_ and not before
    assert run(graph, res, targets=[t["init"]]) == []
    (after,) = run(graph, res, [t["is_init"]])
    assert after
    (value,) = run(graph, res, [t["read"]])
    assert_close(value, np.array([1.0, 2.0], np.float32))
    run(graph, res, targets=[t["add"]])
    run(graph, res, targets=[t["add"]])
    run(graph, res, targets=[t["sub"]])
    (value,) = run(graph, res, [t["read"]])
    assert_close(value, np.array([2.5, 3.5], np.float32))
    assert list(res.values) == [("", "r")]


def test_read_in_the_same_step_as_an_update_with_a_control_edge() -> None:
    b = GraphBuilder()
    h = handle(b, "h")
    init = resource_op(b, "AssignVariableOp", h, b.constant(np.array([1.0, 2.0], np.float32)), "init")
    after = b.op("ReadVariableOp", [h], {"dtype": _type(FLOAT)}, name="after", control_inputs=[init])
    (value,) = run(Graph(b.graph_def), ResourceContainer(), [after])
    assert_close(value, np.array([1.0, 2.0], np.float32))


def test_empty_shared_name_uses_the_node_name() -> None:
    b = GraphBuilder()
    h = handle(b, "anon")
    init = resource_op(b, "AssignVariableOp", h, b.constant(np.array([5.0, 6.0], np.float32)), "init")
    res = ResourceContainer()
    run(Graph(b.graph_def), res, targets=[init])
    assert list(res.values) == [("", "anon")]


def test_reading_an_uninitialized_resource_variable_fails() -> None:
    graph, t = resource_graph()
    with pytest.raises(
        FailedPreconditionError, match=r"Could not find variable r\. .*container=localhost"
    ) as info:
        run(graph, ResourceContainer(), [t["read"]])
    assert info.value.node_name == "read"


def test_updating_an_uninitialized_resource_variable_fails() -> None:
    graph, t = resource_graph()
    with pytest.raises(NotFoundError, match="Resource localhost/r/N10tensorflow3VarE does not exist"):
        run(graph, ResourceContainer(), targets=[t["add"]])


def test_resource_assign_shapes() -> None:
    graph, t = resource_graph()
    res = ResourceContainer()
    run(graph, res, targets=[t["init"]])
    with pytest.raises(InvalidArgumentError, match=r"wrong shape\. Expected \[2\] got \[3\]"):
        run(graph, res, targets=[t["assign3_checked"]])
    with pytest.raises(
        InvalidArgumentError, match=r"Cannot update variable with shape \[2\] using a Tensor with"
    ):
        run(graph, res, targets=[t["add3"]])
    run(graph, res, targets=[t["assign3"]])  # validate_shape defaults to false
    (value,) = run(graph, res, [t["read"]])
    assert_close(value, np.array([1.0, 2.0, 3.0], np.float32))


def test_resource_dtype_mismatches() -> None:
    graph, t = resource_graph()
    res = ResourceContainer()
    run(graph, res, targets=[t["init"]])
    with pytest.raises(
        InvalidArgumentError, match=r"Trying to read variable with wrong dtype\. Expected int32 got float\b"
    ):
        run(graph, res, [t["read_int"]])
    with pytest.raises(
        InvalidArgumentError, match=r"Trying to assign variable with wrong dtype\. Expected float got int32\b"
    ):
        run(graph, res, targets=[t["assign_int"]])
    with pytest.raises(InvalidArgumentError, match="DType of variable handle and value does not match"):
        run(graph, res, targets=[t["add_int"]])


def test_resource_containers_are_independent() -> None:
    b = GraphBuilder()
    one, two = handle(b, "one", "w", container="a"), handle(b, "two", "w", container="b")
    resource_op(b, "AssignVariableOp", one, b.constant(np.array([1.0, 1.0], np.float32)), "init_one")
    read_one, read_two = read(b, one, "read_one"), read(b, two, "read_two")
    is_two = b.op("VarIsInitializedOp", [two], {}, name="is_two")
    graph, res = Graph(b.graph_def), ResourceContainer()
    run(graph, res, targets=["init_one"])
    (value,) = run(graph, res, [read_one])
    assert_close(value, np.array([1.0, 1.0], np.float32))
    assert not run(graph, res, [is_two])[0]
    with pytest.raises(FailedPreconditionError, match="container=b"):
        run(graph, res, [read_two])
    with pytest.raises(FailedPreconditionError):
        run(graph, ResourceContainer(), [read_one])  # another session


def test_resource_op_needs_a_handle() -> None:
    b = GraphBuilder()
    read(b, b.constant(np.float32(1)), "r")
    with pytest.raises(InvalidArgumentError, match="expects a variable handle made by VarHandleOp"):
        run(Graph(b.graph_def), ResourceContainer(), ["r:0"])


def test_variable_kernels_are_stateful() -> None:
    ops = [
        "VariableV2",
        "Assign",
        "AssignAdd",
        "AssignSub",
        "IsVariableInitialized",
        "VarHandleOp",
        "ReadVariableOp",
        "AssignVariableOp",
        "AssignAddVariableOp",
        "AssignSubVariableOp",
        "VarIsInitializedOp",
    ]
    assert all(KERNELS[op].stateful for op in ops)
    outputs = {op: KERNELS[op].num_outputs for op in ops}
    assert (
        outputs["AssignVariableOp"] == outputs["AssignAddVariableOp"] == outputs["AssignSubVariableOp"] == 0
    )
    assert outputs["Assign"] == outputs["ReadVariableOp"] == 1
