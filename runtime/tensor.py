"""TensorProto <-> numpy arrays, with TensorFlow's rules.

Values come from ``tensor_content`` (raw little-endian bytes) or from the typed repeated field of the dtype.
A typed field shorter than the shape is padded with its last value (so one value fills the tensor); an
empty one means zeros.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from poolserve.proto import tensor_pb2, tensor_shape_pb2, types_pb2
from poolserve.runtime import dtypes
from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError

# dtype -> name of the typed repeated field that holds its values
_VALUE_FIELD: dict[int, str] = {
    types_pb2.DT_FLOAT: "float_val",
    types_pb2.DT_DOUBLE: "double_val",
    types_pb2.DT_HALF: "half_val",
    types_pb2.DT_BFLOAT16: "half_val",  # the 16-bit patterns, as for DT_HALF
    types_pb2.DT_INT8: "int_val",
    types_pb2.DT_INT16: "int_val",
    types_pb2.DT_INT32: "int_val",
    types_pb2.DT_UINT8: "int_val",
    types_pb2.DT_UINT16: "int_val",
    types_pb2.DT_INT64: "int64_val",
    types_pb2.DT_UINT32: "uint32_val",
    types_pb2.DT_UINT64: "uint64_val",
    types_pb2.DT_BOOL: "bool_val",
    types_pb2.DT_COMPLEX64: "scomplex_val",
    types_pb2.DT_COMPLEX128: "dcomplex_val",
    types_pb2.DT_STRING: "string_val",
    types_pb2.DT_QINT8: "int_val",
    types_pb2.DT_QUINT8: "int_val",
    types_pb2.DT_QINT16: "int_val",
    types_pb2.DT_QUINT16: "int_val",
    types_pb2.DT_QINT32: "int_val",
}


def _raw_dtypes() -> dict[np.dtype[Any], int]:
    """Numeric numpy dtypes whose native bytes are a ``tensor_content`` as they are, and their DataType:
    on a little-endian machine, every one that maps to a DataType and back to itself."""
    out: dict[np.dtype[Any], int] = {}
    if sys.byteorder != "little":
        return out
    names = "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 complex64"
    names += " complex128 bfloat16"
    for n in names.split():
        out[np.dtype(n)] = 0
    for dt in list(out):
        try:
            code = dtypes.from_numpy(dt)
            same = dtypes.as_numpy_dtype(code) == dt
        except Exception:
            same = False
        if same:
            out[dt] = code
        else:
            del out[dt]
    return out


# the fast paths of from_ndarray / to_ndarray: numbers whose bytes go as they are, both ways
_RAW_CODE = _raw_dtypes()
_RAW_DTYPE = {code: dt for dt, code in _RAW_CODE.items()}


def shape_from_proto(shape: tensor_shape_pb2.TensorShapeProto) -> tuple[int, ...] | None:
    """A shape tuple with -1 for unknown dimensions, or None for an unknown rank."""
    if shape.unknown_rank:
        return None
    return tuple(int(d.size) for d in shape.dim)


def shape_to_proto(shape: Sequence[int] | None) -> tensor_shape_pb2.TensorShapeProto:
    proto = tensor_shape_pb2.TensorShapeProto()
    if shape is None:
        proto.unknown_rank = True
    else:
        for size in shape:
            proto.dim.add(size=int(size))
    return proto


def _num_elements(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def to_ndarray(proto: tensor_pb2.TensorProto, name: str = "tensor") -> np.ndarray[Any, Any]:
    """Decodes a TensorProto. ``name`` is used in error messages (a node or tensor name)."""
    fast = _RAW_DTYPE.get(proto.dtype)
    if fast is not None:  # numbers in tensor_content, a known shape: what clients send (the checks below)
        content = proto.tensor_content
        shape_proto = proto.tensor_shape
        if content and not shape_proto.unknown_rank:
            dims = tuple([d.size for d in shape_proto.dim])
            count = 1
            for d in dims:
                count *= d
            if len(content) == count * fast.itemsize and (not dims or min(dims) >= 0):
                return np.frombuffer(content, dtype=fast).reshape(dims).copy()  # writable, the caller's
    dtype = dtypes.base_dtype(proto.dtype)
    if dtype == types_pb2.DT_VARIANT:
        # variant values (TensorLists) only exist while a graph runs; their serialized form is not read
        raise UnimplementedError(f"{name}: Data type variant is not supported in a TensorProto value")
    np_dtype = dtypes.as_numpy_dtype(dtype)
    shape = shape_from_proto(proto.tensor_shape)
    if shape is None or any(d < 0 for d in shape):
        raise InvalidArgumentError(f"{name}: a tensor value needs a fully defined shape, got {shape}")
    count = _num_elements(shape)

    if proto.tensor_content:
        if dtype == types_pb2.DT_STRING:
            return _strings_from_content(proto.tensor_content, shape, count, name)
        expected = count * np_dtype.itemsize
        if len(proto.tensor_content) != expected:
            raise InvalidArgumentError(
                f"{name}: tensor_content has {len(proto.tensor_content)} bytes, but shape {list(shape)} "
                f"of {dtypes.name(dtype)} needs {expected}"
            )
        flat = np.frombuffer(proto.tensor_content, dtype=np_dtype.newbyteorder("<"))
        return flat.astype(np_dtype, copy=True).reshape(shape)

    field = _VALUE_FIELD.get(dtype)
    if field is None:
        raise InvalidArgumentError(f"{name}: cannot decode values of {dtypes.name(dtype)}")
    raw: Any = getattr(proto, field)
    values: np.ndarray[Any, Any]
    if dtype == types_pb2.DT_STRING:
        values = np.empty(len(raw), dtype=object)
        values[:] = list(raw)
    elif dtype in (types_pb2.DT_HALF, types_pb2.DT_BFLOAT16):
        values = np.asarray(raw, dtype=np.uint16).view(np_dtype)
    elif dtype in (types_pb2.DT_COMPLEX64, types_pb2.DT_COMPLEX128):
        pairs = np.asarray(raw, dtype=np.float64)
        if pairs.size % 2:
            raise InvalidArgumentError(f"{name}: complex values need an even number of floats")
        values = (pairs[0::2] + 1j * pairs[1::2]).astype(np_dtype)
    else:
        values = np.asarray(raw).astype(np_dtype, copy=False)

    n = values.shape[0]
    if n > count:
        raise InvalidArgumentError(f"{name}: {n} values given for shape {list(shape)} ({count} elements)")
    if n == count:
        return values.reshape(shape)
    if n == 0:
        if dtype == types_pb2.DT_STRING:
            out = np.empty(shape, dtype=object)
            out.fill(b"")
            return out
        return np.zeros(shape, dtype=np_dtype)
    out = np.empty(shape, dtype=np_dtype)
    flat_out = out.reshape(-1)
    flat_out[:n] = values
    flat_out[n:] = values[-1]
    return out


def _strings_from_content(
    content: bytes, shape: tuple[int, ...], count: int, name: str
) -> np.ndarray[Any, Any]:
    """DT_STRING in tensor_content, as TensorFlow encodes it: every length as a varint, then the bytes."""
    lengths: list[int] = []
    pos = 0
    for _ in range(count):
        length, shift = 0, 0
        while True:
            if pos >= len(content) or shift > 63:
                raise InvalidArgumentError(f"{name}: truncated string lengths in tensor_content")
            byte = content[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        lengths.append(length)
    if pos + sum(lengths) != len(content):
        raise InvalidArgumentError(
            f"{name}: tensor_content holds {len(content) - pos} string bytes, the lengths say {sum(lengths)}"
        )
    out = np.empty(count, dtype=object)
    for i, length in enumerate(lengths):
        out[i] = content[pos : pos + length]
        pos += length
    return out.reshape(shape)


def as_array(value: Any, dtype: int | None = None) -> np.ndarray[Any, Any]:
    """A numpy array from an array, list, scalar, bytes or str (str is encoded as UTF-8 bytes). Array
    subclasses (``np.matrix``, masked arrays) become plain arrays of their data, as TensorFlow's
    ``np.asarray`` makes them: kept, they would bring their own shapes and results to the kernels."""
    arr = value if type(value) is np.ndarray and value.dtype.kind not in "SU" else np.asarray(value)
    if arr.dtype.kind in "SU" or (arr.dtype == object and dtype in (None, types_pb2.DT_STRING)):
        out = np.empty(arr.shape, dtype=object)
        flat = out.reshape(-1)
        for i, v in enumerate(arr.reshape(-1)):
            if isinstance(v, str):
                flat[i] = v.encode("utf-8")
            elif isinstance(v, (bytes, bytearray, memoryview, np.bytes_)):
                flat[i] = bytes(v)
            else:
                raise InvalidArgumentError(
                    f"a string tensor holds only str or bytes values, got {type(v).__name__} {v!r}"
                )
        arr = out
    if dtype is not None:
        arr = arr.astype(dtypes.as_numpy_dtype(dtype), copy=False)
    return arr


def from_ndarray(value: Any, dtype: int | None = None) -> tensor_pb2.TensorProto:
    """Encodes a value as a TensorProto: numbers in ``tensor_content``, strings in ``string_val``."""
    return fill_tensor_proto(tensor_pb2.TensorProto(), value, dtype)


def fill_tensor_proto(
    proto: tensor_pb2.TensorProto, value: Any, dtype: int | None = None
) -> tensor_pb2.TensorProto:
    """``from_ndarray`` into an empty TensorProto already in place (a field of the message to send):
    adding a finished TensorProto to a message would copy it, bytes and all."""
    if dtype is None and type(value) is np.ndarray:
        code = _RAW_CODE.get(value.dtype)
        if code is not None:
            proto.dtype = code  # type: ignore[assignment]
            shape = proto.tensor_shape
            shape.SetInParent()  # present even for a scalar, as the general path writes it
            dims = shape.dim
            for size in value.shape:
                dims.add(size=size)
            proto.tensor_content = value.tobytes()
            return proto
    arr = as_array(value, dtype)
    code = dtype if dtype is not None else dtypes.from_numpy(arr.dtype)
    proto.dtype = code  # type: ignore[assignment]
    proto.tensor_shape.CopyFrom(shape_to_proto(arr.shape))
    if code == types_pb2.DT_STRING:
        proto.string_val.extend(arr.reshape(-1).tolist())
    else:
        proto.tensor_content = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
    return proto
