"""The kernel table: one entry per op type, filled by the ``@kernel`` decorator.

A kernel is a *factory* ``(node) -> compute``: it reads and checks the node's attrs once, when a graph is
loaded, and returns ``compute(ctx, inputs) -> outputs`` (a tuple or list, one array per output port).
The executor dispatches through this table only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from poolserve.runtime.errors import NotFoundError
from poolserve.runtime.node import Node

Compute = Callable[["OpContext", list[Any]], Sequence[Any]]
Factory = Callable[[Node], Compute]


def _never() -> bool:
    return False


class OpContext:
    """What a running kernel may see of its step: the session's resources, the step id, and whether the
    step was cancelled (a deadline, a closed session): ``cancelled()`` lets a kernel that loops (While)
    stop between iterations. The session sets it on the steps it starts; other steps are never cancelled."""

    __slots__ = ("cancelled", "memory", "resources", "step_id", "trace")

    def __init__(self, resources: ResourceContainer | None = None, step_id: int = 0) -> None:
        self.resources = resources if resources is not None else ResourceContainer()
        self.step_id = step_id
        self.cancelled: Callable[[], bool] = _never
        # the traced step's StepTrace (None when not traced): kernels that run functions trace their nodes
        self.trace: Any = None
        # the step's StepMemory when it counts live bytes (None otherwise): function bodies count in it
        self.memory: Any = None


class ResourceContainer:
    """Per-session state of stateful ops (variables), keyed by (container, shared_name)."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], Any] = {}


@dataclass(frozen=True, slots=True)
class KernelDef:
    op: str
    factory: Factory
    expensive: bool
    stateful: bool
    num_outputs: int | Callable[[Node], int]
    blocking: bool = False

    def outputs(self, node: Node) -> int:
        n = self.num_outputs
        return n if isinstance(n, int) else n(node)


KERNELS: dict[str, KernelDef] = {}


def kernel(
    *ops: str,
    expensive: bool = False,
    stateful: bool = False,
    outputs: int | Callable[[Node], int] = 1,
    blocking: bool = False,
) -> Callable[[Factory], Factory]:
    """Registers a factory for one or more op types.

    ``expensive`` kernels are dispatched to the inter-op pool; cheap ones run inline. ``stateful`` kernels
    are never constant-folded. ``outputs`` is the number of output ports, or a function of the node.
    ``blocking`` kernels may wait without computing (files, sleeps): their CPU time says nothing of how
    long they hold a thread, so their plans never run on a caller's thread or an event loop on the strength
    of a small measured CPU cost (``Plan.learn_cpu``).
    """

    def register(factory: Factory) -> Factory:
        for op in ops:
            if op in KERNELS:
                raise ValueError(f"kernel for op '{op}' registered twice")
            KERNELS[op] = KernelDef(op, factory, expensive, stateful, outputs, blocking)
        return factory

    return register


# Ops TensorFlow itself runs only through XLA (no CPU kernel): why, for the error that refuses them
_XLA_ONLY = {
    "XlaCallModule": "it holds a StableHLO module (jax2tf's native serialization) that only XLA compiles; "
    "export with jax2tf.convert(..., native_serialization=False) for TensorFlow ops",
    "TPUPartitionedCall": "it runs a function on TPU cores; save the model outside a TPUStrategy to serve "
    "it on CPU",
}


def _why_missing(op: str) -> str:
    if op in _XLA_ONLY:
        return f": {_XLA_ONLY[op]}"
    if op.startswith("Xla"):
        return (
            ": it is an XLA operation (tf2xla, jax2tf) that TensorFlow runs only inside XLA-compiled "
            "functions, with no CPU kernel"
        )
    return ""


def lookup(node: Node) -> KernelDef:
    kdef = KERNELS.get(node.op)
    if kdef is None:
        raise NotFoundError(
            f"Op type not registered '{node.op}' (node '{node.name}'): poolserve has no kernel for it"
            + _why_missing(node.op),
            node.name,
        )
    return kdef
