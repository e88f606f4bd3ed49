"""Seeded random ops give TensorFlow's numbers (Philox4x32-10 and its distributions). Expected values are
TensorFlow 2.21's; tools/op_fuzz_random.py compares the kernels with TensorFlow on random seeds and shapes."""

from __future__ import annotations

import numpy as np
import pytest
from support import run_op

from poolserve import GraphBuilder, Session
from poolserve.runtime.errors import InvalidArgumentError


def seed(a: int, b: int) -> np.ndarray:
    return np.array([a, b], np.int64)


def stateless(op: str, dims: list[int], s: np.ndarray, dtype: type, *bounds: np.ndarray) -> np.ndarray:
    return run_op(
        op, [np.array(dims, np.int32), s, *bounds], {"dtype": dtype, "T": np.int32, "Tseed": np.int64}
    )


def test_stateless_ops_draw_tensorflows_numbers():
    uniform = stateless("StatelessRandomUniform", [6], seed(1, 2), np.float32)
    want = [0.8440604209899902, 0.19204533100128174, 0.9962232112884521, 0.16038739681243896,
            0.27199018001556396, 0.6493459939956665]  # fmt: skip
    np.testing.assert_array_equal(uniform, np.array(want, np.float32))
    doubles = stateless("StatelessRandomUniform", [3], seed(1, 2), np.float64)
    np.testing.assert_array_equal(doubles, [0.7524837538451801, 0.9697857725627486, 0.17592233912897481])
    normal = stateless("StatelessRandomNormal", [5], seed(3, 4), np.float32)
    want = [
        -0.17393383383750916,
        1.6723546981811523,
        0.3481701612472534,
        -1.7038906812667847,
        -0.6153246164321899,
    ]
    np.testing.assert_allclose(normal, want, rtol=2e-6)
    ints = stateless("StatelessRandomUniformInt", [6], seed(5, 6), np.int32, np.int32(-3), np.int32(10))
    np.testing.assert_array_equal(ints, [9, 3, 6, 1, 7, 5])
    with pytest.raises(InvalidArgumentError, match="Need minval < maxval"):
        stateless("StatelessRandomUniformInt", [2], seed(5, 6), np.int32, np.int32(3), np.int32(3))
    with pytest.raises(InvalidArgumentError, match=r"seed must have shape \[2\]"):
        stateless("StatelessRandomUniform", [2], np.array([1], np.int64), np.float32)


def test_a_seeded_stateful_op_continues_its_stream_from_run_to_run():
    b = GraphBuilder()
    shape = b.constant(np.array([3], np.int32))
    r = b.op(
        "RandomUniform", [shape], {"dtype": np.float32, "T": np.int32, "seed": 87654321, "seed2": 7}, name="r"
    )
    with Session(b.graph_def) as sess:
        first, second = sess.run(r), sess.run(r)
    np.testing.assert_array_equal(
        first, np.array([0.4839409589767456, 0.5062030553817749, 0.25514376163482666], np.float32)
    )
    np.testing.assert_array_equal(
        second, np.array([0.8793959617614746, 0.07022583484649658, 0.9375956058502197], np.float32)
    )
    with Session(b.graph_def) as sess:  # a new session starts the stream again
        np.testing.assert_array_equal(sess.run(r), first)


def test_categorical_sampling_draws_tensorflows_classes():
    logits = np.log(np.array([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]], np.float32))
    got = run_op(
        "StatelessMultinomial",
        [logits, np.int32(8), seed(7, 11)],
        {"output_dtype": np.int64, "Tseed": np.int64},
    )
    np.testing.assert_array_equal(
        got, [[2, 2, 2, 2, 2, 2, 2, 2], [0, 1, 0, 1, 0, 2, 2, 1]]
    )  # TensorFlow 2.21's
    # a class of -inf logit is never drawn
    never = run_op(
        "StatelessMultinomial",
        [np.array([[-np.inf, 0.0, 0.0]], np.float32), np.int32(50), seed(1, 1)],
        {"output_dtype": np.int32, "Tseed": np.int64},
    )
    assert never.dtype == np.int32 and never.min() >= 1


