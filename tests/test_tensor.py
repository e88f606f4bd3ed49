from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poolserve.proto import tensor_pb2, types_pb2
from poolserve.runtime import dtypes
from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.runtime.tensor import as_array, from_ndarray, shape_from_proto, shape_to_proto, to_ndarray

WIRE = Path(__file__).parent / "fixtures" / "wire"
TENSORS = json.loads((WIRE / "tensors.json").read_text())
DATA_TYPE_NAMES = {
    "float32": "DT_FLOAT",
    "float64": "DT_DOUBLE",
    "float16": "DT_HALF",
    "int8": "DT_INT8",
    "uint8": "DT_UINT8",
    "int16": "DT_INT16",
    "uint16": "DT_UINT16",
    "int32": "DT_INT32",
    "int64": "DT_INT64",
    "uint32": "DT_UINT32",
    "uint64": "DT_UINT64",
    "bool": "DT_BOOL",
    "complex64": "DT_COMPLEX64",
    "complex128": "DT_COMPLEX128",
}


def proto(dtype: int, shape: tuple[int, ...], **fields: Any) -> tensor_pb2.TensorProto:
    p = tensor_pb2.TensorProto(dtype=dtype, **fields)  # type: ignore[arg-type]
    p.tensor_shape.CopyFrom(shape_to_proto(shape))
    return p


def expected_array(case: dict[str, Any]) -> np.ndarray[Any, Any]:
    values = case["values"]
    if case["dtype"] == "string":
        arr = np.empty(len(values), dtype=object)
        arr[:] = [bytes.fromhex(v) for v in values]
    elif case["dtype"].startswith("complex"):
        arr = np.array([complex(re, im) for re, im in values], dtype=case["dtype"])
    else:
        arr = np.array(values, dtype=case["dtype"])
    return arr.reshape(case["shape"])


# --- TensorProtos written by TensorFlow ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TENSORS))
def test_decodes_what_tensorflow_wrote(name: str) -> None:
    p = tensor_pb2.TensorProto.FromString((WIRE / f"tensor_{name}.bin").read_bytes())
    form = name.rsplit("_", 1)[1]
    assert bool(p.tensor_content) == (form == "content")
    actual = to_ndarray(p)
    expected = expected_array(TENSORS[name])
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    if expected.dtype.kind == "f":
        # bit-exact, not just close
        np.testing.assert_array_equal(
            actual.view(f"u{expected.itemsize}"), expected.view(f"u{expected.itemsize}")
        )
    else:
        np.testing.assert_array_equal(actual, expected)


def test_fixtures_cover_both_forms() -> None:
    for dtype in ("float32", "int64", "bool", "half", "complex64"):
        assert {f"{dtype}_content", f"{dtype}_typed"} <= TENSORS.keys()
    assert "string_typed" in TENSORS


# --- round trips --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        np.array([[1.5, -2.0, np.inf], [np.nan, -0.0, 1e-40]], np.float32),
        np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 7,
        np.array([1.5, -65504.0, 6e-8], np.float16),
        np.array([-128, 0, 127], np.int8),
        np.array([0, 255], np.uint8),
        np.array([-(2**15), 2**15 - 1], np.int16),
        np.array([0, 2**16 - 1], np.uint16),
        np.array([[-(2**31), 2**31 - 1]], np.int32),
        np.array([-(2**63), 2**63 - 1], np.int64),
        np.array([2**32 - 1], np.uint32),
        np.array([2**64 - 1, 0], np.uint64),
        np.array([True, False, True]),
        np.array([1 + 2j, -3.5j], np.complex64),
        np.array([[1e300 - 1j]], np.complex128),
        np.float32(3.5),
        np.zeros((0, 3), np.float32),
        np.zeros((2, 0, 1), np.int64),
    ],
    ids=lambda v: f"{np.asarray(v).dtype}{list(np.shape(v))}",
)
def test_numeric_round_trip(value: Any) -> None:
    arr = np.asarray(value)
    p = from_ndarray(arr)
    assert types_pb2.DataType.Name(p.dtype) == DATA_TYPE_NAMES[arr.dtype.name]
    assert len(p.tensor_content) == arr.nbytes
    back = to_ndarray(p)
    assert back.dtype == arr.dtype
    assert back.shape == arr.shape
    assert back.tobytes() == arr.tobytes()  # bit exact, NaN and -0.0 included
    assert back.flags.writeable


