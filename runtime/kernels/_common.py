"""Private helpers shared by several kernel modules: shapes in error messages, attr checks, scalar inputs,
half-precision widening, the tap loops of window ops (pooling, LRN), and string tensors built from Python
lists."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from poolserve.proto import types_pb2
from poolserve.runtime import dtypes
from poolserve.runtime.errors import InvalidArgumentError, OpError
from poolserve.runtime.node import Node

_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
_PLAN_CACHE_SIZE = 64


# --- messages and attrs ------------------------------------------------------------------------------------


def _shape_str(shape: tuple[int, ...] | None) -> str:
    if shape is None:
        return "<unknown>"
    return "[" + ",".join("?" if d < 0 else str(d) for d in shape) + "]"


def _dims(shape: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _type_name(dtype: np.dtype[Any] | int) -> str:
    """TensorFlow's DataTypeString spelling ("float", "int32", "half") used in its errors."""
    code = dtype if isinstance(dtype, int) else dtypes.from_numpy(dtype)
    return str(types_pb2.DataType.Name(code))[3:].lower()


def _bad_attr(node: Node, attr: str, problem: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"Node '{node.name}' (op '{node.op}'): attr '{attr}' {problem}", node.name)


def _index_type(node: Node, attr: str) -> np.dtype[Any]:
    """An int32/int64 output-type attr (``out_type``, ``out_idx``, ``index_type``), int32 by default."""
    dtype = node.attr_dtype(attr, types_pb2.DT_INT32)
    if dtype not in (np.int32, np.int64):
        raise _bad_attr(node, attr, f"must be int32 or int64, got {dtype}")
    return dtype


@contextmanager
def _attrs_of(node: Node) -> Iterator[None]:
    """Names the node in errors raised while a factory checks attr values."""
    try:
        yield
    except OpError as e:
        raise type(e)(f"Node '{node.name}' (op '{node.op}'): {e.message}", node.name) from None


# --- values ------------------------------------------------------------------------------------------------


def _scalar(t: Any) -> Any:
    """A scalar or one-element tensor as a Python number (callers check the size first)."""
    return t.item()


def _widen(*arrays: Any) -> tuple[bool, list[Any]]:
    """Half inputs become float32 (TensorFlow's CPU kernels accumulate half products in float32)."""
    if arrays[0].dtype != _F16:
        return False, list(arrays)
    return True, [a.astype(_F32) for a in arrays]


# --- matrix products ---------------------------------------------------------------------------------------

# float32 products contract at most this many terms per BLAS call. numpy's OpenBLAS (0.3.31, Haswell kernels)
# slows down 2-3x once the inner dimension passes its 384-deep block: measured on this project's 2-core
# machine, interleaved, one BLAS thread: [512x1152] @ [1152x128] 15.8 ms in one call, 4.5 ms as three calls
# of 384; [2048x576] @ [576x64] 12.2 ms against 5.2-6.5 ms; [128x512] @ [512x128] 1.0 ms against 0.5 ms.
# Few rows gain nothing: [32x512] @ [512x256] 0.26 ms either way, [4x784] @ [784x256] 0.08 against 0.10.
_MAX_INNER = 384
_MIN_ROWS_TO_SPLIT = 64


def _matmul(a: Any, b: Any, out: Any = None) -> Any:
    """``np.matmul(a, b, out=out)``, float32 contractions deeper than ``_MAX_INNER`` split into equal slices
    summed (the slices are views: BLAS reads them with their strides, nothing is copied)."""
    k = a.shape[-1]
    if k <= _MAX_INNER or a.dtype != _F32 or b.dtype != _F32 or a.ndim < 2 or b.ndim < 2:
        return np.matmul(a, b, out=out)
    if a.shape[-2] < _MIN_ROWS_TO_SPLIT:
        return np.matmul(a, b, out=out)
    parts = -(-k // _MAX_INNER)
    step = -(-k // parts)
    y = np.matmul(a[..., :step], b[..., :step, :], out=out)
    tmp = np.empty_like(y)
    for s in range(step, k, step):
        np.matmul(a[..., s : s + step], b[..., s : s + step, :], out=tmp)
        y += tmp
    return y


def as_item(value: Any) -> Any:
    """A kernel input as an array: a scalar string (bytes, as indexing a string vector gives) as a 0-d string
    tensor, not numpy's fixed-width bytes."""
    return np.array(value, dtype=object) if isinstance(value, bytes) else np.asarray(value)


def zeros(shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
    """TensorFlow's zeros of ``dtype``: empty strings for a string tensor (numpy's would be int 0s)."""
    return np.full(shape, b"", dtype=object) if dtype.kind == "O" else np.zeros(shape, dtype)


# Rows up to this long are summed by BLAS (``row_sums``): float32 accumulates in blocks there, as in
# TensorFlow's Eigen reductions.
_ROW_SUM_MAX = 8192


@functools.lru_cache(maxsize=32)
def _ones_column(n: int, dtype: np.dtype[Any]) -> Any:
    column = np.ones((n, 1), dtype)
    column.flags.writeable = False
    return column


def row_sums(e: Any) -> Any:
    """``e.sum(axis=-1, keepdims=True)``; the float rows of a C-contiguous ``e`` as one matrix-vector
    product. numpy's reduce along a short last axis cost more than the rest of Softmax and layer norm
    (BERT-tiny's [1, 2, 128, 128] scores: 15-18 us against 5-7; a [1, 128, 128] layer norm 46 us a node
    against 33)."""
    n = e.shape[-1]
    if e.dtype.kind != "f" or not e.flags.c_contiguous or not 1 < n <= _ROW_SUM_MAX:
        return e.sum(axis=-1, keepdims=True)
    return np.matmul(e.reshape(-1, n), _ones_column(n, e.dtype)).reshape(*e.shape[:-1], 1)


# --- window taps -------------------------------------------------------------------------------------------


def _taps(start: int, count: int, step: int) -> slice:
    """The ``count`` positions ``start, start + step, ...`` (count >= 1)."""
    return slice(start, start + (count - 1) * step + 1, step)


def _reduce_taps(x: Any, axis: int, k: int, count: int, step: int, fn: Any, init: Any = None) -> Any:
    """``out[.., i, ..] = fn over t < k of x[.., i * step + t, ..]`` along ``axis`` (new array if k > 1)."""

    def tap(t: int) -> Any:
        index = [slice(None)] * x.ndim
        index[axis] = _taps(t, count, step)
        return x[tuple(index)]

    if init is not None:
        out, first = fn(tap(0), init), 1
    elif k == 1:
        return tap(0)
    else:
        out, first = fn(tap(0), tap(1)), 2
    for t in range(first, k):
        fn(out, tap(t), out=out)
    return out


# --- string tensors ----------------------------------------------------------------------------------------


def _strings(items: list[bytes], shape: tuple[int, ...]) -> np.ndarray:
    """A string tensor (an object array of bytes) of ``shape`` from a flat list."""
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape)


def _each(x: Any, fn: Callable[[bytes], Any], dtype: Any = object) -> np.ndarray:
    """``fn`` of every string of ``x``, in ``x``'s shape: strings, or numbers of ``dtype``."""
    values = [fn(s) for s in x.ravel().tolist()]
    if dtype is object:
        return _strings(values, x.shape)
    return np.array(values, dtype=dtype).reshape(x.shape)
