"""Sources, identities and array manipulation: shapes, slicing, gathering, padding, concatenation."""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime import dtypes
from runtime.errors import InvalidArgumentError
from runtime.kernels.registry import Compute, OpContext, kernel
from runtime.node import Node


def _shape_str(shape: tuple[int, ...] | None) -> str:
    if shape is None:
        return "<unknown>"
    return "[" + ",".join("?" if d < 0 else str(d) for d in shape) + "]"


@kernel("Const")
def const(node: Node) -> Compute:
    value = node.attr_tensor("value")
    expected = node.attr_dtype("dtype")
    if value.dtype != expected:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op 'Const'): value has dtype {value.dtype}, attr dtype is {expected}",
            node.name,
        )
    value.flags.writeable = False
    outputs = (value,)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return outputs

    return compute


@kernel("Placeholder")
def placeholder(node: Node) -> Compute:
    dtype = node.attr_type("dtype")
    shape = node.attr_shape("shape", None)
    message = (
        f"You must feed a value for placeholder tensor '{node.name}' with dtype {dtypes.name(dtype)}"
        + (f" and shape {_shape_str(shape)}" if shape is not None else "")
    )

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        raise InvalidArgumentError(message, node.name)

    return compute


@kernel("PlaceholderWithDefault", "Identity", "StopGradient", "Snapshot", "PreventGradient")
def identity(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        return inputs

    return compute


@kernel("IdentityN", outputs=lambda node: len(node.attr_types("T")))
def identity_n(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        return inputs

    return compute


@kernel("NoOp", outputs=0)
def no_op(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return ()

    return compute
