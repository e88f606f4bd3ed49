"""Sparse tensors and scatters. Expected values are TensorFlow 2.21's (tf.raw_ops on the same inputs);
tools/op_fuzz_sparse.py compares the kernels with TensorFlow on random cases."""

from __future__ import annotations

import numpy as np
import pytest
from support import assert_close, run_op

from poolserve.runtime.errors import InvalidArgumentError

I32, I64, F32 = np.int32, np.int64, np.float32


def _strings(*items: bytes) -> np.ndarray:
    return np.array(items, dtype=object)


def _to_dense(indices, shape, values, default, validate=True):
    attrs = {
        "T": np.asarray(values).dtype,
        "Tindices": np.asarray(indices).dtype,
        "validate_indices": validate,
    }
    return run_op("SparseToDense", [indices, shape, values, default], attrs)


def test_sparse_to_dense_scatters_values_over_the_default():
    idx = np.array([[0, 1], [2, 0]], I64)
    out = _to_dense(idx, np.array([3, 2], I64), np.array([5, 6], F32), F32(-1))
    assert_close(out, np.array([[-1, 5], [-1, -1], [6, -1]], F32))
    one_value = _to_dense(idx, np.array([3, 2], I64), F32(7), F32(0))
    assert_close(one_value, np.array([[0, 7], [0, 0], [7, 0]], F32))
    words = _to_dense(np.array([1, 3], I32), np.array([5], I32), _strings(b"a", b"b"), np.array(b"-", object))
    assert words.tolist() == [b"-", b"a", b"-", b"b", b"-"]
    # unvalidated: any order, and the last of repeated indices wins
    loose = _to_dense(
        np.array([[2, 0], [0, 1], [0, 1]], I64),
        np.array([3, 2], I64),
        np.array([5, 6, 8], F32),
        F32(0),
        False,
    )
    assert_close(loose, np.array([[0, 8], [0, 0], [5, 0]], F32))


@pytest.mark.parametrize(
    ("indices", "validate", "message"),
    [
        ([[2, 0], [0, 1]], True, r"indices\[1\] = \[0,1\] is out of order"),
        ([[0, 1], [0, 1]], True, r"indices\[1\] = \[0,1\] is repeated"),
        ([[0, 1], [3, 1]], True, r"indices\[1\] = \[3,1\] is out of bounds: need 0 <= index < \[3,2\]"),
        ([[0, 1], [-1, 1]], False, r"Indices are not valid \(out of bounds\).  Shape: \[3,2\]"),
    ],
)
def test_sparse_to_dense_refuses_bad_indices(indices, validate, message):
    with pytest.raises(InvalidArgumentError, match=message):
        _to_dense(np.array(indices, I64), np.array([3, 2], I64), np.array([5, 6], F32), F32(-1), validate)


def test_sparse_to_dense_refuses_bad_shapes():
    idx = np.array([[0, 1], [2, 0]], I64)
    with pytest.raises(
        InvalidArgumentError, match=r"sparse_values has incorrect shape \[3\], should be \[\] or \[2\]"
    ):
        _to_dense(idx, np.array([3, 2], I64), np.zeros(3, F32), F32(0))
    with pytest.raises(
        InvalidArgumentError, match="output_shape has incorrect number of elements: 3 should be: 2"
    ):
        _to_dense(idx, np.array([3, 2, 1], I64), np.zeros(2, F32), F32(0))
    with pytest.raises(InvalidArgumentError, match="Dimension -1 must be >= 0"):
        _to_dense(idx[:0], np.array([2, -1], I64), np.zeros(0, F32), F32(0))
    with pytest.raises(InvalidArgumentError, match="default_value should be a scalar"):
        _to_dense(idx, np.array([3, 2], I64), np.zeros(2, F32), np.zeros(1, F32))


def _matmul(indices, values, shape, b, adjoint_a=False, adjoint_b=False):
    attrs = {"T": b.dtype, "Tindices": indices.dtype, "adjoint_a": adjoint_a, "adjoint_b": adjoint_b}
    return run_op("SparseTensorDenseMatMul", [indices, values, np.array(shape, I64), b], attrs)


def test_sparse_tensor_dense_matmul():
    idx = np.array([[0, 1], [2, 0], [0, 1]], I64)  # a repeated entry adds
    b = np.arange(6, dtype=F32).reshape(2, 3)
    want = np.array([[12, 16, 20], [0, 0, 0], [0, 2, 4]], F32)
    assert_close(_matmul(idx, np.array([1, 2, 3], F32), (3, 2), b), want)
    assert_close(_matmul(idx, np.array([1, 2, 3], F32), (3, 2), b.T.copy(), adjoint_b=True), want)
    ints = _matmul(
        np.array([[0, 0], [1, 2]], I64),
        np.array([2, 3], I32),
        (2, 3),
        np.array([[1, 2], [3, 4], [5, 6]], I32),
    )
    assert_close(ints, np.array([[2, 4], [15, 18]], I32))
    # adjoints conjugate
    cplx = _matmul(
        np.array([[1, 0], [0, 2]], I32),
        np.array([1 + 1j, 2j], np.complex64),
        (2, 3),
        np.array([[1, 1j]], np.complex64),
        adjoint_a=True,
        adjoint_b=True,
    )
    assert_close(cplx, np.array([[-1 - 1j], [0], [-2j]], np.complex64))


