"""A Tensordot over the last axis becomes one ``BatchMatMulV2`` (a graph optimizer pass).

Keras's Dense on an input of rank 3 or more freezes into TensorFlow's Tensordot: an identity ``Transpose``,
a ``Reshape`` to rows whose shape is computed from the input's (``Shape``, two ``GatherV2``, two ``Prod``,
``Pack``), the ``MatMul``, and a ``Reshape`` back whose shape is computed again (``ConcatV2`` of the gathered
leading dimensions and the output width). Twelve nodes do one matrix product; the ten around it are tiny
kernels on shape vectors, each costing the executor and numpy some microseconds (BERT-tiny has four such
layers). ``BatchMatMulV2(x, W)`` computes exactly the same: it multiplies the last axis of ``x`` by ``W``,
keeps the leading dimensions, and refuses an ``x`` whose last dimension is not ``W``'s first, where the
MatMul would.

The pattern is matched by structure, strictly: the Transpose's permutation must be the identity (it fixes
the input's rank r), the row shape must be ``[prod(shape[:r-1]), shape[r-1]]`` as the Pack chain computes it
from the same input, the shape back must be ``shape[:r-1] + [N]`` with N the filter's width, and the
MatMul, the Reshapes and the Transpose must be private to the pattern (not fetched, fed, targets, control
inputs, or read elsewhere). The new node takes the name of the Reshape back, so its readers, fetches and
traces keep their names; the shape nodes, unread, leave the plan. A MatMul the other passes fused (a bias
and an activation after the Reshape) is left to them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from poolserve.proto import node_def_pb2
from poolserve.runtime.builder import attr_value
from poolserve.runtime.node import Node, input_name
from poolserve.runtime.types import TensorId

if TYPE_CHECKING:
    from poolserve.runtime.optimizer import _Rewriter


def fuse_tensordots(rw: _Rewriter) -> None:
    for pn in rw.plan.nodes:
        if pn.op != "MatMul" or pn.name in rw.absorbed:
            continue
        if pn.name not in rw.emitted or rw.nodes[pn.name].op == "_FusedMatMul":
            _fuse(rw, rw.nodes[pn.name])


def _fuse(rw: _Rewriter, mm: Node) -> None:
    fused = mm.op == "_FusedMatMul"
    if (
        mm.control_inputs
        or mm.attr_bool("transpose_a", False)
        or mm.attr_bool("transpose_b", False)
        or len(mm.inputs) != (3 if fused else 2)
    ):
        return
    w = rw.const(mm.inputs[1])
    if not isinstance(w, np.ndarray) or w.ndim != 2:
        return
    rows = rw.producer(mm.inputs[0], "Reshape")
    # a fused MatMul (bias and activation) had its Reshape back moved after it, both emitted
    # (``fuse_through_reshape``)
    if rows is None or rw.sole_consumer(rows.name, emitted=fused) != mm.name:
        return
    back_name = rw.sole_consumer(mm.name, emitted=fused)
    back = rw.nodes[back_name] if back_name is not None else None
    if back is None or back.op != "Reshape" or back.inputs[0] != (mm.name, 0) or (back.name, 0) in rw.fed:
        return
    transpose = rw.producer(rows.inputs[0], "Transpose")
    if transpose is None or len(transpose.inputs) != 2 or rw.sole_consumer(transpose.name) != rows.name:
        return
    x = transpose.inputs[0]
    perm = rw.const(transpose.inputs[1])
    if not _ints(perm) or perm.ndim != 1 or perm.size < 2 or perm.tolist() != list(range(perm.size)):
        return
    rank = perm.size
    if not _rows_shape(rw, rows.inputs[1], x, rank):
        return
    if not _back_shape(rw, back.inputs[1], x, rank, w.shape[1]):
        return
    if any(n.control_inputs for n in (rows, back, transpose)) or rows.inputs[0] != (transpose.name, 0):
        return
    nd = node_def_pb2.NodeDef(name=back.name, op="BatchMatMulV2", device=mm.device)
    nd.attr["T"].CopyFrom(attr_value(w.dtype))
    nd.attr["adj_x"].b = False
    nd.attr["adj_y"].b = False
    inputs = [input_name(x), input_name(mm.inputs[1])]
    if fused:
        nd.op = "_FusedBatchMatMulV2"
        for key in ("fused_ops", "num_args", "epsilon", "leakyrelu_alpha"):
            if key in mm.attrs:
                nd.attr[key].CopyFrom(mm.attrs[key])
        inputs.append(input_name(mm.inputs[2]))
    rw.replace_chain(nd, inputs, [transpose.name, rows.name, mm.name, back.name])
    rw.uses[x].append(back.name)


def _ints(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind == "i"


def _gathered(rw: _Rewriter, t: TensorId, x: TensorId, indices: list[int]) -> bool:
    """Whether ``t`` is ``GatherV2(Shape(x), indices, 0)``."""
    gather = rw.producer(t, "GatherV2")
    if gather is None or len(gather.inputs) != 3 or gather.attr_int("batch_dims", 0) != 0:
        return False
    shape = rw.producer(gather.inputs[0], "Shape")
    idx, axis = rw.const(gather.inputs[1]), rw.const(gather.inputs[2])
    return (
        shape is not None
        and shape.inputs == (x,)
        and _ints(idx)
        and idx.ndim == 1
        and idx.tolist() == indices
        and _ints(axis)
        and axis.size == 1
        and int(axis.reshape(())) == 0
    )


def _product_of(rw: _Rewriter, t: TensorId, x: TensorId, indices: list[int]) -> bool:
    """Whether ``t`` is ``Prod(GatherV2(Shape(x), indices, 0), 0)`` without kept dimensions."""
    prod = rw.producer(t, "Prod")
    if prod is None or len(prod.inputs) != 2 or prod.attr_bool("keep_dims", False):
        return False
    axis = rw.const(prod.inputs[1])
    if not _ints(axis) or axis.size != 1 or int(axis.reshape(())) != 0:
        return False
    return _gathered(rw, prod.inputs[0], x, indices)


def _rows_shape(rw: _Rewriter, t: TensorId, x: TensorId, rank: int) -> bool:
    """Whether ``t`` is Tensordot's ``Pack([prod(shape[:rank-1]), prod(shape[rank-1:])])`` of ``x``."""
    pack = rw.producer(t, "Pack")
    if pack is None or len(pack.inputs) != 2 or pack.attr_int("axis", 0) != 0:
        return False
    free, axes = pack.inputs
    return _product_of(rw, free, x, list(range(rank - 1))) and _product_of(rw, axes, x, [rank - 1])


def _back_shape(rw: _Rewriter, t: TensorId, x: TensorId, rank: int, width: int) -> bool:
    """Whether ``t`` is Tensordot's ``ConcatV2([shape[:rank-1], [width]], 0)`` of ``x``."""
    concat = rw.producer(t, "ConcatV2")
    if concat is None or len(concat.inputs) != 3:
        return False
    lead, tail, axis = concat.inputs
    tail_value, axis_value = rw.const(tail), rw.const(axis)
    return (
        _ints(tail_value)
        and tail_value.ndim == 1
        and tail_value.tolist() == [width]
        and _ints(axis_value)
        and axis_value.size == 1
        and int(axis_value.reshape(())) == 0
        and _gathered(rw, lead, x, list(range(rank - 1)))
    )
