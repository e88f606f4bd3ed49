"""Buffer reuse: an elementwise node writes its output into an input that dies at it (a graph optimizer pass).

Decided once per plan: a node whose op is a numpy ufunc over its inputs (Relu, Relu6, Add, AddV2, Sub, Mul,
Maximum, Minimum and the simple unary math ops) may *donate* an input when the plan says that input dies
there: exactly one input of the whole plan reads it, it is neither fed, fetched, nor a constant (Const or
folded), and a kernel of this step makes it (not a stateful op such as a variable read, not an Identity
that passes another tensor through). Such a node gets ``PlanNode.donate`` (the slots the executor clears
before calling it, so that the step's value list no longer holds them) and a kernel that tries ``out=``.

At run time the kernel still checks, per call, that writing is safe, with the rule numpy uses to elide
temporaries: the array is writeable, C-contiguous, has the output's dtype and shape, and its reference
count shows that only the kernel's input list holds it; it owns its data, or it is a view of a whole buffer
(a reshaped matmul result) that only it holds. A view (Reshape, Identity, a slice) of a live tensor holds a
reference to its base, so neither the view nor its base passes; neither do fetched or fed values,
constants (read-only, held by the plan), nor outputs a trace still records. When the check
fails the node runs its ordinary kernel: the result is the same, only a buffer is allocated.

``ConfigProto.graph_options.rewrite_options.memory_optimization: NO_MEM_OPT`` (or
``disable_meta_optimizer``) switches it off, as it switches off TensorFlow's memory optimizer.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from poolserve.runtime.executor import Plan
from poolserve.runtime.kernels.math_ops import _SIMPLE_BINARY, _SIMPLE_UNARY
from poolserve.runtime.kernels.nn_ops import _relu, _relu6
from poolserve.runtime.kernels.registry import Compute, OpContext

# ops whose kernel is one ufunc call on same-typed operands (the kernels in math_ops and nn_ops), by the
# function that also takes ``out=``; ops that compute in another type (IsNan, comparisons) are not here
_BINARY: dict[str, Callable[..., Any]] = {
    op: fn for op, fn in _SIMPLE_BINARY.items() if op in ("Add", "AddV2", "Sub", "Mul", "Maximum", "Minimum")
}
# unary ops by (function, the dtype kinds it maps to themselves): numpy's Sqrt or Floor of an integer
# array is a float64 one, which ``out=`` of the input's type cannot hold
_FLOAT = frozenset("f")
_NUMBER = frozenset("fiu")
_UNARY: dict[str, tuple[Callable[..., Any], frozenset[str]]] = {
    **{
        op: (fn, _NUMBER if op in ("Neg", "Abs", "Square") else _FLOAT)
        for op, fn in _SIMPLE_UNARY.items()
        if op in ("Neg", "Abs", "Exp", "Expm1", "Log", "Log1p", "Sqrt", "Square", "Tanh", "Floor", "Ceil")
    },
    "Relu": (_relu, _NUMBER),
    "Relu6": (_relu6, _NUMBER),
}
# producers whose output may be another tensor (or a view of one) under a new name: never donated, even
# though the reference count would catch them
_ALIASING = frozenset(
    ("Identity", "IdentityN", "StopGradient", "Snapshot", "Reshape", "Squeeze", "ExpandDims", "Bitcast")
)


def _count_held_by_list(inputs: list[Any], k: int) -> int:
    a = inputs[k]
    return sys.getrefcount(a)


# The reference count of an array that only a list holds, read as the kernels read it (the list, the local
# name and getrefcount's argument): anything above means something else holds the array.
_SOLE = _count_held_by_list([np.empty(1)], 0)


def _base_refs(a: Any) -> int:
    base = a.base
    return sys.getrefcount(base)


# The reference count of an array that only a view of it holds (read as ``_base_refs`` reads it). Kernels
# often return such views: a reshaped matmul result from a fused convolution, an Einsum's output.
_VIEW_SOLE = _base_refs(np.empty(4).reshape(2, 2))


# Below this many bytes a fresh output costs less than the checks that make reuse safe: numpy allocates
# small arrays from its own cache. 200 elementwise nodes in a chain (chainL.bN of the pool benchmark), one
# caller, reuse on / off in turns, median of 8 rounds: [1, 256] 525 / 421 us, [4, 256] 698 / 620, [8, 256]
# 592 / 528, [16, 256] 756 / 817, [32, 256] 817 / 972, [64, 256] 1071 / 1309.
REUSE_MIN_BYTES = 16 * 1024


def _writable(a: Any, dtype: Any, kinds: frozenset[str]) -> bool:
    """Whether the ndarray ``a`` (of at least ``REUSE_MIN_BYTES``, which the callers check first) may be
    written into, as the module docstring says."""
    # a 0-d result is a numpy scalar from the ordinary kernel: nothing to save there, and it stays one
    if a.dtype != dtype or a.dtype.kind not in kinds or not a.ndim:
        return False
    flags = a.flags
    if not (flags.writeable and flags.c_contiguous):
        return False
    if flags.owndata:
        return True
    # a view of a whole buffer that nothing else holds (every other view of it would hold the base too)
    base = a.base
    if type(base) is not np.ndarray or base.nbytes != a.nbytes or not base.flags.owndata:
        return False
    del base  # this name must not count as a holder
    return _base_refs(a) <= _VIEW_SOLE


def _unary(fn: Callable[..., Any], kinds: frozenset[str], fallback: Compute) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> Sequence[Any]:
        a = inputs[0]
        if (
            type(a) is np.ndarray
            and a.nbytes >= REUSE_MIN_BYTES
            and sys.getrefcount(a) <= _SOLE
            and _writable(a, a.dtype, kinds)
        ):
            return (fn(a, out=a),)
        return fallback(ctx, inputs)

    return compute


def _binary(fn: Callable[..., Any], ports: tuple[int, ...], fallback: Compute) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> Sequence[Any]:
        x, y = inputs
        dtype = getattr(x, "dtype", None)
        if dtype is not None and getattr(y, "dtype", None) == dtype:
            for k in ports:
                a = inputs[k]
                # the operand names hold it too: the sole holder's count plus x's or y's name
                if (
                    type(a) is np.ndarray
                    and a.nbytes >= REUSE_MIN_BYTES
                    and sys.getrefcount(a) <= _SOLE + 1
                    and _writable(a, dtype, _NUMBER)
                ):
                    try:
                        return (fn(x, y, out=a),)
                    except ValueError:
                        # numpy refuses an ``out`` smaller than the broadcast result before it writes
                        # anything (cheaper than checking the shapes first, 2-3 us a call); the other
                        # operand may be the bigger one, or the shapes do not broadcast and the ordinary
                        # kernel names them
                        continue
        return fallback(ctx, inputs)

    return compute


def donate_buffers(plan: Plan) -> int:
    """Marks the plan's elementwise nodes that may write into a dying input (see the module docstring);
    returns how many. Plans with v1 control flow are left alone: their frames keep tensors per iteration."""
    if plan.frames is not None:
        return 0
    reads = [0] * len(plan.template)
    for pn in plan.nodes:
        for s in pn.in_slots:
            reads[s] += 1
    never = set(plan.fetch_slots)
    producer: dict[int, str] = {}
    stateful: set[int] = set()
    for pn in plan.nodes:
        kdef = plan.graph.kernel_defs.get(pn.name)
        for port in range(pn.num_outputs):
            producer[pn.out_base + port] = pn.op
            if kdef is None or kdef.stateful:
                stateful.add(pn.out_base + port)
    marked = 0
    for pn in plan.nodes:
        unary = _UNARY.get(pn.op)
        binary = _BINARY.get(pn.op)
        if (unary is None and binary is None) or pn.measure:  # a timed kernel keeps the timed path
            continue
        ports = tuple(
            k
            for k, s in enumerate(pn.in_slots)
            if reads[s] == 1
            and s >= len(plan.feeds)
            and plan.template[s] is None
            and s not in never
            and s not in stateful
            and producer.get(s) not in _ALIASING
        )
        if not ports:
            continue
        if unary is not None and len(pn.in_slots) == 1:
            pn.compute = _unary(unary[0], unary[1], pn.compute)
        elif binary is not None and len(pn.in_slots) == 2:
            pn.compute = _binary(binary, ports, pn.compute)
        else:
            continue
        pn.donate = tuple(pn.in_slots[k] for k in ports)
        marked += 1
    return marked