def test_truncated_normals_keep_tensorflows_draws_under_two():
    floats = stateless("StatelessTruncatedNormal", [6], seed(9, 9), np.float32)
    want = [0.38793617486953735, 0.8424108624458313, 1.3343534469604492, 1.8205410242080688,
            0.35720545053482056, 0.3944912254810333]  # fmt: skip
    np.testing.assert_allclose(floats, want, rtol=2e-6)
    doubles = stateless("StatelessTruncatedNormal", [3], seed(9, 9), np.float64)
    np.testing.assert_allclose(
        doubles, [-1.2713582395756344, -1.2514169644010678, 0.8051728990008443], rtol=1e-12
    )


def test_the_v2_ops_take_auto_select_as_philox_and_refuse_other_algorithms():
    # tf.random.stateless_normal([3], seed=[1, 2]) as TensorFlow 2.21 writes it: alg 3 (RNG_ALG_AUTO_SELECT),
    # which is Philox on CPU; TensorFlow's CPU kernels refuse ids 0 and 2 ("Unsupported algorithm id")
    b = GraphBuilder()
    dims = b.constant(np.array([3], np.int32), name="shape")
    key, counter = b.op(
        "StatelessRandomGetKeyCounter", [b.constant(seed(1, 2))], {"Tseed": np.int64}, num_outputs=2
    )
    alg = b.placeholder("alg", np.int32, ())
    normal = b.op(
        "StatelessRandomNormalV2", [dims, key, counter, alg], {"dtype": np.float32, "Tshape": np.int32}
    )
    uniform = b.op(
        "StatelessRandomUniformV2", [dims, key, counter, alg], {"dtype": np.float32, "Tshape": np.int32}
    )
    low, high = b.constant(np.int32(-3)), b.constant(np.int32(10))
    ints = b.op(
        "StatelessRandomUniformIntV2",
        [dims, key, counter, alg, low, high],
        {"dtype": np.int32, "Tshape": np.int32},
    )
    with Session(b.graph_def) as sess:
        for algorithm in (1, 3):
            got = sess.run([normal, uniform, ints], {alg: algorithm})
            want = [0.544110119342804, 0.20738030970096588, 0.0735643208026886]
            np.testing.assert_array_equal(got[0], np.array(want, np.float32))
            np.testing.assert_array_equal(
                got[1], np.array([0.8440604209899902, 0.19204533100128174, 0.9962232112884521], np.float32)
            )
            assert got[2].tolist() == [7, -3, -2]
        for algorithm in (0, 2):
            with pytest.raises(InvalidArgumentError, match=f"Unsupported algorithm id: {algorithm}"):
                sess.run(normal, {alg: algorithm})


def test_float_normals_round_as_tensorflows_box_muller():
    # v1 = 2 * M_PI * u is a double product in TensorFlow (M_PI is a double), rounded to float once, and
    # glibc's logf, sinf and cosf are nearer the exact values than numpy's float32 ones: computed in
    # float32, the last three of these differed in their last bit, and a half of another seed by one step
    normal = stateless("StatelessRandomNormal", [5], seed(3, 4), np.float32)
    want = [-0.17393383383750916, 1.6723546981811523, 0.3481701612472534, -1.7038906812667847,
            -0.6153246164321899]  # fmt: skip
    np.testing.assert_array_equal(normal, np.array(want, np.float32))
    halves = stateless("StatelessRandomNormal", [13], seed(-2052556498, 178074585), np.float16)
    want = [-2.42578125, 0.444091796875, 0.81982421875, 0.58984375, 1.771484375, 0.5048828125, 0.68896484375,
            -0.904296875, -0.48681640625, -0.8916015625, 0.1956787109375, -0.859375, -1.830078125]  # fmt: skip
    np.testing.assert_array_equal(halves, np.array(want, np.float16))
