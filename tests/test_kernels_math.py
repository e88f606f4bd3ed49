"""Math kernels. Expected values marked "TF" were computed with TensorFlow 2.21 (tf.raw_ops)."""

import numpy as np
import pytest
from support import assert_close, run_op

from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.runtime.graph import Graph
from poolserve.runtime.kernels import KERNELS

f16, f32, f64 = np.float16, np.float32, np.float64
i8, i32, i64, u8 = np.int8, np.int32, np.int64, np.uint8
INT32_MIN = np.iinfo(np.int32).min


@pytest.fixture(autouse=True)
def _quiet_numpy_references():
    # The numpy references make NaN and inf on purpose; the kernels run under the evaluator's errstate.
    with np.errstate(all="ignore"):
        yield


def op(name, *inputs, **attrs):
    """Runs one op; ``T`` defaults to the first input's dtype."""
    arrays = [np.asarray(a) for a in inputs]
    attrs.setdefault("T", arrays[0].dtype)
    return run_op(name, arrays, attrs)


def arr(values, dtype):
    return np.array(values, dtype=dtype)


def assert_same(actual, expected):
    """Bit-for-bit, NaNs and the sign of zeros included."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    np.testing.assert_array_equal(actual, expected)
    if actual.dtype.kind == "f":
        zeros = expected == 0
        np.testing.assert_array_equal(np.signbit(actual[zeros]), np.signbit(expected[zeros]))


MATH_OPS = """Add AddV2 Sub Mul RealDiv Div DivNoNan FloorDiv FloorMod TruncateDiv TruncateMod Maximum Minimum
Pow SquaredDifference Atan2 AddN Neg Abs Exp Expm1 Log Log1p Sqrt Rsqrt Square Reciprocal Inv Tanh Sigmoid
Erf Erfc Floor Ceil Round Rint Sign Sin Cos Tan IsNan IsInf IsFinite Cast Equal NotEqual Less LessEqual
Greater GreaterEqual LogicalAnd LogicalOr LogicalNot Select SelectV2 Sum Mean Prod Max Min All Any
EuclideanNorm ArgMax ArgMin Cumsum Cumprod ClipByValue""".split()  # noqa: SIM905


def test_all_math_ops_are_registered_and_cheap():
    for name in MATH_OPS:
        assert name in KERNELS, name
        assert not KERNELS[name].expensive, name
        assert not KERNELS[name].stateful, name


# --- binary element-wise ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, ref",
    [
        ("Add", np.add),
        ("AddV2", np.add),
        ("Sub", np.subtract),
        ("Mul", np.multiply),
        ("Maximum", np.maximum),
        ("Minimum", np.minimum),
        ("Atan2", np.arctan2),
        ("RealDiv", np.true_divide),
        ("Div", np.true_divide),
        ("Pow", np.power),
    ],
)
def test_binary_float_broadcasts(name, ref):
    x = np.linspace(0.5, 3.0, 6, dtype=f32).reshape(2, 3)
    y = arr([1.5, -2.0, 0.25], f32)
    assert_close(op(name, x, y), ref(x, y))
    assert_close(op(name, y, x), ref(y, x))
    assert_close(op(name, x[:, :1], y), ref(x[:, :1], y))
    assert_close(op(name, x, arr(2.0, f32)), ref(x, f32(2.0)))


@pytest.mark.parametrize("name", ["AddV2", "Mul", "Sub", "FloorMod", "Maximum", "Pow"])
def test_binary_incompatible_shapes(name):
    with pytest.raises(InvalidArgumentError, match=r"Incompatible shapes: \[2,3\] vs\. \[4\]"):
        op(name, np.ones((2, 3), f32), np.ones(4, f32))


def test_binary_keeps_narrow_integer_dtypes():
    x, y = arr([100, -100, 7], i8), arr([2, 2, 3], i8)
    assert_same(op("Mul", x, y), arr([-56, 56, 21], i8))  # wraps like int8 arithmetic
    assert_same(op("AddV2", x, y), arr([102, -98, 10], i8))
    assert_same(op("Sub", arr([5], u8), arr([6], u8)), arr([255], u8))
    assert_same(op("AddV2", arr(3, i32), arr(4, i32)), np.int32(7))


def test_add_strings():
    out = op("Add", np.array([b"ab", b"c"], dtype=object), np.array([b"x"], dtype=object))
    assert out.tolist() == [b"abx", b"cx"]


def test_maximum_minimum_propagate_nan():
    x, y = arr([np.nan, 1.0, 2.0], f32), arr([1.0, np.nan, 3.0], f32)
    assert_same(op("Maximum", x, y), arr([np.nan, np.nan, 3.0], f32))  # TF
    assert_same(op("Minimum", x, y), arr([np.nan, np.nan, 2.0], f32))  # TF


def test_atan2_signs():
    y, x = arr([1.0, -0.0, 0.0], f32), arr([0.0, -1.0, -1.0], f32)
    assert_close(op("Atan2", y, x), arr([np.pi / 2, -np.pi, np.pi], f32))  # TF


def test_integer_division_truncates_toward_zero():
    x, y = arr([7, -7, 7, -7, 6], i32), arr([2, 2, -2, -2, 3], i32)
    for name in ("Div", "TruncateDiv", "RealDiv"):
        assert_same(op(name, x, y), arr([3, -3, -3, 3, 2], i32))  # TF
    assert_same(op("TruncateMod", x, y), arr([1, -1, 1, -1, 0], i32))  # TF
    assert_same(op("FloorDiv", x, y), arr([3, -4, -4, 3, 2], i32))  # TF
    assert_same(op("FloorMod", x, y), arr([1, 1, -1, -1, 0], i32))  # TF


def test_integer_division_edge_cases():
    assert_same(op("Div", arr([-(2**31)], i32), arr([-1], i32)), arr([INT32_MIN], i32))  # TF
    assert_same(op("FloorDiv", arr([-(2**31)], i32), arr([-1], i32)), arr([INT32_MIN], i32))  # TF
    big = arr([2**62 + 1, -(2**62) - 1], i64)
    assert_same(op("Div", big, arr([2, 2], i64)), arr([2**61, -(2**61)], i64))  # exact, no float detour
    assert_same(op("Div", arr([7, 200], u8), arr([2, 3], u8)), arr([3, 66], u8))  # TF
    assert_same(op("FloorMod", arr([7], u8), arr([2], u8)), arr([1], u8))  # TF
    assert_same(op("TruncateDiv", arr([250], u8), arr([7], u8)), arr([35], u8))
    assert_same(op("Div", arr([[9], [-9]], i64), arr([4, -4], i64)), arr([[2, -2], [-2, 2]], i64))


@pytest.mark.parametrize("name", ["Div", "RealDiv", "FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod"])
@pytest.mark.parametrize("dtype", [i32, i64, u8])
def test_integer_division_by_zero(name, dtype):
    with pytest.raises(InvalidArgumentError, match="Integer division by zero"):
        op(name, arr([7, 6], dtype), arr([0, 2], dtype))


def test_float_division():
    x, y = arr([7.0, -7.0, 1.0, 0.0], f32), arr([2.0, 0.0, 0.0, 0.0], f32)
    assert_same(op("Div", x, y), arr([3.5, -np.inf, np.inf, np.nan], f32))
    assert_same(op("RealDiv", x, y), arr([3.5, -np.inf, np.inf, np.nan], f32))
    assert_same(
        op("DivNoNan", arr([1.0, 0.0, np.nan, 3.0], f32), arr([0.0, 0.0, 0.0, 2.0], f32)),
        arr([0.0, 0.0, 0.0, 1.5], f32),
    )
    assert_same(op("TruncateDiv", arr([7.0, -7.0], f32), arr([2.0, 2.0], f32)), arr([3.0, -3.0], f32))  # TF
    assert_same(op("Div", arr([1.0], f16), arr([3.0], f16)), arr([1.0 / 3.0], f16))
    assert_close(op("Div", arr([1 + 2j], np.complex64), arr([1j], np.complex64)), arr([2 - 1j], np.complex64))


def test_float_floor_div_and_mod_follow_tf():
    # floor(x / y), not numpy's fmod-based floor_divide (which gives 9 for 1 // 0.1)
    assert_same(
        op("FloorDiv", arr([1.0, -7.0, 1.0], f32), arr([0.1, 2.0, 0.0], f32)), arr([10.0, -4.0, np.inf], f32)
    )  # TF
    x = arr([7.0, -7.0, 7.0, -7.0, -4.0, 4.0, -1.0, 1.0, 5.0], f32)
    y = arr([2.0, 2.0, -2.0, -2.0, 2.0, -2.0, np.inf, -np.inf, 0.0], f32)
    assert_same(
        op("FloorMod", x, y), arr([1.0, 1.0, -1.0, -1.0, -0.0, 0.0, np.inf, -np.inf, np.nan], f32)
    )  # TF
    assert_same(
        op("TruncateMod", arr([7.0, -7.0, 7.0, 1.0, np.inf], f64), arr([2.0, 2.0, 0.0, np.inf, 2.0], f64)),
        arr([1.0, -1.0, np.nan, 1.0, np.nan], f64),
    )  # TF


def test_div_no_nan_needs_float():
    with pytest.raises(InvalidArgumentError, match="attr 'T' must be a floating-point"):
        op("DivNoNan", arr([1], i32), arr([0], i32))


def test_division_needs_t():
    b = GraphBuilder()
    x = b.constant(arr([1.0], f32))
    b.op("Div", [x, x], {}, name="div")
    with pytest.raises(InvalidArgumentError, match="Node 'div' \\(op 'Div'\\): attr 'T' is missing"):
        Graph(b.graph_def)


def test_integer_pow():
    assert_same(
        op("Pow", arr([2, 3, -2, 0, 0, -1, -1], i32), arr([10, 2, 3, 0, 5, 3, 4], i32)),
        arr([1024, 9, -8, 1, 0, -1, 1], i32),
    )  # TF
    with pytest.raises(InvalidArgumentError, match="Integers to negative integer powers are not allowed"):
        op("Pow", arr([2, 1], i64), arr([2, -1], i64))  # TF: even 1 ** -1
    assert_same(op("Pow", arr([2.0], f16), arr([3.0], f16)), arr([8.0], f16))


def test_squared_difference():
    assert_same(op("SquaredDifference", arr([1, 5], i32), arr([4, 2], i32)), arr([9, 9], i32))  # TF
    assert_close(op("SquaredDifference", arr([1.0], f32), arr([[4.0], [2.0]], f32)), arr([[9.0], [1.0]], f32))
    assert_same(op("SquaredDifference", arr([300.0], f16), arr([0.0], f16)), arr([np.inf], f16))  # TF
    out = op("SquaredDifference", arr([1 + 2j], np.complex128), arr([0j], np.complex128))
    assert_same(out, arr([5 + 0j], np.complex128))  # TF: (x-y) * conj(x-y)


def test_add_n():
    a, b, c = (np.full((2, 3), v, f32) for v in (1.0, 2.0, 4.0))
    assert_same(op("AddN", a, b, c, N=3), np.full((2, 3), 7.0, f32))
    assert_same(op("AddN", a, N=1), a)
    assert_same(op("AddN", arr([100], i8), arr([100], i8), N=2), arr([-56], i8))  # TF
    assert_same(op("AddN", arr(1.5, f32), arr(2.0, f32), arr(3.0, f32), N=3), arr(6.5, f32))
    inf = op("AddN", arr([60000.0], f16), arr([60000.0], f16), arr([-60000.0], f16), N=3)
    assert_same(inf, arr([np.inf], f16))  # TF: float16 running sum


def test_add_n_shape_mismatch():
    with pytest.raises(InvalidArgumentError, match=r"Input 0: \[2,3\] != input 1: \[3\]"):
        op("AddN", np.zeros((2, 3), f32), np.zeros(3, f32), N=2)


# --- unary -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, ref",
    [
        ("Neg", np.negative),
        ("Abs", np.abs),
        ("Exp", np.exp),
        ("Expm1", np.expm1),
        ("Log", np.log),
        ("Log1p", np.log1p),
        ("Sqrt", np.sqrt),
        ("Square", np.square),
        ("Reciprocal", np.reciprocal),
        ("Inv", np.reciprocal),
        ("Tanh", np.tanh),
        ("Floor", np.floor),
        ("Ceil", np.ceil),
        ("Rint", np.rint),
        ("Sign", np.sign),
        ("Sin", np.sin),
        ("Cos", np.cos),
        ("Tan", np.tan),
    ],
)
@pytest.mark.parametrize("dtype", [f16, f32, f64])
def test_unary_float(name, ref, dtype):
    x = np.linspace(-3.0, 3.0, 13).astype(dtype).reshape(13, 1)
    x[6] = 0.5  # no 0 (log, reciprocal)
    if name in ("Log", "Sqrt"):
        x = np.abs(x)
    assert_same(op(name, x), ref(x))
    assert_same(op(name, arr(0.5, dtype)), ref(dtype(0.5)))
    assert_same(op(name, np.zeros((0, 2), dtype)), np.zeros((0, 2), dtype))


def test_unary_integers_keep_dtype():
    x = arr([-128, -3, 0, 5], i8)
    assert_same(op("Abs", x), arr([-128, 3, 0, 5], i8))  # TF: abs(-128) wraps
    assert_same(op("Neg", x), arr([-128, 3, 0, -5], i8))
    assert_same(op("Square", arr([3, -4], i8)), arr([9, 16], i8))  # TF
    assert_same(op("Sign", arr([-5, 0, 3], i32)), arr([-1, 0, 1], i32))  # TF


def test_round_is_bankers():
    x = arr([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6], f32)
    assert_same(op("Round", x), arr([0.0, 2.0, 2.0, -0.0, -2.0, 2.0, -3.0], f32))  # TF
    assert_same(op("Round", arr([0.5, 1.5, 2.5], f16)), arr([0.0, 2.0, 2.0], f16))  # TF
    # TF 2.21 returns zeros for integers (a bug); rounding an integer leaves it as it is
    assert_same(op("Round", arr([1, -5, 7], i32)), arr([1, -5, 7], i32))


def test_sign_and_predicates():
    x = arr([np.nan, -0.0, 0.0, -3.0, 2.0, np.inf, -np.inf], f32)
    assert_same(op("Sign", x)[[0, 3, 4, 5, 6]], arr([np.nan, -1.0, 1.0, 1.0, -1.0], f32))  # TF
    assert_same(op("IsNan", x), np.isnan(x))
    assert_same(op("IsInf", x), np.isinf(x))
    assert_same(op("IsFinite", x), np.isfinite(x))
    assert op("IsNan", x).dtype == np.bool_


def test_rsqrt():
    assert_same(op("Rsqrt", arr([0.0, 4.0, -1.0], f16)), arr([np.inf, 0.5, np.nan], f16))  # TF
    x = arr([0.25, 2.0, 1e-30], f32)
    assert_close(op("Rsqrt", x), (1 / np.sqrt(x.astype(f64))).astype(f32), rtol=2e-7)
    assert_same(op("Rsqrt", arr(4.0, f64)), np.float64(0.5))


def _sigmoid_ref(x):
    x = np.asarray(x, f64)
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(x) / (1 + np.exp(x)))


def test_sigmoid_is_stable():
    x = arr([-100.0, -20.0, 0.0, 20.0, 100.0], f32)
    out = op("Sigmoid", x)
    # TF flushes sigmoid(-100) = 3.8e-44 (a float32 subnormal) to 0
    assert_close(out, arr([0.0, 2.0611537e-09, 0.5, 1.0, 1.0], f32), rtol=2e-7, atol=1e-43)  # TF
    x = arr([-800.0, -20.0, 0.0, 20.0, 800.0, -np.inf, np.inf], f64)
    assert_close(
        op("Sigmoid", x),
        arr([0.0, 2.06115362e-09, 0.5, 1 - 2.06115362e-09, 1.0, 0.0, 1.0], f64),
        rtol=1e-8,
        atol=0,
    )  # TF
    assert np.isnan(op("Sigmoid", arr([np.nan], f32))[0])


# float16 as TensorFlow rounds it, each step to half: 1.007e-3 from the exact value at x = -1.14 (0.2422,
# not 0.2424), as TensorFlow's own (tests/test_kernels_half_sigmoid_cases.py holds its values bit for bit)
@pytest.mark.parametrize("dtype, rtol", [(f16, 1.1e-3), (f32, 4e-7), (f64, 1e-14)])
def test_sigmoid_accuracy(dtype, rtol):
    x = np.linspace(-60, 60, 2001).astype(dtype)
    assert_close(op("Sigmoid", x), _sigmoid_ref(x).astype(dtype), rtol=rtol, atol=0)
    assert_close(op("Sigmoid", arr(1.0, dtype)), _sigmoid_ref(1.0).astype(dtype), rtol=rtol)


def test_sigmoid_float16_values():
    assert_close(
        op("Sigmoid", arr([-10.0, 0.5, 3.0], f16)), arr([4.542e-05, 6.226e-01, 9.526e-01], f16)
    )  # TF


def test_sigmoid_complex():
    x = arr([1 + 1j, -2j], np.complex64)
    assert_close(op("Sigmoid", x), (1 / (1 + np.exp(-x.astype(np.complex128)))).astype(np.complex64))


# --- cast ------------------------------------------------------------------------------------------------


def cast(x, dst, truncate=None):
    attrs = {"SrcT": x.dtype, "DstT": np.dtype(dst)}
    if truncate is not None:
        attrs["Truncate"] = truncate
    return run_op("Cast", [x], attrs)


def test_cast_float_to_int_truncates():
    x = arr([1e10, -1e10, np.nan, np.inf, -2.7, 2.7, -0.5], f32)
    assert_same(cast(x, i32), arr([INT32_MIN] * 4 + [-2, 2, 0], i32))  # TF
    assert_same(cast(arr([-1e10, 3e9], f64), i32), arr([INT32_MIN, INT32_MIN], i32))  # TF
    assert_same(cast(arr([1e30, -1e30, np.nan, -2.7], f32), i64), arr([-(2**63)] * 3 + [-2], i64))  # TF


def test_cast_float_to_narrow_int_wraps_like_tf():
    assert_same(cast(arr([-1.0, 300.0, 255.9, -0.5], f32), u8), arr([255, 44, 255, 0], u8))  # TF
    assert_same(cast(arr([-129.0, 300.0, 127.9], f32), i8), arr([127, 44, 127], i8))  # TF
    assert_same(cast(arr([-40000.0, 70000.0, np.nan], f32), np.int16), arr([25536, 4464, 0], np.int16))  # TF
    assert_same(
        cast(arr([-1.0, 70000.0, 65535.9], f32), np.uint16), arr([65535, 4464, 65535], np.uint16)
    )  # TF
    want = arr([4294967295, 705032704, 4000000000, 0], np.uint32)
    assert_same(cast(arr([-1.0, 5e9, 4e9, np.nan], f32), np.uint32), want)  # TF
    assert_same(cast(arr([-200.0, 300.0], f16), i8), arr([56, 44], i8))  # TF


def test_cast_bool_and_complex():
    assert_same(cast(arr([0.0, -0.0, np.nan, 0.1], f32), np.bool_), arr([False, False, True, True], np.bool_))
    assert_same(cast(arr([True, False], np.bool_), f32), arr([1.0, 0.0], f32))
    assert_same(cast(arr([3, 0], i32), np.bool_), arr([True, False], np.bool_))
    assert_same(cast(arr([1 + 2j], np.complex64), f32), arr([1.0], f32))  # TF: the real part
    assert_same(
        cast(arr([1j, 0j, 2 + 0j], np.complex64), np.bool_), arr([False, False, True], np.bool_)
    )  # TF
    assert_same(cast(arr([2.7 + 1j], np.complex128), i32), arr([2], i32))  # TF
    assert_same(cast(arr([1.5], f32), np.complex64), arr([1.5 + 0j], np.complex64))


def test_cast_integers_and_identity():
    assert_same(cast(arr([2**40 + 5, -1], i64), i32), arr([5, -1], i32))  # TF
    assert_same(cast(arr([-1, 300], i32), u8), arr([255, 44], u8))  # TF
    x = arr([1.5, -0.0, np.nan, -np.inf], f32)
    assert_same(cast(x, f32), x)  # bit for bit: the sign of zero and NaN survive
    assert_same(cast(arr(7, i32), f64), np.float64(7.0))


def test_cast_truncate():
    x = arr([1.0009766, 1.00146484375, 1.0004883, 65520.0, 1e6, np.nan], f32)
    assert_same(
        cast(x, f16, truncate=True), arr([1.0009765625, 1.0009765625, 1.0, 65504.0, np.inf, np.nan], f16)
    )
    assert_same(
        cast(x, f16, truncate=False), arr([1.0009765625, 1.001953125, 1.0, np.inf, np.inf, np.nan], f16)
    )
    y = arr([1 + 2**-24 + 2**-40, -(1 + 2**-24 + 2**-40)], f64)
    assert_same(cast(y, f32, truncate=True), arr([1.0, -1.0], f32))  # TF
    assert_same(cast(y, f32), arr([1 + 2**-23, -(1 + 2**-23)], f32))  # TF
    c = arr([(1 + 2**-24 + 2**-40) + 1j], np.complex128)
    assert_same(cast(c, np.complex64, truncate=True), arr([1 + 1j], np.complex64))  # TF
    assert_same(cast(arr(1 + 2**-24 + 2**-40, f64), f32, truncate=True), np.float32(1.0))
    assert_same(cast(arr([16777217], i32), f32, truncate=True), arr([16777216.0], f32))  # TF


def test_cast_string_is_unimplemented_when_run():
    with pytest.raises(UnimplementedError, match="Cast string to float32 is not supported"):
        cast(np.array([b"1"], dtype=object), f32)


# --- comparisons, logic, select --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, ref",
    [
        ("Equal", np.equal),
        ("NotEqual", np.not_equal),
        ("Less", np.less),
        ("LessEqual", np.less_equal),
        ("Greater", np.greater),
        ("GreaterEqual", np.greater_equal),
    ],
)
def test_comparisons(name, ref):
    x = arr([[1.0, 2.0, np.nan], [3.0, 2.0, 1.0]], f32)
    y = arr([2.0, 2.0, np.nan], f32)
    assert_same(op(name, x, y), ref(x, y))
    assert_same(op(name, arr([1, 5], i64), arr(3, i64)), ref(arr([1, 5], i64), 3))
    with pytest.raises(InvalidArgumentError, match=r"Incompatible shapes: \[2\] vs\. \[3\]"):
        op(name, arr([1, 2], i32), arr([1, 2, 3], i32))


def test_equal_strings_and_incompatible_shapes():
    s = np.array([b"a", b"b"], dtype=object)
    assert_same(op("Equal", s, np.array([b"a", b"c"], dtype=object)), arr([True, False], np.bool_))  # TF
    x, y = arr([1, 2], i32), arr([1, 2, 3], i32)
    assert_same(op("Equal", x, y, incompatible_shape_error=False), np.bool_(False))  # TF
    assert_same(op("NotEqual", x, y, incompatible_shape_error=False), np.bool_(True))  # TF
    assert_same(
        op("Equal", x, arr([[1], [2]], i32), incompatible_shape_error=False), np.eye(2, dtype=bool)
    )  # TF
    with pytest.raises(InvalidArgumentError, match="Incompatible shapes"):
        op("Equal", x, y, incompatible_shape_error=True)


def test_logical():
    a, b = arr([True, True, False, False], np.bool_), arr([True, False, True, False], np.bool_)
    assert_same(op("LogicalAnd", a, b), a & b)
    assert_same(op("LogicalOr", a, b), a | b)
    assert_same(op("LogicalNot", a), ~a)
    assert_same(op("LogicalAnd", a.reshape(4, 1), arr(True, np.bool_)), a.reshape(4, 1))
    with pytest.raises(InvalidArgumentError, match=r"Incompatible shapes: \[2\] vs\. \[3\]"):
        op("LogicalAnd", a[:2], a[:3])


def select(cond, x, y):
    return run_op("Select", [np.asarray(cond), np.asarray(x), np.asarray(y)], {"T": np.asarray(x).dtype})


def test_select():
    x, y = arr([[1, 2], [3, 4]], i32), arr([[5, 6], [7, 8]], i32)
    assert_same(select(arr([[True, False], [False, True]], np.bool_), x, y), arr([[1, 6], [7, 4]], i32))
    assert_same(select(arr([True, False], np.bool_), x, y), arr([[1, 2], [7, 8]], i32))  # TF: per row
    assert_same(select(arr(False, np.bool_), x, y), y)  # TF
    assert_same(select(arr(True, np.bool_), arr(1, i32), arr(2, i32)), np.int32(1))  # TF
    assert_same(
        select(arr([True, False, True], np.bool_), arr([1, 2, 3], i32), arr([4, 5, 6], i32)),
        arr([1, 5, 3], i32),
    )
    cube = select(arr([True, False], np.bool_), np.ones((2, 2, 2), f32), np.zeros((2, 2, 2), f32))
    assert_same(cube, np.concatenate([np.ones((1, 2, 2), f32), np.zeros((1, 2, 2), f32)]))  # TF
    empty = select(np.zeros(0, np.bool_), np.ones((0, 2), f32), np.zeros((0, 2), f32))
    assert_same(empty, np.zeros((0, 2), f32))  # TF


@pytest.mark.parametrize(
    "cond, x, y, message",
    [  # TF messages
        (
            [True, False],
            [[1, 2], [3, 4]],
            [[5, 6, 7], [7, 8, 9]],
            r"'then' and 'else' must have the same size.  but received: \[2,2\] vs. \[2,3\]",
        ),
        (
            True,
            [1, 2],
            [5, 6, 7],
            r"'then' and 'else' must have the same size.  but received: \[2\] vs. \[3\]",
        ),
        (
            [[True, False]],
            [[1, 2]],
            [[5, 6, 7]],
            r"Inputs to operation op of type Select must have the same size and shape.  "
            r"Input 0: \[1,2\] != input 2: \[1,3\]",
        ),
        ([[True, False, True]], [[1, 2]], [[5, 6]], r"Input 0: \[1,3\] != input 1: \[1,2\]"),
        ([True, False, True], [1, 2], [5, 6], r"Input 0: \[3\] != input 1: \[2\]"),
        (
            [True, False, True],
            [[1, 2], [3, 4]],
            [[5, 6], [7, 8]],
            r"Number of batches of 'then' must match size of 'cond', but saw: 2 vs. 3",
        ),
        ([True], 1, 2, r"'then' must be at least a vector, but saw shape: \[\]"),
    ],
)
def test_select_errors(cond, x, y, message):
    with pytest.raises(InvalidArgumentError, match=message):
        select(arr(cond, np.bool_), arr(x, i32), arr(y, i32))


def test_select_v2_broadcasts():
    out = run_op("SelectV2", [arr([[True], [False]], np.bool_), arr([1, 2, 3], i32), arr(0, i32)], {"T": i32})
    assert_same(out, arr([[1, 2, 3], [0, 0, 0]], i32))  # TF
    with pytest.raises(
        InvalidArgumentError, match=r"condition \[2\], then \[3\], and else \[\] must be broadcastable"
    ):
        run_op("SelectV2", [arr([True, False], np.bool_), arr([1, 2, 3], i32), arr(0, i32)], {"T": i32})


def test_clip_by_value():
    t = arr([1.0, 5.0, np.nan, -3.0], f32)
    assert_same(op("ClipByValue", t, arr(0.0, f32), arr(2.0, f32)), arr([1.0, 2.0, np.nan, 0.0], f32))  # TF
    lo, hi = arr([0.0, 0.0, 0.0], f32), arr([2.0, 2.0, 2.0], f32)
    assert_same(op("ClipByValue", arr([1.0, 5.0, -3.0], f32), lo, hi), arr([1.0, 2.0, 0.0], f32))  # TF
    assert_same(
        op("ClipByValue", arr([1.0, 5.0, -3.0], f32), arr(3.0, f32), arr(2.0, f32)), arr([3.0, 3.0, 3.0], f32)
    )  # TF: min > max gives min
    assert_same(
        op("ClipByValue", arr([1.0, 5.0, -3.0], f32), arr(np.nan, f32), arr(2.0, f32)),
        arr([1.0, 2.0, -3.0], f32),
    )  # TF: NaN bounds are ignored
    assert_same(
        op("ClipByValue", arr([1.0, 5.0, -3.0], f32), arr(0.0, f32), arr(np.nan, f32)),
        arr([1.0, 5.0, 0.0], f32),
    )  # TF
    assert_same(op("ClipByValue", arr([[-7, 0, 9]], i32), arr(-1, i32), arr(5, i32)), arr([[-1, 0, 5]], i32))


def test_clip_by_value_shapes():
    message = (
        r"clip_value_min and clip_value_max must be either of the same shape as input, or a scalar. "
        r"input shape: \[1,3\]clip_value_min shape: \[3\]clip_value_max shape: \[\]"
    )  # TF
    with pytest.raises(InvalidArgumentError, match=message):
        op("ClipByValue", np.zeros((1, 3), f32), np.zeros(3, f32), arr(1.0, f32))


# --- reductions ------------------------------------------------------------------------------------------


def reduce(name, x, axis, keep_dims=None, axis_dtype=i32):
    attrs = {"T": np.asarray(x).dtype}
    if keep_dims is not None:
        attrs["keep_dims"] = keep_dims
    return run_op(name, [np.asarray(x), np.asarray(axis, axis_dtype)], attrs)


NUMPY_REDUCTIONS = [
    ("Sum", np.sum),
    ("Mean", np.mean),
    ("Prod", np.prod),
    ("Max", np.max),
    ("Min", np.min),
    ("EuclideanNorm", lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))),
]


@pytest.mark.parametrize("name, ref", NUMPY_REDUCTIONS)
@pytest.mark.parametrize(
    "axis, np_axis",
    [(1, 1), (-1, 2), ([0, 2], (0, 2)), ([-3, 1], (0, 1)), ([], ()), ([2, 0, 1], None), ([[0], [2]], (0, 2))],
)
@pytest.mark.parametrize("keep", [False, True])
def test_reductions_match_numpy(name, ref, axis, np_axis, keep):
    x = np.random.default_rng(5).uniform(0.5, 1.5, (2, 3, 4)).astype(f32)
    want = np.asarray(ref(x.astype(f64), axis=np_axis, keepdims=keep)).astype(f32)
    assert_close(reduce(name, x, axis, keep_dims=keep), want)
    assert_close(reduce(name, x, axis, keep_dims=keep, axis_dtype=i64), want)


def test_reduction_defaults_and_scalars():
    x = arr([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], f32)
    assert_same(reduce("Sum", x, 0), arr([5.0, 7.0, 9.0], f32))  # keep_dims defaults to false
    assert_same(reduce("Sum", x, [0], axis_dtype=i64, keep_dims=True), arr([[5.0, 7.0, 9.0]], f32))  # TF
    assert_same(reduce("Sum", x, [[0], [1]]), np.float32(21.0))  # TF: any axis shape
    assert_same(reduce("Sum", arr(3.0, f32), []), np.float32(3.0))  # TF
    assert_same(reduce("Max", arr(3.0, f32), []), np.float32(3.0))
    assert_same(reduce("All", arr(True, np.bool_), []), np.bool_(True))


@pytest.mark.parametrize("name", ["Sum", "Mean", "Prod", "Max", "Min", "EuclideanNorm", "All", "Any"])
def test_reduction_axis_errors(name):
    x = np.ones((2, 3), np.bool_ if name in ("All", "Any") else f32)
    with pytest.raises(
        InvalidArgumentError, match=r"Invalid reduction dimension \(5 for input with 2 dimension\(s\)"
    ):
        reduce(name, x, 5)
    with pytest.raises(
        InvalidArgumentError, match=r"Invalid reduction dimension \(-3 for input with 2 dimension"
    ):
        reduce(name, x, [-3])
    with pytest.raises(InvalidArgumentError, match=r"\(0 for input with 0 dimension\(s\)"):
        reduce(name, x[0, 0], 0)
    with pytest.raises(InvalidArgumentError, match="Axes contains duplicate dimension: 1"):
        reduce(name, x, [1, -1])  # TF rejects duplicates, negative or not


def test_sum_and_prod_keep_integer_dtypes():
    assert_same(reduce("Sum", arr([100, 100], i8), 0), np.int8(-56))  # TF: wraps in int8
    assert_same(reduce("Sum", arr([2**31 - 1, 2**31 - 1], i32), 0), np.int32(-2))  # TF
    assert_same(reduce("Prod", arr([[16, 16]], u8), 1), arr([0], u8))
    assert_same(
        reduce("Sum", arr([[1, 2], [3, 4]], np.uint16), [], keep_dims=True), arr([[1, 2], [3, 4]], np.uint16)
    )


def test_integer_mean_truncates_and_does_not_overflow():
    assert_same(reduce("Mean", arr([[-7, 2], [1, 1]], i32), 1), arr([-2, 1], i32))  # TF
    assert_same(reduce("Mean", arr([-3, -4], i32), 0), np.int32(-3))  # TF
    assert_same(reduce("Mean", arr([2**31 - 1, 2**31 - 1], i32), 0), np.int32(2**31 - 1))  # TF
    assert_same(reduce("Mean", arr([100, 100, 100, -128], i8), 0), np.int8(43))  # TF
    assert_same(reduce("Mean", arr([200, 200, 201], u8), 0), np.uint8(200))  # TF
    assert_same(reduce("Mean", arr([2**62] * 3, i64), 0), np.int64(-1537228672809129301))  # TF: int64 wraps
    assert_same(reduce("Mean", arr([[1, 2, 3], [4, 5, 6]], i32), [0, 1]), np.int32(3))  # TF
    assert_same(reduce("Mean", np.zeros((0, 2), i32), 0), arr([0, 0], i32))  # TF
    assert_same(reduce("Mean", np.zeros((2, 0), i32), 1), arr([0, 0], i32))  # TF


def test_float_mean_edge_cases():
    assert_same(reduce("Mean", np.zeros((0, 2), f32), 0), arr([np.nan, np.nan], f32))  # TF
    assert_same(reduce("Mean", np.zeros(0, np.complex64), 0), np.complex64(0))  # TF
    assert_same(reduce("Mean", arr([1j, 2 + 1j], np.complex128), 0), np.complex128(1 + 1j))  # TF
    assert_same(reduce("Mean", np.full(10000, 1.5, f16), 0), np.float16(1.5))  # TF
    assert_same(reduce("Mean", arr([60000.0, 60000.0], f16), 0), np.float16(np.inf))  # TF: float16 sum
    assert_same(reduce("Sum", np.full(10000, 1.5, f16), 0), np.float16(15000))  # TF


def rel_err(got, want):
    return float(np.max(np.abs(got.astype(f64) - want)) / np.max(np.abs(want)))


@pytest.mark.parametrize("name", ["Sum", "Mean"])
def test_float32_sum_over_outer_axes_is_accurate(name):
    # NHWC's Mean over H and W (global average pooling, squeeze-excite) on activations of magnitude 1e4, as
    # in EfficientNetV2's last stages. Errors against float64: 2.4e-6 added one after another (numpy's
    # order across outer axes, the old kernel), 8.2e-7 in TensorFlow 2.21, 1.5e-7 now.
    x = np.random.default_rng(3).uniform(0.0, 2e4, (2, 64, 64, 24)).astype(f32)
    want = x.astype(f64).sum(axis=(1, 2)) / (64 * 64 if name == "Mean" else 1)
    got = reduce(name, x, [1, 2])
    assert got.dtype == f32 and got.shape == (2, 24)
    assert rel_err(got, want) < 1e-6
    kept = reduce(name, x, [2, 1], keep_dims=True)  # any order, dims kept
    assert_same(kept, got.reshape(2, 1, 1, 24))
    # not consecutive, the last axis kept (the reduced axes are moved last): 5.4e-7 before, TF 1.2e-7
    want = x.astype(f64).sum(axis=(0, 2)) / (2 * 64 if name == "Mean" else 1)
    assert rel_err(reduce(name, x, [0, 2]), want) < 3e-7


@pytest.mark.parametrize("dtype", [f32, f64])
@pytest.mark.parametrize("hw", [(3, 3), (8, 16), (14, 14), (16, 16), (30, 30)])
def test_float_sum_over_outer_axes_in_blas_blocks(dtype, hw):
    # Mean over H and W as products by a row of ones, 128 rows at a time (one block, one and a half, two,
    # seven and a remainder): as accurate as pairwise sums, infinities and NaN carried through.
    from poolserve.runtime.kernels import math_ops

    h, w = hw
    x = np.random.default_rng(5).uniform(1e4, 4e4, (3, h, w, 20)).astype(dtype)
    want = x.astype(f64).sum(axis=(1, 2))
    got = reduce("Sum", x, [1, 2])
    assert got.dtype == dtype and got.shape == (3, 20)
    assert rel_err(got, want) < (3e-7 if dtype == f32 else 1e-14)
    assert rel_err(reduce("Mean", x, [1, 2]), want / (h * w)) < (3e-7 if dtype == f32 else 1e-14)
    x[0, h - 1, w - 1, 0] = np.inf  # in the last block (or the remainder)
    x[1, 0, 0, 1] = np.nan
    x[2, h // 2, 0, 2], x[2, 0, w - 1, 2] = np.inf, -np.inf
    got = reduce("Sum", x, [1, 2])
    assert got[0, 0] == np.inf and np.isnan(got[1, 1]) and np.isnan(got[2, 2])
    assert np.isfinite(np.delete(got.ravel(), [0, 21, 42])).all()
    assert math_ops._SUM_BLOCK == 128


def test_float_sum_over_outer_axes_edge_cases():
    assert_same(reduce("Sum", np.zeros((2, 0, 3), f32), 1), np.zeros((2, 3), f32))
    assert_same(reduce("Mean", np.zeros((0, 3), f32), 0), arr([np.nan] * 3, f32))  # TF
    assert_same(reduce("Sum", np.zeros((0, 2, 3), f32), [1]), np.zeros((0, 3), f32))
    assert_same(reduce("Sum", np.zeros((2, 3, 0, 4), f32), [1, 2]), np.zeros((2, 4), f32))
    assert_same(
        reduce("Mean", np.zeros((2, 0, 3, 4), f32), [1, 2], keep_dims=True),
        np.full((2, 1, 1, 4), np.nan, f32),
    )
    x = np.random.default_rng(4).uniform(-1, 1, (2, 9, 5, 3, 4)).astype(f32)  # three axes, outer and inner
    assert_close(reduce("Sum", x, [1, 2, 3]), x.astype(f64).sum(axis=(1, 2, 3)).astype(f32))
    x = np.ones((3, 17, 2), f32)
    x[1, 16, 0] = np.inf  # the odd row carried along
    assert_same(reduce("Sum", x, 1), arr([[17, 17], [np.inf, 17], [17, 17]], f32))
    assert_same(reduce("Sum", arr([[60000.0, 1.0]] * 20, f16), 0), arr([np.inf, 20.0], f16))  # TF: f16 sum


def test_max_min_empty_and_nan():
    assert_same(reduce("Max", np.zeros((0, 2), f32), 0), arr([-np.inf, -np.inf], f32))  # TF
    assert_same(reduce("Min", np.zeros((0, 2), f32), 0), arr([np.inf, np.inf], f32))  # TF
    assert_same(reduce("Max", np.zeros((0, 2), f16), 0), arr([-np.inf, -np.inf], f16))  # TF
    assert_same(reduce("Max", np.zeros((0, 2), i32), 0), arr([INT32_MIN] * 2, i32))  # TF
    assert_same(reduce("Min", np.zeros((0, 2), u8), 0), arr([255, 255], u8))  # TF
    x = arr([[np.nan, 1.0], [1.0, np.nan], [2.0, 3.0]], f32)
    assert_same(reduce("Max", x, 1), arr([np.nan, np.nan, 3.0], f32))  # TF
    assert_same(reduce("Min", x, 0), arr([np.nan, np.nan], f32))
    assert_same(reduce("Max", arr([[3, -9]], i64), [0, 1], keep_dims=True), arr([[3]], i64))


def test_prod_all_any():
    assert_same(reduce("Prod", np.zeros((0, 2), i32), 0), arr([1, 1], i32))  # TF
    assert_same(reduce("All", np.zeros((0, 2), np.bool_), 0), arr([True, True], np.bool_))  # TF
    assert_same(reduce("Any", np.zeros((0, 2), np.bool_), 0), arr([False, False], np.bool_))  # TF
    b = arr([[True, False], [True, True]], np.bool_)
    assert_same(reduce("All", b, 1, keep_dims=True), arr([[False], [True]], np.bool_))  # TF
    assert_same(reduce("Any", b, -2), arr([True, True], np.bool_))
    assert_same(reduce("All", b, [0, 1]), np.bool_(False))


def test_euclidean_norm():
    assert_same(reduce("EuclideanNorm", arr([[3, 4], [1, 1]], i32), 1), arr([5, 1], i32))  # TF
    assert_close(
        reduce("EuclideanNorm", arr([[3.0, 4.0], [1.0, 1.0]], f32), 1, keep_dims=True),
        arr([[5.0], [1.4142135]], f32),
    )  # TF
    assert_same(
        reduce("EuclideanNorm", arr([[3 + 4j, 0j]], np.complex128), 1), arr([5 + 0j], np.complex128)
    )  # TF
    assert_same(reduce("EuclideanNorm", arr([1e30, 1e30], f32), 0), np.float32(np.inf))  # TF: no rescaling
    assert_same(reduce("EuclideanNorm", arr([300.0, 400.0], f16), 0), np.float16(np.inf))  # TF


# --- arg reductions, scans -------------------------------------------------------------------------------


def argop(name, x, dim, **attrs):
    return run_op(name, [np.asarray(x), np.asarray(dim)], {"T": np.asarray(x).dtype, **attrs})


def test_argmax_argmin():
    x = arr([[1, 3, 3], [5, 5, 0]], i32)
    assert_same(argop("ArgMax", x, arr(1, i32)), arr([1, 0], i64))  # TF: first index on ties
    assert_same(argop("ArgMax", x, arr(-1, i64), output_type=i32), arr([1, 0], i32))  # TF
    assert_same(argop("ArgMin", x, arr(0, i32)), arr([0, 0, 1], i64))
    assert_same(argop("ArgMax", arr([False, True], np.bool_), arr(0, i32)), np.int64(1))  # TF
    assert_same(argop("ArgMax", np.zeros((0, 3), f32), arr(1, i32)), np.zeros(0, i64))  # TF


def test_argmax_skips_nan_like_tf():
    nan, inf = np.nan, np.inf
    cases = [  # TF
        ("ArgMax", [1.0, nan, 3.0], 2),
        ("ArgMax", [nan, 1.0, 3.0], 2),
        ("ArgMax", [nan, nan], 0),
        ("ArgMax", [-inf, nan, -inf], 0),
        ("ArgMax", [nan, -inf], 0),
        ("ArgMax", [1.0] * 20 + [nan] + [0.0] * 20, 0),
        ("ArgMin", [1.0, nan, 0.0], 2),
        ("ArgMin", [nan, 1.0, 3.0], 1),
    ]
    for name, values, want in cases:
        assert argop(name, arr(values, f32), arr(0, i32)) == want, (name, values)
    x = arr([[nan, 1.0, 3.0], [2.0, nan, 1.0]], f64)
    assert_same(argop("ArgMax", x, arr(0, i32)), arr([1, 0, 0], i64))  # TF


@pytest.mark.parametrize(
    "x, dim, message",
    [  # TF messages
        (np.ones((2, 3), f32), arr(2, i32), r"Expected dimension in the range \[-2, 2\), but got 2"),
        (np.ones((2, 3), f32), arr(-3, i32), r"Expected dimension in the range \[-2, 2\), but got -3"),
        (arr(1.0, f32), arr(0, i32), r"Expected dimension in the range \[0, 0\), but got 0"),
        (np.ones(3, f32), arr([0], i32), r"dim must be a scalar, but received tensor of shape: \[1\]"),
        (np.zeros((0, 3), f32), arr(0, i32), r"Reduction axis 0 is empty in shape \[0,3\]"),
        (np.zeros((0, 3), f32), arr(-2, i32), r"Reduction axis -2 is empty in shape \[0,3\]"),
    ],
)
def test_argmax_errors(x, dim, message):
    with pytest.raises(InvalidArgumentError, match=message):
        argop("ArgMax", x, dim)


def _scan_ref(ufunc, x, axis, exclusive, reverse):
    x = np.flip(x, axis) if reverse else x
    out = ufunc.accumulate(x, axis=axis, dtype=x.dtype)
    if exclusive:
        first = np.full_like(np.take(out, [0], axis=axis), 1 if ufunc is np.multiply else 0)
        out = np.concatenate([first, np.delete(out, -1, axis=axis)], axis=axis)
    return np.flip(out, axis) if reverse else out


@pytest.mark.parametrize("name, ufunc", [("Cumsum", np.add), ("Cumprod", np.multiply)])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scans(name, ufunc, exclusive, reverse, axis):
    x = np.arange(1, 25, dtype=f32).reshape(2, 3, 4) / 8
    out = argop(name, x, arr(axis, i32), exclusive=exclusive, reverse=reverse)
    assert_close(out, _scan_ref(ufunc, x, axis, exclusive, reverse))


def test_scan_values_and_dtypes():
    v = arr([1, 2, 3], i32)
    assert_same(argop("Cumsum", v, arr(0, i32), exclusive=True, reverse=True), arr([5, 3, 0], i32))  # TF
    assert_same(argop("Cumprod", v, arr(0, i64), exclusive=True), arr([1, 1, 2], i32))  # TF
    m = arr([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], f32)
    want = arr([[6.0, 3.0, 1.0], [30.0, 6.0, 1.0]], f32)
    assert_same(argop("Cumprod", m, arr(1, i32), exclusive=True, reverse=True), want)  # TF
    assert_same(argop("Cumsum", v, arr(0, i32)), arr([1, 3, 6], i32))
    assert_same(argop("Cumsum", arr([100, 100], i8), arr(0, i32)), arr([100, -56], i8))  # TF
    ones = np.ones(3000, f16)
    assert argop("Cumsum", ones, arr(0, i32))[-1] == 2048  # TF: a float16 running sum
    assert_same(argop("Cumsum", np.zeros((0, 3), f32), arr(0, i32), exclusive=True), np.zeros((0, 3), f32))


@pytest.mark.parametrize(
    "x, axis, message",
    [  # TF messages
        (arr([1, 2, 3], i32), arr(1, i32), r"ScanOp: Expected scan axis in the range \[-1, 1\), but got 1"),
        (arr([1, 2, 3], i32), arr([0], i32), r"ScanOp: axis must be a scalar, not \[1\]"),
        (arr(1, i32), arr(0, i32), r"ScanOp: Expected scan axis in the range \[0, 0\), but got 0"),
    ],
)
def test_scan_errors(x, axis, message):
    with pytest.raises(InvalidArgumentError, match=message):
        argop("Cumsum", x, axis)
