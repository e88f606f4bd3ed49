"""A batch matrix product by a constant matrix, its bias and its activation become one
``_FusedBatchMatMulV2`` (a graph optimizer pass, part of remapping).

Keras's Dense on a 3-D input (after ``runtime/tensordot_fusion.py`` made its Tensordot one ``BatchMatMulV2``)
and its EinsumDense (attention projections, frozen as ``BatchMatMulV2`` by a reshaped kernel) leave the bias
to a node of their own: ``BiasAdd``, or ``AddV2`` of a constant. Two shapes are matched:

- ``BatchMatMulV2(x, W)``, then ``BiasAdd``/``Add``/``AddV2`` of a constant vector of W's width, then
  optionally an activation ``_FusedMatMul`` takes (GELU by value, as there): one fused node, named as the
  last node it replaces;
- ``BatchMatMulV2(x, W)``, then a ``Reshape`` to a constant shape whose last k dimensions split W's width
  (EinsumDense's ``[-1, 128, heads, depth]``), then an add of a constant of exactly those k dimensions: the
  bias added before the Reshape, flattened, is the same sum (a row-major reshape that keeps the product of
  the last dimensions maps channel i of the product to position i of those dimensions), so the fused node
  runs the product and the bias, and the Reshape follows it under the add's name.

W must be a constant matrix, not adjointed; the bias a constant of W's dtype; every absorbed node private
(not fetched, fed, a target, named by a control input, or read elsewhere), as for the other fusions.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from poolserve.proto import node_def_pb2
from poolserve.runtime.builder import attr_value
from poolserve.runtime.node import Node, input_name
from poolserve.runtime.types import TensorId

if TYPE_CHECKING:
    from poolserve.runtime.optimizer import _Rewriter

_ADDS = ("Add", "AddV2", "BiasAdd")


def fuse_batch_matmuls(rw: _Rewriter) -> None:
    for pn in rw.plan.nodes:
        if pn.name in rw.absorbed:
            continue
        node = rw.node(pn.name)
        if node.op == "BatchMatMulV2":
            _fuse(rw, node)


def _fuse(rw: _Rewriter, bmm: Node) -> None:
    if (
        bmm.control_inputs
        or len(bmm.inputs) != 2
        or bmm.attr_bool("adj_x", False)
        or bmm.attr_bool("adj_y", False)
        or rw.const(bmm.inputs[0]) is not None
    ):
        return
    w = rw.const(bmm.inputs[1])
    if not isinstance(w, np.ndarray) or w.ndim != 2 or w.dtype not in (np.float32, np.float64):
        return
    width = w.shape[1]
    nxt = rw.sole_consumer(bmm.name)
    if nxt is None:
        return
    node = rw.nodes[nxt]
    reshape: Node | None = None
    if node.op == "Reshape":
        reshape = node
        add_name = rw.sole_consumer(nxt)
        if add_name is None or reshape.control_inputs or reshape.inputs[0] != (bmm.name, 0):
            return
        node = rw.nodes[add_name]
    bias = _bias(rw, node, bmm.name, w.dtype, width, reshape)
    if bias is None:
        return
    bias_tensor, flat = bias
    act, group = (None, []) if reshape is not None else rw.activation(_AS_MATMUL, node.name, w.dtype)
    chain = [bmm.name, *([reshape.name] if reshape is not None else []), node.name, *group]
    name = chain[-1] if reshape is None else bmm.name
    nd = node_def_pb2.NodeDef(name=name, op="_FusedBatchMatMulV2", device=bmm.device)
    for key in bmm.attrs:
        nd.attr[key].CopyFrom(bmm.attrs[key])
    nd.attr["fused_ops"].CopyFrom(attr_value(["BiasAdd"] + ([act] if act else [])))
    nd.attr["num_args"].i = 1
    nd.attr["epsilon"].f = 0.0001
    bias_input = input_name(bias_tensor) if flat is None else rw.constant(f"{name}/_flat_bias", flat)
    rw.uses[bmm.inputs[0]].append(name)
    if reshape is None:
        rw.replace_chain(nd, [input_name(bmm.inputs[0]), input_name(bmm.inputs[1]), bias_input], chain)
        return
    # the product and its bias under the product's name, then the Reshape under the add's
    rw.out[name] = nd
    nd.input.extend([input_name(bmm.inputs[0]), input_name(bmm.inputs[1]), bias_input])
    rw.nodes[name] = Node(nd)
    rw.emitted.add(name)
    back = node_def_pb2.NodeDef()
    back.CopyFrom(reshape.node_def)
    back.name = node.name
    back.input[0] = name
    controls = [f"^{c}" for c in node.control_inputs if f"^{c}" not in back.input]
    back.input.extend(controls)
    rw.out[node.name] = back
    rw.nodes[node.name] = Node(back)
    rw.emitted.add(node.name)
    rw.absorbed.add(reshape.name)
    rw.uses[(name, 0)] = [node.name]
    shape_users = rw.uses[reshape.inputs[1]]
    shape_users[shape_users.index(reshape.name)] = node.name


# the activation search reads the base node's op: GELU is looked for after matrix products only
_AS_MATMUL = Node(node_def_pb2.NodeDef(name="", op="MatMul"))


def _bias(
    rw: _Rewriter, add: Node, product: str, dtype: np.dtype[Any], width: int, reshape: Node | None
) -> tuple[TensorId, Any] | None:
    """(the bias tensor, its values flattened when the fused node needs a new constant, else None) of
    ``add`` on the product (or on its Reshape), when it adds a constant per channel."""
    if add.op not in _ADDS or add.control_inputs or len(add.inputs) != 2:
        return None
    x = (reshape.name, 0) if reshape is not None else (product, 0)
    if x not in add.inputs or (add.op == "BiasAdd" and add.inputs[0] != x):
        return None
    if add.op == "BiasAdd" and add.attr_str("data_format", "NHWC") != "NHWC":
        return None
    other = add.inputs[1] if add.inputs[0] == x else add.inputs[0]
    value = rw.const(other)
    if not isinstance(value, np.ndarray) or value.dtype != dtype:
        return None
    if reshape is None:
        return (other, None) if value.shape == (width,) else None
    target = rw.const(reshape.inputs[1])
    k = value.ndim
    if (
        not isinstance(target, np.ndarray)
        or target.dtype.kind != "i"
        or target.ndim != 1
        or not 1 <= k < target.size
        or tuple(int(d) for d in target[-k:]) != value.shape
        or math.prod(value.shape) != width
    ):
        return None
    return other, value.reshape(width)
