"""DepthwiseConv2dNative (``runtime/kernels/depthwise_ops.py``): every layout and path against a float64
reference, and the state a node keeps from step to step."""

import numpy as np
import pytest
from support import assert_close, conv_attrs, nchw, ref_depthwise, run_op

from poolserve.runtime.errors import InvalidArgumentError

F32 = np.float32
RNG = np.random.default_rng(4321)


def rand(*shape, dtype=F32):
    return RNG.standard_normal(shape).astype(dtype)


DEPTHWISE_CASES = [
    ((1, 6, 6, 3), (3, 3, 3, 1), (1, 1), (1, 1), "SAME", None),
    ((2, 7, 5, 2), (3, 2, 2, 3), (2, 2), (1, 1), "SAME", None),
    ((1, 9, 8, 4), (2, 3, 4, 2), (3, 3), (1, 1), "VALID", None),
    ((2, 9, 9, 3), (3, 2, 3, 2), (1, 1), (2, 3), "SAME", None),
    ((1, 6, 7, 2), (3, 3, 2, 1), (2, 1), (1, 1), "EXPLICIT", ((2, 1), (0, 1))),
    ((1, 4, 4, 3), (5, 5, 3, 1), (1, 1), (1, 1), "SAME", None),
    # channel multiplier 1 through each of depthwise_ops' ways: one einsum over flattened rows (unit column
    # stride: dilated, 16 channels; 96 channels on 4 output columns; above, a row stride of 2 with explicit
    # padding), copied patches (column stride 2, 48 channels), the strided einsum (384 channels, 4 output
    # columns)
    ((1, 10, 9, 5), (3, 3, 5, 1), (1, 1), (2, 2), "SAME", None),
    ((2, 7, 6, 48), (3, 3, 48, 1), (2, 2), (1, 1), "SAME", None),
    ((1, 5, 6, 96), (3, 3, 96, 1), (1, 1), (1, 1), "VALID", None),
    ((1, 5, 6, 384), (3, 3, 384, 1), (1, 1), (1, 1), "VALID", None),
    ((1, 32, 33, 16), (3, 3, 16, 1), (1, 1), (1, 1), "SAME", None),
]


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize(("xs", "ws", "strides", "dilations", "padding", "explicit"), DEPTHWISE_CASES)
def test_depthwise_conv2d(xs, ws, strides, dilations, padding, explicit, fmt):
    x, w = rand(*xs), rand(*ws)
    expected = ref_depthwise(x, w, strides, dilations, padding, explicit or ((0, 0), (0, 0)))
    attrs = conv_attrs(strides, dilations, padding, explicit, fmt)
    x_in, expected = (nchw(x), nchw(expected)) if fmt == "NCHW" else (x, expected)
    assert_close(run_op("DepthwiseConv2dNative", [x_in, w], attrs), expected, rtol=1e-4, atol=1e-5)


def test_depthwise_conv2d_matches_tensorflow():
    x = np.arange(32, dtype=F32).reshape(1, 4, 4, 2)
    w = np.array([1, -1, 2, 0.5], F32).reshape(1, 1, 2, 2) * np.ones((2, 2, 1, 1), F32)
    got = run_op("DepthwiseConv2dNative", [x, w], {"strides": [1, 2, 2, 1], "padding": "SAME"})
    expected = [[[[20, -20, 48, 12], [36, -36, 80, 20]], [[84, -84, 176, 44], [100, -100, 208, 52]]]]
    assert_close(got, np.array(expected, F32))


# Depthwise convolutions of column stride 2 and fewer than 96 channels run on the input's two column-parity
# planes (depthwise_ops._depthwise_parity): kernels of odd and even size (a 1-wide one has no odd-column taps),
# each padding (one wider than the kernel's half, one where a plane holds only padding), a row stride of 1 and
# a dilated one, odd and even input sizes, batches, outputs of one band and of several; small 3x3 ones of 48
# channels or more keep the copied patches.
PARITY_CASES = [
    ((1, 57, 56, 32), (7, 7, 32, 1), (2, 2), (1, 1), "SAME", None, True),
    ((3, 50, 51, 24), (5, 5, 24, 1), (2, 2), (1, 1), "VALID", None, True),
    ((2, 64, 64, 48), (3, 3, 48, 1), (2, 2), (1, 1), "EXPLICIT", ((0, 1), (0, 1)), True),
    ((4, 33, 30, 40), (6, 4, 40, 1), (2, 2), (1, 1), "SAME", None, True),
    ((3, 71, 70, 16), (2, 7, 16, 1), (2, 2), (1, 1), "EXPLICIT", ((3, 2), (1, 0)), True),
    ((1, 48, 48, 16), (3, 3, 16, 1), (2, 2), (1, 1), "SAME", None, True),
    ((2, 9, 12, 8), (3, 1, 8, 1), (1, 2), (1, 1), "SAME", None, True),
    ((1, 13, 11, 24), (3, 3, 24, 1), (3, 2), (2, 1), "VALID", None, True),
    ((2, 20, 21, 8), (3, 7, 8, 1), (1, 2), (1, 1), "EXPLICIT", ((2, 1), (4, 3)), True),  # wide left padding
    ((1, 6, 1, 16), (3, 5, 16, 1), (2, 2), (1, 1), "EXPLICIT", ((1, 1), (2, 2)), True),  # a plane of padding
    ((1, 24, 24, 48), (3, 3, 48, 1), (2, 2), (1, 1), "SAME", None, False),
    ((1, 23, 25, 72), (3, 3, 72, 1), (2, 2), (1, 1), "SAME", None, False),
]


