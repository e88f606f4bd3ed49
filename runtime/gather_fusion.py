"""An embedding lookup's negative-index wrap joins its ``GatherV2`` (a graph optimizer pass).

Keras 3 writes every ``Embedding`` and ``ops.take`` as ``GatherV2(params, SelectV2(Less(i, 0), AddV2(i, n),
i), axis)``, with ``n`` the size of the gathered axis: negative indices count from the end, as in numpy.
Three of the four nodes are elementwise kernels on a handful of integers, each costing the executor and
numpy some microseconds; a recommendation model looks up one table per categorical column (the wide & deep
fixture has eight, so 24 of its 49 executed nodes).

The rewrite keeps the ``GatherV2`` under its own name, reading ``i`` itself, with the private attr
``_wrap_negative_indices = n`` (TensorFlow ignores attrs whose name starts with ``_``). Its kernel then
accepts indices in ``[-n, n)`` and lets numpy's ``take`` wrap them, which is what the three nodes computed;
an index outside that range raises the error TensorFlow's ``GatherV2`` would have raised for the wrapped
value, and a gathered axis of another size than ``n`` (a fed table) wraps by ``n`` first, as the graph did.

The match is strict: both constants are scalars of the indices' integer type, the zero is zero and ``n`` is
positive, the three nodes read the same tensor in TensorFlow's operand order (``AddV2`` either way round),
and each is private to the pattern (not fetched, fed, a target or a control input, read only by the next).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from poolserve.proto import node_def_pb2
from poolserve.runtime.kernels.gather_ops import WRAP_ATTR
from poolserve.runtime.node import Node, input_name
from poolserve.runtime.types import TensorId

if TYPE_CHECKING:
    from poolserve.runtime.optimizer import _Rewriter


def fuse_index_wraps(rw: _Rewriter) -> None:
    for pn in rw.plan.nodes:
        if pn.op == "GatherV2" and pn.name not in rw.absorbed and pn.name not in rw.emitted:
            _fuse(rw, rw.nodes[pn.name])


def _fuse(rw: _Rewriter, gather: Node) -> None:
    if len(gather.inputs) != 3 or gather.control_inputs or WRAP_ATTR in gather.attrs:
        return
    select = _private(rw, gather.inputs[1], "SelectV2", gather.name)
    if select is None or len(select.inputs) != 3:
        return
    cond, added, i = select.inputs
    less = _private(rw, cond, "Less", select.name)
    add = _private(rw, added, "AddV2", select.name)
    if less is None or add is None or len(less.inputs) != 2 or len(add.inputs) != 2:
        return
    if less.inputs[0] != i or i not in add.inputs or add.inputs[0] == add.inputs[1]:
        return
    zero = _int_scalar(rw, less.inputs[1])
    n = _int_scalar(rw, add.inputs[1] if add.inputs[0] == i else add.inputs[0])
    if zero is None or n is None or int(zero) != 0 or int(n) <= 0 or zero.dtype != n.dtype:
        return
    if any(node.control_inputs for node in (select, less, add)):
        return
    nd = node_def_pb2.NodeDef()
    nd.CopyFrom(gather.node_def)
    del nd.input[:]
    nd.attr[WRAP_ATTR].i = int(n)
    rw.replace_chain(
        nd,
        [input_name(gather.inputs[0]), input_name(i), input_name(gather.inputs[2])],
        [less.name, add.name, select.name, gather.name],
    )
    rw.uses[i].append(gather.name)


def _private(rw: _Rewriter, t: TensorId, op: str, reader: str) -> Node | None:
    """The node of op ``op`` behind ``t`` when only ``reader`` reads it and it may go."""
    node = rw.producer(t, op)
    return node if node is not None and rw.sole_consumer(node.name) == reader else None


def _int_scalar(rw: _Rewriter, t: TensorId) -> Any:
    value = rw.const(t)
    if not isinstance(value, np.ndarray) or value.ndim != 0 or value.dtype.kind != "i":
        return None
    return value
