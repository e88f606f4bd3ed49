"""Segment reductions: sorted, unsorted and sparse. Expected values are TensorFlow 2.21's (tf.raw_ops on the
same inputs); tools/op_fuzz_sparse.py compares the kernels with TensorFlow on random cases."""

from __future__ import annotations

import numpy as np
import pytest
from support import assert_close, run_op

from poolserve.runtime.errors import InvalidArgumentError

DATA = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], np.float32)
I32, I64 = np.int32, np.int64


def _ids(*ids: int, dtype: type = I32) -> np.ndarray:
    return np.array(ids, dtype)


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        ("SegmentSum", [[4, 6], [0, 0], [12, 14]]),
        ("SegmentMean", [[2, 3], [0, 0], [6, 7]]),
        ("SegmentMax", [[3, 4], [0, 0], [7, 8]]),
        ("SegmentMin", [[1, 2], [0, 0], [5, 6]]),
        ("SegmentProd", [[3, 8], [1, 1], [35, 48]]),
    ],
)
def test_sorted_segments_reduce_runs_of_ids_and_fill_gaps(op, expected):
    out = run_op(op, [DATA, _ids(0, 0, 2, 2)], {"Tindices": I32})
    assert_close(out, np.array(expected, np.float32))


def test_sorted_segments_keep_the_dtype_integers_wrap_and_truncate():
    # TensorFlow 2.21's: int16 sums wrap (7 + 32767), integer means truncate toward zero
    out = run_op("SegmentSum", [np.array([7, 32767, 5], np.int16), _ids(0, 0, 1)], {"Tindices": I32})
    assert_close(out, np.array([-32762, 5], np.int16))
    mean = run_op("SegmentMean", [np.array([7, 32767, -7, 2], np.int16), _ids(0, 0, 1, 1)])
    assert_close(mean, np.array([-16381, -2], np.int16))
    # half sums round after each term: 2048 + 1 is 2048 in half
    half = run_op("SegmentSum", [np.array([2048, 1, 1, 1, 1], np.float16), _ids(0, 0, 0, 0, 0)])
    assert_close(half, np.array([2048], np.float16))
    prod = run_op("SegmentProd", [np.array([300, 300, 2], np.float16), _ids(0, 0, 1)])
    assert_close(prod, np.array([np.inf, 2], np.float16))
    cplx = run_op("SegmentMean", [np.array([1 + 2j, 3j], np.complex64), _ids(1, 1)])
    assert_close(cplx, np.array([0, 0.5 + 2.5j], np.complex64))
    empty_max = run_op("SegmentMax", [np.array([[1, 5], [3, -2], [0, 0]], I64), _ids(0, 0, 3, dtype=I64)])
    assert_close(empty_max, np.array([[3, 5], [0, 0], [0, 0], [0, 0]], I64))
    none = run_op("SegmentSum", [np.zeros((0, 3), np.float32), _ids()])
    assert none.shape == (0, 3)


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (_ids(0, 2, 1, 3), "segment ids are not increasing"),
        (_ids(-1, 0, 1, 3), r"Segment id -1 out of range \[0, 4\), possibly because 'segment_ids' input"),
        (_ids(0, 0, 1, -1), "segment ids must be >= 0"),
        (_ids(0, 0, 1), "segment_ids should be the same size as dimension 0 of input"),
        (np.array([[0, 0, 1, 1]], I32), "segment_ids should be a vector"),
    ],
)
def test_sorted_segments_refuse_bad_ids(ids, message):
    with pytest.raises(InvalidArgumentError, match=message):
        run_op("SegmentSum", [DATA, ids])


def test_unsorted_segments_drop_negative_ids_and_fill_with_the_identity():
    data = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    ids = np.array([[1, -1, 0], [1, 1, -1]], I32)
    out = run_op("UnsortedSegmentSum", [data, ids, I32(3)], {"Tindices": I32})
    assert_close(out, np.array([[4, 5], [14, 17], [0, 0]], np.float32))
    ints = run_op(
        "UnsortedSegmentSum", [np.array([[1, 2], [3, 4], [5, 6]], I32), _ids(2, 0, 2, dtype=I64), I64(4)]
    )
    assert_close(ints, np.array([[3, 4], [0, 0], [6, 8], [0, 0]], I32))
    low = run_op("UnsortedSegmentMin", [np.array([5, 3, 9], np.uint8), _ids(1, 1, 0), I32(3)])
    assert_close(low, np.array([9, 3, 255], np.uint8))
    prod = run_op("UnsortedSegmentProd", [np.array([5, 3, 9], I64), _ids(1, 1, -1), I32(3)])
    assert_close(prod, np.array([1, 15, 1], I64))
    high = run_op("UnsortedSegmentMax", [np.array([5, 3, 9], np.float16), _ids(1, 1, -1), I32(3)])
    assert_close(high, np.array([-65504, 5, -65504], np.float16))
    f32 = run_op("UnsortedSegmentMax", [DATA, _ids(3, -1, 0, 0), I32(5)])
    assert f32[1, 0] == np.finfo(np.float32).min