@pytest.mark.parametrize(("xs", "ws", "strides", "dilations", "padding", "explicit", "parity"), PARITY_CASES)
def test_column_strided_depthwise_runs_on_parity_planes(
    xs, ws, strides, dilations, padding, explicit, parity, monkeypatch
):
    from poolserve.runtime.kernels import depthwise_ops

    calls = []
    planes = depthwise_ops._depthwise_parity
    monkeypatch.setattr(depthwise_ops, "_depthwise_parity", lambda *a: calls.append(1) or planes(*a))
    x, w = rand(*xs), rand(*ws)
    expected = ref_depthwise(x, w, strides, dilations, padding, explicit or ((0, 0), (0, 0)))
    attrs = conv_attrs(strides, dilations, padding, explicit)
    assert_close(run_op("DepthwiseConv2dNative", [x, w], attrs), expected, rtol=1e-4, atol=1e-5)
    bias = rand(ws[2]) * 3
    fused = {**attrs, "fused_ops": ["BiasAdd", "Relu6"], "num_args": 1}
    want = np.clip(expected + bias, 0, 6)
    assert_close(run_op("_FusedDepthwiseConv2dNative", [x, w, bias], fused), want, rtol=1e-4, atol=1e-5)
    assert len(calls) == (2 if parity else 0)


def test_depthwise_conv2d_row_tile_follows_the_filter_and_the_width():
    # one session, step after step: the row tile a node keeps (depthwise_ops._depthwise_rows) is remade when the
    # output width changes and when a fed filter changes, even in place
    from poolserve.runtime.builder import GraphBuilder
    from poolserve.runtime.session import Session

    b = GraphBuilder()
    x = b.placeholder("x", F32, (None, None, None, 8))
    w = b.placeholder("w", F32, (3, 3, 8, 1))
    out = b.op("DepthwiseConv2dNative", [x, w], {"T": F32, "strides": [1, 1, 1, 1], "padding": "SAME"})
    filt = rand(3, 3, 8, 1)
    with Session(b.graph_def) as sess:
        for shape in [(1, 6, 7, 8), (2, 6, 7, 8), (1, 5, 11, 8), (1, 6, 7, 8)]:
            xv = rand(*shape)
            for _ in range(2):
                got = sess.run(out, {x: xv, w: filt})
                assert_close(got, ref_depthwise(xv, filt, padding="SAME"), rtol=1e-4, atol=1e-5)
                filt *= -0.5  # the same array, changed in place


def test_strided_depthwise_parity_tiles_follow_the_filter_and_the_width():
    # as above, for the sub-filters a stride-2 node keeps (depthwise_ops._depthwise_parity): a fed filter, then
    # a constant one (read-only: its tiles are kept), at two widths
    from poolserve.runtime.builder import GraphBuilder
    from poolserve.runtime.session import Session

    attrs = {"T": F32, "strides": [1, 2, 2, 1], "padding": "SAME"}
    b = GraphBuilder()
    x = b.placeholder("x", F32, (None, None, None, 32))
    w = b.placeholder("w", F32, (5, 5, 32, 1))
    fed = b.op("DepthwiseConv2dNative", [x, w], attrs, name="fed")
    const = rand(5, 5, 32, 1)
    kept = b.op("DepthwiseConv2dNative", [x, b.constant(const)], attrs, name="kept")
    filt = rand(5, 5, 32, 1)
    with Session(b.graph_def) as sess:
        for shape in [(2, 61, 60, 32), (2, 61, 52, 32), (2, 61, 60, 32)]:
            xv = rand(*shape)
            for _ in range(2):
                got_fed, got_kept = sess.run([fed, kept], {x: xv, w: filt})
                assert_close(got_fed, ref_depthwise(xv, filt, (2, 2), padding="SAME"), rtol=1e-4, atol=1e-5)
                assert_close(got_kept, ref_depthwise(xv, const, (2, 2), padding="SAME"), rtol=1e-4, atol=1e-5)
                filt *= -0.5


