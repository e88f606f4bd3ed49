"""TensorList ops: the variant lists that ``tf.TensorArray`` and Keras RNN loops (``unroll=False``) carry.

A TensorList travels as TensorFlow's DT_VARIANT tensor does: a scalar (0-d) object array holding one
``TensorList``, so Identity, Switch, Enter, Merge, function args and While loop variables pass it unchanged.
A ``TensorList`` is immutable: every op that "modifies" a list returns a new one sharing the unchanged
element arrays (kernels never write into their inputs), so a list a loop iteration holds, or a folded
constant, never changes under anyone. Elements never set are ``None`` and read as zeros of the list's
element shape, as in TensorFlow.

Element shapes follow TensorFlow's encoding in the ``element_shape`` inputs: a scalar ``-1`` is an unknown
rank, ``-1`` in a vector an unknown dimension. Errors quote TensorFlow's messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _attrs_of, _shape_str, as_item, zeros
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

Shape = tuple[int, ...] | None  # None: unknown rank; -1: unknown dimension


class TensorList:
    """One list value: element arrays (``None`` where never set), their dtype and (partial) shape."""

    __slots__ = ("element_dtype", "element_shape", "elements", "max_num_elements")

    def __init__(
        self,
        elements: list[Any],
        element_dtype: np.dtype[Any],
        element_shape: Shape,
        max_num_elements: int = -1,
    ) -> None:
        self.elements = elements
        self.element_dtype = element_dtype
        self.element_shape = element_shape
        self.max_num_elements = max_num_elements

    def replace(self, elements: list[Any]) -> TensorList:
        return TensorList(elements, self.element_dtype, self.element_shape, self.max_num_elements)

    def __repr__(self) -> str:
        return f"TensorList({len(self.elements)} x {self.element_dtype} {_shape_str(self.element_shape)})"


def _wrap(value: TensorList) -> Any:
    out = np.empty((), dtype=object)
    out[()] = value
    out.flags.writeable = False
    return out


def _list(node: Node, value: Any) -> TensorList:
    v = value.item() if isinstance(value, np.ndarray) and value.shape == () else value
    if not isinstance(v, TensorList):
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): input handle is not a list. Saw: '{v!r}'", node.name
        )
    return v


def _check_dtype(node: Node, lst: TensorList, dtype: np.dtype[Any]) -> None:
    if lst.element_dtype != dtype:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): Invalid data types; op elements {dtype} but list "
            f"elements {lst.element_dtype}",
            node.name,
        )


def _shape_input(node: Node, value: Any) -> Shape:
    """An ``element_shape`` input: a scalar -1 (unknown rank) or a vector of dims (-1 unknown)."""
    arr = np.asarray(value)
    if arr.ndim == 0:
        if int(arr) != -1:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): element_shape must be a vector or the scalar -1 "
                f"(unknown rank), got {int(arr)}",
                node.name,
            )
        return None
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): element_shape must be an int32/int64 vector, got "
            f"{arr.dtype} of shape {_shape_str(arr.shape)}",
            node.name,
        )
    return tuple(int(d) for d in arr)


def _merge(node: Node, a: Shape, b: Shape) -> Shape:
    """The most defined shape compatible with both (TensorFlow's MergeWith)."""
    if a is None:
        return b
    if b is None:
        return a
    if len(a) != len(b) or any(x >= 0 and y >= 0 and x != y for x, y in zip(a, b, strict=True)):
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): Incompatible shapes during merge: {_shape_str(a)} vs. "
            f"{_shape_str(b)}",
            node.name,
        )
    return tuple(x if x >= 0 else y for x, y in zip(a, b, strict=True))


def _compatible(shape: tuple[int, ...], want: Shape) -> bool:
    if want is None:
        return True
    return len(shape) == len(want) and all(w < 0 or s == w for s, w in zip(shape, want, strict=True))


def _defined(shape: Shape) -> bool:
    return shape is not None and all(d >= 0 for d in shape)


def _zeros(node: Node, lst: TensorList, requested: Shape, what: str) -> Any:
    """The value of an element never set: zeros of the element shape, which must be known by now."""
    shape = _merge(node, lst.element_shape, requested)
    if not _defined(shape):
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): Trying to read an uninitialized tensor but element_shape "
            f"is not fully defined: {_shape_str(shape)} ({what})",
            node.name,
        )
    assert shape is not None
    return zeros(shape, lst.element_dtype)


def _index(node: Node, value: Any) -> int:
    arr = np.asarray(value)
    if arr.size != 1:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): index must be a scalar, got shape {_shape_str(arr.shape)}",
            node.name,
        )
    return int(arr.reshape(()))