def test_unsorted_segments_refuse_ids_past_num_segments():
    data = np.array([[1, 2], [3, 4]], np.float32)
    with pytest.raises(InvalidArgumentError, match=r"segment_ids\[1,1\] = 3 is out of range \[0, 3\)"):
        run_op("UnsortedSegmentSum", [data, np.array([[0, 2], [1, 3]], I32), I32(3)])
    with pytest.raises(InvalidArgumentError, match="must not be negative"):
        run_op("UnsortedSegmentSum", [data, _ids(0, 1), I32(-1)])
    with pytest.raises(InvalidArgumentError, match="does not start with segment_ids.shape"):
        run_op("UnsortedSegmentSum", [data, _ids(0, 1, 1), I32(2)])


def test_sparse_segments_reduce_the_rows_picked_by_indices():
    data = np.array([[1, 2], [3, 4], [5, 7]], np.float64)
    mean = run_op(
        "SparseSegmentMean", [data, _ids(2, 0, 0, 1, dtype=I64), _ids(1, 1, 1, 3, dtype=I64)], {"Tidx": I64}
    )
    assert_close(mean, np.array([[0, 0], [2.333333333333333, 3.6666666666666665], [0, 0], [3, 4]]))
    sqrtn = run_op(
        "SparseSegmentSqrtNWithNumSegments", [data.astype(np.float32), _ids(2, 0, 1), _ids(0, 0, 2), I32(4)]
    )
    assert_close(
        sqrtn, np.array([[4.242640495300293, 6.3639607429504395], [0, 0], [3, 4], [0, 0]], np.float32)
    )
    ints = run_op(
        "SparseSegmentSumWithNumSegments",
        [np.array([3, 4, 5], np.int8), _ids(2, 2, 1, dtype=I64), _ids(0, 1, 1), I64(3)],
    )
    assert_close(ints, np.array([5, 9, 0], np.int8))
    # half rows are summed in float32: 2048 + 4 ones is 2052
    half = run_op(
        "SparseSegmentSum", [np.array([2048, 1], np.float16), _ids(0, 1, 1, 1, 1), _ids(0, 0, 0, 0, 0)]
    )
    assert_close(half, np.array([2052], np.float16))
    none = run_op("SparseSegmentMeanWithNumSegments", [DATA, _ids(), _ids(), I32(2)])
    assert_close(none, np.zeros((2, 2), np.float32))


@pytest.mark.parametrize(
    ("indices", "ids", "message"),
    [
        (_ids(0, 1, 1, 7), _ids(0, 1, 1, 2), r"Bad: indices\[3\] == 7 out of range \[0, 4\)"),
        (_ids(0, 1, 1, 7), _ids(0, 2, 1, 1), "segment ids are not increasing"),
        (_ids(0, 7, 1, 1), _ids(0, 0, 2, 1), r"Bad: indices\[1\] == 7 out of range \[0, 4\)"),
        (_ids(0, 1), _ids(0, -1), "segment ids must be >= 0"),
        (_ids(0, 1, 2), _ids(0, 1), "segment_ids and indices should have same size"),
    ],
)
def test_sparse_segments_refuse_bad_indices_and_ids(indices, ids, message):
    with pytest.raises(InvalidArgumentError, match=message):
        run_op("SparseSegmentSum", [DATA, indices, ids])


def test_sparse_segments_with_num_segments_refuse_ids_past_it():
    with pytest.raises(InvalidArgumentError, match="segment ids must be < num_segments"):
        run_op("SparseSegmentSumWithNumSegments", [DATA, _ids(0, 1), _ids(0, 2), I32(2)])
