"""Private helpers shared by several kernel modules: shapes in error messages, attr checks, scalar inputs,
half-precision widening, and the tap loops of window ops (pooling, LRN)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from poolserve.proto import types_pb2
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
