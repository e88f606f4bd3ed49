"""Neural-network ops: matrix products, convolutions, pooling, normalization, activations."""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.kernels.registry import Compute, OpContext, kernel
from runtime.node import Node


@kernel("MatMul", expensive=True)
def matmul(node: Node) -> Compute:
    ta = node.attr_bool("transpose_a", False)
    tb = node.attr_bool("transpose_b", False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        a, b = inputs
        return (np.matmul(a.T if ta else a, b.T if tb else b),)

    return compute
