"""TF1's TensorArrays: TensorArrayV3 and its write, read, gather, scatter, split, concat, size and close ops.

What ``tf.compat.v1.nn.dynamic_rnn``, ``bidirectional_dynamic_rnn`` and ``tf.TensorArray`` with control
flow v1 leave in a frozen graph (TF2's control flow writes TensorLists instead: list_ops.py). A
TensorArrayV3 node makes a new array each time it runs (it is stateful, never folded), and outputs a scalar
object tensor holding it (the handle) and a float "flow" scalar that orders the ops using the array: each
write returns the flow its reads wait for, so the graph's edges order the mutations. The array keeps its
elements under a lock (the v1 frame runner may run iterations side by side).

As in TensorFlow: an element is written once; ``clear_after_read`` (the default) frees an element when read,
and a second read of it is an error; a fixed-size array refuses indices past its size, a ``dynamic_size``
one grows; gathering or concatenating an element never written gives zeros when the element shape is fully
known, an error otherwise.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _shape_str, as_item, zeros
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_FLOW = np.zeros((), np.float32)
_FLOW.flags.writeable = False


class TensorArray:
    __slots__ = (
        "clear_after_read",
        "dtype",
        "dynamic",
        "element_shape",
        "elements",
        "identical",
        "lock",
        "name",
        "read",
    )

    def __init__(
        self,
        name: str,
        size: int,
        dtype: np.dtype[Any],
        element_shape: tuple[int, ...] | None,
        dynamic: bool,
        clear_after_read: bool,
        identical: bool,
    ) -> None:
        self.name = name
        self.elements: list[Any] = [None] * size
        self.read = [False] * size
        self.dtype = dtype
        self.element_shape = element_shape
        self.dynamic = dynamic
        self.clear_after_read = clear_after_read
        self.identical = identical
        self.lock = threading.Lock()

    def write(self, index: int, value: Any) -> None:
        if value.dtype != self.dtype:
            raise InvalidArgumentError(
                f"TensorArray {self.name}: Could not write to TensorArray index {index} because the value "
                f"dtype is {value.dtype} but TensorArray dtype is {self.dtype}."
            )
        if not _fits(value.shape, self.element_shape):
            raise InvalidArgumentError(
                f"TensorArray {self.name}: Could not write to TensorArray index {index} because the value "
                f"shape is {_shape_str(value.shape)} which is incompatible with the TensorArray's inferred "
                f"element shape: {_shape_str(self.element_shape)} (consider setting infer_shape=False)."
            )
        with self.lock:
            if index < 0:
                raise InvalidArgumentError(f"TensorArray {self.name}: Tried to write to index {index}")
            if index >= len(self.elements):
                if not self.dynamic:
                    raise InvalidArgumentError(
                        f"TensorArray {self.name}: Tried to write to index {index} but array is not "
                        f"resizeable and size is: {len(self.elements)}"
                    )
                grow = index + 1 - len(self.elements)
                self.elements.extend([None] * grow)
                self.read.extend([False] * grow)
            if self.elements[index] is not None or self.read[index]:
                raise InvalidArgumentError(
                    f"TensorArray {self.name}: Could not write to TensorArray index {index} because it has "
                    "already been written to."
                )
            self.elements[index] = value
            if self.identical and self.element_shape is None:
                self.element_shape = value.shape

    def get(self, index: int, gathering: bool = False) -> Any:
        with self.lock:
            if not 0 <= index < len(self.elements):
                raise InvalidArgumentError(
                    f"TensorArray {self.name}: Tried to read from index {index} but array size is: "
                    f"{len(self.elements)}"
                )
            value = self.elements[index]
            if value is None:
                if self.read[index]:
                    raise InvalidArgumentError(
                        f"TensorArray {self.name}: Could not read index {index} twice because it was cleared "
                        "after a previous read (perhaps try setting clear_after_read = false?)."
                    )
                shape = self.element_shape
                if gathering and shape is not None and all(d >= 0 for d in shape):
                    return zeros(shape, self.dtype)
                raise InvalidArgumentError(
                    f"TensorArray {self.name}: Could not read from TensorArray index {index} because it has "
                    "not yet been written to."
                )
            if self.clear_after_read:
                self.elements[index] = None
                self.read[index] = True
            return value

    def size(self) -> int:
        return len(self.elements)


def _fits(shape: tuple[int, ...], want: tuple[int, ...] | None) -> bool:
    if want is None:
        return True
    return len(shape) == len(want) and all(w < 0 or w == d for d, w in zip(shape, want, strict=True))


def _array(node: Node, value: Any) -> TensorArray:
    ta = value.item() if isinstance(value, np.ndarray) and value.shape == () else value
    if not isinstance(ta, TensorArray):
        raise InvalidArgumentError(
            f"{node.op} expects a TensorArray handle made by TensorArrayV3, got {ta!r}"
        )
    return ta


def _index(value: Any, what: str = "index") -> int:
    if value.ndim != 0:
        raise InvalidArgumentError(
            f"TensorArray {what} must be scalar, but had shape: {_shape_str(value.shape)}"
        )
    return int(value)


def _vector(value: Any, what: str) -> list[int]:
    if value.ndim != 1:
        raise InvalidArgumentError(
            f"Expected {what} to be a vector, but received shape: {_shape_str(value.shape)}"
        )
    return [int(v) for v in value.tolist()]


@kernel("TensorArrayV3", stateful=True, outputs=2)
def tensor_array_v3(node: Node) -> Compute:
    dtype = node.attr_dtype("dtype")
    element_shape = node.attr_shape("element_shape", None)
    dynamic = node.attr_bool("dynamic_size", False)
    clear_after_read = node.attr_bool("clear_after_read", True)
    identical = node.attr_bool("identical_element_shapes", False)
    name = node.attr_str("tensor_array_name", "") or node.name

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        size = _index(inputs[0], "size")
        if size < 0:
            raise InvalidArgumentError(f"Size should be >= 0, got {size}")
        handle = np.empty((), dtype=object)
        handle[()] = TensorArray(name, size, dtype, element_shape, dynamic, clear_after_read, identical)
        return handle, _FLOW

    return compute


@kernel("TensorArrayWriteV3", stateful=True)
def tensor_array_write_v3(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        ta = _array(node, inputs[0])
        ta.write(_index(inputs[1]), as_item(inputs[2]))
        return (_FLOW,)

    return compute


@kernel("TensorArrayReadV3", stateful=True)
def tensor_array_read_v3(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_array(node, inputs[0]).get(_index(inputs[1])),)

    return compute


def _stack(ta: TensorArray, values: list[Any], element_shape: tuple[int, ...] | None) -> Any:
    shapes = {v.shape for v in values}
    if len(shapes) > 1:
        raise InvalidArgumentError(
            f"TensorArray {ta.name}: Could not stack elements of different shapes: "
            f"{', '.join(_shape_str(s) for s in sorted(shapes))}"
        )
    if values:
        return np.stack(values)
    shape = element_shape if element_shape is not None else ta.element_shape
    if shape is None or any(d < 0 for d in shape):
        raise InvalidArgumentError(
            f"TensorArray {ta.name}: Cannot gather from an empty TensorArray with an unknown element shape"
        )
    return np.zeros((0, *shape), ta.dtype)


@kernel("TensorArrayGatherV3", stateful=True)
def tensor_array_gather_v3(node: Node) -> Compute:
    element_shape = node.attr_shape("element_shape", None)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        ta = _array(node, inputs[0])
        indices = _vector(inputs[1], "indices")
        return (_stack(ta, [ta.get(i, gathering=True) for i in indices], element_shape),)

    return compute


@kernel("TensorArrayScatterV3", stateful=True)
def tensor_array_scatter_v3(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        ta = _array(node, inputs[0])
        indices = _vector(inputs[1], "indices")
        value = as_item(inputs[2])
        if value.ndim < 1 or value.shape[0] != len(indices):
            raise InvalidArgumentError(
                f"Expected len(indices) == values.shape[0], but saw: {len(indices)} vs. "
                f"{value.shape[0] if value.ndim else 'a scalar'}"
            )
        for row, i in enumerate(indices):
            ta.write(i, value[row, ...])
        return (_FLOW,)

    return compute


@kernel("TensorArraySplitV3", stateful=True)
def tensor_array_split_v3(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        ta = _array(node, inputs[0])
        value = as_item(inputs[1])
        lengths = _vector(inputs[2], "lengths")
        if value.ndim < 1 or sum(lengths) != value.shape[0]:
            raise InvalidArgumentError(
                f"Expected sum of lengths to be equal to values.shape[0], but sum of lengths is "
                f"{sum(lengths)} and value's shape is: {_shape_str(value.shape)}"
            )
        start = 0
        for i, n in enumerate(lengths):
            ta.write(i, value[start : start + n])
            start += n
        return (_FLOW,)

    return compute


@kernel("TensorArrayConcatV3", stateful=True, outputs=2)
def tensor_array_concat_v3(node: Node) -> Compute:
    rest = node.attr_shape("element_shape_except0", None)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        ta = _array(node, inputs[0])
        values = [ta.get(i, gathering=True) for i in range(ta.size())]
        for v in values:
            if v.ndim < 1:
                raise InvalidArgumentError(f"TensorArray {ta.name}: Concat saw a scalar shape at an element")
        tails = {v.shape[1:] for v in values}
        if len(tails) > 1:
            raise InvalidArgumentError(f"TensorArray {ta.name}: Concat saw elements of different shapes")
        lengths = np.array([v.shape[0] for v in values], np.int64)
        if values:
            return np.concatenate(values), lengths
        if rest is None or any(d < 0 for d in rest):
            raise InvalidArgumentError(
                f"TensorArray {ta.name}: Concat of an empty TensorArray with an unknown shape"
            )
        return np.zeros((0, *rest), ta.dtype), lengths

    return compute


@kernel("TensorArraySizeV3", stateful=True)
def tensor_array_size_v3(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (np.asarray(_array(node, inputs[0]).size(), np.int32),)

    return compute


@kernel("TensorArrayCloseV3", stateful=True, outputs=0)
def tensor_array_close_v3(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        _array(node, inputs[0])
        return ()

    return compute
