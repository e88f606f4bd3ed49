"""Moving spatial blocks to and from the batch or the depth: SpaceToBatchND, BatchToSpaceND (and their 4-D
v1 forms SpaceToBatch, BatchToSpace), SpaceToDepth and DepthToSpace.

TensorFlow lowers a dilated convolution to SpaceToBatchND -> convolution -> BatchToSpaceND
(``tf.nn.convolution`` with ``dilation_rate`` > 1: Keras' dilated Conv1D and Conv2D, atrous models);
super-resolution and detection heads use the depth moves. Each is a pad or crop and one transpose of a
reshaped view, as TensorFlow defines them (array_ops.cc's shape functions and the kernels'
``OP_REQUIRES``), with TensorFlow's errors.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _bad_attr, _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node


def _block_args(x: Any, block_t: Any, pads_t: Any, what: str) -> tuple[list[int], list[list[int]]]:
    """``block_shape`` (1-D, M values) and ``paddings``/``crops`` ([M, 2]) checked against ``x``."""
    if block_t.ndim != 1:
        raise InvalidArgumentError(f"block_shape must be 1-D, got shape {_shape_str(block_t.shape)}")
    m = block_t.shape[0]
    if pads_t.shape != (m, 2):
        raise InvalidArgumentError(f"{what} should have shape [{m}, 2] instead of {_shape_str(pads_t.shape)}")
    if x.ndim < 1 + m:
        raise InvalidArgumentError(f"input rank should be >= {1 + m} instead of {x.ndim}")
    block = [int(b) for b in block_t.tolist()]
    pads = [[int(a), int(b)] for a, b in pads_t.tolist()]
    for i, b in enumerate(block):
        if b < 1:
            raise InvalidArgumentError(
                f"All values in block_shape must be positive, got value, {b} at index {i}."
            )
    for a, b in pads:
        if a < 0 or b < 0:
            raise InvalidArgumentError(f"All values in {what} must be non-negative, got [{a}, {b}]")
    return block, pads


def _space_to_batch(x: Any, block: list[int], pads: list[list[int]]) -> Any:
    m = len(block)
    if any(a or b for a, b in pads):
        x = np.pad(x, [(0, 0), *pads, *[(0, 0)] * (x.ndim - 1 - m)])
    batch, spatial, rest = x.shape[0], x.shape[1 : 1 + m], x.shape[1 + m :]
    for i, (dim, b) in enumerate(zip(spatial, block, strict=True)):
        if dim % b:
            raise InvalidArgumentError(f"padded_shape[{i}]={dim} is not divisible by block_shape[{i}]={b}")
    split: list[int] = [batch]
    for dim, b in zip(spatial, block, strict=True):
        split += [dim // b, b]
    # [batch, s0/b0, b0, s1/b1, b1, ..., rest] -> [b0, b1, ..., batch, s0/b0, s1/b1, ..., rest]
    order = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)]
    order += list(range(1 + 2 * m, 1 + 2 * m + len(rest)))
    y = x.reshape(*split, *rest).transpose(order)
    return y.reshape(
        batch * int(np.prod(block)), *(d // b for d, b in zip(spatial, block, strict=True)), *rest
    )


def _batch_to_space(x: Any, block: list[int], crops: list[list[int]]) -> Any:
    m = len(block)
    size = int(np.prod(block))
    batch = x.shape[0]
    if batch % size:
        raise InvalidArgumentError(
            f"Input batch dimension ({batch}) is not divisible by product of block sizes ({size})"
        )
    spatial, rest = x.shape[1 : 1 + m], x.shape[1 + m :]
    for i, ((a, b), dim, k) in enumerate(zip(crops, spatial, block, strict=True)):
        if dim * k - a - b < 0:
            raise InvalidArgumentError(f"cropped_shape[{i}]={dim * k - a - b} must be non-negative")
    # [b0, b1, ..., batch', s0, s1, ..., rest] -> [batch', s0, b0, s1, b1, ..., rest]
    y = x.reshape(*block, batch // size, *spatial, *rest)
    order = [m]
    for i in range(m):
        order += [m + 1 + i, i]
    order += list(range(1 + 2 * m, 1 + 2 * m + len(rest)))
    y = y.transpose(order).reshape(
        batch // size, *(d * k for d, k in zip(spatial, block, strict=True)), *rest
    )
    if any(a or b for a, b in crops):
        y = y[(slice(None), *(slice(a, y.shape[1 + i] - b) for i, (a, b) in enumerate(crops)))]
    return y


@kernel("SpaceToBatchND", expensive=True)
def space_to_batch_nd(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, block_t, pads_t = inputs
        block, pads = _block_args(x, block_t, pads_t, "paddings")
        return (_space_to_batch(x, block, pads),)

    return compute


@kernel("BatchToSpaceND", expensive=True)
def batch_to_space_nd(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        x, block_t, crops_t = inputs
        block, crops = _block_args(x, block_t, crops_t, "crops")
        return (_batch_to_space(x, block, crops),)

    return compute


def _v1_block(node: Node) -> int:
    size = node.attr_int("block_size")
    if size < 2:
        raise _bad_attr(node, "block_size", f"must be greater than 1, got {size}")
    return size


def _v1(move: Any, what: str) -> Any:
    """SpaceToBatch / BatchToSpace: the ND ops on a 4-D input, one block size for both dimensions."""

    def factory(node: Node) -> Compute:
        size = _v1_block(node)
        block_t = np.array([size, size])

        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            x, pads_t = inputs
            if x.ndim != 4:
                raise InvalidArgumentError(f"input must be 4-dimensional, got shape {_shape_str(x.shape)}")
            block, pads = _block_args(x, block_t, pads_t, what)
            return (move(x, block, pads),)

        return compute

    return factory


kernel("SpaceToBatch", expensive=True)(_v1(_space_to_batch, "paddings"))
kernel("BatchToSpace", expensive=True)(_v1(_batch_to_space, "crops"))


def _depth_attrs(node: Node) -> int:
    size = _v1_block(node)
    layout = node.attr_str("data_format", "NHWC")
    if layout != "NHWC":
        raise _bad_attr(node, "data_format", f"{layout} is not supported on CPU: only NHWC")
    return size


@kernel("SpaceToDepth", expensive=True)
def space_to_depth(node: Node) -> Compute:
    size = _depth_attrs(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        if x.ndim != 4:
            raise InvalidArgumentError(f"Input rank should be: 4 instead of: {x.ndim}")
        n, h, w, c = x.shape
        if h % size or w % size:
            raise InvalidArgumentError(
                f"Image width {w} and height {h} should be divisible by block_size: {size}"
            )
        y = x.reshape(n, h // size, size, w // size, size, c).transpose(0, 1, 3, 2, 4, 5)
        return (y.reshape(n, h // size, w // size, size * size * c),)

    return compute


@kernel("DepthToSpace", expensive=True)
def depth_to_space(node: Node) -> Compute:
    size = _depth_attrs(node)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        if x.ndim != 4:
            raise InvalidArgumentError(f"Input rank should be: 4 instead of: {x.ndim}")
        n, h, w, c = x.shape
        if c % (size * size):
            raise InvalidArgumentError(f"Input depth dimension {c} should be divisible by: {size * size}")
        y = x.reshape(n, h, w, size, size, c // (size * size)).transpose(0, 1, 3, 2, 4, 5)
        return (y.reshape(n, h * size, w * size, c // (size * size)),)

    return compute
