"""Array kernels. Expected values are numpy references or values checked against TensorFlow 2.21."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from evaluate import evaluate
from support import assert_close, run_op

from poolserve.runtime.builder import GraphBuilder, shape
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.graph import Graph
from poolserve.runtime.kernels import KERNELS

X = np.arange(6, dtype=np.float32).reshape(2, 3)
P = np.arange(10, dtype=np.float32).reshape(5, 2)


def i32(v: Any) -> Any:
    return np.array(v, np.int32)


def i64(v: Any) -> Any:
    return np.array(v, np.int64)


def fails(
    op: str, inputs: list[Any], message: str, attrs: dict[str, Any] | None = None, outputs: int = 1
) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        run_op(op, inputs, attrs, num_outputs=outputs)


# --- sources and identities ------------------------------------------------------------------------------------


def test_const_is_read_only_and_checks_its_dtype():
    b = GraphBuilder()
    t = b.constant(X)
    (out,) = evaluate(Graph(b.graph_def), [t])
    assert_close(out, X)
    assert not out.flags.writeable

    bad = GraphBuilder()
    bad.op("Const", [], {"dtype": np.int32, "value": X}, name="c")
    with pytest.raises(InvalidArgumentError, match="value has dtype float32, attr dtype is int32"):
        Graph(bad.graph_def)


def test_placeholder_needs_a_feed():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 3))
    y = b.identity(x)
    graph = Graph(b.graph_def)
    assert_close(evaluate(graph, [y], {x: X})[0], X)
    with pytest.raises(
        InvalidArgumentError,
        match=re.escape(
            "You must feed a value for placeholder tensor 'x' with dtype float32 and shape [?,3]"
        ),
    ):
        evaluate(graph, [y])


def test_placeholder_with_default_uses_the_feed_when_given():
    b = GraphBuilder()
    d = b.constant(X, name="d")
    p = b.op("PlaceholderWithDefault", [d], {"dtype": np.float32, "shape": shape([None, 3])}, name="p")
    graph = Graph(b.graph_def)
    assert_close(evaluate(graph, [p])[0], X)
    assert_close(evaluate(graph, [p], {p: X + 1})[0], X + 1)


@pytest.mark.parametrize("op", ["Identity", "StopGradient", "Snapshot", "PreventGradient"])
def test_identities(op):
    assert_close(run_op(op, [X]), X)
    strings = run_op(op, [np.array([b"a", b"bc"])])
    assert strings.dtype == object
    assert strings.tolist() == [b"a", b"bc"]


def test_identity_n_and_no_op():
    a, c = run_op("IdentityN", [X, i32([1, 2])], {"T": [np.float32, np.int32]}, num_outputs=2)
    assert_close(a, X)
    assert_close(c, i32([1, 2]))

    b = GraphBuilder()
    x = b.constant(X)
    done = b.no_op(control_inputs=[x])
    graph = Graph(b.graph_def)
    assert graph.num_outputs[done] == 0
    assert evaluate(graph, [x], targets=[done])[0].shape == (2, 3)


def test_fill_zeros_like_ones_like():
    assert_close(run_op("Fill", [i32([2, 1]), np.float32(3)]), np.full((2, 1), 3, np.float32))
    assert_close(run_op("Fill", [i64([2]), np.int8(3)]), np.array([3, 3], np.int8))
    assert_close(run_op("Fill", [i32([]), np.float32(3)]), np.float32(3))
    assert_close(run_op("Fill", [i32([0, 4]), np.float32(3)]), np.zeros((0, 4), np.float32))
    assert run_op("Fill", [i32([2]), np.array(b"ab")]).tolist() == [b"ab", b"ab"]
    fails("Fill", [i32([[2]]), np.float32(1)], "dims must represent a vector, got shape [1,1]")
    fails("Fill", [i32([2]), np.float32([1, 2])], "value must represent a scalar, got shape [2]")
    fails("Fill", [i32([2, -1]), np.float32(1)], "Dimension -1 must be >= 0")

    assert_close(run_op("ZerosLike", [X]), np.zeros_like(X))
    assert_close(run_op("ZerosLike", [np.array([1 + 2j], np.complex64)]), np.zeros(1, np.complex64))
    assert run_op("ZerosLike", [np.array([b"a"])]).tolist() == [b""]
    assert_close(run_op("OnesLike", [np.array([False, True])]), np.array([True, True]))
    assert_close(run_op("OnesLike", [np.zeros((0, 2), np.int64)]), np.zeros((0, 2), np.int64))


def test_range_values_and_dtypes():
    assert_close(run_op("Range", [i32(0), i32(5), i32(2)]), i32([0, 2, 4]))
    assert_close(run_op("Range", [i64(10), i64(1), i64(-3)]), i64([10, 7, 4]))
    assert_close(run_op("Range", [i32(3), i32(3), i32(1)]), i32([]))
    assert_close(run_op("Range", [i32([0]), i32(3), i32(1)]), i32([0, 1, 2]))  # one-element vectors pass
    # start + i * delta in float32, as TensorFlow computes it (0.90000004, not 0.9 accumulated).
    got = run_op("Range", [np.float32(0), np.float32(1), np.float32(0.1)])
    assert got.dtype == np.float32
    assert got.tolist() == (np.arange(10, dtype=np.float32) * np.float32(0.1)).tolist()
    assert got[-1] == np.float32(0.90000004)
    half = run_op("Range", [np.float16(0), np.float16(3), np.float16(0.7)])
    assert_close(half, np.array([0, 0.7, 1.4, 2.102, 2.8], np.float16), rtol=0, atol=0)
    start, delta = np.float64(0.11540925535470947), np.float64(3.1920740682581297)
    f64 = run_op("Range", [start, np.float64(6.919272724255411), delta])
    assert f64.tolist() == [start, start + delta, start + 2 * delta]


def test_range_errors():
    fails("Range", [i32(0), i32(5), i32(0)], "Requires delta != 0: 0")
    fails("Range", [i32(5), i32(0), i32(1)], "Requires start <= limit when delta > 0: 5/0")
    fails("Range", [i32(0), i32(5), i32(-1)], "Requires start >= limit when delta < 0: 0/5")
    fails("Range", [np.float32(0), np.float32(np.nan), np.float32(1)], "when delta > 0: 0/nan")
    f32 = np.float32
    fails("Range", [f32(1.5), f32(2.5), f32(0)], "Requires delta != 0: 0")
    fails("Range", [f32(5.5), f32(0), f32(1)], "Requires start <= limit when delta > 0: 5.5/0")
    fails("Range", [f32(0), f32(2.5), f32(-1)], "Requires start >= limit when delta < 0: 0/2.5")
    fails(
        "Range", [np.float32(0), np.float32(np.inf), np.float32(1)], "Requires ((limit - start) / delta) <="
    )
    fails("Range", [i32([0, 1]), i32(5), i32(1)], "start must be a scalar, not shape [2]")


# --- shapes ------------------------------------------------------------------------------------------------------


def test_shape_size_rank():
    empty = np.zeros((2, 0, 3), np.float32)
    assert_close(run_op("Shape", [empty]), i32([2, 0, 3]))
    assert_close(run_op("Shape", [empty], {"out_type": np.int64}), i64([2, 0, 3]))
    assert_close(run_op("Shape", [np.float32(1)]), i32([]))
    assert_close(run_op("Size", [X]), np.int32(6))
    assert_close(run_op("Size", [empty], {"out_type": np.int64}), np.int64(0))
    assert_close(run_op("Rank", [empty]), np.int32(3))
    a, b = run_op("ShapeN", [X, P], {"N": 2, "out_type": np.int64}, num_outputs=2)
    assert_close(a, i64([2, 3]))
    assert_close(b, i64([5, 2]))
    with pytest.raises(InvalidArgumentError, match="attr 'out_type' must be int32 or int64"):
        run_op("Shape", [X], {"out_type": np.float32})


def test_reshape():
    assert_close(run_op("Reshape", [X, i32([3, 2])]), X.reshape(3, 2))
    assert_close(run_op("Reshape", [X, i64([-1])]), X.reshape(-1))
    assert_close(run_op("Reshape", [X, i32([1, -1, 3])]), X.reshape(1, 2, 3))
    assert_close(run_op("Reshape", [np.float32([5]), i32([])]), np.float32(5))
    assert_close(run_op("Reshape", [np.float32([5]), i32(1)]), np.float32([5]))  # a scalar shape is [n]
    # Zero-sized dims stay out of the -1 inference on both sides.
    assert run_op("Reshape", [np.zeros((0, 3), np.float32), i32([-1, 0])]).shape == (3, 0)
    assert run_op("Reshape", [np.zeros((0, 3), np.float32), i32([-1, 3])]).shape == (0, 3)
    assert run_op("Reshape", [np.zeros((0, 3), np.float32), i32([-1, 0, 2])]).shape == (1, 0, 2)


def test_reshape_errors():
    fails(
        "Reshape",
        [X, i32([2, 4])],
        "Input to reshape is a tensor with 6 values, but the requested shape has 8",
    )
    fails(
        "Reshape",
        [X, i32([-1, 4])],
        "Input to reshape is a tensor with 6 values, but the requested shape requires a multiple of 4",
    )
    fails("Reshape", [X, i32([-1, -1])], "Only one input size may be -1, not both 0 and 1")
    fails("Reshape", [X, i32([-2, 3])], "Size 0 must be non-negative, not -2")
    fails("Reshape", [X, i32([[2, 3]])], "sizes input must be 1-D, not [1,2]")


def test_squeeze():
    z = np.zeros((1, 2, 1, 1), np.float32)
    assert run_op("Squeeze", [z]).shape == (2,)
    assert run_op("Squeeze", [z], {"squeeze_dims": [0, -1]}).shape == (2, 1)
    assert run_op("Squeeze", [z], {"squeeze_dims": [0, -4]}).shape == (2, 1, 1)  # the same dim twice
    assert run_op("Squeeze", [np.float32(1)]).shape == ()
    assert run_op("Squeeze", [np.zeros((1, 0), np.float32)]).shape == (0,)
    fails("Squeeze", [X], "Can not squeeze dim[1], expected a dimension of 1, got 3", {"squeeze_dims": [1]})
    fails("Squeeze", [X], "Tried to squeeze dim index 5 for tensor with 2 dimensions.", {"squeeze_dims": [5]})
    fails(
        "Squeeze", [X], "Tried to squeeze dim index -3 for tensor with 2 dimensions.", {"squeeze_dims": [-3]}
    )


def test_expand_dims():
    assert run_op("ExpandDims", [X, i32(0)]).shape == (1, 2, 3)
    assert run_op("ExpandDims", [X, i32(-1)]).shape == (2, 3, 1)
    assert run_op("ExpandDims", [X, i64([1])]).shape == (2, 1, 3)
    assert run_op("ExpandDims", [X, i32(-3)]).shape == (1, 2, 3)
    assert_close(run_op("ExpandDims", [np.float32(1), i32(-1)]), np.float32([1]))
    fails("ExpandDims", [X, i32(3)], "Tried to expand dim index 3 for tensor with 2 dimensions.")
    fails("ExpandDims", [X, i32(-4)], "Tried to expand dim index -4 for tensor with 2 dimensions.")
    fails("ExpandDims", [X, i32([1, 2])], "'dim' must be a tensor with a single value")


def test_ensure_shape():
    assert_close(run_op("EnsureShape", [X], {"shape": shape([None, 3])}), X)
    assert_close(run_op("EnsureShape", [X], {"shape": shape(None)}), X)
    fails(
        "EnsureShape",
        [X],
        "Shape of tensor in0 [2,3] is not compatible with expected shape [?,4].",
        {"shape": shape([None, 4])},
    )
    fails(
        "EnsureShape",
        [X],
        "Shape of tensor in0 [2,3] is not compatible with expected shape [2].",
        {"shape": shape([2])},
    )


def test_broadcast_to_and_args():
    assert_close(run_op("BroadcastTo", [X, i32([3, 2, 3])]), np.broadcast_to(X, (3, 2, 3)))
    assert_close(
        run_op("BroadcastTo", [np.float32([[1], [2]]), i64([2, 4])]),
        np.repeat([[1], [2]], 4, 1).astype(np.float32),
    )
    assert_close(run_op("BroadcastTo", [np.float32(2), i32([])]), np.float32(2))
    assert run_op("BroadcastTo", [np.ones((1, 3), np.float32), i32([0, 3])]).shape == (0, 3)
    fails("BroadcastTo", [X, i32([4])], "Rank of input (2) must be no greater than rank of output shape (1).")
    fails("BroadcastTo", [X, i32([2, 2])], "Incompatible shapes: [2,3] vs. [2,2]")
    fails(
        "BroadcastTo",
        [np.ones((0, 3), np.float32), i32([1, 3])],
        "Unable to broadcast tensor of shape [0,3] to tensor of shape [1,3]",
    )
    fails("BroadcastTo", [X, i32([-2, 3])], "Dimension -2 must be >= 0")
    fails("BroadcastTo", [X, i32([[2, 3]])], "shape must be a vector of {int32,int64}, got shape [1,2]")

    assert_close(run_op("BroadcastArgs", [i32([2, 1]), i32([5, 1, 3])]), i32([5, 2, 3]))
    assert_close(run_op("BroadcastArgs", [i64([1, 0]), i64([3, 1, 1])]), i64([3, 1, 0]))
    fails("BroadcastArgs", [i32([2, 3]), i32([4])], "Incompatible shapes: [2,3] vs. [4]")
    fails("BroadcastArgs", [i32([[1]]), i32([1])], "In[0] must be a vector.[1,1]")


# --- transposes, reversals, tiling ----------------------------------------------------------------------------


def test_transpose():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert_close(run_op("Transpose", [x, i32([2, 0, 1])]), x.transpose(2, 0, 1))
    assert_close(run_op("Transpose", [x, i64([2, -3, 1])]), x.transpose(2, 0, 1))  # negative perm entries
    assert_close(run_op("Transpose", [np.float32(1), i32([])]), np.float32(1))
    assert run_op("Transpose", [np.zeros((0, 2), np.int8), i32([1, 0])]).shape == (2, 0)
    fails(
        "Transpose",
        [X, i32([0, 1, 2])],
        "transpose expects a vector of size 2. But input(1) is a vector of size 3",
    )
    fails("Transpose", [X, i32([0, 0])], "1 is missing from {0,0}.")
    fails("Transpose", [x, i32([2, -1, 1])], "0 is missing from {2,2,1}.")
    fails("Transpose", [X, i32([0, 2])], "2 is out of range [0 .. 2)")
    fails("Transpose", [X, i32([[1, 0]])], "perm must be rank 1, got shape [1,2]")


def test_reverse():
    assert_close(run_op("ReverseV2", [X, i32([1])]), X[:, ::-1])
    assert_close(run_op("ReverseV2", [X, i64([-1, 0])]), X[::-1, ::-1])
    assert_close(run_op("ReverseV2", [X, i32([])]), X)
    assert_close(run_op("Reverse", [X, np.array([True, False])]), X[::-1])
    # Empty and scalar inputs come back before any axis is looked at, as in TensorFlow.
    assert run_op("ReverseV2", [np.zeros((2, 0), np.float32), i32([5])]).shape == (2, 0)
    assert_close(run_op("ReverseV2", [np.float32(1), i32([0])]), np.float32(1))
    assert_close(run_op("Reverse", [np.float32(1), np.array([True])]), np.float32(1))
    fails("ReverseV2", [X, i32([2])], "'axis'[0] = 2 is out of valid range [0, 1")
    fails("ReverseV2", [X, i32([-3])], "'axis'[0] = -3 is out of valid range [0, 1")
    fails("ReverseV2", [X, i32([1, -1])], "axis 1 specified more than once.")
    fails("ReverseV2", [X, i32([[0]])], "'dims' must be 1-dimension, not 2")
    fails("Reverse", [X, np.array([True])], "'input' has 2'dims' has 1 values")


def test_tile():
    assert_close(run_op("Tile", [X, i32([2, 1])]), np.tile(X, (2, 1)))
    assert_close(run_op("Tile", [X, i64([1, 3])]), np.tile(X, (1, 3)))
    assert run_op("Tile", [X, i32([0, 2])]).shape == (0, 6)
    assert run_op("Tile", [np.zeros((0, 2), np.float32), i32([3, 2])]).shape == (0, 4)
    assert_close(run_op("Tile", [np.float32(2), i32([])]), np.float32(2))
    assert run_op("Tile", [np.array([b"a", b"b"]), i32([2])]).tolist() == [b"a", b"b", b"a", b"b"]
    fails(
        "Tile", [X, i32([1, 2, 3])], "Expected multiples argument to be a vector of length 2 but got length 3"
    )
    fails("Tile", [X, i32([1, -2])], "Expected multiples[1] >= 0, but got -2")
    fails("Tile", [X, i32([[1, 2]])], "Expected multiples to be 1-D, but got shape [1,2]")


# --- concatenation and splitting ------------------------------------------------------------------------------


def test_concat_v2_and_concat():
    y = np.arange(4, dtype=np.float32).reshape(2, 2)
    assert_close(run_op("ConcatV2", [X, y, i32(1)], {"N": 2}), np.concatenate([X, y], 1))
    assert_close(run_op("ConcatV2", [X, y, X, i64(-1)], {"N": 3}), np.concatenate([X, y, X], 1))
    assert_close(run_op("ConcatV2", [X, X, i32([0])], {"N": 2}), np.concatenate([X, X], 0))
    assert_close(run_op("Concat", [i32(0), X, X], {"N": 2}), np.concatenate([X, X], 0))
    assert_close(run_op("Concat", [i32(-1), X, y], {"N": 2}), np.concatenate([X, y], 1))
    empty = np.zeros((2, 0), np.float32)
    assert_close(run_op("ConcatV2", [empty, X, empty, i32(1)], {"N": 3}), X)
    assert run_op("ConcatV2", [empty, empty, i32(1)], {"N": 2}).shape == (2, 0)
    strings = run_op("ConcatV2", [np.array([b"a"]), np.array([b"b", b"c"]), i32(0)], {"N": 2})
    assert strings.tolist() == [b"a", b"b", b"c"]


def test_concat_errors():
    fails(
        "ConcatV2",
        [X, np.zeros(3, np.float32), i32(0)],
        "ConcatOp : Ranks of all input tensors should match: shape[0] = [2,3] vs. shape[1] = [3]",
    )
    fails(
        "ConcatV2",
        [X, np.zeros((2, 4), np.float32), i32(0)],
        "ConcatOp : Dimension 1 in both shapes must be equal: shape[0] = [2,3] vs. shape[1] = [2,4]",
    )
    fails(
        "ConcatV2",
        [X, X, i32(2)],
        "ConcatOp : Expected concatenating dimensions in the range [-2, 2), but got 2",
    )
    fails(
        "Concat",
        [i32(-3), X, X],
        "ConcatOp : Expected concatenating dimensions in the range [-2, 2), but got -3",
    )
    fails(
        "ConcatV2",
        [np.float32(1), np.float32(2), i32(0)],
        "ConcatOp : Can't concatenate scalars (use tf.stack instead)",
    )
    fails("ConcatV2", [X, X, i32([0, 1])], "axis tensor should be a scalar integer, but got shape [2]")
    fails("Concat", [i32([[0]]), X, X], "concat_dim tensor should be a scalar integer, but got shape [1,1]")


def test_pack_unpack():
    assert_close(run_op("Pack", [X, X + 1], {"N": 2}), np.stack([X, X + 1]))
    assert_close(run_op("Pack", [X, X + 1], {"N": 2, "axis": -1}), np.stack([X, X + 1], -1))
    assert_close(run_op("Pack", [np.float32(1)], {"N": 1, "axis": -1}), np.float32([1]))
    assert run_op("Pack", [np.zeros((0, 2)), np.zeros((0, 2))], {"N": 2, "axis": 1}).shape == (0, 2, 2)
    fails(
        "Pack",
        [X, np.zeros((2, 4), np.float32)],
        "Shapes of all inputs must match: values[0].shape = [2,3] != values[1].shape = [2,4]",
        {"N": 2},
    )
    fails("Pack", [X, X], "axis = 3 not in [-3, 3)", {"N": 2, "axis": 3})

    rows = run_op("Unpack", [X], {"num": 2}, num_outputs=2)
    assert [r.tolist() for r in rows] == X.tolist()
    cols = run_op("Unpack", [X], {"num": 3, "axis": -1}, num_outputs=3)
    for i, c in enumerate(cols):
        assert_close(c, X[:, i])
    assert run_op("Unpack", [np.zeros((0, 2), np.float32)], {"num": 2, "axis": 1}, num_outputs=2)[
        1
    ].shape == (0,)
    fails("Unpack", [X], "Input shape axis 0 must equal 3, got shape [2,3]", {"num": 3}, outputs=3)
    fails("Unpack", [X], "axis = 2 not in [-2, 2)", {"num": 3, "axis": 2}, outputs=3)
    fails("Unpack", [np.float32(1)], "axis = 0 not in [0, 0)", {"num": 1})


def test_split():
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    parts = run_op("Split", [i32(1), x], {"num_split": 3}, num_outputs=3)
    for got, want in zip(parts, np.split(x, 3, axis=1), strict=True):
        assert_close(got, want)
    parts = run_op("Split", [i32(-2), x], {"num_split": 2}, num_outputs=2)
    assert_close(parts[1], x[1:])
    assert_close(run_op("Split", [i32(0), x], {"num_split": 1}), x)
    assert [
        p.shape for p in run_op("Split", [i32(0), np.zeros((0, 2))], {"num_split": 2}, num_outputs=2)
    ] == [(0, 2)] * 2
    fails(
        "Split",
        [i32(1), X],
        "Number of ways to split should evenly divide the split dimension, but got split_dim 1 (size = 3) and num_split 2",
        {"num_split": 2},
        2,
    )
    fails(
        "Split", [i32(2), X], "-input rank(-2) <= split_dim < input rank (2), but got 2", {"num_split": 2}, 2
    )
    fails("Split", [i32([1]), X], "split_dim must be a scalar but has rank 1", {"num_split": 3}, 3)
    with pytest.raises(InvalidArgumentError, match="attr 'num_split' must be at least 1, got 0"):
        run_op("Split", [i32(0), X], {"num_split": 0}, num_outputs=0)


def test_split_v():
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    a, b, c = run_op("SplitV", [x, i32([1, -1, 2]), i32(-1)], {"num_split": 3}, num_outputs=3)
    assert_close(a, x[:, :1])
    assert_close(b, x[:, 1:4])
    assert_close(c, x[:, 4:])
    a, b = run_op("SplitV", [X, i64([3, -1]), i64(1)], {"num_split": 2}, num_outputs=2)
    assert_close(a, X)
    assert b.shape == (2, 0)
    assert_close(run_op("SplitV", [X, i32([3]), i32(1)], {"num_split": 1}), X)
    attrs = {"num_split": 2}
    fails("SplitV", [X, i32([1, 1]), i32(1)], "along split_dim if not fully specified.  Got: 2", attrs, 2)
    fails("SplitV", [X, i32([4, -1]), i32(1)], "along split_dim if not fully specified.  Got: 4", attrs, 2)
    fails("SplitV", [X, i32([-1, -1]), i32(1)], "There can only be one -1 in the input.", attrs, 2)
    fails("SplitV", [X, i32([-2, 5]), i32(1)], "Split size at index 0 must be >= 0. Got: -2", attrs, 2)
    fails(
        "SplitV",
        [X, i32([1, 1, 1]), i32(1)],
        "must be 1-D and have the same elements as outputs got 1 -D and 3 elements",
        attrs,
        2,
    )
    fails(
        "SplitV",
        [X, i32([1, 2]), i32(2)],
        "-input rank(-2) <= split_dim < input rank (2), but got 2",
        attrs,
        2,
    )
    fails(
        "SplitV",
        [X, i32([-1]), i32(1)],
        "If there is only one output, it must have the same size as the input. Input size: 3 output size: -1",
        {"num_split": 1},
    )


# --- slicing ----------------------------------------------------------------------------------------------------


def test_slice():
    assert_close(run_op("Slice", [P, i32([1, 1]), i32([-1, -1])]), P[1:, 1:])
    assert_close(run_op("Slice", [P, i64([2, 0]), i64([2, 1])]), P[2:4, 0:1])
    assert_close(run_op("Slice", [P, i64([1, 1]), i32([1, 1])]), P[1:2, 1:2])  # mixed index dtypes
    assert run_op("Slice", [P, i32([5, 2]), i32([-1, -1])]).shape == (0, 0)
    assert run_op("Slice", [np.zeros((0, 2)), i32([0, 0]), i32([-1, 1])]).shape == (0, 1)
    assert_close(run_op("Slice", [np.float32(4), i32([]), i32([])]), np.float32(4))
    fails("Slice", [X, i32([3, 0]), i32([1, 1])], "Expected begin[0] in [0, 2], but got 3")
    fails("Slice", [X, i32([-1, 0]), i32([1, 1])], "Expected begin[0] in [0, 2], but got -1")
    fails("Slice", [X, i32([1, 0]), i32([2, 1])], "Expected size[0] in [0, 1], but got 2")
    fails("Slice", [X, i32([1, 0]), i32([-2, 1])], "Expected size[0] in [0, 1], but got -2")
    fails(
        "Slice",
        [X, i32([1]), i32([1])],
        "Expected begin and size arguments to be 1-D tensors of size 2, but got shapes [1] and [1] instead.",
    )
    fails(
        "Slice",
        [np.zeros((0, 2)), i32([1, 0]), i32([0, 1])],
        "Expected begin[0] == 0 (got 1) and size[0] == 0 (got 0) when input.dim_size(0) == 0",
    )


def strided(x: Any, begin: list[int], end: list[int], strides: list[int] | None = None, **masks: int) -> Any:
    strides = strides if strides is not None else [1] * len(begin)
    return run_op("StridedSlice", [x, i32(begin), i32(end), i32(strides)], masks)


def test_strided_slice_like_python_slices():
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    assert_close(strided(x, [1], [3]), x[1:3])
    assert_close(strided(x, [0, 1], [0, -1], begin_mask=1, end_mask=1), x[:, 1:-1])
    assert_close(strided(x, [-1, 0], [0, 0], [-1, 2], begin_mask=1, end_mask=3), x[::-1, ::2])
    assert_close(strided(x, [2, 3], [-5, -9], [-1, -2]), x[2:-5:-1, 3:-9:-2])
    assert_close(strided(x, [-1], [0], [-1], end_mask=1), x[-1::-1])
    assert_close(strided(x, [10], [-10], [-1]), x[10:-10:-1])
    assert_close(strided(x, [-10], [10], [-1]), x[-10:10:-1])  # begin below the start: empty
    assert_close(strided(x, [-10], [-3], [-1]), x[-10:-3:-1])
    assert_close(strided(x, [0, 1], [0, 3], [1, 1], ellipsis_mask=1), x[..., 1:3])
    assert_close(
        strided(x, [1, 0, 2], [2, 0, 3], [1, 1, 1], shrink_axis_mask=5, ellipsis_mask=2), x[1, ..., 2]
    )
    assert_close(strided(x, [0, -1], [0, 0], [1, 1], new_axis_mask=1, shrink_axis_mask=2), x[None, -1])
    assert_close(
        strided(x, [0, 0, 0], [0, 0, 0], [1, 1, 1], ellipsis_mask=1, new_axis_mask=6), x[..., None, None]
    )
    assert_close(strided(x, [1, 0], [2, 2], [1, 1], shrink_axis_mask=1, new_axis_mask=0), x[1, 0:2])
    assert_close(strided(x, [0, 0], [1, 1], [1, 1], shrink_axis_mask=3), x[0, 0])
    assert_close(strided(x, [1, 2, 3], [0, 0, 0], [1, 1, 1], shrink_axis_mask=7), x[1, 2, 3])
    assert_close(strided(x, [], []), x)
    strings = np.array([b"a", b"b", b"c"])
    assert strided(strings, [1], [2], shrink_axis_mask=1).tolist() == b"b"
    assert strided(strings, [-1], [0], [-1], end_mask=1).tolist() == [b"c", b"b", b"a"]


def test_strided_slice_tensorflow_corners():
    # Checked against TensorFlow: shrink ignores begin_mask; new_axis wins over shrink and over nothing
    # else; the ellipsis wins over new_axis on the same entry.
    assert_close(strided(X, [1], [0], shrink_axis_mask=1, begin_mask=1), X[1])
    assert strided(X, [1, 0], [2, 0], new_axis_mask=1, shrink_axis_mask=1).shape == (1, 0, 3)
    assert strided(X, [0, 0], [0, 0], ellipsis_mask=1, new_axis_mask=1).shape == (2, 0)
    assert_close(strided(np.float32(3), [0], [1], new_axis_mask=1), np.float32([3]))
    assert strided(
        np.zeros((0, 3), np.float32), [0, -1], [0, 0], [-1, -1], begin_mask=1, end_mask=3
    ).shape == (0, 3)
    x = np.arange(5, dtype=np.int64)
    got = run_op("StridedSlice", [x, i64([0]), i32([4]), i64([2])])
    assert_close(got, x[0:4:2])
    # The same node keeps working when the slice arguments change between calls.
    b = GraphBuilder()
    inp = [
        b.constant(X),
        b.placeholder("begin", np.int32, [None]),
        b.constant(i32([3])),
        b.constant(i32([1])),
    ]
    out = b.op("StridedSlice", inp, {"shrink_axis_mask": 0})
    graph = Graph(b.graph_def)
    assert_close(evaluate(graph, [out], {"begin:0": i32([1])})[0], X[1:3])
    assert_close(evaluate(graph, [out], {"begin:0": i32([0])})[0], X[0:3])


def test_strided_slice_errors():
    fails(
        "StridedSlice",
        [X, i32([5]), i32([6]), i32([1])],
        "slice index 5 of dimension 0 out of bounds.",
        {"shrink_axis_mask": 1},
    )
    fails(
        "StridedSlice",
        [X, i32([-7]), i32([6]), i32([1])],
        "slice index -5 of dimension 0 out of bounds.",
        {"shrink_axis_mask": 1},
    )
    fails(
        "StridedSlice",
        [X, i32([1]), i32([0]), i32([-1])],
        "only stride 1 allowed on non-range indexing.",
        {"shrink_axis_mask": 1},
    )
    fails("StridedSlice", [X, i32([0, 1]), i32([0, 0]), i32([1, 0])], "strides[1] must be non-zero")
    fails(
        "StridedSlice",
        [X, i32([1, 0]), i32([0]), i32([1])],
        "Expected begin, end, and strides to be 1D equal size tensors, but got shapes [2], [1], and [1] instead.",
    )
    fails(
        "StridedSlice",
        [X, i32([[0]]), i32([[0]]), i32([[1]])],
        "but got shapes [1,1], [1,1], and [1,1] instead.",
    )
    fails(
        "StridedSlice",
        [X, i32([1, 0, 0]), i32([0, 0, 0]), i32([1, 1, 1])],
        "Index out of range using input dim 2; input has only 2 dims",
    )
    fails(
        "StridedSlice",
        [X, i32([0, 0]), i32([0, 0]), i32([1, 1])],
        "Multiple ellipses in slice spec not allowed",
        {"ellipsis_mask": 3},
    )
    fails("StridedSlice", [np.float32(3), i32([0]), i32([1]), i32([1])], "Attempting to slice scalar input.")


# --- gathering ----------------------------------------------------------------------------------------------------


def test_gather_v2():
    assert_close(run_op("GatherV2", [P, i32([4, 0, 4]), i32(0)]), P[[4, 0, 4]])
    assert_close(run_op("GatherV2", [P, i64([[1], [0]]), i64(-1)]), P[:, [[1], [0]]])
    assert_close(run_op("GatherV2", [P, i32(3), i32(0)]), P[3])
    assert_close(run_op("GatherV2", [np.float32([7, 8]), i32(1), i32(0)]), np.float32(8))
    assert run_op("GatherV2", [P, i32([]), i32(0)]).shape == (0, 2)
    assert run_op("GatherV2", [np.zeros((0, 2)), i32(np.zeros((0, 3))), i32(0)]).shape == (0, 3, 2)
    # Nothing to copy, nothing checked (TensorFlow does the same).
    assert run_op("GatherV2", [np.zeros((2, 0)), i32([3]), i32(0)]).shape == (1, 0)
    strings = run_op("GatherV2", [np.array([b"a", b"b"]), i32(1), i32(0)])
    assert strings.dtype == object
    assert strings.shape == ()
    assert strings.item() == b"b"
    assert_close(run_op("Gather", [X, i64([1, 0])], {"validate_indices": False}), X[[1, 0]])


def test_gather_v2_batch_dims():
    params = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    idx = i32([[0, 3], [2, 2]])
    want = np.stack([params[b][:, idx[b]] for b in range(2)])
    assert_close(run_op("GatherV2", [params, idx, i32(2)], {"batch_dims": 1}), want)
    assert_close(run_op("GatherV2", [params, idx, i32(-1)], {"batch_dims": -1}), want)
    idx2 = i32([[1, 0], [2, 2]])
    want2 = np.stack([params[b][idx2[b]] for b in range(2)])
    assert_close(run_op("GatherV2", [params, idx2, i32(1)], {"batch_dims": 1}), want2)
    idx3 = i32([[0, 1, 0], [3, 2, 1]])  # batch_dims 2 over [2, 3]
    want3 = np.array([[params[b, c, idx3[b, c]] for c in range(3)] for b in range(2)], np.float32)
    assert_close(run_op("GatherV2", [params, idx3, i32(2)], {"batch_dims": 2}), want3)
    assert_close(
        run_op("GatherV2", [P, i32([0, 1, 0, 1, 1]), i32(1)], {"batch_dims": 1}), np.float32([0, 3, 4, 7, 9])
    )


def test_gather_errors():
    fails("GatherV2", [P, i32([1, 7]), i32(0)], "indices[1] = 7 is not in [0, 5)")
    fails("GatherV2", [P, i32([[1, 2], [7, 0]]), i32(0)], "indices[1,0] = 7 is not in [0, 5)")
    fails("GatherV2", [P, i32([0, 9, 8, -1]), i32(0)], "indices[1] = 9 is not in [0, 5)")  # the first
    fails("GatherV2", [P, i32(7), i32(0)], "indices = 7 is not in [0, 5)")
    fails("GatherV2", [P, i64([3, 2**40]), i32(0)], "indices[1] = 1099511627776 is not in [0, 5)")
    fails("GatherV2", [np.zeros((0, 2)), i32([0]), i32(0)], "indices[0] = 0 is not in [0, 0)")
    fails("GatherV2", [P, i32([0]), i32(2)], "Expected axis in the range [-2, 2), but got 2")
    fails("GatherV2", [P, i32([0]), i32([0])], "axis must be scalar")
    fails("GatherV2", [np.float32(1), i32([0]), i32(0)], "params must be at least 1 dimensional")
    fails("Gather", [P, i32([[1], [9]])], "indices[1,0] = 9 is not in [0, 5)")
    # past 64 indices the check is numpy's reductions, below it Python's: both find the same first culprit
    for n in (64, 65, 300):
        many = np.zeros(n, np.int32)
        many[n - 2], many[n - 1] = -3, 8
        fails("GatherV2", [P, many, i32(0)], f"indices[{n - 2}] = -3 is not in [0, 5)")
        many[n - 2] = 4
        assert_close(run_op("GatherV2", [P, many[:-1], i32(0)]), P[many[:-1]])
    params = np.zeros((2, 3, 4), np.float32)
    fails(
        "GatherV2",
        [params, i32(np.zeros(2)), i32(2)],
        "Expected batch_dims in the range [-1, 1], but got 2",
        {"batch_dims": 2},
    )
    fails(
        "GatherV2",
        [params, i32(np.zeros((2, 3))), i32(0)],
        "batch_dims (1) must be less than or equal to axis (0).",
        {"batch_dims": 1},
    )
    fails(
        "GatherV2",
        [params, i32(np.zeros((3, 3))), i32(1)],
        "params.shape[0]: 2 should be equal to indices.shape[0]: 3",
        {"batch_dims": 1},
    )
    fails(
        "GatherV2", [X, i32([[0, 1], [3, 0]]), i32(1)], "indices[1,0] = 3 is not in [0, 3)", {"batch_dims": 1}
    )


def test_gather_nd():
    assert_close(run_op("GatherNd", [P, i32([[1, 1], [4, 0]])]), np.float32([3, 8]))
    assert_close(run_op("GatherNd", [P, i64([[3], [0]])]), P[[3, 0]])
    assert_close(run_op("GatherNd", [P, i32([2, 1])]), np.float32(5))
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    idx = i32([[[0, 2]], [[1, 0]]])
    assert_close(run_op("GatherNd", [x, idx]), np.stack([x[0, 2][None], x[1, 0][None]]))
    assert_close(run_op("GatherNd", [P, i32(np.zeros((3, 0)))]), np.stack([P, P, P]))
    assert run_op("GatherNd", [P, i32(np.zeros((0, 2)))]).shape == (0,)
    assert run_op("GatherNd", [np.zeros((0, 2)), i32(np.zeros((0, 1)))]).shape == (0, 2)
    assert run_op("GatherNd", [np.array([[b"a", b"b"]]), i32([[0, 1]])]).tolist() == [b"b"]


def test_gather_nd_errors():
    fails(
        "GatherNd",
        [P, i32([[1, 5], [0, 0]])],
        "indices[0] = [1, 5] does not index into param shape [5,2], node name: op",
    )
    fails(
        "GatherNd", [P, i32([[9, 0], [8, 0]])], "indices[1] = [8, 0] does not index into param shape [5,2]"
    )  # the last
    fails("GatherNd", [P, i32([[[1, 1]], [[9, 0]]])], "indices[1,0] = [9, 0] does not index")
    fails("GatherNd", [P, i32([-1])], "indices = [-1] does not index into param shape [5,2]")
    fails(
        "GatherNd",
        [P, i32([[1, 1, 1]])],
        "index innermost dimension length must be <= params rank; saw: 3 vs. 2",
    )
    fails("GatherNd", [P, i32(1)], "indices must be at least a vector")
    fails("GatherNd", [np.float32(3), i32(np.zeros((2, 0)))], "params must be at least a vector")
    fails(
        "GatherNd",
        [np.zeros((2, 0)), i32([[1]])],
        "Requested more than 0 entries, but params is empty.  Params shape: [2,0]",
    )


def test_one_hot():
    on, off = np.float32(5), np.float32(-1)
    idx = i32([0, 2, -1, 5])
    want = np.where(idx[:, None] == np.arange(3), on, off).astype(np.float32)
    assert_close(run_op("OneHot", [idx, i32(3), on, off]), want)
    assert_close(run_op("OneHot", [idx, i32(3), on, off], {"axis": 0}), want.T)
    assert_close(run_op("OneHot", [i32(1), i32(3), on, off], {"axis": 0}), np.float32([-1, 5, -1]))
    idx2 = i64([[0, 1], [2, 2**40]])
    got = run_op("OneHot", [idx2, i32(3), np.int32(1), np.int32(0)], {"axis": 1})
    assert_close(got, (idx2[:, None, :] == np.arange(3)[None, :, None]).astype(np.int32))
    assert_close(
        run_op("OneHot", [np.uint8([1, 255]), i32(2), True, False]), np.array([[False, True], [False, False]])
    )
    assert run_op("OneHot", [i32([1, 0]), i32(0), on, off]).shape == (2, 0)
    assert run_op("OneHot", [i32(np.zeros((0, 2))), i32(4), on, off], {"axis": 1}).shape == (0, 4, 2)


def test_one_hot_errors():
    args = [i32([0, 2]), i32(3), np.float32(1), np.float32(0)]
    fails("OneHot", args, "Expected axis to be -1 or between [0, 2).  But received: 2", {"axis": 2})
    fails("OneHot", args, "Expected axis to be -1 or between [0, 2).  But received: -2", {"axis": -2})
    fails("OneHot", [args[0], i32(-3), *args[2:]], "depth must be non-negative, got: -3")
    fails("OneHot", [args[0], i32([3]), *args[2:]], "depth must be a scalar, but got: [1]")
    fails("OneHot", [*args[:2], np.float32([1]), args[3]], "on_value must be a scalar, but got: [1]")
    fails("OneHot", [*args[:3], np.float32([0])], "off_value must be a scalar, but got: [1]")


def test_top_k_v2():
    v = np.array([1, 3, 3, 2, 3, -np.inf, np.inf], np.float32)
    values, indices = run_op("TopKV2", [v, i32(5)], num_outputs=2)
    assert_close(values, np.float32([np.inf, 3, 3, 3, 2]))
    assert_close(indices, i32([6, 1, 2, 4, 3]))  # ties: the lower index first
    values, indices = run_op("TopKV2", [i32([[1, 2, 2, 1], [0, 0, 0, 0]]), i32(2)], num_outputs=2)
    assert_close(values, i32([[2, 2], [0, 0]]))
    assert_close(indices, i32([[1, 2], [0, 1]]))
    values, indices = run_op(
        "TopKV2", [np.uint8([3, 255, 0, 255]), i32(3)], {"index_type": np.int64}, num_outputs=2
    )
    assert_close(values, np.uint8([255, 255, 3]))
    assert_close(indices, i64([1, 3, 0]))
    values, indices = run_op("TopKV2", [np.float32([5, 1, 9, 3]), i32(4)], {"sorted": False}, num_outputs=2)
    assert_close(indices, i32([2, 0, 3, 1]))
    values, indices = run_op("TopKV2", [np.zeros((2, 0), np.float32), i32(0)], num_outputs=2)
    assert values.shape == indices.shape == (2, 0)
    assert indices.dtype == np.int32
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, size=(3, 50)).astype(np.float64)
    values, indices = run_op("TopKV2", [x, i32(7)], num_outputs=2)
    want = np.argsort(-x, axis=-1, kind="stable")[:, :7]
    assert_close(indices, want.astype(np.int32))
    assert_close(values, np.take_along_axis(x, want, -1))


def test_top_k_v2_errors():
    v = np.float32([1, 2, 3])
    fails("TopKV2", [v, i32(4)], "input must have at least k columns. Had 3, needed 4", outputs=2)
    fails("TopKV2", [v, i32(-1)], "Need k >= 0, got -1", outputs=2)
    fails("TopKV2", [np.float32(1), i32(0)], "input must be >= 1-D, got shape []", outputs=2)
    fails("TopKV2", [v, i32([1])], "k must be scalar, got shape [1]", outputs=2)


def test_where():
    assert_close(run_op("Where", [np.float32([[0, 1], [2, 0]])]), i64([[0, 1], [1, 0]]))
    assert_close(run_op("Where", [np.array([True, False, True])]), i64([[0], [2]]))
    assert_close(run_op("Where", [np.float32([np.nan, 0, -0.0])]), i64([[0]]))
    assert_close(run_op("Where", [np.array([b"", b"a"])]), i64([[1]]))
    assert_close(run_op("Where", [np.zeros((0, 3), np.bool_)]), np.zeros((0, 2), np.int64))
    fails("Where", [np.array(True)], "WhereOp : Unhandled input dimensions: 0")


def test_unique():
    y, idx = run_op("Unique", [i32([3, 1, 3, 2, 1])], num_outputs=2)
    assert_close(y, i32([3, 1, 2]))
    assert_close(idx, i32([0, 1, 0, 2, 1]))
    y, idx = run_op(
        "Unique", [np.float32([np.nan, 1, np.nan, -0.0, 0.0])], {"out_idx": np.int64}, num_outputs=2
    )
    np.testing.assert_array_equal(y, np.float32([np.nan, 1, np.nan, -0.0]))  # NaNs stay apart
    assert np.signbit(y[3])
    assert_close(idx, i64([0, 1, 2, 3, 3]))
    y, idx = run_op("Unique", [np.array([b"b", b"a", b"b"])], num_outputs=2)
    assert y.tolist() == [b"b", b"a"]
    assert_close(idx, i32([0, 1, 0]))
    y, idx = run_op("Unique", [np.zeros(0, np.float32)], num_outputs=2)
    assert y.shape == idx.shape == (0,)
    assert idx.dtype == np.int32
    fails("Unique", [np.float32([[3, 1]])], "unique expects a 1D vector.", outputs=2)


# --- padding ------------------------------------------------------------------------------------------------------


def test_pad_and_pad_v2():
    pads = i32([[1, 0], [2, 1]])
    assert_close(run_op("Pad", [X, pads]), np.pad(X, [(1, 0), (2, 1)]))
    assert_close(
        run_op("PadV2", [X, i64([[0, 2], [1, 1]]), np.float32(7)]),
        np.pad(X, [(0, 2), (1, 1)], constant_values=7),
    )
    assert_close(
        run_op("Pad", [np.zeros((0, 2), np.float32), i32([[1, 0], [0, 1]])]), np.zeros((1, 3), np.float32)
    )
    assert_close(run_op("Pad", [np.float32(2), i32(np.zeros((0, 2)))]), np.float32(2))
    assert run_op("Pad", [np.array([b"a"]), i32([[1, 0]])]).tolist() == [b"", b"a"]
    fails("Pad", [X, i32([[1, 1]])], "The first dimension of paddings must be the rank of inputs[1,2] [2,3]")
    fails("Pad", [X, i32([[1, 1, 1], [1, 1, 1]])], "paddings must be a matrix with 2 columns: [2,3]")
    fails("Pad", [X, i32([[1, -1], [0, 0]])], "Paddings must be non-negative: 1 -1")
    fails("PadV2", [X, pads, np.float32([1])], "constant_values must be a scalar. Found: [1]")


def test_mirror_pad():
    reflect = {"mode": "REFLECT"}
    symmetric = {"mode": "SYMMETRIC"}
    pads = i32([[1, 1], [2, 2]])
    want = np.float32(
        [[5, 4, 3, 4, 5, 4, 3], [2, 1, 0, 1, 2, 1, 0], [5, 4, 3, 4, 5, 4, 3], [2, 1, 0, 1, 2, 1, 0]]
    )
    assert_close(run_op("MirrorPad", [X, pads], reflect), want)
    assert_close(
        run_op("MirrorPad", [X, i64([[2, 2], [3, 0]])], symmetric),
        np.pad(X, [(2, 2), (3, 0)], mode="symmetric"),
    )
    assert run_op("MirrorPad", [np.zeros((0, 2)), i32([[0, 0], [1, 1]])], symmetric).shape == (0, 4)
    assert_close(run_op("MirrorPad", [np.float32(1), i32(np.zeros((0, 2)))], reflect), np.float32(1))
    assert run_op("MirrorPad", [np.array([b"a", b"b"]), i32([[1, 1]])], reflect).tolist() == [
        b"b",
        b"a",
        b"b",
        b"a",
    ]
    fails(
        "MirrorPad",
        [X, i32([[2, 0], [0, 0]])],
        "paddings must be less than the dimension size: 2, 0 not less than 2",
        reflect,
    )
    fails(
        "MirrorPad",
        [X, i32([[3, 0], [0, 0]])],
        "paddings must be no greater than the dimension size: 3, 0 greater than 2",
        symmetric,
    )
    fails("MirrorPad", [np.zeros((0, 2)), i32([[0, 0], [1, 1]])], "0, 0 not less than 0", reflect)
    fails("MirrorPad", [X, i32([[-1, 0], [0, 0]])], "paddings must be non-negative: -1 0", symmetric)
    fails(
        "MirrorPad",
        [X, i32([[1, 0]])],
        "The first dimension of paddings must be the rank of inputs[1,2], [2,3]",
        symmetric,
    )
    with pytest.raises(InvalidArgumentError, match="attr 'mode' must be one of REFLECT, SYMMETRIC"):
        run_op("MirrorPad", [X, pads], {"mode": "EDGE"})


# --- checks and scheduling ------------------------------------------------------------------------------------------


def test_check_numerics():
    assert_close(run_op("CheckNumerics", [X], {"message": "boom"}), X)
    big = np.full(4, 60000, np.float16)  # its float16 sum overflows; the values are all finite
    assert_close(run_op("CheckNumerics", [big], {"message": "boom"}), big)
    assert_close(run_op("CheckNumerics", [i32([1])], {"message": "boom"}), i32([1]))
    fails("CheckNumerics", [np.float32([1, np.nan])], "boom : Tensor had NaN values", {"message": "boom"})
    fails("CheckNumerics", [np.float64([1, np.inf])], "boom : Tensor had Inf values", {"message": "boom"})
    fails(
        "CheckNumerics",
        [np.float16([-np.inf, np.nan])],
        "boom : Tensor had Inf and NaN values",
        {"message": "boom"},
    )


def test_inputs_are_never_written_and_feeds_work():
    x = X.copy()
    run_op("Pad", [x, i32([[1, 1], [1, 1]])], feed=True)
    run_op("StridedSlice", [x, i32([0]), i32([1]), i32([1])], feed=True)
    assert_close(x, X)


def test_copying_kernels_are_marked_expensive():
    expensive = {op for op, kdef in KERNELS.items() if kdef.expensive}
    heavy = {"Gather", "GatherV2", "GatherNd", "Tile", "Pad", "PadV2", "MirrorPad", "ConcatV2", "Concat"}
    assert heavy <= expensive
    for op in (
        "Reshape",
        "StridedSlice",
        "Slice",
        "Transpose",
        "Shape",
        "Identity",
        "Pack",
        "TopKV2",
        "Where",
    ):
        assert not KERNELS[op].expensive


def test_matrix_band_part():
    x = np.arange(1, 17, dtype=np.float32).reshape(4, 4)
    for lo, up in [(0, -1), (-1, 0), (1, 1), (0, 0), (-1, -1), (2, 0)]:
        want = x.copy()
        for i in range(4):
            for j in range(4):
                if (lo >= 0 and i - j > lo) or (up >= 0 and j - i > up):
                    want[i, j] = 0
        out = run_op("MatrixBandPart", [x, np.int64(lo), np.int64(up)], {"T": np.float32, "Tindex": np.int64})
        assert_close(out, want)
    batched = run_op("MatrixBandPart", [np.ones((2, 3, 3), np.int32), np.int32(0), np.int32(-1)])
    assert batched.dtype == np.int32 and batched[1].tolist() == [[1, 1, 1], [0, 1, 1], [0, 0, 1]]
    with pytest.raises(
        InvalidArgumentError, match="num_lower must be negative or less or equal to number of rows"
    ):
        run_op("MatrixBandPart", [np.ones((2, 2), np.float32), np.int64(3), np.int64(0)])
    with pytest.raises(InvalidArgumentError, match="at least 2-dim"):
        run_op("MatrixBandPart", [np.ones(3, np.float32), np.int64(0), np.int64(0)])
