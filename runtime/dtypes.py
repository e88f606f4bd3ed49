"""TensorFlow DataType <-> numpy dtype.

Strings are numpy object arrays of ``bytes``; DT_HALF is ``float16``; resources and variants (TensorLists) are
0-d object arrays holding the Python object. TensorFlow's quantized types (qint8, quint8, qint16, quint16,
qint32: a quantize_weights graph's Const weights, QuantizeV2's outputs) are held as the integers of their
width; an integer array is never taken for one. DT_BFLOAT16 is ``ml_dtypes.bfloat16``, the type TensorFlow's
own ``tf.bfloat16.as_numpy_dtype`` is (kernels compute it in float32: ``runtime/bfloat16.py``). Types numpy
cannot hold (float8, int4) are refused with ``UnimplementedError``.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from poolserve.proto import types_pb2
from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError

DataType = int  # a types_pb2.DataType value

BFLOAT16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)

_TO_NUMPY: dict[int, np.dtype[Any]] = {
    types_pb2.DT_FLOAT: np.dtype(np.float32),
    types_pb2.DT_DOUBLE: np.dtype(np.float64),
    types_pb2.DT_HALF: np.dtype(np.float16),
    types_pb2.DT_BFLOAT16: BFLOAT16,
    types_pb2.DT_INT8: np.dtype(np.int8),
    types_pb2.DT_INT16: np.dtype(np.int16),
    types_pb2.DT_INT32: np.dtype(np.int32),
    types_pb2.DT_INT64: np.dtype(np.int64),
    types_pb2.DT_UINT8: np.dtype(np.uint8),
    types_pb2.DT_UINT16: np.dtype(np.uint16),
    types_pb2.DT_UINT32: np.dtype(np.uint32),
    types_pb2.DT_UINT64: np.dtype(np.uint64),
    types_pb2.DT_BOOL: np.dtype(np.bool_),
    types_pb2.DT_COMPLEX64: np.dtype(np.complex64),
    types_pb2.DT_COMPLEX128: np.dtype(np.complex128),
    types_pb2.DT_STRING: np.dtype(object),
    types_pb2.DT_RESOURCE: np.dtype(object),
    # a TensorList (kernels/list_ops.py) in a 0-d object array
    types_pb2.DT_VARIANT: np.dtype(object),
}

# quantized types: values of the integer type of the same width
QUANTIZED: dict[int, np.dtype[Any]] = {
    types_pb2.DT_QINT8: np.dtype(np.int8),
    types_pb2.DT_QUINT8: np.dtype(np.uint8),
    types_pb2.DT_QINT16: np.dtype(np.int16),
    types_pb2.DT_QUINT16: np.dtype(np.uint16),
    types_pb2.DT_QINT32: np.dtype(np.int32),
}

_FROM_NUMPY: dict[np.dtype[Any], int] = {
    dt: code for code, dt in _TO_NUMPY.items() if code not in (types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT)
}
_TO_NUMPY.update(QUANTIZED)


def base_dtype(dtype: int) -> int:
    """Strips the reference flag (``DT_FLOAT_REF`` -> ``DT_FLOAT``)."""
    return dtype - 100 if dtype > 100 else dtype


def name(dtype: int) -> str:
    """TensorFlow's spelling, e.g. ``float32`` for DT_FLOAT."""
    try:
        enum_name = types_pb2.DataType.Name(dtype)
    except ValueError:
        return f"<unknown dtype {dtype}>"
    plain = (
        dtype not in (types_pb2.DT_STRING, types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT)
        and dtype not in QUANTIZED
    )
    if dtype in _TO_NUMPY and plain:
        return str(_TO_NUMPY[dtype])
    return enum_name[3:].lower()


def as_numpy_dtype(dtype: int) -> np.dtype[Any]:
    """The numpy dtype that holds values of a TensorFlow DataType."""
    dt = _TO_NUMPY.get(base_dtype(dtype))
    if dt is None:
        raise UnimplementedError(f"Data type {name(dtype)} is not supported by poolserve's numpy runtime")
    return dt


def from_numpy(dtype: Any) -> int:
    """The DataType for a numpy dtype (``bytes``/``str`` arrays are DT_STRING)."""
    dt = np.dtype(dtype)
    if dt.kind in "SUO":
        return types_pb2.DT_STRING
    code = _FROM_NUMPY.get(dt.newbyteorder("=") if dt.byteorder not in "=|" else dt)
    if code is None:
        raise InvalidArgumentError(f"numpy dtype {dt} has no TensorFlow DataType")
    return code


def is_floating(dtype: int) -> bool:
    return base_dtype(dtype) in (
        types_pb2.DT_FLOAT,
        types_pb2.DT_DOUBLE,
        types_pb2.DT_HALF,
        types_pb2.DT_BFLOAT16,
    )
