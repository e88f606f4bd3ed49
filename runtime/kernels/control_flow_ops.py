"""TensorFlow's v1 control-flow ops: Switch, _SwitchN, Merge, Enter, Exit, NextIteration, LoopCond (and the
Ref forms).

These ops move tensors between branches, frames and iterations rather than compute anything, so the work is
the executor's (``runtime/frames.py``): a plan holding one of them runs with frames, iterations and dead
tensors, and routes their outputs itself. The kernels here check the attrs once, when the graph is loaded,
and compute what the op does to its live inputs; all are stateful so that constant folding never runs
them outside a frame.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

SWITCH_OPS = frozenset({"Switch", "RefSwitch"})
SWITCH_N_OPS = frozenset({"_SwitchN"})
MERGE_OPS = frozenset({"Merge", "RefMerge"})
ENTER_OPS = frozenset({"Enter", "RefEnter"})
EXIT_OPS = frozenset({"Exit", "RefExit"})
NEXT_ITERATION_OPS = frozenset({"NextIteration", "RefNextIteration"})
# ops whose presence makes a plan run with frames
CONTROL_FLOW_OPS = (
    SWITCH_OPS | SWITCH_N_OPS | MERGE_OPS | ENTER_OPS | EXIT_OPS | NEXT_ITERATION_OPS | {"LoopCond"}
)


def _forward(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        return [inputs[0]]

    return compute


@kernel("Switch", "RefSwitch", stateful=True, outputs=2)
def switch(node: Node) -> Compute:
    """Outputs ``data`` on port 1 when ``pred`` is true, on port 0 when false; the other port is dead (the
    executor marks it so)."""
    if len(node.inputs) != 2:
        raise InvalidArgumentError(f"Switch '{node.name}' takes (data, pred), not {len(node.inputs)} inputs")

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        return [inputs[0], inputs[0]]

    return compute


@kernel("_SwitchN", stateful=True, outputs=lambda node: node.attr_int("num_outs"))
def switch_n(node: Node) -> Compute:
    """``tf.switch_case`` lowered to v1 control flow (what TensorFlow's lowering pass and
    ``convert_variables_to_constants_v2`` write for ``Case``): inputs (data, output_index), ``data`` on port
    ``output_index``, the other ports dead (the executor routes it so); an index out of range takes the last
    port, the default branch, as in TensorFlow."""
    if len(node.inputs) != 2:
        raise InvalidArgumentError(
            f"_SwitchN '{node.name}' takes (data, output_index), not {len(node.inputs)} inputs"
        )
    num_outs = node.attr_int("num_outs")
    if num_outs < 1:
        raise InvalidArgumentError(f"_SwitchN '{node.name}': num_outs must be at least 1, got {num_outs}")

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        return [inputs[0]] * num_outs

    return compute


@kernel("Merge", "RefMerge", stateful=True, outputs=2)
def merge(node: Node) -> Compute:
    """(the first live input, its index as int32): the executor passes only that input."""
    if not node.inputs:
        raise InvalidArgumentError(f"Merge '{node.name}' has no data inputs")

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        return [inputs[0], np.int32(0)]

    return compute


@kernel("Enter", "RefEnter", stateful=True)
def enter(node: Node) -> Compute:
    if not node.attr_str("frame_name", ""):
        raise InvalidArgumentError(f"Enter '{node.name}' has no frame_name")
    if node.attr_int("parallel_iterations", 10) < 1:
        raise InvalidArgumentError(f"Enter '{node.name}': parallel_iterations must be at least 1")
    return _forward(node)


kernel("Exit", "RefExit", stateful=True)(_forward)
kernel("NextIteration", "RefNextIteration", stateful=True)(_forward)
kernel("LoopCond", stateful=True)(_forward)


@kernel("ControlTrigger", outputs=0)
def control_trigger(node: Node) -> Compute:
    """A NoOp that runs even when its inputs are dead (TF's loops use it to order gradient work)."""

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        return []

    return compute