def _check_item(node: Node, lst: TensorList, item: Any) -> None:
    if item.dtype != lst.element_dtype:
        _check_dtype(node, lst, item.dtype)
    if not _compatible(item.shape, lst.element_shape):
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): Tried to set a tensor with incompatible shape at a list "
            f"index. Item element shape: {_shape_str(item.shape)} list shape: "
            f"{_shape_str(lst.element_shape)}",
            node.name,
        )


def _stack(node: Node, lst: TensorList, items: Sequence[Any], requested: Shape) -> Any:
    """``items`` (elements of ``lst``, ``None`` for unset ones) stacked on a new leading axis."""
    shape = _merge(node, lst.element_shape, requested)
    known = next((e for e in items if e is not None), None)
    if known is not None:
        shape = _merge(node, shape, known.shape)
    if not items:
        if not _defined(shape):
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): Tried to stack elements of an empty list with "
                f"non-fully-defined element_shape: {_shape_str(shape)}",
                node.name,
            )
        assert shape is not None
        return np.zeros((0, *shape), dtype=lst.element_dtype)
    filled = [e if e is not None else _zeros(node, lst, shape, "stacking") for e in items]
    first = filled[0].shape
    for e in filled:
        if e.shape != first:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): Incompatible shapes in the list: "
                f"{_shape_str(first)} vs. {_shape_str(e.shape)}",
                node.name,
            )
    return np.stack(filled)


def _element_dtype(node: Node) -> np.dtype[Any]:
    with _attrs_of(node):
        return node.attr_dtype("element_dtype")


# --- making lists ------------------------------------------------------------------------------------------


@kernel("EmptyTensorList")
def empty_tensor_list(node: Node) -> Compute:
    dtype = _element_dtype(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        shape = _shape_input(node, inputs[0])
        max_elements = _index(node, inputs[1])
        if max_elements < -1:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): max_num_elements must be non-negative or -1, got "
                f"{max_elements}",
                node.name,
            )
        return (_wrap(TensorList([], dtype, shape, max_elements)),)

    return compute


@kernel("TensorListReserve")
def tensor_list_reserve(node: Node) -> Compute:
    dtype = _element_dtype(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        shape = _shape_input(node, inputs[0])
        n = _index(node, inputs[1])
        if n < 0:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): The num_elements to reserve must be a non negative "
                f"number, but got {n}",
                node.name,
            )
        return (_wrap(TensorList([None] * n, dtype, shape)),)

    return compute


@kernel("TensorListFromTensor")
def tensor_list_from_tensor(node: Node) -> Compute:
    dtype = _element_dtype(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        tensor = np.asarray(inputs[0])
        shape = _shape_input(node, inputs[1])
        if tensor.ndim < 1:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): Tensor must be at least a vector, but saw shape: "
                f"{_shape_str(tensor.shape)}",
                node.name,
            )
        if tensor.dtype != dtype:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): tensor is {tensor.dtype}, element_dtype is {dtype}",
                node.name,
            )
        if not _compatible(tensor.shape[1:], shape):
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): Specified a list with shape {_shape_str(shape)} from "
                f"a tensor with shape {_shape_str(tensor.shape[1:])}",
                node.name,
            )
        # tensor[i, ...]: a 0-d array for a vector's elements (list() would give scalars, bytes for strings)
        return (_wrap(TensorList([tensor[i, ...] for i in range(tensor.shape[0])], dtype, shape)),)

    return compute


@kernel("TensorListSplit")
def tensor_list_split(node: Node) -> Compute:
    dtype = _element_dtype(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        tensor = np.asarray(inputs[0])
        shape = _shape_input(node, inputs[1])
        lengths = [int(n) for n in np.asarray(inputs[2]).reshape(-1)]
        if tensor.ndim < 1:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): Tensor must be at least a vector, but saw shape: "
                f"{_shape_str(tensor.shape)}",
                node.name,
            )
        if any(n < 0 for n in lengths) or sum(lengths) != tensor.shape[0]:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): Unused values in tensor. Length of tensor: "
                f"{tensor.shape[0]} Values used: {sum(lengths)} (lengths must be non-negative)",
                node.name,
            )
        bounds = np.cumsum([0, *lengths])
        parts = [tensor[bounds[i] : bounds[i + 1]] for i in range(len(lengths))]
        return (_wrap(TensorList(parts, dtype, shape)),)

    return compute


# --- reading ----------------------------------------------------------------------------------------------


