"""TensorList kernels and the Keras RNNs that use them, against what TensorFlow 2.21 computed
(fixtures by tools/make_rnn_fixtures.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poolserve import Session, load_graph_def, load_saved_model
from poolserve.proto import types_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels.list_ops import TensorList

FIXTURES = Path(__file__).parent / "fixtures" / "rnn"
MODELS = ("lstm", "gru", "simple_rnn", "bidi", "text", "tensor_array")


def cases(path: Path) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """case -> (inputs, outputs) by tensor name; SavedModel files key them ``<case>/in:<key>``."""
    out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    with np.load(path) as data:
        for key in data.files:
            case, rest = key.split("/", 1)
            sep = "/" if rest.startswith(("in/", "out/")) else ":"
            kind, tensor = rest.split(sep, 1)
            ins, outs = out.setdefault(case, ({}, {}))
            (ins if kind == "in" else outs)[tensor] = data[key]
    return out


def assert_matches(got: Any, want: Any, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, what
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)


def ops_of(graph_def: Any) -> set[str]:
    ops = {n.op for n in graph_def.node}
    for f in graph_def.library.function:
        ops |= {n.op for n in f.node_def}
    return ops


@pytest.mark.parametrize("form", ["lowered", "functional"])
@pytest.mark.parametrize("name", MODELS)
def test_frozen_models_match_tensorflow(name: str, form: str) -> None:
    suffix = "" if form == "lowered" else "_functional"
    graph_def = load_graph_def(FIXTURES / f"{name}{suffix}.pb")
    ops = ops_of(graph_def)
    # lowered: v1 frames in the graph; functional: a While over library functions
    assert ("Enter" in ops) == (form == "lowered") and ("While" in ops or "StatelessWhile" in ops) == (
        form == "functional"
    )
    assert {"TensorListSetItem", "TensorListStack"} <= ops
    with Session(graph_def) as sess:
        for case, (ins, outs) in cases(FIXTURES / f"{name}.npz").items():
            got = sess.run(list(outs), ins)
            for (tensor, want), value in zip(outs.items(), got, strict=True):
                assert_matches(value, want, f"{name}{suffix}/{case} {tensor}")


def test_tensor_array_fixture_covers_the_list_ops() -> None:
    want = {
        "EmptyTensorList",
        "TensorListConcatV2",
        "TensorListElementShape",
        "TensorListFromTensor",
        "TensorListGather",
        "TensorListGetItem",
        "TensorListLength",
        "TensorListPopBack",
        "TensorListPushBack",
        "TensorListReserve",
        "TensorListResize",
        "TensorListScatterIntoExistingList",
        "TensorListSetItem",
        "TensorListSplit",
        "TensorListStack",
    }
    assert want <= ops_of(load_graph_def(FIXTURES / "tensor_array.pb"))


def test_text_saved_model_with_masking_matches_tensorflow() -> None:
    model = load_saved_model(FIXTURES / "saved" / "text")
    try:
        ops = {n.op for n in model.session.graph.nodes.values()}
        # a functional loop whose body reads the variables (resource handles passed in)
        assert {"While", "TensorListReserve", "VarHandleOp"} <= ops
        for case, (ins, outs) in cases(FIXTURES / "saved" / "text.npz").items():
            got = model.run(ins)
            for key, want in outs.items():
                assert_matches(got[key], want, f"{case} {key}")
    finally:
        model.close()


# --- kernels on hand-made graphs ---------------------------------------------------------------------------


def _reserve(b: GraphBuilder, n: int, shape: list[int] | int, name: str = "list") -> str:
    return str(
        b.op(
            "TensorListReserve",
            [b.constant(np.asarray(shape, np.int32)), b.constant(np.int32(n))],
            {"element_dtype": np.float32, "shape_type": np.int32},
            name=name,
        )
    )


def _get(b: GraphBuilder, lst: str, index: str, shape: list[int] | int = -1, name: str = "get") -> str:
    return str(
        b.op(
            "TensorListGetItem",
            [lst, index, b.constant(np.asarray(shape, np.int32))],
            {"element_dtype": np.float32},
            name=name,
        )
    )


def test_unset_elements_read_as_zeros_of_the_element_shape() -> None:
    b = GraphBuilder()
    i = b.placeholder("i", np.int32, ())
    x = b.placeholder("x", np.float32, (2,))
    lst = _reserve(b, 3, [2])
    lst = b.op("TensorListSetItem", [lst, b.constant(np.int32(1)), x], {"element_dtype": np.float32})
    item = _get(b, lst, i)
    stacked = b.op(
        "TensorListStack", [lst, b.constant(np.asarray([2], np.int32))], {"element_dtype": np.float32}
    )
    with Session(b.graph_def) as sess:
        feeds = {"i:0": np.int32(0), "x:0": np.asarray([1.0, 2.0], np.float32)}
        got, whole = sess.run([item, stacked], feeds)
        np.testing.assert_array_equal(got, [0.0, 0.0])
        np.testing.assert_array_equal(whole, [[0.0, 0.0], [1.0, 2.0], [0.0, 0.0]])
        np.testing.assert_array_equal(sess.run(item, {**feeds, "i:0": np.int32(1)}), [1.0, 2.0])


def test_a_list_of_strings_yields_string_tensors() -> None:
    """A vector's elements are 0-d tensors: strings too, which a kernel like DecodeImage reads as arrays
    (tf.map_fn over encoded images lowers to this)."""
    string = np.dtype(object)
    b = GraphBuilder()
    x = b.placeholder("x", string, (None,))
    lst = b.op(
        "TensorListFromTensor",
        [x, b.constant(np.asarray([], np.int32))],
        {"element_dtype": string, "shape_type": np.int32},
    )
    item = b.op(
        "TensorListGetItem",
        [lst, b.constant(np.int32(1)), b.constant(np.asarray([], np.int32))],
        {"element_dtype": string},
    )
    length = b.op("StringLength", [item], {"unit": "BYTE"})
    words = np.array([b"a", b"bcd"], dtype=object)
    with Session(b.graph_def) as sess:
        got, n = sess.run([item, length], {"x:0": words})
    assert type(got) is bytes and got == b"bcd" and n == 3  # a 0-d string: bytes, as TensorFlow returns it


def test_reading_out_of_range_names_the_node() -> None:
    b = GraphBuilder()
    i = b.placeholder("i", np.int32, ())
    item = _get(b, _reserve(b, 2, [3]), i, name="rnn/get")
    with (
        Session(b.graph_def) as sess,
        pytest.raises(InvalidArgumentError, match=r"rnn/get.*access element 5 in a list with 2 elements"),
    ):
        sess.run(item, {"i:0": np.int32(5)})


def test_unknown_element_shape_of_an_unset_element_is_an_error() -> None:
    b = GraphBuilder()
    item = _get(b, _reserve(b, 2, -1), b.constant(np.int32(0)))
    with (
        Session(b.graph_def) as sess,
        pytest.raises(InvalidArgumentError, match="uninitialized tensor but element_shape is not fully"),
    ):
        sess.run(item)


def test_setting_an_item_of_the_wrong_shape_or_dtype_is_an_error() -> None:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, None)
    lst = b.op(
        "TensorListSetItem",
        [_reserve(b, 2, [2]), b.constant(np.int32(0)), x],
        {"element_dtype": np.float32},
        name="set",
    )
    with (
        Session(b.graph_def) as sess,
        pytest.raises(InvalidArgumentError, match=r"incompatible shape.*Item element shape: \[3\]"),
    ):
        sess.run(lst, {"x:0": np.zeros(3, np.float32)})
    b = GraphBuilder()
    lst = b.op(
        "TensorListGetItem",
        [_reserve(b, 2, [2]), b.constant(np.int32(0)), b.constant(np.asarray([2], np.int32))],
        {"element_dtype": np.int32},
        name="get",
    )
    with (
        Session(b.graph_def) as sess,
        pytest.raises(InvalidArgumentError, match="op elements int32 but list elements float32"),
    ):
        sess.run(lst)


def test_a_list_is_never_changed_by_the_ops_that_derive_from_it() -> None:
    """SetItem makes a new list: the list it read (here fetched too) keeps its old element."""
    b = GraphBuilder()
    first = b.op(
        "TensorListFromTensor",
        [b.constant(np.arange(6, dtype=np.float32).reshape(3, 2)), b.constant(np.asarray([2], np.int32))],
        {"element_dtype": np.float32, "shape_type": np.int32},
    )
    second = b.op(
        "TensorListSetItem",
        [first, b.constant(np.int32(0)), b.constant(np.asarray([9.0, 9.0], np.float32))],
        {"element_dtype": np.float32},
    )
    with Session(b.graph_def) as sess:
        a, c = sess.run([first, second])
    old, new = a.item(), c.item()
    assert isinstance(old, TensorList) and isinstance(new, TensorList)
    np.testing.assert_array_equal(old.elements[0], [0.0, 1.0])
    np.testing.assert_array_equal(new.elements[0], [9.0, 9.0])
    assert new.elements[1] is old.elements[1]


def test_variant_tensor_protos_are_refused() -> None:
    from poolserve.proto import tensor_pb2
    from poolserve.runtime.errors import UnimplementedError
    from poolserve.runtime.tensor import to_ndarray

    with pytest.raises(UnimplementedError, match="variant"):
        to_ndarray(tensor_pb2.TensorProto(dtype=types_pb2.DT_VARIANT))


@pytest.mark.anyio
async def test_the_text_model_served_over_kserve() -> None:
    import httpx

    from poolserve.server.app import create_app
    from poolserve.server.config import make_config

    ((ins, outs),) = cases(FIXTURES / "saved" / "text.npz").values()
    ((key, ids),) = ins.items()
    ((out_key, want),) = outs.items()
    app = create_app(make_config({"models": [{"name": "text", "path": str(FIXTURES / "saved" / "text")}]}))
    body = {
        "inputs": [{"name": key, "shape": list(ids.shape), "datatype": "INT32", "data": ids.ravel().tolist()}]
    }
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=10) as c:
            r = await c.post("/v2/models/text/infer", json=body)
    assert r.status_code == 200, r.text
    (out,) = r.json()["outputs"]
    assert out["name"] == out_key and out["shape"] == list(want.shape)
    np.testing.assert_allclose(
        np.asarray(out["data"], np.float32).reshape(want.shape), want, rtol=1e-5, atol=1e-6
    )


def test_concat_takes_an_unset_elements_first_dimension_from_leading_dims() -> None:
    """As TensorFlow 2.21 computes it: leading_dims [1, 2, 3] give elements 0 and 2 lengths 1 and 3."""
    b = GraphBuilder()
    lst = _reserve(b, 3, [-1, 2])
    lst = b.op(
        "TensorListSetItem",
        [lst, b.constant(np.int32(1)), b.constant(np.ones((4, 2), np.float32))],
        {"element_dtype": np.float32},
    )
    joined, lengths = b.op(
        "TensorListConcatV2",
        [lst, b.constant(np.asarray([-1, 2], np.int32)), b.constant(np.asarray([1, 2, 3], np.int64))],
        {"element_dtype": np.float32, "shape_type": np.int32},
        num_outputs=2,
    )
    with Session(b.graph_def) as sess:
        values, sizes = sess.run([joined, lengths])
    np.testing.assert_array_equal(sizes, [1, 4, 3])
    np.testing.assert_array_equal(
        values, np.concatenate([np.zeros((1, 2)), np.ones((4, 2)), np.zeros((3, 2))])
    )


def test_a_scalar_string_a_slice_returns_sets_a_string_list_item() -> None:
    """``s[i]`` of a string vector is a scalar string (bytes): a list of strings takes it as a string tensor
    (a TF1 while loop writing ``table.lookup(s)[i] + "/" + s[i]`` to a TensorArray)."""
    string = np.dtype(object)
    b = GraphBuilder()
    x = b.placeholder("x", string, (None,))
    lst = b.op(
        "TensorListReserve",
        [b.constant(np.asarray([], np.int32)), b.constant(np.int32(2))],
        {"element_dtype": string, "shape_type": np.int32},
    )
    first = b.op(
        "StridedSlice",
        [x, *(b.constant(np.asarray([v], np.int32)) for v in (1, 2, 1))],
        {"Index": np.int32, "shrink_axis_mask": 1},
    )
    joined = b.op("Add", [first, b.constant(np.asarray(b"!", object))], {"T": string})
    lst = b.op("TensorListSetItem", [lst, b.constant(np.int32(0)), joined], {"element_dtype": string})
    lst = b.op("TensorListPushBack", [lst, first], {"element_dtype": string})
    stacked = b.op(
        "TensorListStack", [lst, b.constant(np.asarray([], np.int32))], {"element_dtype": string}, name="out"
    )
    with Session(b.graph_def) as sess:
        got = sess.run(stacked, {"x:0": np.array([b"a", b"bc"], object)})
    assert got.dtype == object and list(got) == [b"bc!", b"", b"bc"]
