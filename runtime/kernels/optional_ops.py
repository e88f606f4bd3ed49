"""Optional ops: ``OptionalFromValue``, ``OptionalNone``, ``OptionalHasValue``, ``OptionalGetValue``.

An optional is TensorFlow's DT_VARIANT holding a tuple of tensors or nothing (``tf.experimental.Optional``).
Graphs meet them mostly through control flow v2 in a TF1 graph (``tf.compat.v1`` with
``enable_control_flow_v2``, e.g. ``tf.compat.v1.layers.batch_normalization(training=...)``): cond_v2 makes
each If branch also return the intermediates a gradient of the other branch could need, wrapped as
optionals, ``OptionalFromValue`` in the branch that computes them and ``OptionalNone`` in the other, so
that both branches have the same outputs. A served graph only passes them along.

An optional travels as a TensorList does (``list_ops.py``): a read-only 0-d object array holding one
``Optional``, so Identity, Switch, Merge, function args and loop variables carry it unchanged. Errors quote
TensorFlow's messages.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.runtime import dtypes
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _shape_str, _type_name
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node


class Optional:
    """One optional value: its components, or None when it has no value."""

    __slots__ = ("components",)

    def __init__(self, components: tuple[Any, ...] | None) -> None:
        self.components = components

    def __repr__(self) -> str:
        if self.components is None:
            return "Optional(none)"
        return f"Optional({', '.join(f'{np.asarray(c).dtype}{list(np.shape(c))}' for c in self.components)})"


def _wrap(value: Optional) -> Any:
    out = np.empty((), dtype=object)
    out[()] = value
    out.flags.writeable = False
    return out


def _constant(value: Any) -> Any:
    out = np.asarray(value)
    out.flags.writeable = False
    return out


_NONE = _wrap(Optional(None))
_TRUE, _FALSE = _constant(True), _constant(False)


def _optional(node: Node, value: Any) -> Optional:
    v = value.item() if isinstance(value, np.ndarray) and value.shape == () else value
    if not isinstance(v, Optional):
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): input is not an optional (a variant of "
            f"OptionalFromValue or OptionalNone). Saw: '{v!r}'",
            node.name,
        )
    return v


@kernel("OptionalFromValue")
def optional_from_value(node: Node) -> Compute:
    count = len(node.attr_types("Toutput_types"))
    if len(node.inputs) != count:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): {len(node.inputs)} components, but attr "
            f"'Toutput_types' lists {count} types",
            node.name,
        )

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_wrap(Optional(tuple(inputs))),)

    return compute


@kernel("OptionalNone")
def optional_none(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_NONE,)  # immutable: every step shares it

    return compute


@kernel("OptionalHasValue")
def optional_has_value(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_FALSE if _optional(node, inputs[0]).components is None else _TRUE,)

    return compute


@kernel("OptionalGetValue", outputs=lambda node: len(node.attr_types("output_types")))
def optional_get_value(node: Node) -> Compute:
    want = [dtypes.as_numpy_dtype(t) for t in node.attr_types("output_types")]
    shapes: list[tuple[int, ...] | None] = node.attr("output_shapes")
    if not isinstance(shapes, list) or len(shapes) != len(want):
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): attr 'output_shapes' must list one shape for each of the "
            f"{len(want)} 'output_types'",
            node.name,
        )
    # per component: the dims to check (index, size), or None for an unknown rank
    checks = [None if s is None else (len(s), [(i, d) for i, d in enumerate(s) if d >= 0]) for s in shapes]

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        components = _optional(node, inputs[0]).components
        if components is None:
            raise InvalidArgumentError("The given optional does not have a value.", node.name)
        if len(components) != len(want):
            raise InvalidArgumentError(
                f"The given optional has {len(components)} components, expected {len(want)}", node.name
            )
        for i, (value, dtype, check) in enumerate(zip(components, want, checks, strict=True)):
            if value.dtype != dtype:
                raise InvalidArgumentError(
                    f"The given optional does not match the expected type for component {i}. Expected: "
                    f"{_type_name(dtype)}. Actual: {_type_name(value.dtype)}.",
                    node.name,
                )
            if check is not None:
                rank, dims = check
                if value.ndim != rank or any(value.shape[j] != d for j, d in dims):
                    raise InvalidArgumentError(
                        f"The given optional does not match the expected shape for component {i}. Expected: "
                        f"{_shape_str(shapes[i])}. Actual: {_shape_str(value.shape)}.",
                        node.name,
                    )
        return components

    return compute