def test_small_depthwise_keeps_its_padded_input_across_steps_and_threads(monkeypatch):
    # a small depthwise node (depthwise_ops._SmallDepthwise) keeps zero-bordered input buffers from step to step:
    # other values, other batch sizes, SAME with a fused bias and Relu6, a dilated VALID one, a strided one
    # (its patches) and a strided one of 48 channels (its patches copied), and eight threads at once, each
    # with its own input, all get their own answers
    from concurrent.futures import ThreadPoolExecutor

    from poolserve.runtime.builder import GraphBuilder
    from poolserve.runtime.kernels import depthwise_ops
    from poolserve.runtime.session import Session

    runs = []
    run = depthwise_ops._SmallDepthwise.run
    monkeypatch.setattr(
        depthwise_ops._SmallDepthwise, "run", lambda self, *a: runs.append(1) or run(self, *a)
    )
    b = GraphBuilder()
    x = b.placeholder("x", F32, (None, 6, 6, 144))
    w, bv = rand(3, 3, 144, 1), rand(144) * 3
    filt, bias = b.constant(w), b.constant(bv)
    same = {"T": F32, **conv_attrs((1, 1), (1, 1), "SAME", None)}
    fused_attrs = {**same, "fused_ops": ["BiasAdd", "Relu6"], "num_args": 1}
    fused = b.op("_FusedDepthwiseConv2dNative", [x, filt, bias], fused_attrs, name="fused")
    dilated_attrs = {"T": F32, **conv_attrs((1, 1), (2, 2), "VALID", None)}
    dilated = b.op("DepthwiseConv2dNative", [x, filt], dilated_attrs, name="dilated")
    strided_attrs = {"T": F32, **conv_attrs((2, 2), (1, 1), "SAME", None)}  # patches, not rows
    strided = b.op("DepthwiseConv2dNative", [x, filt], strided_attrs, name="strided")
    narrow, w48 = b.placeholder("narrow", F32, (None, 8, 8, 48)), rand(3, 3, 48, 1)
    copied = b.op("DepthwiseConv2dNative", [narrow, b.constant(w48)], strided_attrs, name="copied")
    inputs = [(rand(1 + i % 2, 6, 6, 144) * 4, rand(1 + i % 3, 8, 8, 48)) for i in range(8)]
    wants = [
        (
            np.clip(ref_depthwise(v, w, padding="SAME") + bv, 0, 6),
            ref_depthwise(v, w, dilations=(2, 2)),
            ref_depthwise(v, w, (2, 2), padding="SAME"),
            ref_depthwise(u, w48, (2, 2), padding="SAME"),  # patches copied to a block
        )
        for v, u in inputs
    ]
    with Session(b.graph_def) as sess:

        def steps(i):
            feeds = dict(zip([x, narrow], inputs[i], strict=True))
            for _ in range(6):
                got = sess.run([fused, dilated, strided, copied], feeds)
                for value, want in zip(got, wants[i], strict=True):
                    assert_close(value, want, rtol=1e-4, atol=1e-5)

        steps(0)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(steps, range(8)))
    # all but the first calls at each batch size (threads that meet a size at once all take the first path)
    assert len(runs) >= 4 * 6 * 9 // 2


def test_depthwise_conv2d_half_empty_and_errors():
    x, w = rand(1, 5, 5, 2, dtype=np.float16), rand(3, 3, 2, 2, dtype=np.float16)
    got = run_op("DepthwiseConv2dNative", [x, w], {"strides": [1, 1, 1, 1], "padding": "SAME"})
    expected = ref_depthwise(x.astype(F32), w.astype(F32), padding="SAME").astype(np.float16)
    assert_close(got, expected, rtol=2e-3, atol=2e-3)
    got = run_op(
        "DepthwiseConv2dNative",
        [rand(1, 2, 2, 3), rand(3, 3, 3, 2)],
        {"strides": [1, 1, 1, 1], "padding": "VALID"},
    )
    assert got.shape == (1, 0, 0, 6)
    with pytest.raises(InvalidArgumentError, match="input and filter must have the same depth: 4 vs 3"):
        run_op(
            "DepthwiseConv2dNative",
            [rand(1, 5, 5, 4), rand(3, 3, 3, 2)],
            {"strides": [1, 1, 1, 1], "padding": "SAME"},
        )
    with pytest.raises(InvalidArgumentError, match="Computed output size would be negative"):
        run_op(
            "DepthwiseConv2dNative",
            [rand(1, 5, 5, 4), rand(7, 3, 4, 1)],
            {"strides": [1, 1, 1, 1], "padding": "VALID"},
        )