@kernel("TensorListLength")
def tensor_list_length(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (np.asarray(len(_list(node, inputs[0]).elements), dtype=np.int32),)

    return compute


@kernel("TensorListElementShape")
def tensor_list_element_shape(node: Node) -> Compute:
    with _attrs_of(node):
        out_type = node.attr_dtype("shape_type")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        shape = _list(node, inputs[0]).element_shape
        if shape is None:
            return (np.asarray(-1, dtype=out_type),)
        return (np.asarray(shape, dtype=out_type).reshape(len(shape)),)

    return compute


@kernel("TensorListGetItem")
def tensor_list_get_item(node: Node) -> Compute:
    dtype = _element_dtype(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        lst = _list(node, inputs[0])
        _check_dtype(node, lst, dtype)
        i = _index(node, inputs[1])
        if not 0 <= i < len(lst.elements):
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): Trying to access element {i} in a list with "
                f"{len(lst.elements)} elements.",
                node.name,
            )
        item = lst.elements[i]
        if item is None:
            item = _zeros(node, lst, _shape_input(node, inputs[2]), f"element {i}")
        return (item,)

    return compute


@kernel("TensorListStack")
def tensor_list_stack(node: Node) -> Compute:
    dtype = _element_dtype(node)
    with _attrs_of(node):
        num_elements = node.attr_int("num_elements", -1)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        lst = _list(node, inputs[0])
        _check_dtype(node, lst, dtype)
        if num_elements != -1 and len(lst.elements) != num_elements:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): Operation expected a list with {num_elements} "
                f"elements but got a list with {len(lst.elements)} elements.",
                node.name,
            )
        return (_stack(node, lst, lst.elements, _shape_input(node, inputs[1])),)

    return compute


@kernel("TensorListGather")
def tensor_list_gather(node: Node) -> Compute:
    dtype = _element_dtype(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        lst = _list(node, inputs[0])
        _check_dtype(node, lst, dtype)
        indices = [int(i) for i in np.asarray(inputs[1]).reshape(-1)]
        n = len(lst.elements)
        for i in indices:
            if not 0 <= i < n:
                raise InvalidArgumentError(
                    f"Node '{node.name}' (op '{node.op}'): Trying to gather element {i} in a list with {n} "
                    "elements.",
                    node.name,
                )
        items = [lst.elements[i] for i in indices]
        return (_stack(node, lst, items, _shape_input(node, inputs[2])),)

    return compute


def _concat(node: Node, lst: TensorList, requested: Shape, leading: list[int]) -> tuple[Any, Any]:
    """Elements joined along their first axis, and each one's length (TensorListConcat). An element never
    set is zeros whose first dimension is the element shape's, else ``leading[i]`` for element ``i``."""
    shape = _merge(node, lst.element_shape, requested)
    if shape is not None and len(shape) == 0:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): Concat requires elements to be at least vectors, found "
            "scalars instead.",
            node.name,
        )
    if not lst.elements:
        if shape is None or any(d < 0 for d in shape[1:]):
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): All except the first dimension must be fully defined "
                f"when concating an empty tensor list. element_shape: {_shape_str(shape)}",
                node.name,
            )
        return np.zeros((0, *shape[1:]), dtype=lst.element_dtype), np.zeros(0, dtype=np.int64)
    items = []
    for i, e in enumerate(lst.elements):
        if e is None:
            if shape is not None and shape[0] >= 0:
                first = shape[0]
            elif i < len(leading):
                first = leading[i]
            else:
                raise InvalidArgumentError(
                    f"Node '{node.name}' (op '{node.op}'): element {i} was never set, and neither the "
                    f"element shape {_shape_str(shape)} nor leading_dims ({len(leading)} values) gives its "
                    "first dimension",
                    node.name,
                )
            e = _zeros(node, lst, None if shape is None else (first, *shape[1:]), "concat")
        if e.ndim == 0:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): Concat saw a scalar shape at index 0 but requires at "
                "least vectors.",
                node.name,
            )
        items.append(e)
    tails = {e.shape[1:] for e in items}
    if len(tails) > 1:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): Tried to concat tensors with unequal shapes: "
            + " vs. ".join(_shape_str(t) for t in sorted(tails)),
            node.name,
        )
    lengths = np.asarray([e.shape[0] for e in items], dtype=np.int64)
    return np.concatenate(items, axis=0), lengths