def test_round_trip_of_non_contiguous_big_endian_array() -> None:
    arr = np.arange(12, dtype=">i4").reshape(3, 4)[:, ::2]
    back = to_ndarray(from_ndarray(arr))
    assert back.dtype == np.dtype(np.int32)
    np.testing.assert_array_equal(back, [[0, 2], [4, 6], [8, 10]])


def test_string_round_trip() -> None:
    p = from_ndarray(np.array([["ab", "h\u00e9"], ["", "z"]]))
    assert p.dtype == types_pb2.DT_STRING
    assert list(p.string_val) == [b"ab", "h\u00e9".encode(), b"", b"z"]
    back = to_ndarray(p)
    assert back.dtype == object and back.shape == (2, 2)
    assert back.tolist() == [[b"ab", "h\u00e9".encode()], [b"", b"z"]]


def test_from_ndarray_with_dtype_converts() -> None:
    p = from_ndarray([1, 2, 3], dtype=types_pb2.DT_FLOAT)
    assert p.dtype == types_pb2.DT_FLOAT
    out = to_ndarray(p)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [1.0, 2.0, 3.0])


def test_as_array_encodes_str_as_utf8() -> None:
    out = as_array(["a", "\u00e9"])
    assert out.dtype == object
    assert out.tolist() == [b"a", b"\xc3\xa9"]
    assert as_array(b"xy").tolist() == b"xy"


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")  # np.matrix
def test_as_array_takes_subclasses_as_plain_arrays() -> None:
    for value in (np.matrix([[1, 2]], np.int32), np.ma.masked_array([[1, 2]], mask=[[0, 1]], dtype=np.int32)):
        arr = as_array(value)
        assert type(arr) is np.ndarray and arr.shape == (1, 2) and arr.tolist() == [[1, 2]]
        assert type(as_array(value, types_pb2.DT_FLOAT)) is np.ndarray


def test_shape_protos() -> None:
    assert shape_from_proto(shape_to_proto([2, -1, 3])) == (2, -1, 3)
    assert shape_from_proto(shape_to_proto(None)) is None
    assert shape_from_proto(shape_to_proto(())) == ()


# --- typed fields: broadcast, padding, zeros ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "field", "value", "expected"),
    [
        (types_pb2.DT_FLOAT, "float_val", [2.5], np.full((2, 3), 2.5, np.float32)),
        (types_pb2.DT_DOUBLE, "double_val", [-1.25], np.full((2, 3), -1.25)),
        (types_pb2.DT_INT32, "int_val", [7], np.full((2, 3), 7, np.int32)),
        (types_pb2.DT_INT64, "int64_val", [-(2**40)], np.full((2, 3), -(2**40), np.int64)),
        (types_pb2.DT_UINT8, "int_val", [200], np.full((2, 3), 200, np.uint8)),
        (types_pb2.DT_UINT32, "uint32_val", [2**32 - 1], np.full((2, 3), 2**32 - 1, np.uint32)),
        (types_pb2.DT_UINT64, "uint64_val", [2**64 - 1], np.full((2, 3), 2**64 - 1, np.uint64)),
        (types_pb2.DT_BOOL, "bool_val", [True], np.ones((2, 3), bool)),
        (types_pb2.DT_HALF, "half_val", [0x3E00], np.full((2, 3), 1.5, np.float16)),
        (types_pb2.DT_COMPLEX64, "scomplex_val", [1.0, -2.0], np.full((2, 3), 1 - 2j, np.complex64)),
        (types_pb2.DT_COMPLEX128, "dcomplex_val", [0.5, 3.0], np.full((2, 3), 0.5 + 3j, np.complex128)),
    ],
)
def test_single_value_fills_the_shape(dtype: int, field: str, value: list[Any], expected: Any) -> None:
    out = to_ndarray(proto(dtype, (2, 3), **{field: value}))
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected)


