import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view
from support import assert_close, conv_attrs, nchw, ref_conv, ref_depthwise, run_op, tf_pads

from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError

F32 = np.float32
RNG = np.random.default_rng(1234)


def rand(*shape, dtype=F32):
    return RNG.standard_normal(shape).astype(dtype)


# --- references --------------------------------------------------------------------------------------------


def ref_conv_backprop_input(input_shape, w, dy, **conv_args):
    """The transpose of the conv's matrix: built by convolving every basis vector of the input space."""
    size = int(np.prod(input_shape[1:]))
    basis = np.eye(size, dtype=np.float64).reshape(size, *input_shape[1:])
    matrix = ref_conv(basis, w.astype(np.float64), **conv_args).reshape(size, -1)
    dx = dy.reshape(dy.shape[0], -1).astype(np.float64) @ matrix.T
    return dx.reshape(input_shape).astype(dy.dtype)


def ref_pool(x, k, s, padding, reducer):
    """NHWC pooling over NaN-padded windows; reducer ignores the padding (np.nanmax/np.nanmean)."""
    oh, pt, pb = tf_pads(x.shape[1], k[0], s[0], 1, padding)
    ow, pl, pr = tf_pads(x.shape[2], k[1], s[1], 1, padding)
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=np.nan)
    win = sliding_window_view(xp, k, axis=(1, 2))[:, :: s[0], :: s[1]][:, :oh, :ow]
    return reducer(win, axis=(-2, -1)).astype(x.dtype)


# --- MatMul, BatchMatMul, Einsum ---------------------------------------------------------------------------


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_transposes(ta, tb):
    a, b = rand(3, 4), rand(4, 5)
    a_in, b_in = (a.T.copy() if ta else a), (b.T.copy() if tb else b)
    got = run_op("MatMul", [a_in, b_in], {"transpose_a": ta, "transpose_b": tb})
    assert_close(got, a @ b, rtol=1e-5)


def test_matmul_dtypes():
    a, b = RNG.integers(-9, 9, (3, 4)).astype(np.int32), RNG.integers(-9, 9, (4, 2)).astype(np.int32)
    assert_close(run_op("MatMul", [a, b]), a @ b)
    # Half products accumulate in float32 and round once, as TensorFlow does.
    h, g = rand(2, 300, dtype=np.float16), rand(300, 3, dtype=np.float16)
    assert_close(run_op("MatMul", [h, g]), (h.astype(F32) @ g.astype(F32)).astype(np.float16))
    # transpose_a is a plain transpose, not an adjoint, for complex inputs.
    c = (rand(3, 2) + 1j * rand(3, 2)).astype(np.complex64)
    assert_close(run_op("MatMul", [c, c], {"transpose_a": True}), c.T @ c, rtol=1e-5)


def test_matmul_empty():
    assert_close(run_op("MatMul", [np.zeros((2, 0), F32), np.zeros((0, 3), F32)]), np.zeros((2, 3), F32))
    assert run_op("MatMul", [np.zeros((0, 4), F32), np.zeros((4, 3), F32)]).shape == (0, 3)


def test_matmul_errors():
    with pytest.raises(
        InvalidArgumentError, match=r"Matrix size-incompatible: In\[0\]: \[2,3\], In\[1\]: \[4,5\]"
    ):
        run_op("MatMul", [np.ones((2, 3), F32), np.ones((4, 5), F32)])
    with pytest.raises(InvalidArgumentError, match=r"Matrix size-incompatible"):
        run_op("MatMul", [np.ones((2, 3), F32), np.ones((2, 3), F32)], {"transpose_b": False})
    with pytest.raises(
        InvalidArgumentError, match=r"In\[0\] is not a matrix. Instead it has shape \[2,2,3\]"
    ):
        run_op("MatMul", [np.ones((2, 2, 3), F32), np.ones((3, 2), F32)])


def test_batch_matmul_adjoint_conjugates():
    x = (rand(2, 4, 3) + 1j * rand(2, 4, 3)).astype(np.complex64)
    y = (rand(2, 5, 4) + 1j * rand(2, 5, 4)).astype(np.complex64)
    expected = np.conj(x.transpose(0, 2, 1)) @ np.conj(y.transpose(0, 2, 1))
    for op in ("BatchMatMul", "BatchMatMulV2"):
        assert_close(run_op(op, [x, y], {"adj_x": True, "adj_y": True}), expected, rtol=1e-5)
    r = rand(2, 4, 3)
    assert_close(run_op("BatchMatMulV2", [r, r], {"adj_x": True}), r.transpose(0, 2, 1) @ r, rtol=1e-5)


def test_batch_matmul_v2_broadcasts():
    x, y = rand(2, 1, 3, 4), rand(5, 4, 2)
    assert_close(run_op("BatchMatMulV2", [x, y]), np.matmul(x, y), rtol=1e-5)
    m = rand(3, 4)
    assert_close(run_op("BatchMatMulV2", [m, y]), np.matmul(m, y), rtol=1e-5)


def test_batch_matmul_v2_by_a_matrix_runs_all_rows_at_once():
    # [..., m, k] @ [k, n] as one [rows, k] @ [k, n] product: contiguous (also deeper than the 384 terms
    # float32 products are split at), adjoint and broadcast operands must give numpy's answer
    for x, w in [(rand(2, 3, 5, 4), rand(4, 6)), (rand(2, 70, 400), rand(400, 3))]:
        assert_close(run_op("BatchMatMulV2", [x, w]), np.matmul(x, w), rtol=1e-5, atol=1e-5)
    x, w = rand(2, 4, 5), rand(6, 4)
    want = np.matmul(x.transpose(0, 2, 1), w.T)
    assert_close(run_op("BatchMatMulV2", [x, w], {"adj_x": True, "adj_y": True}), want, rtol=1e-5)


def test_batch_matmul_v3_casts_to_tout():
    x = RNG.integers(-128, 127, (2, 3, 40)).astype(np.int8)
    y = RNG.integers(0, 255, (40, 2)).astype(np.uint8)
    got = run_op("BatchMatMulV3", [x, y], {"Tout": np.int32})
    assert_close(got, np.matmul(x.astype(np.int32), y.astype(np.int32)))
    f = rand(2, 3, 4)
    assert_close(run_op("BatchMatMulV3", [f, f], {"Tout": F32, "adj_y": True}), f @ f.transpose(0, 2, 1))


def test_batch_matmul_v2_broadcasts_batch_dims_of_any_rank():
    x, y = rand(5, 1, 2, 3), rand(4, 3, 2)
    assert_close(run_op("BatchMatMulV2", [x, y]), np.matmul(x, y), rtol=1e-5, atol=1e-6)
    m, b = rand(2, 3), rand(4, 3, 5)
    assert_close(run_op("BatchMatMulV2", [m, b]), np.matmul(m, b), rtol=1e-5, atol=1e-6)