def test_sparse_tensor_dense_matmul_refuses_entries_outside_a():
    b = np.arange(6, dtype=F32).reshape(2, 3)
    with pytest.raises(InvalidArgumentError, match=r"k \(5\) from index\[0,1\] out of bounds \(>=2\)"):
        _matmul(np.array([[0, 5]], I64), np.ones(1, F32), (3, 2), b)
    with pytest.raises(InvalidArgumentError, match=r"m \(2\) from index\[1,0\] out of bounds \(>=2\)"):
        _matmul(np.array([[0, 1], [2, 0]], I64), np.ones(2, F32), (2, 2), b)
    with pytest.raises(InvalidArgumentError, match="inner dimension does not match: 3 vs. 2"):
        _matmul(np.array([[0, 1]], I64), np.ones(1, F32), (3, 3), b)
    with pytest.raises(InvalidArgumentError, match="Number of rows of a_indices does not match"):
        _matmul(np.array([[0, 1]], I64), np.ones(2, F32), (3, 2), b)
    # nothing to compute: no entry is checked
    assert _matmul(np.array([[4, 0]], I64), np.ones(1, F32), (3, 2), b[:, :0]).shape == (3, 0)


def test_sparse_fill_empty_rows_fills_each_empty_row_with_the_default():
    idx = np.array([[0, 1], [3, 0], [0, 0]], I64)
    out = run_op(
        "SparseFillEmptyRows", [idx, np.array([1, 2, 3], F32), np.array([5, 2], I64), F32(-1)], num_outputs=4
    )
    indices, values, empty, reverse = out
    assert_close(indices, np.array([[0, 1], [0, 0], [1, 0], [2, 0], [3, 0], [4, 0]], I64))
    assert_close(values, np.array([1, 3, -1, -1, 2, -1], F32))
    assert_close(empty, np.array([False, True, True, False, True]))
    assert_close(reverse, np.array([0, 4, 1], I64))
    words = run_op(
        "SparseFillEmptyRows",
        [
            np.array([[1, 9], [0, -3]], I64),
            _strings(b"a", b"b"),
            np.array([3, 2], I64),
            np.array(b"", object),
        ],
        num_outputs=4,
    )
    assert words[0].tolist() == [[0, -3], [1, 9], [2, 0]]
    assert words[1].tolist() == [b"b", b"a", b""]
    assert words[3].tolist() == [1, 0]


def test_sparse_fill_empty_rows_refuses_rows_outside_the_shape():
    with pytest.raises(InvalidArgumentError, match=r"indices\(1, 0\) is invalid: 3 >= 3"):
        run_op(
            "SparseFillEmptyRows",
            [np.array([[0, 1], [3, 0]], I64), np.ones(2, F32), np.array([3, 2], I64), F32(0)],
            num_outputs=4,
        )
    with pytest.raises(InvalidArgumentError, match=r"dense_shape\[0\] = 0 but indices.shape\[0\] = 1"):
        run_op(
            "SparseFillEmptyRows",
            [np.array([[0, 1]], I64), np.ones(1, F32), np.array([0, 2], I64), F32(0)],
            num_outputs=4,
        )


def test_sparse_reshape_moves_indices_to_the_new_shape():
    idx = np.array([[0, 1], [2, 3], [1, 0]], I64)
    indices, shape = run_op(
        "SparseReshape", [idx, np.array([3, 4], I64), np.array([2, -1, 3], I64)], num_outputs=2
    )
    assert_close(indices, np.array([[0, 0, 1], [1, 1, 2], [0, 1, 1]], I64))
    assert_close(shape, np.array([2, 2, 3], I64))
    scalar, _ = run_op(
        "SparseReshape", [np.zeros((1, 0), I64), np.zeros(0, I64), np.array([-1], I64)], num_outputs=2
    )
    assert_close(scalar, np.zeros((1, 1), I64))


@pytest.mark.parametrize(
    ("new_shape", "message"),
    [
        ([5, -1], "requires a multiple of 5. input_shape=\\[3,4\\] output_shape=\\[5,1\\]"),
        ([-1, -1], "only one output dimension may be -1, not both 0 and 1"),
        ([-2, 6], "size 0 must be non-negative, not -2"),
        ([5, 2], "the requested shape has 10"),
    ],
)
def test_sparse_reshape_refuses_shapes_of_another_size(new_shape, message):
    idx = np.array([[0, 1]], I64)
    with pytest.raises(InvalidArgumentError, match=message):
        run_op("SparseReshape", [idx, np.array([3, 4], I64), np.array(new_shape, I64)], num_outputs=2)