def test_single_string_fills_the_shape() -> None:
    out = to_ndarray(proto(types_pb2.DT_STRING, (3,), string_val=[b"x"]))
    assert out.tolist() == [b"x", b"x", b"x"]


def test_short_field_is_padded_with_its_last_value() -> None:
    out = to_ndarray(proto(types_pb2.DT_INT32, (2, 3), int_val=[1, 2, 3]))
    np.testing.assert_array_equal(out, [[1, 2, 3], [3, 3, 3]])
    out = to_ndarray(proto(types_pb2.DT_COMPLEX64, (3,), scomplex_val=[1, 2, 3, 4]))
    np.testing.assert_array_equal(out, np.array([1 + 2j, 3 + 4j, 3 + 4j], np.complex64))
    strings = to_ndarray(proto(types_pb2.DT_STRING, (2, 2), string_val=[b"a", b"b"]))
    assert strings.tolist() == [[b"a", b"b"], [b"b", b"b"]]


@pytest.mark.parametrize(
    ("dtype", "np_dtype"),
    [
        (types_pb2.DT_FLOAT, np.float32),
        (types_pb2.DT_INT64, np.int64),
        (types_pb2.DT_BOOL, np.bool_),
        (types_pb2.DT_HALF, np.float16),
        (types_pb2.DT_COMPLEX128, np.complex128),
    ],
)
def test_no_values_means_zeros(dtype: int, np_dtype: Any) -> None:
    out = to_ndarray(proto(dtype, (2, 2)))
    assert out.dtype == np_dtype
    np.testing.assert_array_equal(out, np.zeros((2, 2), np_dtype))


def test_no_values_means_empty_strings() -> None:
    out = to_ndarray(proto(types_pb2.DT_STRING, (2,)))
    assert out.dtype == object and out.tolist() == [b"", b""]


def test_scalar_and_empty_shapes() -> None:
    scalar = to_ndarray(proto(types_pb2.DT_FLOAT, (), float_val=[4.0]))
    assert scalar.shape == () and scalar == 4.0
    empty = to_ndarray(proto(types_pb2.DT_FLOAT, (0, 5)))
    assert empty.shape == (0, 5) and empty.dtype == np.float32


def test_int_val_wraps_like_tensorflow() -> None:
    # TensorFlow's C++ decoder truncates int_val to the narrow type: 300 -> 44 (int8), -1 -> 255 (uint8).
    np.testing.assert_array_equal(to_ndarray(proto(types_pb2.DT_INT8, (2,), int_val=[300, -1])), [44, -1])
    np.testing.assert_array_equal(to_ndarray(proto(types_pb2.DT_UINT8, (2,), int_val=[300, -1])), [44, 255])


def test_reference_dtype_decodes_as_its_value_type() -> None:
    out = to_ndarray(proto(types_pb2.DT_FLOAT_REF, (2,), float_val=[1.0, 2.0]))
    assert out.dtype == np.float32


# --- errors -------------------------------------------------------------------------------------------------


def test_wrong_tensor_content_length() -> None:
    p = proto(types_pb2.DT_FLOAT, (3,), tensor_content=b"\0" * 8)
    with pytest.raises(
        InvalidArgumentError, match=r"w: tensor_content has 8 bytes, but shape \[3\] .* needs 12"
    ):
        to_ndarray(p, name="w")


def test_unknown_shape_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="fully defined shape"):
        to_ndarray(proto(types_pb2.DT_FLOAT, (2, -1), float_val=[1.0]))
    p = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT)
    p.tensor_shape.unknown_rank = True
    with pytest.raises(InvalidArgumentError, match="fully defined shape"):
        to_ndarray(p)


@pytest.mark.parametrize("dtype", [types_pb2.DT_INT4, types_pb2.DT_VARIANT, types_pb2.DT_FLOAT8_E4M3FN])
def test_unsupported_dtypes_are_unimplemented(dtype: int) -> None:
    with pytest.raises(UnimplementedError, match="not supported"):
        to_ndarray(proto(dtype, (1,), tensor_content=b"\0\0"))