def test_batch_matmul_errors():
    with pytest.raises(InvalidArgumentError, match=r"In\[0\].dim\(0\) and In\[1\].dim\(0\) must be the same"):
        run_op("BatchMatMul", [np.ones((2, 2, 3), F32), np.ones((1, 3, 2), F32)])
    with pytest.raises(InvalidArgumentError, match=r"has different ndims: \[2,2,3\] vs. \[3,2\]"):
        run_op("BatchMatMul", [np.ones((2, 2, 3), F32), np.ones((3, 2), F32)])
    with pytest.raises(InvalidArgumentError, match=r"compatible batch dimensions: \[2,2,3\] vs. \[3,3,2\]"):
        run_op("BatchMatMulV2", [np.ones((2, 2, 3), F32), np.ones((3, 3, 2), F32)])
    with pytest.raises(InvalidArgumentError, match=r"compatible batch dimensions: \[5,2,2,3\] vs. \[3,3,2\]"):
        run_op("BatchMatMulV2", [np.ones((5, 2, 2, 3), F32), np.ones((3, 3, 2), F32)])
    with pytest.raises(
        InvalidArgumentError, match=r"Matrix size-incompatible: In\[0\]: \[2,2,3\], In\[1\]: \[2,4,2\]"
    ):
        run_op("BatchMatMulV2", [np.ones((2, 2, 3), F32), np.ones((2, 4, 2), F32)])
    with pytest.raises(InvalidArgumentError, match=r"In\[0\] ndims must be >= 2: 1"):
        run_op("BatchMatMulV2", [np.ones(3, F32), np.ones((3, 2), F32)])


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("ij,jk->ki", [(3, 4), (4, 5)]),
        ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
        ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 6)]),
        ("...j,...j->...", [(2, 3, 1, 4), (3, 5, 4)]),
        ("i,j->ij", [(3,), (4,)]),
        ("ab,bc->c", [(2, 3), (3, 4)]),
        ("ii,i->i", [(3, 3), (3,)]),
        ("aab,bc->ac", [(3, 3, 2), (2, 4)]),
        ("ijk,ijk->", [(2, 3, 4), (2, 3, 4)]),
        ("abcd,dc->ba", [(2, 3, 4, 5), (5, 4)]),
        ("ij,ij->ij", [(3, 4), (3, 4)]),
        ("ii->", [(4, 4)]),
        ("bij->jib", [(2, 3, 4)]),
        ("...i->i...", [(2, 3, 4)]),
        ("ij,jk->ik", [(0, 4), (4, 5)]),
        ("ij,jk->ik", [(3, 0), (0, 5)]),
    ],
)
def test_einsum(equation, shapes):
    ops = [rand(*s) for s in shapes]
    expected = np.asarray(np.einsum(equation, *[o.astype(np.float64) for o in ops])).astype(F32)
    assert_close(run_op("Einsum", ops, {"equation": equation, "N": len(ops)}), expected, rtol=1e-5, atol=1e-5)


def test_einsum_dtypes_and_repeated_shapes():
    a, b = RNG.integers(-5, 5, (3, 4)).astype(np.int32), RNG.integers(-5, 5, (4, 2)).astype(np.int32)
    assert_close(run_op("Einsum", [a, b], {"equation": "ij,jk->ik", "N": 2}), a @ b)
    h = rand(3, 4, dtype=np.float16)
    got = run_op("Einsum", [h, h], {"equation": "ij,kj->ik", "N": 2})
    assert_close(got, (h.astype(F32) @ h.astype(F32).T).astype(np.float16))


@pytest.mark.parametrize(
    ("equation", "shapes", "message"),
    [
        ("bij,bjk", [(2, 3, 4), (2, 4, 5)], "Expecting exactly one '->'"),
        (
            "bij,bjk->bik",
            [(2, 3, 4), (5, 4, 6)],
            r"Expected dimension 2 at axis 0 of the input shaped \[5,4,6\]",
        ),
        ("bij,bjk->bik", [(2, 3, 4), (2, 5, 6)], "Expected dimension 4 at axis 1"),
        ("bij,bjk->bik", [(2, 3), (2, 4, 6)], "Expected input 0 to have rank 3 but got: 2"),
        (
            "...ij,...jk->...ik",
            [(2, 3, 4), (5, 4, 6)],
            r"Invalid broadcasting dimensions: \[2,3,4\] vs. \[5,4,6\]",
        ),
        ("...ij,...jk->ik", [(2, 3, 4), (2, 4, 5)], "Output contains 1 broadcasting dimension"),
        ("ab,bc->ad", [(2, 3), (3, 4)], "does not appear in the inputs"),
        ("a1,bc->ac", [(2, 3), (3, 4)], "Invalid character '1'"),
    ],
)
def test_einsum_errors(equation, shapes, message):
    with pytest.raises(InvalidArgumentError, match=message):
        run_op("Einsum", [np.ones(s, F32) for s in shapes], {"equation": equation, "N": len(shapes)})


def test_einsum_three_operands_refused():
    with pytest.raises(InvalidArgumentError, match="Expecting 1 or 2 input subscripts"):
        run_op("Einsum", [np.ones(2, F32)] * 3, {"equation": "i,i,i->i", "N": 3})


# --- BiasAdd and activations -------------------------------------------------------------------------------


def test_bias_add_formats():
    x = rand(2, 3, 4, 5)
    assert_close(run_op("BiasAdd", [x, np.arange(5, dtype=F32)]), x + np.arange(5, dtype=F32))
    assert_close(run_op("BiasAddV1", [x, np.arange(5, dtype=F32)]), x + np.arange(5, dtype=F32))
    b3 = np.arange(3, dtype=F32)
    assert_close(run_op("BiasAdd", [x, b3], {"data_format": "NCHW"}), x + b3[:, None, None])
    m = rand(2, 3)
    assert_close(run_op("BiasAdd", [m, b3], {"data_format": "NCHW"}), m + b3)
    i = np.ones((2, 3), np.int32)
    assert_close(run_op("BiasAdd", [i, np.arange(3, dtype=np.int32)]), i + np.arange(3, dtype=np.int32))


def test_bias_add_errors():
    with pytest.raises(
        InvalidArgumentError, match=r"as many biases as the last dimension.*\[2\] vs. \[2,3\]"
    ):
        run_op("BiasAdd", [np.ones((2, 3), F32), np.ones(2, F32)])
    with pytest.raises(InvalidArgumentError, match=r"as many biases as the channel dimension"):
        run_op("BiasAdd", [np.ones((2, 3, 4), F32), np.ones(4, F32)], {"data_format": "NCHW"})
    with pytest.raises(InvalidArgumentError, match=r"at least 2D: \[3\]"):
        run_op("BiasAdd", [np.ones(3, F32), np.ones(3, F32)])
    with pytest.raises(InvalidArgumentError, match=r"Biases must be 1D: \[1,3\]"):
        run_op("BiasAdd", [np.ones((2, 3), F32), np.ones((1, 3), F32)])
    with pytest.raises(InvalidArgumentError, match="data_format"):
        run_op("BiasAdd", [np.ones((2, 3), F32), np.ones(3, F32)], {"data_format": "NDHWC"})


