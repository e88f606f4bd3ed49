"""bfloat16 (runtime/bfloat16.py): a Keras ``mixed_bfloat16`` model, frozen and as Keras exports it, gives
TensorFlow's numbers (committed by tools/make_bfloat16_fixture.py), tensors cross TensorProto both ways, fetches are ``ml_dtypes.bfloat16``
arrays, and float32 -> bfloat16 rounds as TensorFlow's kernels round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from support import rewrite_config

from poolserve.proto import tensor_pb2, types_pb2
from poolserve.runtime import bfloat16, dtypes
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.saved_model import load_saved_model
from poolserve.runtime.session import Session
from poolserve.runtime.tensor import from_ndarray, to_ndarray

MODELS = Path(__file__).parent / "fixtures" / "models"
BF16 = np.dtype(ml_dtypes.bfloat16)

# float32 values and what TensorFlow 2.21's Cast makes of them (16-bit patterns): a tie to even, a tie
# rounded up to even, just above a tie, near the float32 maximum, NaN
EDGES = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, 3.0e38, np.nan], np.float32)
ROUNDED = [16256, 16258, 16257, 32610, 32704]
TRUNCATED = [16256, 16257, 16256, 32609, 32704]


def fixture(name: str = "bfloat16") -> tuple[Graph, dict[str, Any], dict[str, Any]]:
    with np.load(MODELS / f"{name}.npz") as data:
        bf16 = set(data["bfloat16"].tolist())
        arrays = {k: data[k].view(BF16) if k in bf16 else data[k] for k in data.files if k != "bfloat16"}
    feeds = {k[3:]: v for k, v in arrays.items() if k.startswith("in:")}
    want = {k[4:]: v for k, v in arrays.items() if k.startswith("out:")}
    return Graph(load_graph_def(MODELS / f"{name}.pb")), feeds, want


def assert_tensorflows(got: list[Any], want: dict[str, Any]) -> None:
    for (name, w), g in zip(want.items(), got, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, name
        if w.dtype == BF16:  # every bfloat16 element is TensorFlow's, bit for bit
            np.testing.assert_array_equal(g.view(np.uint16), w.view(np.uint16), err_msg=name)
        else:  # the float32 softmax after them: within a float32 rounding
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.parametrize(
    "cfg", [None, rewrite_config(disable_meta_optimizer=True)], ids=["default", "optimizer_off"]
)
def test_a_mixed_bfloat16_keras_model_gives_tensorflows_numbers(cfg: Any) -> None:
    # Conv2D + ReLU, Dense + ReLU in bfloat16, LayerNormalization, a float32 Dense + softmax; a bfloat16
    # placeholder through a bfloat16 constant, a MatMul (which TensorFlow truncates), casts, and Sigmoid
    # and SquaredDifference, which TensorFlow rounds step by step (runtime/bfloat16.STEPWISE)
    graph, feeds, want = fixture()
    assert not graph.unavailable
    with Session(graph, cfg) as s:
        got = s.run(list(want), feeds)
    assert_tensorflows(got, want)


@pytest.mark.parametrize("name", ["bfloat16_loop_v1", "bfloat16_loop"])
def test_bfloat16_loop_variables_cond_and_tensor_arrays_give_tensorflows_numbers(name: str) -> None:
    # v1 frames (Enter, Merge, Switch, NextIteration run on bfloat16 arrays as they are) and functional
    # StatelessWhile/StatelessIf (their bodies' nodes bound like any graph's), a TensorList of bfloat16
    graph, feeds, want = fixture(name)
    assert not graph.unavailable
    with Session(graph) as s:
        assert_tensorflows(s.run(list(want), feeds), want)


def test_bfloat16_tensor_protos_round_trip() -> None:
    value = np.array([[1.5, -2.25, 0.0], [np.inf, -0.0, 3.0e38]], BF16)
    proto = from_ndarray(value)
    assert proto.dtype == types_pb2.DT_BFLOAT16 and len(proto.tensor_content) == 12  # as TensorFlow writes it
    back = to_ndarray(proto)
    assert back.dtype == BF16
    np.testing.assert_array_equal(back.view(np.uint16), value.view(np.uint16))
    # a scalar as TensorFlow writes one: the 16-bit pattern in half_val, which also fills a larger shape
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_BFLOAT16, half_val=[0xBFC0])  # -1.5
    proto.tensor_shape.dim.add(size=3)
    np.testing.assert_array_equal(to_ndarray(proto).astype(np.float32), [-1.5, -1.5, -1.5])
    # float32 values encoded as bfloat16 round to nearest even, as TensorFlow's Cast does
    proto = from_ndarray(EDGES, types_pb2.DT_BFLOAT16)
    np.testing.assert_array_equal(np.frombuffer(proto.tensor_content, np.uint16), ROUNDED)
    assert dtypes.name(types_pb2.DT_BFLOAT16) == "bfloat16"
    assert dtypes.from_numpy(BF16) == types_pb2.DT_BFLOAT16


def cast_graph(truncate: bool) -> Any:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, None)
    b.op("Cast", [x], {"SrcT": np.float32, "DstT": BF16, "Truncate": truncate}, name="bf")
    return b.graph_def


@pytest.mark.parametrize(("truncate", "want"), [(False, ROUNDED), (True, TRUNCATED)])
def test_cast_to_bfloat16_rounds_or_truncates_as_tensorflow(truncate: bool, want: list[int]) -> None:
    with Session(cast_graph(truncate)) as s:
        got = s.run("bf:0", {"x:0": EDGES})
        scalar = s.run("bf:0", {"x:0": EDGES[2]})
    assert got.dtype == BF16
    np.testing.assert_array_equal(got.view(np.uint16), want)
    assert scalar.shape == () and scalar.view(np.uint16) == want[2]


def test_a_bfloat16_placeholder_takes_float32_and_bfloat16_values_and_fetches_are_bfloat16() -> None:
    b = GraphBuilder()
    y = b.placeholder("y", BF16, [None, 2])
    w = b.constant(np.array([[1.0, 2.0], [3.0, -1.0]], BF16))
    b.matmul(y, w, name="mm")
    b.op("Relu", [b.add(y, b.constant(np.array(1.5, BF16)), name="add")], {"T": BF16}, name="relu")
    with Session(b.graph_def) as s:
        for fed in ([[1.0, -4.0]], np.array([[1.0, -4.0]], np.float32), np.array([[1.0, -4.0]], BF16)):
            mm, relu = s.run(["mm:0", "relu:0"], {"y:0": fed})
            assert mm.dtype == relu.dtype == BF16
            np.testing.assert_array_equal(mm.astype(np.float32), [[-11.0, 6.0]])
            np.testing.assert_array_equal(relu.astype(np.float32), [[2.5, 0.0]])
        # float32 feeds round to nearest even, as TensorFlow's Session converts them
        got = s.run("add:0", {"y:0": np.stack([EDGES[:2], EDGES[2:4]])})
        np.testing.assert_array_equal(
            got.view(np.uint16),
            (np.array([ROUNDED[:2], ROUNDED[2:4]], np.uint16).view(BF16) + BF16.type(1.5)).view(np.uint16),
        )


def test_matmul_truncates_its_float32_sum_as_tensorflow() -> None:
    # TensorFlow's CPU MatMul sums in float32 and keeps the upper 16 bits: 1 + 3/256 becomes 1 + 2/256
    b = GraphBuilder()
    y = b.placeholder("y", BF16, [1, 2])
    b.matmul(y, b.constant(np.array([[1.0], [1.0]], BF16)), name="mm")
    with Session(b.graph_def) as s:
        got = s.run("mm:0", {"y:0": np.array([[1.0, 3 * 2**-8]], BF16)})
    assert got.item() == 1 + 2 * 2**-8


def test_the_same_model_as_keras_exports_it_gives_tensorflows_numbers() -> None:
    # model.export: float32 resource variables, read and cast to bfloat16 inside the called function
    saved = Path(__file__).parent / "fixtures" / "saved_models" / "keras3_bfloat16"
    with np.load(saved.with_suffix(".npz")) as data:
        bf16 = set(data["bfloat16"].tolist())
        x = data["in:x"]
        want = {
            k[4:]: data[k].view(BF16) if k in bf16 else data[k] for k in data.files if k.startswith("out:")
        }
    model = load_saved_model(saved)
    try:
        got = model.run({"x": x})
    finally:
        model.close()
    assert sorted(got) == sorted(want) and bf16
    for name, w in want.items():
        assert got[name].dtype == w.dtype and got[name].shape == w.shape, name
        if w.dtype == BF16:
            np.testing.assert_array_equal(got[name].view(np.uint16), w.view(np.uint16), err_msg=name)
        else:
            np.testing.assert_allclose(got[name], w, rtol=1e-6, atol=1e-7, err_msg=name)


_I = np.int32
_MOVES = {
    "Transpose": lambda b, x, dt: b.op(
        "Transpose", [x, b.constant(np.array([2, 0, 1], _I))], {"T": dt, "Tperm": _I}
    ),
    "ConcatV2": lambda b, x, dt: b.op("ConcatV2", [x, x, b.constant(_I(1))], {"T": dt, "N": 2, "Tidx": _I}),
    "Pack": lambda b, x, dt: b.op("Pack", [x, x], {"T": dt, "N": 2, "axis": 1}),
    "Unpack": lambda b, x, dt: b.op("Unpack", [x], {"T": dt, "num": 4, "axis": 0}),
    "Slice": lambda b, x, dt: b.op(
        "Slice",
        [x, b.constant(np.array([1, 2, 0], _I)), b.constant(np.array([2, -1, 3], _I))],
        {"T": dt, "Index": _I},
    ),
    "StridedSlice": lambda b, x, dt: b.op(
        "StridedSlice",
        [x, *(b.constant(np.array(v, _I)) for v in ([0, 1, 0], [4, 6, 5], [2, 2, -1]))],
        {"T": dt, "Index": _I, "begin_mask": 0, "end_mask": 0, "ellipsis_mask": 0, "new_axis_mask": 0}
        | {"shrink_axis_mask": 0},
    ),
    "GatherV2": lambda b, x, dt: b.op(
        "GatherV2",
        [x, b.constant(np.array([3, 0, 3], _I)), b.constant(_I(1))],
        {"Tparams": dt, "Tindices": _I, "Taxis": _I, "batch_dims": 0},
    ),
    "Tile": lambda b, x, dt: b.op(
        "Tile", [x, b.constant(np.array([1, 2, 1], _I))], {"T": dt, "Tmultiples": _I}
    ),
    "ReverseV2": lambda b, x, dt: b.op(
        "ReverseV2", [x, b.constant(np.array([1], _I))], {"T": dt, "Tidx": _I}
    ),
    "Split": lambda b, x, dt: b.op("Split", [b.constant(_I(1)), x], {"T": dt, "num_split": 2}),
    "Pad": lambda b, x, dt: b.op(
        "Pad", [x, b.constant(np.array([[1, 0], [0, 2], [1, 1]], _I))], {"T": dt, "Tpaddings": _I}
    ),
    "Fill": lambda b, x, dt: b.op(
        "Fill",
        [
            b.constant(np.array([2, 3], _I)),
            b.op("Max", [x, b.constant(np.array([0, 1, 2], _I))], {"T": dt, "Tidx": _I}),
        ],
        {"T": dt, "index_type": _I},
    ),
    "ZerosLike": lambda b, x, dt: b.op("ZerosLike", [x], {"T": dt}),
}


@pytest.mark.parametrize("op", sorted(_MOVES))
def test_ops_that_move_bfloat16_values_run_on_them_as_they_are(op: str) -> None:
    # bit for bit what the op gives on the same values in float32, without the casts
    assert op in bfloat16.NATIVE
    x = np.random.default_rng(0).standard_normal((4, 6, 5)).astype(BF16)
    results = []
    for dt, value in ((BF16, x), (np.float32, x.astype(np.float32))):
        b = GraphBuilder()
        out = _MOVES[op](b, b.placeholder("x", dt, None), dt)
        with Session(b.graph_def) as s:
            results.append(s.run(out, {"x:0": value}))
    got, want = results
    assert got.dtype == BF16 and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint16), want.astype(BF16).view(np.uint16))