def test_sparse_reorder_sorts_indices_in_row_major_order():
    idx = np.array([[1, 0], [0, 3], [1, -1], [0, 1]], I64)  # indices are not checked against the shape
    indices, values = run_op(
        "SparseReorder", [idx, _strings(b"w", b"x", b"y", b"z"), np.array([2, 4], I64)], num_outputs=2
    )
    assert indices.tolist() == [[0, 1], [0, 3], [1, -1], [1, 0]]
    assert values.tolist() == [b"z", b"x", b"y", b"w"]
    with pytest.raises(InvalidArgumentError, match=r"Index rank \(2\) and shape rank \(3\) do not match"):
        run_op("SparseReorder", [idx, np.ones(4, F32), np.array([2, 4, 1], I64)], num_outputs=2)


def test_scatter_nd_sums_repeated_indices():
    idx = np.array([[[0, 1], [1, 1]], [[0, 1], [2, 0]]], I64)
    out = run_op("ScatterNd", [idx, np.array([[1, 2], [3, 4]], F32), np.array([3, 2], I64)], {"T": F32})
    assert_close(out, np.array([[0, 4], [0, 2], [4, 0]], F32))
    rows = run_op(
        "ScatterNd", [np.array([[1], [3]], I32), np.ones((2, 3), F32), np.array([4, 3], I32)], {"T": F32}
    )
    assert_close(rows, np.array([[0, 0, 0], [1, 1, 1], [0, 0, 0], [1, 1, 1]], F32))
    words = run_op(
        "ScatterNd",
        [np.array([[1], [1], [0]], I32), _strings(b"a", b"b", b"c"), np.array([2], I32)],
        {"T": np.dtype(object)},
    )
    assert words.tolist() == [b"c", b"ab"]


def test_scatter_nd_refuses_or_drops_indices_outside_the_shape():
    idx = np.array([[1], [-1]], I32)
    with pytest.raises(
        InvalidArgumentError, match=r"indices\[1\] = \[-1\] does not index into shape \[5,5\]"
    ):
        run_op("ScatterNd", [idx, np.ones((2, 5), F32), np.array([5, 5], I32)], {"T": F32})
    kept = run_op(
        "ScatterNd",
        [idx, np.ones((2, 2), F32), np.array([2, 2], I32)],
        {"T": F32, "bad_indices_policy": "IGNORE"},
    )
    assert_close(kept, np.array([[0, 0], [1, 1]], F32))
    with pytest.raises(InvalidArgumentError, match=r"Indices and updates specified for empty output"):
        run_op("ScatterNd", [np.zeros((1, 1), I32), np.ones((1, 5), F32), np.array([0, 5], I32)], {"T": F32})
    with pytest.raises(InvalidArgumentError, match="bad_indices_policy"):
        run_op(
            "ScatterNd",
            [idx, np.ones((2, 2), F32), np.array([2, 2], I32)],
            {"T": F32, "bad_indices_policy": "X"},
        )


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ("TensorScatterUpdate", [[3, 3], [2, 3], [9, 10]]),
        ("TensorScatterAdd", [[3, 4], [2, 3], [14, 14]]),
        ("TensorScatterSub", [[-3, -2], [2, 3], [-6, -4]]),
        ("TensorScatterMax", [[3, 3], [2, 3], [9, 10]]),
        ("TensorScatterMin", [[0, 1], [2, 3], [1, -1]]),
    ],
)
def test_tensor_scatters_combine_updates_with_the_tensor(op, expected):
    tensor = np.arange(6, dtype=F32).reshape(3, 2)
    if op == "TensorScatterUpdate":  # unique indices: TensorFlow does not say which repeated update wins
        idx, updates = np.array([[2], [0]], I32), np.array([[9, 10], [3, 3]], F32)
    else:
        idx, updates = np.array([[2], [0], [2]], I32), np.array([[9, -1], [3, 3], [1, 10]], F32)
    assert_close(run_op(op, [tensor, idx, updates]), np.array(expected, F32))


def test_tensor_scatters_keep_the_dtype_and_refuse_bad_indices():
    wrapped = run_op(
        "TensorScatterAdd",
        [np.array([1, 2], np.uint8), np.array([[1], [1]], I32), np.array([255, 3], np.uint8)],
    )
    assert_close(wrapped, np.array([1, 4], np.uint8))
    words = run_op("TensorScatterUpdate", [_strings(b"x", b"y"), np.array([[1]], I32), _strings(b"z")])
    assert words.tolist() == [b"x", b"z"]
    tensor = np.arange(6, dtype=F32).reshape(3, 2)
    with pytest.raises(
        InvalidArgumentError, match=r"indices\[0\] = \[3, 1\] does not index into shape \[3,2\]"
    ):
        run_op("TensorScatterAdd", [tensor, np.array([[3, 1]], I32), np.array([10], F32)])
    ignored = run_op(
        "TensorScatterMin",
        [tensor, np.array([[3, 1], [0, 0]], I32), np.array([-4, -5], F32)],
        {"bad_indices_policy": "IGNORE"},
    )
    assert_close(ignored, np.array([[-5, 1], [2, 3], [4, 5]], F32))
    with pytest.raises(
        InvalidArgumentError, match=r"Dimensions \[0,1\) of indices\[shape=\[1\]\] = 1 must match"
    ):
        run_op("TensorScatterUpdate", [np.zeros((5, 5), F32), np.array([3], I32), np.ones(5, F32)])