X_ACT = np.array([np.nan, -np.inf, np.inf, -100, -15, -1, -1e-3, -0.0, 0, 1e-3, 0.5, 1, 7, 15, 100], F32)


def test_relu_family():
    with np.errstate(invalid="ignore"):
        # NaN propagates, as in TensorFlow.
        assert_close(run_op("Relu", [X_ACT]), np.where(np.isnan(X_ACT) | (X_ACT > 0), X_ACT, 0).astype(F32))
        assert_close(run_op("Relu6", [X_ACT]), np.where(np.isnan(X_ACT), X_ACT, np.clip(X_ACT, 0, 6)))
    ints = np.array([-5, 0, 3, 9], np.int8)
    assert_close(run_op("Relu", [ints]), np.array([0, 0, 3, 9], np.int8))
    assert_close(run_op("Relu6", [ints]), np.array([0, 0, 3, 6], np.int8))


@pytest.mark.parametrize("alpha", [None, 0.0, 0.5, 1.0, 1.5, -0.3])
def test_leaky_relu(alpha):
    attrs = {} if alpha is None else {"alpha": alpha}
    a = F32(0.2 if alpha is None else alpha)
    with np.errstate(invalid="ignore"):  # -inf * 0 is NaN, in TensorFlow too
        expected = np.where(X_ACT > 0, X_ACT, X_ACT * a)
    assert_close(run_op("LeakyRelu", [X_ACT], attrs), expected)


def test_elu_selu_softplus_softsign_match_tensorflow():
    # Values from tf.raw_ops (TensorFlow 2.21, CPU) for the inputs below.
    x = np.array([-1e-3, -0.1, -10, -15, 13, 17, 1e-6], F32)
    tf_elu = [-9.9951029e-04, -9.5162630e-02, -9.9995458e-01, -9.9999970e-01, 13, 17, 1e-6]
    tf_selu = [-1.7572384e-03, -1.6730535e-01, -1.7580194, -1.7580988, 13.659113, 17.861917, 1.0507010e-06]
    tf_softplus = [
        6.92647278e-01,
        6.44396663e-01,
        4.53988978e-05,
        3.05902319e-07,
        13.0000019,
        17,
        6.93147659e-01,
    ]
    assert_close(run_op("Elu", [x]), np.array(tf_elu, F32), rtol=1e-4)
    assert_close(run_op("Selu", [x]), np.array(tf_selu, F32), rtol=1e-4)
    assert_close(run_op("Softplus", [x]), np.array(tf_softplus, F32), rtol=1e-4)
    assert_close(run_op("Softsign", [x]), x / (1 + np.abs(x)))


def test_activation_special_values():
    got = {
        op: run_op(op, [np.array([np.nan, -np.inf, np.inf, -1000, 1000], F32)])
        for op in ("Elu", "Selu", "Softplus", "Softsign")
    }
    assert_close(got["Elu"], np.array([np.nan, -1, np.inf, -1, 1000], F32))
    assert np.isnan(got["Selu"][0]) and got["Selu"][2] == np.inf
    assert_close(got["Softplus"], np.array([np.nan, 0, np.inf, 0, 1000], F32))
    assert_close(got["Softsign"], np.array([np.nan, np.nan, np.nan, -1000 / 1001, 1000 / 1001], F32))


@pytest.mark.parametrize("op", ["Relu", "Relu6", "LeakyRelu", "Elu", "Selu", "Softplus", "Softsign"])
@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_activation_dtypes(op, dtype):
    x = np.array([-2, -0.5, 0, 0.5, 3], dtype)
    got = run_op(op, [x])
    assert got.dtype == dtype and got.shape == x.shape
    ref = run_op(op, [x.astype(F32)]).astype(dtype)
    assert_close(got, ref, rtol=2e-3 if dtype == np.float16 else 1e-6)


def test_activation_empty():
    assert run_op("Elu", [np.zeros((0, 3), F32)]).shape == (0, 3)


def softmax_ref(x):
    e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("shape", [(5,), (3, 7), (2, 3, 4)])
