"""Array extras: Roll, ReverseSequence, LinSpace, Empty, Bitcast, the diagonal ops, sorted searches, the
Unique family, ListDiff, InTopK and the debugging pass-throughs (Assert, Print, CheckNumericsV2). Expected
values and messages are TensorFlow 2.21's (tf.raw_ops on the same inputs); tools/op_fuzz_detect.py
compares the kernels with TensorFlow on random cases."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from evaluate import evaluate
from support import run_op

from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.graph import Graph


def i32(v: Any) -> Any:
    return np.array(v, np.int32)


def f32(v: Any) -> Any:
    return np.array(v, np.float32)


def test_roll_adds_shifts_per_axis():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    out = run_op("Roll", [x, np.array([1, -5, 2], np.int64), i32([0, 1, 0])])
    np.testing.assert_array_equal(out, [[1, 2, 3, 0], [5, 6, 7, 4], [9, 10, 11, 8]])
    with pytest.raises(InvalidArgumentError, match="axis 2 is out of range"):
        run_op("Roll", [x, i32(1), i32(2)])


def test_reverse_sequence_reverses_each_prefix():
    seq = np.arange(16, dtype=np.float32).reshape(2, 4, 2)
    out = run_op("ReverseSequence", [seq, np.array([3, 0], np.int64)], {"seq_dim": 1, "batch_dim": 0})
    want = [[[4, 5], [2, 3], [0, 1], [6, 7]], [[8, 9], [10, 11], [12, 13], [14, 15]]]
    np.testing.assert_array_equal(out, f32(want))
    t = run_op("ReverseSequence", [seq.transpose(1, 0, 2), i32([2, 4])], {"seq_dim": 0, "batch_dim": 1})
    want_t = [[[2, 3], [14, 15]], [[0, 1], [12, 13]], [[4, 5], [10, 11]], [[6, 7], [8, 9]]]
    np.testing.assert_array_equal(t, f32(want_t))
    with pytest.raises(InvalidArgumentError, match=re.escape("seq_lens(0) > input.dims(1)")):
        run_op("ReverseSequence", [seq, i32([5, 0])], {"seq_dim": 1, "batch_dim": 0})


def test_lin_space_ends_exactly_at_stop():
    out = run_op("LinSpace", [np.float32(0), np.float32(1), i32(4)])
    np.testing.assert_array_equal(out, f32([0.0, 0.3333333432674408, 0.6666666865348816, 1.0]))
    d = run_op("LinSpace", [np.float64(1 / 3), np.float64(10), np.int64(7)])
    want = [0.3333333333333333, 1.9444444444444442, 3.5555555555555554, 5.166666666666666]
    np.testing.assert_array_equal(d, [*want, 6.777777777777777, 8.38888888888889, 10.0])
    with pytest.raises(InvalidArgumentError, match="Requires num > 0: 0"):
        run_op("LinSpace", [np.float32(0), np.float32(1), i32(0)])


def test_empty_and_bitcast():
    e = run_op("Empty", [i32([2, 3])], {"dtype": np.int32, "init": True})
    np.testing.assert_array_equal(e, np.zeros((2, 3), np.int32))
    with pytest.raises(InvalidArgumentError, match="Dimension -1 must be >= 0"):
        run_op("Empty", [i32([2, -1])], {"dtype": np.float32})
    cast = run_op("Bitcast", [f32([1.0, -2.0])], {"type": np.int32})
    np.testing.assert_array_equal(cast, i32([1065353216, -1073741824]))
    wide = run_op("Bitcast", [i32([[1, 0], [2, 0]])], {"type": np.int64})
    np.testing.assert_array_equal(wide, np.array([1, 2], np.int64))
    narrow = run_op("Bitcast", [np.array([258, 1], np.int16)], {"type": np.uint8})
    np.testing.assert_array_equal(narrow, np.array([[2, 1], [1, 0]], np.uint8))
    with pytest.raises(InvalidArgumentError, match="Cannot bitcast from 3 to 9"):
        run_op("Bitcast", [i32([1, 2, 3])], {"type": np.int64})


def test_diag_and_diag_part():
    out = run_op("Diag", [i32([[1, 2], [3, 4]])])
    assert out.shape == (2, 2, 2, 2)
    np.testing.assert_array_equal(out.reshape(4, 4), np.diag([1, 2, 3, 4]))
    part = run_op("DiagPart", [np.arange(16, dtype=np.float64).reshape(2, 2, 2, 2)])
    np.testing.assert_array_equal(part, [[0.0, 5.0], [10.0, 15.0]])
    with pytest.raises(InvalidArgumentError, match="dimensions 0 and 1 do not match"):
        run_op("DiagPart", [np.zeros((2, 3))])


DIAGS = np.array([[[1, 2, 0], [3, 4, 5], [6, 7, 8]]], np.int32)


@pytest.mark.parametrize(
    ("align", "want"),
    [
        ("RIGHT_LEFT", [[3, 2, 9], [6, 4, 0], [9, 7, 5]]),
        ("LEFT_RIGHT", [[3, 1, 9], [7, 4, 2], [9, 8, 5]]),
        ("LEFT_LEFT", [[3, 1, 9], [6, 4, 2], [9, 7, 5]]),
        ("RIGHT_RIGHT", [[3, 2, 9], [7, 4, 0], [9, 8, 5]]),
    ],
)
def test_matrix_diag_v3_aligns_diagonals(align: str, want: list[Any]):
    out = run_op("MatrixDiagV3", [DIAGS, i32([-1, 1]), i32(-1), i32(-1), i32(9)], {"align": align})
    np.testing.assert_array_equal(out, i32([want]))


def test_matrix_diag_v1_v2_shapes():
    np.testing.assert_array_equal(
        run_op("MatrixDiag", [i32([[1, 2, 3], [4, 5, 6]])]), [np.diag([1, 2, 3]), np.diag([4, 5, 6])]
    )
    rect = run_op("MatrixDiagV2", [f32([1, 2]), i32(1), i32(3), i32(-1), np.float32(0.5)])
    np.testing.assert_array_equal(rect, f32([[0.5, 1, 0.5], [0.5, 0.5, 2], [0.5, 0.5, 0.5]]))
    with pytest.raises(InvalidArgumentError, match="The number of rows is too small."):
        run_op("MatrixDiagV2", [f32([1, 2]), i32(0), i32(1), i32(-1), np.float32(0)])


M = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
NEW = f32([[10, 20, 0], [30, 40, 50], [60, 70, 80], [90, 100, 0]])


@pytest.mark.parametrize(
    ("align", "part", "set_"),
    [
        (
            "RIGHT_LEFT",
            [[-1, 3, 8], [2, 7, 12], [1, 6, 11], [5, 10, -1]],
            [[60, 30, 20, 4], [90, 70, 40, 0], [9, 100, 80, 50]],
        ),
        (
            "LEFT_RIGHT",
            [[3, 8, -1], [2, 7, 12], [1, 6, 11], [-1, 5, 10]],
            [[60, 30, 10, 4], [100, 70, 40, 20], [9, 0, 80, 50]],
        ),
    ],
)
def test_matrix_diag_part_and_set_diag_v3(align: str, part: list[Any], set_: list[Any]):
    got = run_op("MatrixDiagPartV3", [M, i32([-1, 2]), np.float32(-1)], {"align": align})
    np.testing.assert_array_equal(got, f32(part))
    np.testing.assert_array_equal(
        run_op("MatrixSetDiagV3", [M, NEW, i32([-1, 2])], {"align": align}), f32(set_)
    )
    with pytest.raises(InvalidArgumentError, match="lower_diag_index is out of bound: -3"):
        run_op("MatrixDiagPartV3", [M, i32([-3, 0]), np.float32(0)], {"align": align})


def test_lower_and_upper_bound_follow_std_binary_search():
    srt = f32([[1, 3, 3, 5], [0, 0.5, 2, np.nan]])
    vals = f32([[3, 0, 6], [np.nan, 0.5, 9]])
    lower = run_op("LowerBound", [srt, vals], {"out_type": np.int64})
    assert lower.dtype == np.int64
    np.testing.assert_array_equal(lower, [[1, 0, 4], [0, 1, 3]])
    # NaN compares false both ways: past 2, upper_bound of 9 runs over the NaN to the end
    np.testing.assert_array_equal(run_op("UpperBound", [srt, vals]), i32([[3, 0, 4], [4, 2, 4]]))


def test_unique_v2_along_an_axis_and_with_counts():
    u = i32([[1, 2], [3, 4], [1, 2], [0, 0], [3, 4]])
    y, idx = run_op("UniqueV2", [u, np.array([0], np.int64)], num_outputs=2)
    np.testing.assert_array_equal(y, [[1, 2], [3, 4], [0, 0]])
    np.testing.assert_array_equal(idx, i32([0, 1, 0, 2, 1]))
    y, idx = run_op("UniqueV2", [u.T, i32([-1])], num_outputs=2)
    np.testing.assert_array_equal(y, [[1, 3, 0], [2, 4, 0]])
    x = f32([np.nan, 0.0, -0.0, np.nan, 2.0, 0.0])
    y, idx, count = run_op("UniqueWithCounts", [x], {"out_idx": np.int64}, num_outputs=3)
    np.testing.assert_array_equal(y, [np.nan, 0.0, np.nan, 2.0])  # NaNs never equal; 0.0 == -0.0
    np.testing.assert_array_equal(idx, np.array([0, 1, 1, 2, 3, 1], np.int64))
    np.testing.assert_array_equal(count, np.array([1, 3, 1, 1], np.int64))
    halves, hidx = run_op(
        "UniqueV2", [np.array([0.0, -0.0, 0.0], np.float16), np.zeros(0, np.int64)], num_outputs=2
    )
    assert np.signbit(halves).tolist() == [False, True]  # TensorFlow hashes halves by their bits
    np.testing.assert_array_equal(hidx, i32([0, 1, 0]))
    with pytest.raises(InvalidArgumentError, match=re.escape("axis has to be between [0, 2)")):
        run_op("UniqueV2", [u, np.array([2], np.int64)], num_outputs=2)


def test_list_diff_and_in_top_k():
    out, idx = run_op("ListDiff", [i32([1, 2, 3, 4, 5, 6]), i32([1, 3, 5])], num_outputs=2)
    np.testing.assert_array_equal(out, [2, 4, 6])
    np.testing.assert_array_equal(idx, i32([1, 3, 5]))
    s, sidx = run_op(
        "ListDiff", [np.array([b"a", b"b", b"c"], object), np.array([b"b"], object)], num_outputs=2
    )
    assert s.tolist() == [b"a", b"c"] and sidx.tolist() == [0, 2]
    pred = f32([[0.1, 0.5, 0.5, 0.2], [0.3, np.inf, 0.1, 0.2], [0.4, 0.3, 0.2, 0.1]])
    np.testing.assert_array_equal(run_op("InTopKV2", [pred, i32([2, 0, 4]), i32(1)]), [True, False, False])
    np.testing.assert_array_equal(
        run_op("InTopKV2", [pred, np.array([3, 0, 1], np.int64), np.int64(2)]), [False, False, True]
    )


def run_assert(cond: Any, data: list[Any], summarize: int = 3) -> None:
    """An Assert node (no outputs) run as a target."""
    b = GraphBuilder()
    ins = [b.constant(np.asarray(v), dtype=np.asarray(v).dtype) for v in [cond, *data]]
    b.op("Assert", ins, {"T": [d.dtype for d in data], "summarize": summarize}, name="check", num_outputs=0)
    evaluate(Graph(b.graph_def), [], targets=["check"])


def test_assert_passes_or_refuses_with_tensorflows_summary():
    run_assert(np.array(True), [f32(1.0)])
    cases = [
        ([f32([1.5, 2.0, 1 / 3, 4, 5])], 3, "assertion failed: [1.5 2 0.333333343...]"),
        (
            [np.arange(12, dtype=np.int32).reshape(3, 4)],
            10,
            "assertion failed: [[0 1 2 3][4 5 6 7][8 9...]...]",
        ),
        ([np.array(b"hello", object), np.array([b"a", b"b"], object)], 3, "assertion failed: [hello] [a b]"),
        ([f32([1e10, 1e-5, np.nan, np.inf])], 3, "assertion failed: [1e+10 1e-05 nan...]"),
        ([np.array([1e10, 1 / 3, 0.1])], 3, "assertion failed: [10000000000 0.33333333333333331 0.1]"),
        ([np.array([True, False])], -1, "assertion failed: [1 0]"),
        ([np.arange(24).reshape(2, 3, 4)], 2, "assertion failed: [[[0 1...]]...]"),
        ([np.array([1 + 2j], np.complex64)], 3, "assertion failed: [?]"),
        ([np.zeros(0, np.float32)], 3, "assertion failed: []"),
    ]
    for data, summarize, message in cases:
        with pytest.raises(InvalidArgumentError, match=re.escape(message) + r"(\n|$)"):
            run_assert(np.array(False), data, summarize)
    with pytest.raises(InvalidArgumentError, match=re.escape("In[0] should be a scalar: [1]")):
        run_assert(np.array([False]), [f32(1.0)])


def test_print_passes_its_input_and_check_numerics_v2_names_the_infinities(capfd: Any):
    x = f32([1, 2])
    out = run_op("Print", [x, x], {"U": [np.float32], "message": "msg: "})
    np.testing.assert_array_equal(out, x)
    assert "msg: [1 2]" in capfd.readouterr().err
    np.testing.assert_array_equal(run_op("CheckNumericsV2", [x], {"message": "hi"}), x)
    for bad, message in (
        ([1, -np.inf], "hi : Tensor had -Inf values"),
        ([np.inf, -np.inf, np.nan], "hi : Tensor had -Inf, +Inf, and NaN values"),
        ([np.inf, np.nan], "hi : Tensor had +Inf and NaN values"),
    ):
        with pytest.raises(InvalidArgumentError, match=re.escape(message)):
            run_op("CheckNumericsV2", [f32(bad)], {"message": "hi"})
