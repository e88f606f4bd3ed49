"""Element-wise math, comparisons, casts and reductions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from runtime.kernels.registry import Compute, OpContext, kernel
from runtime.node import Node


def _binary(fn: Callable[[Any, Any], Any]) -> Callable[[Node], Compute]:
    def factory(node: Node) -> Compute:
        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            return (fn(inputs[0], inputs[1]),)

        return compute

    return factory


kernel("Add", "AddV2")(_binary(np.add))