@kernel("TensorListConcatV2", outputs=2)
def tensor_list_concat_v2(node: Node) -> Compute:
    dtype = _element_dtype(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        lst = _list(node, inputs[0])
        _check_dtype(node, lst, dtype)
        leading = [int(d) for d in np.asarray(inputs[2]).reshape(-1)]
        return _concat(node, lst, _shape_input(node, inputs[1]), leading)

    return compute


@kernel("TensorListConcat", outputs=2)
def tensor_list_concat(node: Node) -> Compute:
    dtype = _element_dtype(node)
    with _attrs_of(node):
        shape = node.attr_shape("element_shape", None)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        lst = _list(node, inputs[0])
        _check_dtype(node, lst, dtype)
        return _concat(node, lst, shape, [])

    return compute


# --- new lists from old ------------------------------------------------------------------------------------


@kernel("TensorListSetItem")
def tensor_list_set_item(node: Node) -> Compute:
    dtype = _element_dtype(node)
    with _attrs_of(node):
        resize = node.attr_bool("resize_if_index_out_of_bounds", False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        lst = _list(node, inputs[0])
        _check_dtype(node, lst, dtype)
        i = _index(node, inputs[1])
        item = as_item(inputs[2])
        _check_item(node, lst, item)
        elements = list(lst.elements)
        if resize and i >= len(elements):
            elements.extend([None] * (i + 1 - len(elements)))
        if not 0 <= i < len(elements):
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): Trying to modify element {i} in a list with "
                f"{len(lst.elements)} elements.",
                node.name,
            )
        elements[i] = item
        return (_wrap(lst.replace(elements)),)

    return compute


@kernel("TensorListPushBack")
def tensor_list_push_back(node: Node) -> Compute:
    dtype = _element_dtype(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        lst = _list(node, inputs[0])
        _check_dtype(node, lst, dtype)
        item = as_item(inputs[1])
        _check_item(node, lst, item)
        if lst.max_num_elements != -1 and len(lst.elements) >= lst.max_num_elements:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): Tried to push item into a full list list size: "
                f"{len(lst.elements)} max_num_elements: {lst.max_num_elements}",
                node.name,
            )
        return (_wrap(lst.replace([*lst.elements, item])),)

    return compute


@kernel("TensorListPopBack", outputs=2)
def tensor_list_pop_back(node: Node) -> Compute:
    dtype = _element_dtype(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        lst = _list(node, inputs[0])
        _check_dtype(node, lst, dtype)
        if not lst.elements:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): Trying to pop from an empty list.", node.name
            )
        item = lst.elements[-1]
        if item is None:
            item = _zeros(node, lst, _shape_input(node, inputs[1]), "popped element")
        return (_wrap(lst.replace(lst.elements[:-1])), item)

    return compute


@kernel("TensorListResize")
def tensor_list_resize(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        lst = _list(node, inputs[0])
        n = _index(node, inputs[1])
        if n < 0:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): TensorListSlice expects size to be non-negative. Got: "
                f"{n}",
                node.name,
            )
        elements = lst.elements[:n] + [None] * max(0, n - len(lst.elements))
        return (_wrap(lst.replace(elements)),)

    return compute


def _scatter(node: Node, lst: TensorList, tensor: Any, indices: list[int]) -> TensorList:
    if tensor.ndim < 1 or tensor.shape[0] != len(indices):
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): Invalid number of rows in input tensor. Expected: "
            f"{len(indices)} Actual: {tensor.shape[0] if tensor.ndim else 0}",
            node.name,
        )
    _check_dtype(node, lst, tensor.dtype)
    elements = list(lst.elements)
    for row, i in enumerate(indices):
        if i < 0:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): Indices in TensorListScatter must all be "
                "non-negative.",
                node.name,
            )
        item = tensor[row, ...]
        _check_item(node, lst, item)
        if i >= len(elements):
            elements.extend([None] * (i + 1 - len(elements)))
        elements[i] = item
    return lst.replace(elements)


@kernel("TensorListScatterV2", "TensorListScatter")
def tensor_list_scatter(node: Node) -> Compute:
    dtype = _element_dtype(node)
    v2 = node.op == "TensorListScatterV2"

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        tensor = np.asarray(inputs[0])
        indices = [int(i) for i in np.asarray(inputs[1]).reshape(-1)]
        shape = _shape_input(node, inputs[2])
        size = _index(node, inputs[3]) if v2 else -1
        if size == -1:
            size = max(indices, default=-1) + 1
        if max(indices, default=-1) >= size:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): TensorListScatter: Trying to scatter at index "
                f"{max(indices)} in list with size {size}",
                node.name,
            )
        lst = TensorList([None] * size, dtype, shape)
        return (_wrap(_scatter(node, lst, tensor, indices)),)

    return compute


@kernel("TensorListScatterIntoExistingList")
def tensor_list_scatter_into_existing_list(node: Node) -> Compute:
    dtype = _element_dtype(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        lst = _list(node, inputs[0])
        _check_dtype(node, lst, dtype)
        indices = [int(i) for i in np.asarray(inputs[2]).reshape(-1)]
        return (_wrap(_scatter(node, lst, np.asarray(inputs[1]), indices)),)

    return compute