def test_bfloat16_values_are_ml_dtypes_bfloat16() -> None:
    """tf.bfloat16.as_numpy_dtype: the 16-bit patterns in tensor_content or half_val (tests/test_bfloat16.py)."""
    value = to_ndarray(proto(types_pb2.DT_BFLOAT16, (1,), tensor_content=b"\xc0\x3f"))
    assert value.dtype == dtypes.BFLOAT16 and value.tolist() == [1.5]


def test_quantized_values_are_the_integers_of_their_width() -> None:
    """A quantize_weights graph's Const weights: qint8 and friends, read as int8 and friends."""
    q = to_ndarray(proto(types_pb2.DT_QINT8, (2,), tensor_content=bytes([0xFF, 0x05])))
    assert q.dtype == np.int8 and q.tolist() == [-1, 5]
    listed = proto(types_pb2.DT_QUINT16, (3,))
    listed.int_val.extend([1, 65535, 7])
    assert to_ndarray(listed).tolist() == [1, 65535, 7] and to_ndarray(listed).dtype == np.uint16


def test_resource_values_cannot_be_decoded() -> None:
    with pytest.raises(InvalidArgumentError, match="cannot decode values of resource"):
        to_ndarray(proto(types_pb2.DT_RESOURCE, (1,)))


@pytest.mark.parametrize("value", [np.array([1], np.longdouble), np.array(["2020-01-01"], "datetime64[D]")])
def test_numpy_dtypes_without_a_tensorflow_type(value: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="has no TensorFlow DataType"):
        from_ndarray(value)


# --- where poolserve differs from TensorFlow's C++ decoder (Tensor::FromProto) ------------------------------


def test_string_tensor_content() -> None:
    # TensorFlow's encoding: every length as a varint, then the bytes
    p = proto(types_pb2.DT_STRING, (2,), tensor_content=b"\x02\x01abc")
    assert to_ndarray(p).tolist() == [b"ab", b"c"]
    long = b"x" * 200
    p = proto(types_pb2.DT_STRING, (1,), tensor_content=b"\xc8\x01" + long)
    assert to_ndarray(p).tolist() == [long]
    with pytest.raises(InvalidArgumentError, match="the lengths say 3"):
        to_ndarray(proto(types_pb2.DT_STRING, (2,), tensor_content=b"\x02\x01abcd"))
    with pytest.raises(InvalidArgumentError, match="truncated"):
        to_ndarray(proto(types_pb2.DT_STRING, (2,), tensor_content=b"\x02"))


def test_extra_typed_values_are_an_error() -> None:
    # TensorFlow keeps the first values; poolserve refuses rather than drop data silently
    with pytest.raises(InvalidArgumentError, match="3 values given for shape \\[2\\]"):
        to_ndarray(proto(types_pb2.DT_FLOAT, (2,), float_val=[1, 2, 3]))


def test_object_array_of_numbers_is_not_a_string_tensor() -> None:
    with pytest.raises(InvalidArgumentError, match="only str or bytes values, got int"):
        as_array(np.array([1, 2], dtype=object))


@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "int32", "int64", "uint8", "bool", "float16", "complex64"]
)
@pytest.mark.parametrize("shape", [(), (0,), (2, 3)])
def test_native_arrays_encode_as_byte_swapped_ones_and_decode_writable(
    dtype: str, shape: tuple[int, ...]
) -> None:
    # native arrays take the fast path both ways; a big-endian copy takes the general one: same message
    a = np.asarray(np.arange(int(np.prod(shape))).reshape(shape) % 3).astype(dtype)
    fast = from_ndarray(a)
    general = from_ndarray(a.astype(a.dtype.newbyteorder(">")))
    assert fast.SerializeToString() == general.SerializeToString()
    back = to_ndarray(fast)
    assert back.dtype == a.dtype and back.shape == a.shape and back.flags.writeable
    np.testing.assert_array_equal(back, a)


def test_content_that_does_not_fit_the_shape_is_refused_on_the_fast_path_too() -> None:
    proto = from_ndarray(np.ones((2, 3), np.float32))
    proto.tensor_shape.dim[1].size = 4
    with pytest.raises(InvalidArgumentError, match="tensor_content has 24 bytes"):
        to_ndarray(proto, "x")