def test_softmax_and_log_softmax(shape):
    x = rand(*shape) * 10
    assert_close(run_op("Softmax", [x]), softmax_ref(x).astype(F32), rtol=1e-5)
    assert_close(run_op("LogSoftmax", [x]), np.log(softmax_ref(x)).astype(F32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_softmax_of_masked_attention_scores(dtype):
    # BERT's [batch, heads, queries, keys] scores, padded keys and a padded query row set to -1e9
    x = (rand(1, 2, 64, 64) * 8).astype(dtype)
    x[..., 50:] = -1e9
    x[:, :, 60, :] = -1e9
    got = run_op("Softmax", [x])
    assert got.dtype == dtype
    assert_close(got, softmax_ref(x).astype(dtype), rtol=1e-5, atol=1e-7)
    assert np.all(got[..., 50:][:, :, :60] == 0)
    assert_close(got[:, :, 60], np.full((1, 2, 64), 1 / 64, dtype), rtol=1e-6)
    assert_close(
        run_op("LogSoftmax", [x[..., :50]]), np.log(softmax_ref(x[..., :50])).astype(dtype), atol=1e-5
    )
    assert_close(run_op("Softmax", [x[..., :1]]), np.ones((1, 2, 64, 1), dtype))  # rows of one


def test_softmax_is_stable_and_keeps_dtype():
    x = np.array([[1000, 1001, 1002], [-1000, -1000, -1000]], F32)
    assert_close(run_op("Softmax", [x]), softmax_ref(x - x.max(-1, keepdims=True)).astype(F32))
    assert_close(run_op("LogSoftmax", [x]), np.log(softmax_ref(x)).astype(F32), atol=1e-5)
    h = x.astype(np.float16)
    assert run_op("Softmax", [h]).dtype == np.float16
    assert run_op("LogSoftmax", [np.zeros((2, 0), F32)]).shape == (2, 0)
    with pytest.raises(InvalidArgumentError, match=r"logits must have >= 1 dimension, got \[\]"):
        run_op("Softmax", [np.float32(1)])


# --- Conv2D ------------------------------------------------------------------------------------------------


CONV_CASES = [
    # (x shape, filter shape, strides, dilations, padding, explicit (h, w) pads)
    ((1, 5, 5, 3), (3, 3, 3, 2), (1, 1), (1, 1), "SAME", None),
    ((2, 7, 6, 3), (2, 3, 3, 4), (2, 2), (1, 1), "SAME", None),
    ((2, 9, 8, 4), (3, 2, 4, 5), (2, 3), (1, 1), "VALID", None),
    ((1, 9, 9, 2), (3, 3, 2, 3), (1, 1), (2, 3), "SAME", None),
    ((1, 10, 9, 2), (2, 3, 2, 3), (2, 1), (2, 2), "VALID", None),
    ((2, 6, 5, 3), (3, 2, 3, 2), (2, 1), (1, 2), "EXPLICIT", ((1, 2), (0, 3))),
    ((1, 6, 6, 4), (1, 1, 4, 7), (1, 1), (1, 1), "SAME", None),
    ((1, 7, 6, 4), (1, 1, 4, 3), (2, 3), (1, 1), "VALID", None),
    ((1, 5, 5, 3), (1, 1, 3, 2), (1, 1), (1, 1), "EXPLICIT", ((1, 0), (0, 2))),
    ((2, 6, 6, 4), (3, 3, 2, 6), (1, 1), (1, 1), "SAME", None),  # 2 groups
    ((1, 5, 7, 6), (2, 2, 1, 6), (2, 2), (1, 1), "VALID", None),  # 6 groups
    ((1, 3, 3, 2), (5, 5, 2, 1), (1, 1), (1, 1), "SAME", None),  # kernel larger than the input
]


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize(("xs", "ws", "strides", "dilations", "padding", "explicit"), CONV_CASES)
def test_conv2d(xs, ws, strides, dilations, padding, explicit, fmt):
    x, w = rand(*xs), rand(*ws)
    expected = ref_conv(x, w, strides, dilations, padding, explicit or ((0, 0), (0, 0)))
    attrs = conv_attrs(strides, dilations, padding, explicit, fmt)
    if fmt == "NCHW":
        assert_close(run_op("Conv2D", [nchw(x), w], attrs), nchw(expected), rtol=1e-4, atol=1e-5)
    else:
        assert_close(run_op("Conv2D", [x, w], attrs), expected, rtol=1e-4, atol=1e-5)


def test_conv2d_matches_tensorflow():
    # SAME with an even kernel and stride 2 pads (0 before, 1 after): values from tf.raw_ops.Conv2D.
    x = (np.arange(40, dtype=F32).reshape(1, 5, 4, 2) - 20) / 10
    w = (np.arange(12, dtype=F32).reshape(2, 3, 2, 1) - 6) / 4
    got = run_op("Conv2D", [x, w], {"strides": [1, 2, 2, 1], "padding": "SAME"})
    assert_close(got[0, :, :, 0], np.array([[6.5, 5.8], [4.1, 1.0], [-7.175, -7.75]], F32), rtol=1e-5)
    x2 = np.arange(16, dtype=F32).reshape(1, 4, 4, 1)
    attrs = {
        "strides": [1, 1, 1, 1],
        "dilations": [1, 2, 2, 1],
        "padding": "EXPLICIT",
        "explicit_paddings": [0, 0, 1, 0, 0, 1, 0, 0],
    }
    got = run_op("Conv2D", [x2, np.ones((2, 2, 1, 1), F32)], attrs)
    assert_close(got[0, :, :, 0], np.array([[10, 12, 6], [20, 24, 12], [36, 40, 20]], F32))


def test_conv2d_dtypes_and_empty():
    x, w = rand(1, 5, 5, 3, dtype=np.float16), rand(3, 3, 3, 2, dtype=np.float16)
    expected = ref_conv(x.astype(F32), w.astype(F32), padding="SAME").astype(np.float16)
    assert_close(
        run_op("Conv2D", [x, w], {"strides": [1, 1, 1, 1], "padding": "SAME"}), expected, rtol=2e-3, atol=2e-3
    )
    xi, wi = (
        RNG.integers(-3, 3, (1, 4, 4, 2)).astype(np.int32),
        RNG.integers(-3, 3, (2, 2, 2, 1)).astype(np.int32),
    )
    got = run_op("Conv2D", [xi, wi], {"strides": [1, 1, 1, 1], "padding": "VALID"})
    assert_close(got, ref_conv(xi.astype(np.float64), wi.astype(np.float64)).astype(np.int32))
    got = run_op(
        "Conv2D", [np.zeros((0, 5, 5, 3), F32), w.astype(F32)], {"strides": [1, 1, 1, 1], "padding": "SAME"}
    )
    assert got.shape == (0, 5, 5, 2)
    # A window that fits nowhere gives an empty output, as in TensorFlow.
    got = run_op(
        "Conv2D", [rand(1, 5, 5, 4), rand(6, 3, 4, 4)], {"strides": [1, 1, 1, 1], "padding": "VALID"}
    )
    assert got.shape == (1, 0, 3, 4)
    # Output sizes truncate toward zero like TensorFlow's C++: (5 - 8 + 2) / 2 is 0, not an error.
    got = run_op(
        "Conv2D", [rand(1, 5, 5, 2), rand(8, 3, 2, 2)], {"strides": [1, 2, 2, 1], "padding": "VALID"}
    )
    assert got.shape == (1, 0, 2, 2)


def test_conv2d_does_not_write_inputs():
    # run_op feeds read-only Consts; also check a fed (writable) input is left alone.
    x, w = rand(1, 4, 4, 2), rand(3, 3, 2, 2)
    x0, w0 = x.copy(), w.copy()
    run_op("Conv2D", [x, w], {"strides": [1, 1, 1, 1], "padding": "SAME"}, feed=True)
    assert_close(x, x0)
    assert_close(w, w0)


@pytest.mark.parametrize(
    ("x", "w", "attrs", "error", "message"),
    [
        (
            (1, 5, 5, 4),
            (3, 3, 3, 4),
            {},
            InvalidArgumentError,
            "input depth must be evenly divisible by filter depth: 4 vs 3",
        ),
        (
            (1, 5, 5, 4),
            (3, 3, 2, 3),
            {},
            InvalidArgumentError,
            "output depth must be evenly divisible by number of groups: 3 vs 2",
        ),
        ((1, 5, 5, 0), (3, 3, 0, 2), {}, InvalidArgumentError, "filter depth must be strictly positive"),
        (
            (1, 5, 5, 4),
            (7, 3, 4, 4),
            {"padding": "VALID"},
            InvalidArgumentError,
            r"Computed output size would be negative: -1 \[input_size: 5, effective_filter_size: 7, stride: 1\]",
        ),
        (
            (1, 5, 4),
            (3, 3, 4, 4),
            {},
            InvalidArgumentError,
            r"convolution input must be 4-dimensional: \[1,5,4\]",
        ),
        (
            (1, 5, 5, 4),
            (3, 4, 4),
            {},
            InvalidArgumentError,
            r"convolution filter must be 4-dimensional: \[3,4,4\]",
        ),
        (
            (1, 5, 5, 4),
            (3, 3, 4, 4),
            {"strides": [2, 1, 1, 1]},
            UnimplementedError,
            "strides in the batch and depth",
        ),
        (
            (1, 5, 5, 4),
            (3, 3, 4, 4),
            {"strides": [1, 1, 1]},
            InvalidArgumentError,
            "strides field must specify 4",
        ),
        (
            (1, 5, 5, 4),
            (3, 3, 4, 4),
            {"strides": [1, 0, 1, 1]},
            InvalidArgumentError,
            "strides should be larger than 0",
        ),
        (
            (1, 5, 5, 4),
            (3, 3, 4, 4),
            {"dilations": [1, 1, 1, 2]},
            UnimplementedError,
            "dilations in the batch and depth",
        ),
        (
            (1, 5, 5, 4),
            (3, 3, 4, 4),
            {"dilations": [1, 0, 1, 1]},
            InvalidArgumentError,
            "Dilated rates should be larger",
        ),
        (
            (1, 5, 5, 4),
            (3, 3, 4, 4),
            {"padding": "EXPLICIT", "explicit_paddings": [0, 0, 1, 1]},
            InvalidArgumentError,
            "must contain 8 values, but got: 4",
        ),
        (
            (1, 5, 5, 4),
            (3, 3, 4, 4),
            {"padding": "EXPLICIT", "explicit_paddings": [0, 0, -1, 1, 0, 0, 0, 0]},
            InvalidArgumentError,
            "must be nonnegative",
        ),
        (
            (1, 5, 5, 4),
            (3, 3, 4, 4),
            {"padding": "EXPLICIT", "explicit_paddings": [1, 0, 1, 1, 0, 0, 0, 0]},
            InvalidArgumentError,
            "Nonzero explicit padding in the batch or depth",
        ),
        (
            (1, 5, 5, 4),
            (3, 3, 4, 4),
            {"explicit_paddings": [0, 0, 1, 1, 0, 0, 0, 0]},
            InvalidArgumentError,
            "must be empty if the padding attribute is not EXPLICIT",
        ),
        (
            (1, 5, 5, 4),
            (3, 3, 4, 4),
            {"padding": "FULL"},
            InvalidArgumentError,
            "attr 'padding' must be one of",
        ),
    ],
)
def test_conv2d_errors(x, w, attrs, error, message):
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME", **attrs}
    with pytest.raises(error, match=message):
        run_op("Conv2D", [np.ones(x, F32), np.ones(w, F32)], attrs)


def test_conv2d_attr_errors_name_the_node():
    with pytest.raises(InvalidArgumentError, match=r"Node 'op' \(op 'Conv2D'\): Row and column strides"):
        run_op(
            "Conv2D",
            [np.ones((1, 3, 3, 1), F32), np.ones((1, 1, 1, 1), F32)],
            {"strides": [1, 0, 0, 1], "padding": "SAME"},
        )


# Outputs of 128K values and more run a band of rows at a time, the epilogue of a fused node on each band
# (conv_ops._CHUNK): odd sizes, so that the last band of each image is short.
BANDED_CASES = [
    ("Conv2D", (2, 75, 61, 5), (3, 3, 5, 16), (1, 1), (1, 1), "SAME"),
    ("Conv2D", (3, 64, 48, 8), (1, 1, 8, 24), (1, 1), (1, 1), "VALID"),
    ("Conv2D", (1, 150, 97, 8), (1, 1, 8, 24), (1, 1), (1, 1), "SAME"),  # 1x1: bands of 256K values
    ("Conv2D", (2, 129, 97, 3), (3, 3, 3, 32), (2, 2), (1, 1), "VALID"),
    ("DepthwiseConv2dNative", (2, 90, 83, 16), (3, 3, 16, 1), (1, 1), (1, 1), "SAME"),
    ("DepthwiseConv2dNative", (2, 90, 83, 16), (3, 3, 16, 1), (1, 1), (2, 2), "SAME"),
    ("DepthwiseConv2dNative", (2, 181, 150, 16), (3, 3, 16, 1), (2, 2), (1, 1), "SAME"),
    ("DepthwiseConv2dNative", (2, 45, 47, 64), (3, 3, 64, 1), (1, 1), (1, 1), "VALID"),
]


@pytest.mark.parametrize(("op", "xs", "ws", "strides", "dilations", "padding"), BANDED_CASES)
def test_large_convolutions_run_in_bands(op, xs, ws, strides, dilations, padding):
    x, w = rand(*xs), rand(*ws)
    bias = rand(ws[2] * ws[3] if op != "Conv2D" else ws[3]) * 3
    ref = ref_conv if op == "Conv2D" else ref_depthwise
    expected = ref(x, w, strides, dilations, padding)
    assert expected.size >= 2 * 65536
    attrs = conv_attrs(strides, dilations, padding, None)
    assert_close(run_op(op, [x, w], attrs), expected, rtol=1e-4, atol=1e-5)
    fused = {**attrs, "fused_ops": ["BiasAdd", "Relu6"], "num_args": 1}
    want = np.clip(expected + bias, 0, 6)
    assert_close(run_op(f"_Fused{op}", [x, w, bias], fused), want, rtol=1e-4, atol=1e-5)


def test_deep_narrow_convolution_runs_in_bands(monkeypatch):
    # a small output of a deep im2col matrix (conv_ops._BAND_COLS): bands of rows too, with the epilogue
    from poolserve.runtime.kernels import conv_ops

    calls = []
    chunked = conv_ops._conv2d_chunked
    monkeypatch.setattr(conv_ops, "_conv2d_chunked", lambda *a: calls.append(1) or chunked(*a))
    # (12 output columns: too narrow for row taps)
    x, w = rand(1, 45, 12, 512), rand(3, 3, 512, 8)
    expected = ref_conv(x, w, (1, 1), (1, 1), "SAME")
    assert expected.size < 2 * 65536
    attrs = conv_attrs((1, 1), (1, 1), "SAME", None)
    assert_close(run_op("Conv2D", [x, w], attrs), expected, rtol=1e-4, atol=1e-4)
    bias = rand(8) * 3
    fused = {**attrs, "fused_ops": ["BiasAdd", "Relu"], "num_args": 1}
    want = np.maximum(expected + bias, 0)
    assert_close(run_op("_FusedConv2D", [x, w, bias], fused), want, rtol=1e-4, atol=1e-4)
    assert len(calls) == 2


# NHWC convolutions of unit row stride, kernels more than one row tall, 8+ channels and 16+ output columns run
# on row taps (conv_ops._conv2d_row_taps): column strides and dilations, row dilation, every padding, tall
# and wide kernels, one band and several (with the epilogue per band), filter rows deeper than 384 values (the
# product in slices), batches.
ROW_TAP_CASES = [
    ((2, 20, 18, 16), (3, 3, 16, 8), (1, 1), (1, 1), "SAME", None),
    ((1, 40, 37, 32), (3, 3, 32, 24), (1, 2), (1, 1), "SAME", None),
    ((3, 30, 33, 8), (5, 5, 8, 16), (1, 1), (2, 2), "VALID", None),
    ((1, 24, 40, 12), (7, 1, 12, 8), (1, 1), (1, 1), "SAME", None),
    ((1, 17, 36, 8), (2, 4, 8, 8), (1, 1), (3, 1), "EXPLICIT", ((2, 1), (0, 3))),
    ((2, 70, 64, 48), (3, 3, 48, 64), (1, 1), (1, 1), "SAME", None),
    ((1, 19, 20, 160), (3, 3, 160, 8), (1, 1), (1, 1), "VALID", None),
]


def assert_convolution_on(monkeypatch, path, xs, ws, strides, dilations, padding, explicit):
    """Conv2D and _FusedConv2D (bias, Relu6) of this case match the reference, each through conv_ops.``path``."""
    from poolserve.runtime.kernels import conv_ops

    calls = []
    real = getattr(conv_ops, path)
    monkeypatch.setattr(conv_ops, path, lambda *a: calls.append(1) or real(*a))
    x, w = rand(*xs), rand(*ws)
    expected = ref_conv(x, w, strides, dilations, padding, explicit or ((0, 0), (0, 0)))
    attrs = conv_attrs(strides, dilations, padding, explicit)
    assert_close(run_op("Conv2D", [x, w], attrs), expected, rtol=1e-4, atol=1e-4)
    bias = rand(ws[3]) * 3
    fused = {**attrs, "fused_ops": ["BiasAdd", "Relu6"], "num_args": 1}
    want = np.clip(expected + bias, 0, 6)
    assert_close(run_op("_FusedConv2D", [x, w, bias], fused), want, rtol=1e-4, atol=1e-4)
    assert len(calls) == 2


@pytest.mark.parametrize(("xs", "ws", "strides", "dilations", "padding", "explicit"), ROW_TAP_CASES)
def test_convolution_on_row_taps(monkeypatch, xs, ws, strides, dilations, padding, explicit):
    assert_convolution_on(monkeypatch, "_conv2d_row_taps", xs, ws, strides, dilations, padding, explicit)


def test_row_stride_and_narrow_convolutions_stay_on_im2col(monkeypatch):
    from poolserve.runtime.kernels import conv_ops

    monkeypatch.setattr(conv_ops, "_conv2d_row_taps", lambda *a: pytest.fail("ran on row taps"))
    for xs, ws, strides in [
        ((1, 32, 32, 16), (3, 3, 16, 8), (2, 2)),  # a row stride
        ((1, 32, 32, 3), (3, 3, 3, 8), (1, 1)),  # 3 channels
        ((1, 32, 12, 16), (3, 3, 16, 8), (1, 1)),  # 12 output columns
        ((1, 32, 32, 16), (1, 3, 16, 8), (1, 1)),  # one kernel row
    ]:
        x, w = rand(*xs), rand(*ws)
        attrs = conv_attrs(strides, (1, 1), "SAME", None)
        assert_close(
            run_op("Conv2D", [x, w], attrs), ref_conv(x, w, strides, (1, 1), "SAME"), rtol=1e-4, atol=1e-4
        )


# NHWC convolutions of one input channel run on tap planes (conv_ops._conv2d_tap_planes): strides, dilations,
# every padding, a 1-row and a 1-column kernel, images grouped in bands (7 images of 28x28x16 outputs: bands
# of 5 and 2), an image in bands of rows (128x128x8 outputs), fused bias and activation per band.
TAP_PLANE_CASES = [
    ((7, 28, 28, 1), (3, 3, 1, 16), (1, 1), (1, 1), "SAME", None),
    ((2, 129, 130, 1), (3, 3, 1, 8), (1, 1), (1, 1), "SAME", None),
    ((3, 21, 19, 1), (5, 3, 1, 4), (2, 3), (1, 1), "VALID", None),
    ((2, 17, 18, 1), (3, 2, 1, 5), (1, 1), (2, 3), "SAME", None),
    ((1, 12, 11, 1), (2, 3, 1, 3), (2, 1), (1, 2), "EXPLICIT", ((1, 2), (0, 3))),
    ((2, 9, 10, 1), (1, 4, 1, 2), (1, 1), (1, 1), "SAME", None),
    ((2, 9, 10, 1), (4, 1, 1, 2), (1, 2), (1, 1), "VALID", None),
]


@pytest.mark.parametrize(("xs", "ws", "strides", "dilations", "padding", "explicit"), TAP_PLANE_CASES)
def test_one_channel_convolution_on_tap_planes(monkeypatch, xs, ws, strides, dilations, padding, explicit):
    assert_convolution_on(monkeypatch, "_conv2d_tap_planes", xs, ws, strides, dilations, padding, explicit)


def test_one_channel_convolution_of_empty_input_on_tap_planes():
    attrs = {"strides": [1, 1, 1, 1], "padding": "SAME"}
    got = run_op("Conv2D", [np.zeros((0, 5, 5, 1), F32), rand(3, 3, 1, 2)], attrs)
    assert got.shape == (0, 5, 5, 2)
    got = run_op("Conv2D", [rand(1, 5, 5, 1), rand(6, 3, 1, 4)], {**attrs, "padding": "VALID"})
    assert got.shape == (1, 0, 3, 4)


# --- Conv2DBackpropInput -----------------------------------------------------------------------------------


BACKPROP_CASES = [
    ((1, 5, 5, 2), (3, 3, 2, 3), (2, 2), (1, 1), "SAME", None),
    ((2, 6, 7, 3), (2, 3, 3, 2), (2, 3), (1, 1), "VALID", None),
    ((1, 7, 6, 2), (3, 2, 2, 2), (1, 1), (2, 2), "SAME", None),
    ((1, 6, 5, 1), (3, 3, 1, 2), (2, 1), (1, 1), "EXPLICIT", ((1, 2), (0, 1))),
    ((1, 4, 4, 3), (1, 1, 3, 2), (1, 1), (1, 1), "VALID", None),
]


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize(("xs", "ws", "strides", "dilations", "padding", "explicit"), BACKPROP_CASES)
def test_conv2d_backprop_input(xs, ws, strides, dilations, padding, explicit, fmt):
    w = rand(*ws)
    pads = explicit or ((0, 0), (0, 0))
    out_shape = ref_conv(np.zeros(xs, F32), w, strides, dilations, padding, pads).shape
    dy = rand(*out_shape)
    expected = ref_conv_backprop_input(
        xs, w, dy, strides=strides, dilations=dilations, padding=padding, explicit=pads
    )
    attrs = conv_attrs(strides, dilations, padding, explicit, fmt)
    if fmt == "NCHW":
        sizes = np.array([xs[0], xs[3], xs[1], xs[2]], np.int32)
        got = run_op("Conv2DBackpropInput", [sizes, w, nchw(dy)], attrs)
        assert_close(got, nchw(expected), rtol=1e-4, atol=1e-5)
    else:
        got = run_op("Conv2DBackpropInput", [np.array(xs, np.int32), w, dy], attrs)
        assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_conv2d_backprop_input_matches_tensorflow():
    dy = np.arange(1, 5, dtype=F32).reshape(1, 2, 2, 1)
    w = np.arange(9, dtype=F32).reshape(3, 3, 1, 1)
    attrs = {"strides": [1, 2, 2, 1], "padding": "SAME"}
    expected = np.array([[0, 1, 2, 2], [3, 4, 11, 8], [6, 10, 26, 18], [9, 12, 27, 16]], F32)
    got = run_op("Conv2DBackpropInput", [np.array([1, 4, 4, 1], np.int32), w, dy], attrs)
    assert_close(got[0, :, :, 0], expected)
    # input_sizes may give only the spatial dims; int64 sizes work too.
    got = run_op("Conv2DBackpropInput", [np.array([4, 4], np.int64), w, dy], attrs)
    assert_close(got[0, :, :, 0], expected)


@pytest.mark.parametrize(
    ("sizes", "w", "dy", "message"),
    [
        (
            [1, 5, 5, 4],
            (3, 3, 4, 2),
            (1, 3, 3, 2),
            "Size of out_backprop doesn't match computed: actual = 3, computed = 5",
        ),
        ([1, 5, 5, 3], (3, 3, 4, 2), (1, 5, 5, 2), "input depth must be evenly divisible by filter depth"),
        ([1, 5, 5, 4], (3, 3, 4, 2), (1, 5, 5, 1), "filter and out_backprop must have the same out_depth"),
        ([2, 5, 5, 4], (3, 3, 4, 2), (1, 5, 5, 2), "input and out_backprop must have the same batch size"),
        ([1, 5, 5], (3, 3, 4, 2), (1, 5, 5, 2), "input_sizes to contain 4 values or 2 values, but got: 3"),
        ([1, 5, 5, 8], (3, 3, 4, 2), (1, 5, 5, 2), "grouped convolutions are not supported"),
    ],
)
def test_conv2d_backprop_input_errors(sizes, w, dy, message):
    inputs = [np.array(sizes, np.int32), np.ones(w, F32), np.ones(dy, F32)]
    with pytest.raises(InvalidArgumentError, match=message):
        run_op("Conv2DBackpropInput", inputs, {"strides": [1, 1, 1, 1], "padding": "SAME"})


# --- pooling -----------------------------------------------------------------------------------------------


POOL_CASES = [
    ((1, 5, 5, 3), (3, 3), (2, 2), "SAME"),
    ((2, 6, 7, 2), (2, 2), (2, 2), "VALID"),
    ((1, 7, 6, 4), (3, 2), (1, 3), "SAME"),
    ((2, 9, 8, 1), (4, 3), (3, 2), "VALID"),
    ((1, 3, 3, 2), (5, 5), (1, 1), "SAME"),
    ((1, 4, 4, 2), (1, 1), (2, 2), "VALID"),
]


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize(("op", "reducer"), [("MaxPool", np.nanmax), ("AvgPool", np.nanmean)])
@pytest.mark.parametrize(("xs", "k", "s", "padding"), POOL_CASES)
def test_pool(op, reducer, xs, k, s, padding, fmt):
    x = rand(*xs)
    expected = ref_pool(x, k, s, padding, reducer)
    attrs = {"ksize": [1, *k, 1], "strides": [1, *s, 1], "padding": padding}
    if fmt == "NCHW":
        attrs = {"ksize": [1, 1, *k], "strides": [1, 1, *s], "padding": padding, "data_format": "NCHW"}
        x, expected = nchw(x), nchw(expected)
    assert_close(run_op(op, [x], attrs), expected, rtol=1e-5, atol=1e-6)


def test_avg_pool_same_divides_by_valid_elements():
    x = np.arange(25, dtype=F32).reshape(1, 5, 5, 1)
    got = run_op("AvgPool", [x], {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "SAME"})
    assert_close(got[0, :, :, 0], np.array([[3, 5, 6.5], [13, 15, 16.5], [20.5, 22.5, 24]], F32))
    h = x.astype(np.float16)
    got = run_op("AvgPool", [h], {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "SAME"})
    assert got.dtype == np.float16 and got[0, 2, 2, 0] == 24


def test_max_pool_nan_and_infinity_like_tensorflow():
    # TensorFlow's max starts from the lowest float and skips NaN.
    lowest = np.finfo(F32).min
    x = np.array([1, np.nan, np.nan, np.nan], F32).reshape(1, 2, 2, 1)
    got = run_op("MaxPool", [x], {"ksize": [1, 2, 2, 1], "strides": [1, 1, 1, 1], "padding": "SAME"})
    assert_close(got.ravel(), np.array([1, lowest, lowest, lowest], F32))
    x = np.full((1, 2, 2, 1), -np.inf, F32)
    got = run_op("MaxPool", [x], {"ksize": [1, 2, 2, 1], "strides": [1, 1, 1, 1], "padding": "VALID"})
    assert_close(got.ravel(), np.array([lowest], F32))
    # at the padded edges too (the padding is not copied: each tap covers the windows that hold it)
    x = np.array([[2, -np.inf, 3], [np.nan, 1, -np.inf], [5, -np.inf, np.nan]], F32).reshape(1, 3, 3, 1)
    got = run_op("MaxPool", [x], {"ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1], "padding": "SAME"})
    assert_close(got.ravel(), np.array([2, 3, 5, lowest], F32))
    got = run_op("MaxPool", [x], {"ksize": [1, 3, 1, 1], "strides": [1, 1, 1, 1], "padding": "SAME"})
    assert_close(got[0, :, :, 0], np.array([[2, 1, 3], [5, 1, 3], [5, 1, lowest]], F32))


def test_max_pool_dtypes_explicit_depth_and_v2():
    xi = RNG.integers(-128, 127, (1, 5, 5, 2)).astype(np.int8)
    attrs = {"ksize": [1, 3, 3, 1], "strides": [1, 2, 2, 1], "padding": "SAME"}
    expected = ref_pool(xi.astype(np.float64), (3, 3), (2, 2), "SAME", np.nanmax).astype(np.int8)
    assert_close(run_op("MaxPool", [xi], attrs), expected)
    x = rand(1, 6, 5, 2)
    explicit = {**attrs, "padding": "EXPLICIT", "explicit_paddings": [0, 0, 1, 0, 0, 2, 0, 0]}
    padded = np.pad(x, ((0, 0), (1, 0), (0, 2), (0, 0)), constant_values=-np.inf)
    assert_close(run_op("MaxPool", [x], explicit), ref_pool(padded, (3, 3), (2, 2), "VALID", np.nanmax))
    x = rand(2, 3, 3, 6)
    depth = {"ksize": [1, 1, 1, 3], "strides": [1, 1, 1, 3], "padding": "VALID"}
    assert_close(run_op("MaxPool", [x], depth), x.reshape(2, 3, 3, 2, 3).max(-1))
    x = rand(2, 7, 6, 3)
    v2 = run_op(
        "MaxPoolV2",
        [x, np.array([1, 3, 2, 1], np.int32), np.array([1, 2, 2, 1], np.int32)],
        {"padding": "SAME"},
    )
    assert_close(v2, ref_pool(x, (3, 2), (2, 2), "SAME", np.nanmax))


def test_pool_empty_output():
    attrs = {"ksize": [1, 6, 3, 1], "strides": [1, 1, 1, 1], "padding": "VALID"}
    for op in ("MaxPool", "AvgPool"):
        assert run_op(op, [rand(1, 5, 5, 4)], attrs).shape == (1, 0, 3, 4)
        assert run_op(op, [rand(0, 5, 5, 4)], {**attrs, "ksize": [1, 2, 2, 1]}).shape == (0, 4, 4, 4)


@pytest.mark.parametrize(
    ("op", "ksize", "strides", "error", "message"),
    [
        (
            "MaxPool",
            [2, 3, 3, 1],
            [1, 1, 1, 1],
            UnimplementedError,
            "not yet supported on the batch dimension",
        ),
        ("MaxPool", [1, 0, 3, 1], [1, 1, 1, 1], InvalidArgumentError, "ksize must be positive"),
        ("MaxPool", [1, 3, 3, 1], [1, 0, 1, 1], InvalidArgumentError, "Stride must be > 0, but got 0"),
        ("MaxPool", [1, 3, 3], [1, 1, 1, 1], InvalidArgumentError, "ksize field must specify 4 dimensions"),
        ("MaxPool", [1, 1, 1, 2], [1, 1, 1, 1], UnimplementedError, "depth window to equal the depth stride"),
        ("MaxPool", [1, 2, 1, 2], [1, 1, 1, 2], UnimplementedError, "exactly one of pooling across depth"),
        ("AvgPool", [1, 1, 1, 2], [1, 1, 1, 2], UnimplementedError, "Non-spatial pooling"),
    ],
)
def test_pool_attr_errors(op, ksize, strides, error, message):
    with pytest.raises(error, match=message):
        run_op(op, [rand(1, 5, 5, 4)], {"ksize": ksize, "strides": strides, "padding": "VALID"})


def test_pool_input_errors():
    attrs = {"ksize": [1, 7, 3, 1], "strides": [1, 1, 1, 1], "padding": "VALID"}
    with pytest.raises(InvalidArgumentError, match="Computed output size would be negative: -1"):
        run_op("AvgPool", [rand(1, 5, 5, 4)], attrs)
    with pytest.raises(InvalidArgumentError, match="input must be 4-dimensional"):
        run_op("MaxPool", [rand(5, 5, 4)], attrs)
    with pytest.raises(UnimplementedError, match="depth window to evenly divide the input depth"):
        run_op(
            "MaxPool",
            [rand(1, 5, 5, 4)],
            {"ksize": [1, 1, 1, 3], "strides": [1, 1, 1, 3], "padding": "VALID"},
        )


# --- FusedBatchNorm and LRN --------------------------------------------------------------------------------


def bn_inputs(c=5):
    return rand(c), rand(c), rand(c), np.abs(rand(c)) + 0.1


@pytest.mark.parametrize(
    ("op", "outputs"), [("FusedBatchNorm", 5), ("FusedBatchNormV2", 5), ("FusedBatchNormV3", 6)]
)
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_fused_batch_norm_inference(op, outputs, fmt):
    x = rand(2, 3, 4, 5)
    scale, offset, mean, var = bn_inputs()
    expected = (x - mean) / np.sqrt(var + F32(0.001)) * scale + offset
    if fmt == "NCHW":
        x, expected = nchw(x), nchw(expected)
    attrs = {"is_training": False, "epsilon": 0.001, "data_format": fmt}
    got = run_op(op, [x, scale, offset, mean, var], attrs, num_outputs=outputs)
    assert_close(got[0], expected, rtol=1e-5, atol=1e-5)
    for out, want in zip(got[1:5], (mean, var, mean, var), strict=True):
        assert_close(out, want)
    if outputs == 6:
        assert got[5].dtype == F32


def test_fused_batch_norm_defaults_half_and_5d():
    x = rand(2, 3, 4, 5, dtype=np.float16)
    scale, offset, mean, var = bn_inputs()
    got = run_op("FusedBatchNormV3", [x, scale, offset, mean, var], {"is_training": False}, num_outputs=6)
    expected = ((x.astype(F32) - mean) / np.sqrt(var + F32(0.0001)) * scale + offset).astype(np.float16)
    assert_close(got[0], expected, rtol=2e-3, atol=2e-3)
    x5 = rand(1, 2, 3, 3, 5)
    got = run_op("FusedBatchNormV3", [x5, scale, offset, mean, var], {"is_training": False}, num_outputs=6)
    assert_close(got[0], (x5 - mean) / np.sqrt(var + F32(0.0001)) * scale + offset, rtol=1e-5, atol=1e-5)
    got = run_op(
        "FusedBatchNormV3",
        [rand(0, 3, 3, 5), scale, offset, mean, var],
        {"is_training": False},
        num_outputs=6,
    )
    assert got[0].shape == (0, 3, 3, 5) and np.isnan(got[1]).all() and np.isnan(got[2]).all()
    assert (got[3] == 0).all() and (got[4] == 0).all()  # TensorFlow's oneDNN kernels (fuzzed)


def test_fused_batch_norm_errors():
    scale, offset, mean, var = bn_inputs()
    x = rand(2, 3, 3, 5)
    inference = {"is_training": False}
    with pytest.raises(
        InvalidArgumentError,
        match="scale must have the same number of elements as the channels of x, got 4 and 5",
    ):
        run_op("FusedBatchNormV3", [x, scale[:4], offset, mean, var], inference, num_outputs=6)
    with pytest.raises(InvalidArgumentError, match="When is_training=false, mean must have the same number"):
        run_op("FusedBatchNormV3", [x, scale, offset, mean[:0], var], inference, num_outputs=6)
    with pytest.raises(InvalidArgumentError, match=r"input must be 4 or 5-dimensional\[3,3,5\]"):
        run_op("FusedBatchNormV3", [x[0], scale, offset, mean, var], inference, num_outputs=6)
    with pytest.raises(InvalidArgumentError, match=r"scale must be 1-dimensional\[1,5\]"):
        run_op("FusedBatchNormV3", [x, scale[None], offset, mean, var], inference, num_outputs=6)


def test_lrn():
    x = rand(1, 4, 4, 7)
    sq = np.pad(x.astype(np.float64) ** 2, ((0, 0), (0, 0), (0, 0), (2, 2)))
    window = sliding_window_view(sq, 5, axis=3).sum(-1)
    expected = (x / (1.5 + 0.3 * window) ** 0.75).astype(F32)
    attrs = {"depth_radius": 2, "bias": 1.5, "alpha": 0.3, "beta": 0.75}
    assert_close(run_op("LRN", [x], attrs), expected, rtol=1e-5)
    with pytest.raises(InvalidArgumentError, match="in must be 4-dimensional"):
        run_op("LRN", [x[0]])
