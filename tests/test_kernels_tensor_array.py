"""TF1 TensorArrays: a frozen dynamic_rnn / bidirectional_dynamic_rnn graph against TensorFlow's outputs
(tools/make_tensor_array_fixture.py), and each op's rules on hand-made graphs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poolserve import Session, load_graph_def
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError

RNN = Path(__file__).parent / "fixtures" / "rnn"


def test_tf1_dynamic_rnn_matches_tensorflow() -> None:
    data = np.load(RNN / "tf1_dynamic_rnn.npz")
    graph = load_graph_def(RNN / "tf1_dynamic_rnn.pb")
    assert {"TensorArrayV3", "TensorArrayScatterV3", "TensorArrayReadV3", "TensorArrayWriteV3"} <= {
        n.op for n in graph.node
    }
    with Session(graph) as sess:
        for _ in range(2):  # a new array each step
            y, h = sess.run(["y:0", "h:0"], {"x:0": data["x"], "lengths:0": data["lengths"]})
            np.testing.assert_allclose(y, data["y"], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(h, data["h"], rtol=1e-5, atol=1e-6)


def _array(b: GraphBuilder, size: int, **attrs: Any) -> tuple[str, str]:
    handle, flow = b.op(
        "TensorArrayV3",
        [b.constant(np.int32(size))],
        {"dtype": np.float32, "element_shape": attrs.pop("element_shape", None) or _unknown(), **attrs},
        name="ta",
        num_outputs=2,
    )
    return handle, flow


def _unknown() -> Any:
    from poolserve.runtime.builder import shape

    return shape(None)


def _write(b: GraphBuilder, handle: str, index: int, value: Any, flow: str, name: str) -> str:
    return str(
        b.op(
            "TensorArrayWriteV3",
            [handle, b.constant(np.int32(index)), b.constant(np.asarray(value, np.float32)), flow],
            {"T": np.float32},
            name=name,
        )
    )


def test_write_read_gather_concat_and_size() -> None:
    b = GraphBuilder()
    handle, flow = _array(b, 2, dynamic_size=True, clear_after_read=False)
    flow = _write(b, handle, 0, [1.0, 2.0], flow, "w0")
    flow = _write(b, handle, 2, [5.0, 6.0], flow, "w2")  # past the size: the array grows
    size = b.op("TensorArraySizeV3", [handle, flow], name="size")
    read = b.op(
        "TensorArrayReadV3", [handle, b.constant(np.int32(2)), flow], {"dtype": np.float32}, name="read"
    )
    gathered = b.op(
        "TensorArrayGatherV3",
        [handle, b.constant(np.asarray([2, 0], np.int32)), flow],
        {"dtype": np.float32, "element_shape": _unknown()},
        name="gather",
    )
    with Session(b.graph_def) as sess:
        n, r, g = sess.run([size, read, gathered])
    assert n == 3
    np.testing.assert_array_equal(r, [5.0, 6.0])
    np.testing.assert_array_equal(g, [[5.0, 6.0], [1.0, 2.0]])


def test_the_rules_tensorflow_enforces() -> None:
    b = GraphBuilder()
    handle, flow = _array(b, 1)
    w0 = _write(b, handle, 0, [1.0], flow, "w0")
    twice = _write(b, handle, 0, [2.0], w0, "twice")
    past = _write(b, handle, 1, [2.0], flow, "past")
    r1 = b.op("TensorArrayReadV3", [handle, b.constant(np.int32(0)), w0], {"dtype": np.float32}, name="r1")
    r2 = b.op("TensorArrayReadV3", [handle, b.constant(np.int32(0)), r1], {"dtype": np.float32}, name="r2")
    unwritten = b.op(
        "TensorArrayReadV3", [handle, b.constant(np.int32(0)), flow], {"dtype": np.float32}, name="u"
    )
    with Session(b.graph_def) as sess:
        with pytest.raises(InvalidArgumentError, match="because it has already been written to"):
            sess.run(twice)
        with pytest.raises(InvalidArgumentError, match="not resizeable and size is: 1"):
            sess.run(past)
        with pytest.raises(InvalidArgumentError, match="twice because it was cleared after a previous read"):
            sess.run(r2)
        with pytest.raises(InvalidArgumentError, match="because it has not yet been written to"):
            sess.run(unwritten)


def test_strings_written_and_scattered_stay_strings() -> None:
    """A scalar string from a slice (bytes), and a string vector scattered element by element."""
    string = np.dtype(object)
    b = GraphBuilder()
    x = b.placeholder("x", string, (None,))
    handle, flow = b.op(
        "TensorArrayV3",
        [b.constant(np.int32(3))],
        {"dtype": string, "element_shape": _unknown()},
        name="ta",
        num_outputs=2,
    )
    flow = b.op(
        "TensorArrayScatterV3", [handle, b.constant(np.asarray([0, 1], np.int32)), x, flow], {"T": string}
    )
    last = b.op(
        "StridedSlice",
        [x, *(b.constant(np.asarray([v], np.int32)) for v in (0, 1, 1))],
        {"Index": np.int32, "shrink_axis_mask": 1},
    )
    flow = b.op("TensorArrayWriteV3", [handle, b.constant(np.int32(2)), last, flow], {"T": string})
    stacked = b.op(
        "TensorArrayGatherV3",
        [handle, b.constant(np.asarray([2, 1, 0], np.int32)), flow],
        {"dtype": string, "element_shape": _unknown()},
        name="gather",
    )
    with Session(b.graph_def) as sess:
        got = sess.run(stacked, {"x:0": np.array([b"a", b"bc"], object)})
    assert got.dtype == object and list(got) == [b"a", b"bc", b"a"]
