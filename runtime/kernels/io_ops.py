"""Checkpoint reading: ``RestoreV2``, which a SavedModel's restore op runs to give variables their values.

Reads tensors from a tensor bundle (``runtime.tensor_bundle``): whole, or the slice a ``shape_and_slices``
entry names (each part of a TF1 partitioned variable restores its slice of the saved tensor).
"""

from __future__ import annotations

from typing import Any

from poolserve.runtime import dtypes
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node
from poolserve.runtime.tensor_bundle import BundleReader, parse_slice_spec


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


@kernel(
    "RestoreV2",
    stateful=True,
    expensive=True,
    blocking=True,  # reads files
    outputs=lambda node: len(node.attr_types("dtypes")),
)
def restore_v2(node: Node) -> Compute:
    want = node.attr_types("dtypes")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        prefix, names, slices = inputs
        names, slices = list(names.reshape(-1)), list(slices.reshape(-1))
        if len(names) != len(want) or len(slices) != len(want):
            raise InvalidArgumentError(
                f"RestoreV2 got {len(names)} tensor names and {len(slices)} slice specs for {len(want)} "
                "dtypes",
                node.name,
            )
        reader = BundleReader(_text(prefix.reshape(()).item()))
        out = []
        for name, spec, dtype in zip(names, slices, want, strict=True):
            name = _text(name)
            full, region = parse_slice_spec(_text(spec))
            entry = reader.entry(name)
            stored = entry.dtype
            if region is not None and tuple(d.size for d in entry.shape.dim) != full:
                raise InvalidArgumentError(
                    f"tensor '{name}' in {reader.prefix} has shape {[d.size for d in entry.shape.dim]}, "
                    f"the slice spec '{_text(spec)}' says {list(full)}",
                    node.name,
                )
            if stored != dtype:
                raise InvalidArgumentError(
                    f"tensor '{name}' in {reader.prefix} is {dtypes.name(stored)}, but {node.name} expects "
                    f"{dtypes.name(dtype)}",
                    node.name,
                )
            out.append(reader.read(name, region))
        return tuple(out)

    return compute
