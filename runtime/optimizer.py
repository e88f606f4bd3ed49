"""The graph optimizer: rewrites a signature's constant-folded plan once, in the spirit of Grappler.

It reads the plan (its executed nodes, their consumers, the folded constants) and writes TensorFlow's ops:

- *Weight folding* (Grappler's arithmetic optimizer): multiplications and additions by per-channel
  constants after a Conv2D, DepthwiseConv2dNative or MatMul (the batch-norm arithmetic Keras leaves in a
  frozen graph: ``Mul``, ``AddV2``, ``Sub``, and ``FusedBatchNorm`` with ``is_training=false``) become the
  product's scaled weights and a bias. Folding is done in float64 and rounded once. A zero Pad before a
  VALID convolution becomes its explicit padding.
- *Fusion* (the remapper): the bias and one following activation (Relu, Relu6, Elu, LeakyRelu, Tanh,
  Sigmoid, swish as Keras writes it, named ``_MklSwish`` as oneDNN builds name it, hard swish as
  ``HardSwish``; GELU in its erf and tanh forms after a MatMul) join the product as ``_FusedConv2D``,
  ``_FusedDepthwiseConv2dNative`` or ``_FusedMatMul`` with TensorFlow's attrs (``fused_ops``, ``num_args``,
  ``epsilon``, ``leakyrelu_alpha``). As in TensorFlow, the fused node takes the name of the last node it
  replaces, so its consumers, fetches and traces keep their names. A Reshape between a MatMul and its
  bias (Keras's Dense on 3-D input, a Tensordot) moves after the fused node when it keeps the channels
  last.
- *Identity and NoOp removal* (the dependency optimizer): executed Identity/StopGradient/Snapshot nodes
  pass their input straight to their consumers; a NoOp that only waits for constants is dropped.
- *Layer norm* (the remapper, as oneDNN builds fuse it into ``_MklLayerNorm``): the Mean, SquaredDifference,
  Rsqrt and affine arithmetic of a layer normalization become one ``_FusedLayerNorm``
  (``runtime/layer_norm_fusion.py``).
- *Tensordot* (remapping): Keras's Dense on a 3-D input, written out by TensorFlow as Transpose, Reshape,
  MatMul and Reshape with ten shape nodes, becomes one ``BatchMatMulV2``, or one ``_FusedBatchMatMulV2``
  when a bias and an activation fused into its MatMul (``runtime/tensordot_fusion.py``).
- *Embedding lookups* (remapping): Keras 3's negative-index wrap before a ``GatherV2`` (``Less``, ``AddV2``,
  ``SelectV2``) joins the ``GatherV2`` as a private attr (``runtime/gather_fusion.py``).
- *Batch products* (remapping, as oneDNN builds write ``_FusedBatchMatMulV2``): a ``BatchMatMulV2`` by a
  constant matrix, its per-channel bias (also after a Reshape that splits the channels, EinsumDense's) and
  an activation become one ``_FusedBatchMatMulV2`` (``runtime/batch_matmul_fusion.py``).

A node is only absorbed when nothing else needs its output: not fetched, not fed, not a target, not
named by a control input, consumed once. GELU and hard swish are recognised by their value, not their
spelling: a closed group of elementwise ops on one tensor whose output matches the function on a probe of
241 points to float32 precision.

``ConfigProto.graph_options.rewrite_options`` switches it as TensorFlow does: ``disable_meta_optimizer``
turns all of it off, ``arithmetic_optimization: OFF`` the folding, ``remapping: OFF`` the fusion (layer
norm, Tensordot and batch products included), ``dependency_optimization: OFF`` the Identity and NoOp removal,
``memory_optimization: NO_MEM_OPT`` the buffer reuse of elementwise nodes (``runtime/inplace.py``), which
runs last, on the rewritten plan.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from poolserve.proto import config_pb2, node_def_pb2
from poolserve.runtime.batch_matmul_fusion import fuse_batch_matmuls
from poolserve.runtime.builder import attr_value
from poolserve.runtime.executor import ConstantFolder, Plan
from poolserve.runtime.gather_fusion import fuse_index_wraps
from poolserve.runtime.inplace import donate_buffers
from poolserve.runtime.kernels.fused_ops import ACTIVATIONS
from poolserve.runtime.kernels.math_ops import CUBE_ATTR
from poolserve.runtime.kernels.registry import OpContext
from poolserve.runtime.layer_norm_fusion import fuse_layer_norms
from poolserve.runtime.node import Node, input_name
from poolserve.runtime.tensordot_fusion import fuse_tensordots
from poolserve.runtime.types import TensorId

_PRODUCTS = {
    "Conv2D": "_FusedConv2D",
    "DepthwiseConv2dNative": "_FusedDepthwiseConv2dNative",
    "MatMul": "_FusedMatMul",
}
_IDENTITIES = ("Identity", "StopGradient", "Snapshot")
_BATCH_NORMS = ("FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3")
_ADDS = ("Add", "AddV2", "BiasAdd")
# what a GELU written out elementwise is made of (Keras: 0.5 * x * erfc(-x / sqrt(2)), or the tanh form)
_ELEMENTWISE = (
    "Mul", "Add", "AddV2", "Sub", "RealDiv", "Neg", "Erf", "Erfc", "Tanh", "Pow", "Square", "Relu6", "Relu",
    "Maximum", "Minimum",
)  # fmt: skip
_GELU_MAX_NODES = 12
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@dataclass(frozen=True)
class Passes:
    fold: bool  # arithmetic_optimization
    fuse: bool  # remapping
    identities: bool  # dependency_optimization
    inplace: bool = True  # memory_optimization: elementwise outputs reuse dying inputs (runtime/inplace.py)


def passes(config: config_pb2.ConfigProto) -> Passes | None:
    """The passes ``config`` asks for, TensorFlow's way (all on by default); None when none is."""
    rw = config.graph_options.rewrite_options
    if rw.disable_meta_optimizer:
        return None
    off = config_pb2.RewriterConfig.OFF
    p = Passes(
        rw.arithmetic_optimization != off,
        rw.remapping != off,
        rw.dependency_optimization != off,
        rw.memory_optimization != config_pb2.RewriterConfig.NO_MEM_OPT,
    )
    return p if p.fold or p.fuse or p.identities or p.inplace else None


def optimize(plan: Plan, folder: ConstantFolder | None, which: Passes) -> Plan:
    """The plan of the rewritten graph, or ``plan`` itself when nothing applies (or the plan has v1
    control flow: rewrites must not move nodes across its frames)."""
    if plan.frames is not None:
        return plan
    node_defs = _Rewriter(plan, which).run()
    if node_defs:
        graph = plan.graph.rewritten(node_defs)
        # The folder's values are keyed by node name: rewritten nodes keep names of executed (never folded)
        # nodes, and new nodes are Consts, so what it holds stays true of the rewritten graph.
        plan = Plan(graph, plan.feeds, plan.fetches, plan.targets, folder=folder)
    if which.inplace:  # last: it reads the final plan's slots and consumers
        donate_buffers(plan)
    return plan


def _gelu_reference(x: Any) -> dict[str, Any]:
    x = x.astype(np.float64)
    erf = np.array([math.erf(v) for v in x / math.sqrt(2.0)])
    tanh = np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3))
    return {"GeluExact": 0.5 * x * (1.0 + erf), "GeluApproximate": 0.5 * x * (1.0 + tanh)}


_PROBE = np.linspace(-6.0, 6.0, 241)
_GELU_REFERENCE = _gelu_reference(_PROBE)
# hard swish, x * relu6(x + 3) / 6 (Keras's "hard_swish", MobileNetV3's activation): after any product
_HARD_SWISH_REFERENCE = {"HardSwish": _PROBE * np.clip(_PROBE + 3.0, 0.0, 6.0) / 6.0}


class _Rewriter:
    def __init__(self, plan: Plan, which: Passes) -> None:
        self.plan = plan
        self.graph = plan.graph
        self.which = which
        self.nodes: dict[str, Node] = {pn.name: pn.node for pn in plan.nodes}
        self.position = {pn.name: pn.index for pn in plan.nodes}
        self.uses: dict[TensorId, list[str]] = defaultdict(list)
        self.control_users: dict[str, list[str]] = defaultdict(list)
        self.targets = set(plan.targets)
        pinned = set(plan.targets)
        for pn in plan.nodes:
            for t in pn.node.inputs:
                self.uses[t].append(pn.name)
            for c in pn.node.control_inputs:
                self.control_users[c].append(pn.name)
            pinned.update(pn.node.control_inputs)
        self.pinned = pinned
        self.fetched = set(plan.fetches)
        self.fed = set(plan.feeds)
        self.fetched_nodes = {n for n, _ in plan.fetches}
        # outputs past port 0 named anywhere in the graph: a node whose ports they are cannot become a
        # one-output fused node, or the rewritten graph would not load
        self.multi_port = {src for node in self.graph.nodes.values() for src, port in node.inputs if port > 0}
        self.absorbed: set[str] = set()
        self.emitted: set[str] = set()  # fused or refolded nodes: not folded into anything again
        self.out: dict[str, node_def_pb2.NodeDef] = {}

    # --- queries -------------------------------------------------------------------------------------------

    def const(self, t: TensorId) -> Any:
        slot = self.plan.slot_of.get(t)
        if slot is None or slot < len(self.plan.feeds):
            return None
        return self.plan.template[slot]

    def node(self, name: str) -> Node:
        nd = self.out.get(name)
        return Node(nd) if nd is not None else self.nodes[name]

    def producer(self, t: TensorId, op: str) -> Node | None:
        """The executed node of op ``op`` whose first output ``t`` is, if no pass absorbed it."""
        if t[1] != 0 or t[0] not in self.nodes or t[0] in self.absorbed:
            return None
        node = self.nodes[t[0]]
        return node if node.op == op else None

    def sole_consumer(self, name: str, emitted: bool = False) -> str | None:
        """The one executed node that reads ``name:0``, when ``name`` may disappear into it (with
        ``emitted``, also a node a pass wrote)."""
        if name in self.pinned or name in self.fetched_nodes or name in self.absorbed:
            return None
        ports = self.graph.num_outputs[name]
        if any((name, p) in self.fed or self.uses.get((name, p)) for p in range(1, ports)):
            return None
        if (name, 0) in self.fed:
            return None
        users = self.uses.get((name, 0), [])
        if len(users) != 1 or users[0] in self.absorbed or (users[0] in self.emitted and not emitted):
            return None
        if self.nodes[users[0]].inputs.count((name, 0)) != 1:
            return None
        return users[0]

    def channel_vector(self, node: Node, x: TensorId, channels: int, dtype: np.dtype[Any]) -> Any:
        """The constant operand of binary ``node`` on ``x`` as a float64 per-channel vector, if it is one."""
        if len(node.inputs) != 2 or node.control_inputs:
            return None
        other = node.inputs[1] if node.inputs[0] == x else node.inputs[0]
        c = self.const(other)
        if not isinstance(c, np.ndarray) or c.dtype != dtype or c.ndim > 4:
            return None
        if c.size == 1:
            return np.full(channels, float(c.reshape(())), np.float64)
        if c.shape[-1] != channels or c.size != channels:
            return None
        return c.reshape(channels).astype(np.float64)

    # --- passes --------------------------------------------------------------------------------------------

    def run(self) -> list[node_def_pb2.NodeDef]:
        if self.which.identities:
            for pn in self.plan.nodes:
                self.skip_noop(self.node(pn.name))
            for pn in self.plan.nodes:
                self.skip_identity(self.node(pn.name))
        if self.which.fold:
            for pn in self.plan.nodes:
                if pn.op == "Pad":
                    self.fold_pad(self.node(pn.name))
                elif pn.op == "Pow":
                    self.mark_cube(self.node(pn.name))
        if self.which.fold or self.which.fuse:
            for pn in self.plan.nodes:
                if pn.op in _PRODUCTS and pn.name not in self.absorbed:
                    self.fold_chain(self.node(pn.name))
        if self.which.fuse:
            fuse_layer_norms(self)
            fuse_tensordots(self)  # after the MatMul fusions: a MatMul fused with its bias stays so
            fuse_batch_matmuls(self)  # after the Tensordots, which become BatchMatMulV2
            fuse_index_wraps(self)
        return list(self.out.values())

    def mark_cube(self, node: Node) -> None:
        """Grappler's ConvertPow: x ** 3 by a constant scalar 3 runs as x * Square(x), two roundings where
        pow has one (float16 x ** 3 differs in the last bit on 1 value in 4 otherwise)."""
        y = self.const(node.inputs[1]) if len(node.inputs) == 2 else None
        if not isinstance(y, np.ndarray) or y.size != 1 or y.dtype.kind != "f" or float(y.reshape(())) != 3:
            return
        x = self.const(node.inputs[0])
        if x is not None:
            return  # folded already
        nd = node_def_pb2.NodeDef()
        nd.CopyFrom(node.node_def)
        nd.attr[CUBE_ATTR].b = True
        self.out[node.name] = nd
        self.nodes[node.name] = Node(nd)

    def skip_noop(self, node: Node) -> None:
        """Drops a NoOp that only waits for constants (Keras's, on its variable reads): what depends on it
        has nothing left to wait for. It would otherwise run every step, and as a cheap root it sends the
        step's first expensive node to the pool instead of the caller's thread."""
        if node.op != "NoOp" or node.inputs or node.name in self.targets or node.name in self.fetched_nodes:
            return
        if any(c in self.nodes for c in node.control_inputs):
            return  # it orders executed work
        for user in self.control_users.pop(node.name, []):
            nd = node_def_pb2.NodeDef()
            nd.CopyFrom(self.node(user).node_def)
            kept = [s for s in nd.input if s != f"^{node.name}"]
            del nd.input[:]
            nd.input.extend(kept)
            self.out[user] = nd
            self.nodes[user] = Node(nd)
        self.absorbed.add(node.name)

    def skip_identity(self, node: Node) -> None:
        if node.op not in _IDENTITIES or len(node.inputs) != 1 or node.control_inputs:
            return
        name = node.name
        if name in self.pinned or name in self.fetched_nodes or (name, 0) in self.fed:
            return
        src = node.inputs[0]
        users = self.uses.pop((name, 0), [])
        for user in users:
            nd = node_def_pb2.NodeDef()
            nd.CopyFrom(self.node(user).node_def)
            for i, s in enumerate(nd.input):
                if s in (name, f"{name}:0"):
                    nd.input[i] = src[0] if src[1] == 0 else f"{src[0]}:{src[1]}"
            self.out[user] = nd
            self.nodes[user] = Node(nd)
            self.uses[src].append(user)
        if name in self.uses.get(src, []):
            self.uses[src].remove(name)
        self.absorbed.add(name)

    def fold_pad(self, pad: Node) -> None:
        """A zero Pad of height and width before a VALID convolution becomes the convolution's explicit
        padding (Keras's ZeroPadding2D before a strided convolution): one copy and one node less."""
        paddings = self.const(pad.inputs[1]) if len(pad.inputs) == 2 and not pad.control_inputs else None
        if (
            not isinstance(paddings, np.ndarray)
            or paddings.shape != (4, 2)
            or paddings[0].any()
            or paddings[3].any()
            or (paddings < 0).any()
        ):
            return
        user = self.sole_consumer(pad.name)
        if user is None:
            return
        conv = self.node(user)
        if (
            conv.op not in ("Conv2D", "DepthwiseConv2dNative")
            or conv.inputs[0] != (pad.name, 0)
            or conv.attr_str("padding", "") != "VALID"
            or conv.attr_str("data_format", "NHWC") != "NHWC"
        ):
            return
        nd = node_def_pb2.NodeDef()
        nd.CopyFrom(conv.node_def)
        nd.input[0] = input_name(pad.inputs[0])
        nd.attr["padding"].s = b"EXPLICIT"
        nd.attr["explicit_paddings"].CopyFrom(attr_value([int(v) for v in paddings.reshape(-1)]))
        self.out[user] = nd
        self.nodes[user] = Node(nd)
        self.uses[pad.inputs[0]].append(user)
        self.uses[pad.inputs[0]].remove(pad.name)
        self.absorbed.add(pad.name)

    def fold_chain(self, base: Node) -> None:
        """Folds what follows ``base`` (a Conv2D, DepthwiseConv2dNative or MatMul) into it."""
        dtype = base.attr_dtype("T", np.float32)
        w = self.const(base.inputs[1])
        if (
            dtype not in _FLOATS
            or not isinstance(w, np.ndarray)
            or w.dtype != dtype
            or self.const(base.inputs[0]) is not None
            or (base.op != "MatMul" and base.attr_str("data_format", "NHWC") != "NHWC")
        ):
            return
        transpose_b = base.op == "MatMul" and base.attr_bool("transpose_b", False)
        if base.op == "DepthwiseConv2dNative":
            channels = w.shape[2] * w.shape[3] if w.ndim == 4 else 0
        else:
            channels = w.shape[0] if transpose_b else w.shape[-1]
        scale = np.ones(channels)
        bias: Any = None
        # the graph's own bias tensor, while the bias is exactly it (a BiasAdd's): the fused node reads it
        bias_tensor: TensorId | None = None
        chain = [base.name]
        cur = base.name
        act: str | None = None
        while True:
            nxt = self.sole_consumer(cur)
            if nxt is None:
                break
            node = self.nodes[nxt]
            x = (cur, 0)
            if node.op == "Mul" and self.which.fold:
                c = self.channel_vector(node, x, channels, dtype)
                if c is None:
                    break
                scale *= c
                bias = None if bias is None else bias * c
                bias_tensor = None
            elif node.op in _ADDS or node.op == "Sub":
                if node.op == "BiasAdd" and node.attr_str("data_format", "NHWC") != "NHWC":
                    break
                if node.op in ("Sub", "BiasAdd") and node.inputs[0] != x:
                    break
                c = self.channel_vector(node, x, channels, dtype)
                # a bias needs a fused op (remapping); without folding only one add joins (BiasAdd fusion)
                if c is None or not self.which.fuse or (not self.which.fold and bias is not None):
                    break
                c = -c if node.op == "Sub" else c
                other = node.inputs[1] if node.inputs[0] == x else node.inputs[0]
                exact = bias is None and node.op != "Sub" and np.shape(self.const(other)) == (channels,)
                bias_tensor = other if exact else None
                bias = c if bias is None else bias + c
            elif node.op in _BATCH_NORMS and self.which.fold and self.which.fuse:
                bn = self.batch_norm(node, x, channels, dtype)
                if bn is None or nxt in self.multi_port:
                    break
                factor, shift = bn
                scale *= factor
                bias = shift if bias is None else bias * factor + shift
                bias_tensor = None
            else:
                break
            chain.append(nxt)
            cur = nxt
        fusable = len(chain) == 1 and base.op == "MatMul" and self.which.fuse
        if fusable and self.fuse_through_reshape(base, w, channels, dtype, transpose_b):
            return
        if self.which.fuse:
            act, group = self.activation(base, cur, dtype)
            if act is not None:
                chain.extend(group)
        if len(chain) == 1:
            return
        self.emit(base, chain, w, scale, (bias, bias_tensor), act, dtype, transpose_b)

    def fuse_through_reshape(
        self, base: Node, w: Any, channels: int, dtype: np.dtype[Any], transpose_b: bool
    ) -> bool:
        """MatMul, Reshape, bias, activation (Keras's Dense on a 3-D input: Tensordot, then BiasAdd and
        GELU) becomes ``_FusedMatMul`` then the Reshape, when the Reshape keeps the channels last: the bias
        and the activation act per channel, so they commute with it. The Reshape takes the name of the last
        node replaced, so its readers see the same tensor."""
        reshape_name = self.sole_consumer(base.name)
        if reshape_name is None:
            return False
        reshape = self.nodes[reshape_name]
        if (
            reshape.op != "Reshape"
            or reshape.control_inputs
            or reshape.inputs[0] != (base.name, 0)
            or not self.keeps_last_dim(reshape.inputs[1], channels)
        ):
            return False
        add_name = self.sole_consumer(reshape_name)
        if add_name is None:
            return False
        add = self.nodes[add_name]
        x = (reshape_name, 0)
        if add.op not in _ADDS or add.control_inputs or len(add.inputs) != 2:
            return False
        if add.op == "BiasAdd" and (add.inputs[0] != x or add.attr_str("data_format", "NHWC") != "NHWC"):
            return False
        bias_tensor = add.inputs[1] if add.inputs[0] == x else add.inputs[0]
        bias = self.const(bias_tensor)
        if not isinstance(bias, np.ndarray) or bias.dtype != dtype or bias.shape != (channels,):
            return False
        act, group = self.activation(base, add_name, dtype)
        if act is None:
            return False  # a bias alone saves one pass: not worth moving the Reshape
        sink = group[-1]
        self.emit(base, [base.name], w, np.ones(channels), (bias, bias_tensor), act, dtype, transpose_b)
        nd = node_def_pb2.NodeDef()
        nd.CopyFrom(reshape.node_def)
        nd.name = sink
        nd.input[0] = base.name
        self.out[sink] = nd
        self.nodes[sink] = Node(nd)
        self.emitted.add(sink)
        self.absorbed.update([reshape_name, add_name, *group[:-1]])
        self.uses[(base.name, 0)] = [sink]
        shape_users = self.uses[reshape.inputs[1]]
        shape_users[shape_users.index(reshape_name)] = sink
        return True

    def keeps_last_dim(self, shape: TensorId, channels: int) -> bool:
        """Whether the Reshape target ``shape`` ends in ``channels``: a constant, or (Tensordot's) a
        ConcatV2 on axis 0 whose last part is a constant ending in it."""
        value = self.const(shape)
        if value is None and shape[1] == 0 and shape[0] in self.nodes:
            node = self.nodes[shape[0]]
            axis = self.const(node.inputs[-1]) if node.op == "ConcatV2" and len(node.inputs) >= 2 else None
            if isinstance(axis, np.ndarray) and axis.size == 1 and int(axis.reshape(())) == 0:
                value = self.const(node.inputs[-2])
        return (
            isinstance(value, np.ndarray)
            and value.ndim == 1
            and value.size > 0
            and value.dtype.kind == "i"
            and int(value[-1]) == channels
        )

    def batch_norm(
        self, node: Node, x: TensorId, channels: int, dtype: np.dtype[Any]
    ) -> tuple[Any, Any] | None:
        if (
            node.inputs[0] != x
            or node.control_inputs
            or node.attr_bool("is_training", True)
            or node.attr_str("data_format", "NHWC") != "NHWC"
        ):
            return None
        params = [self.const(t) for t in node.inputs[1:5]]
        if not all(isinstance(p, np.ndarray) and p.shape == (channels,) for p in params):
            return None
        scale, offset, mean, variance = (np.asarray(p, np.float64) for p in params)
        factor = scale / np.sqrt(variance + node.attr_float("epsilon", 0.0001))
        return factor, offset - mean * factor

    def activation(self, base: Node, cur: str, dtype: np.dtype[Any]) -> tuple[str | None, list[str]]:
        """The activation that follows ``cur``, by TensorFlow's ``fused_ops`` name, and the nodes it is."""
        nxt = self.sole_consumer(cur)
        if nxt is not None:
            node = self.nodes[nxt]
            if node.op in ACTIVATIONS and not node.control_inputs and node.attr_dtype("T", dtype) == dtype:
                return node.op, [nxt]
        # TensorFlow's CPU kernels fuse GELU only after a matrix product
        kinds = {**_GELU_REFERENCE, **_HARD_SWISH_REFERENCE} if base.op == "MatMul" else _HARD_SWISH_REFERENCE
        elementwise = self.valued_activation(cur, dtype, kinds)
        if elementwise is not None:
            return elementwise
        swish = self.swish(cur, dtype)
        if swish is not None:
            return "_MklSwish", swish
        return None, []

    def swish(self, x_name: str, dtype: np.dtype[Any]) -> list[str] | None:
        """The nodes of ``x * sigmoid(x)`` on ``x_name:0``, its output last, as Keras writes swish (silu):
        Sigmoid and Mul, in Keras 3 after a Mul of x by its ``beta`` (fused only when it is 1) and before
        the IdentityN of its custom gradient (``IdentityN(swish, x, beta)``, whose consumers read port 0).
        Every member reads only x, constants and the members before it, and x only the members."""
        x = (x_name, 0)
        if x_name in self.pinned or x_name in self.fetched_nodes or x in self.fed:
            return None
        users = [self.nodes[u] for u in self.uses.get(x, [])]
        if any(u.control_inputs or u.name in self.absorbed or u.name in self.emitted for u in users):
            return None
        members: list[str] = []
        gate = x  # what the Sigmoid reads
        for u in users:
            if u.op == "Mul" and len(u.inputs) == 2 and x in u.inputs and u.inputs[0] != u.inputs[1]:
                beta = self.const(u.inputs[1] if u.inputs[0] == x else u.inputs[0])
                if isinstance(beta, np.ndarray) and beta.size == 1 and beta.dtype == dtype and beta == 1:
                    gate = (u.name, 0)
                    members.append(u.name)
                    break
        sigmoid = [n for n in self.uses.get(gate, []) if self.nodes[n].op == "Sigmoid"]
        if len(sigmoid) != 1 or (gate != x and len(self.uses[gate]) != 1):
            return None
        sig = self.nodes[sigmoid[0]]
        members.append(sig.name)
        product = [
            u.name
            for u in users
            if u.op == "Mul" and sorted(u.inputs) == sorted([x, (sig.name, 0)]) and len(u.inputs) == 2
        ]
        if len(product) != 1 or self.uses.get((sig.name, 0)) != product or sig.control_inputs:
            return None
        members.append(product[0])
        wrapper = self.gradient_wrapper(product[0], x)
        if wrapper is not None:
            members.append(wrapper)
        inside = set(members)
        if not {u.name for u in users} <= inside:
            return None
        for m in members[:-1]:
            node = self.nodes[m]
            if m in self.pinned or m in self.fetched_nodes or (m, 0) in self.fed or node.control_inputs:
                return None
            if node.attr_dtype("T", dtype) != dtype or not set(self.uses.get((m, 0), [])) <= inside:
                return None
        if members[-1] in self.multi_port or self.nodes[members[-1]].control_inputs:
            return None
        return members

    def gradient_wrapper(self, y_name: str, x: TensorId) -> str | None:
        """The IdentityN that Keras's custom gradient puts after ``y_name:0`` (its sole reader; its other
        inputs x and constants, its other outputs unused), which may then take the swish's place."""
        users = self.uses.get((y_name, 0), [])
        if len(users) != 1:
            return None
        node = self.nodes[users[0]]
        if node.op != "IdentityN" or node.inputs[0] != (y_name, 0) or node.control_inputs:
            return None
        if any(t != x and self.const(t) is None for t in node.inputs[1:]):
            return None
        ports = self.graph.num_outputs[node.name]
        if any((node.name, p) in self.fed or self.uses.get((node.name, p)) for p in range(ports)[1:]):
            return None
        return node.name

    def valued_activation(
        self, x_name: str, dtype: np.dtype[Any], kinds: dict[str, Any]
    ) -> tuple[str, list[str]] | None:
        """A closed group of elementwise ops on ``x_name:0`` whose value is one of ``kinds`` (GELU's, or
        hard swish's, on ``_PROBE``), and its kind."""
        if x_name in self.pinned or x_name in self.fetched_nodes or (x_name, 0) in self.fed:
            return None
        x = (x_name, 0)
        # elementwise nodes within reach of x, in topological order, each reading only x, scalars and
        # each other
        reach: set[str] = set()
        frontier = list(self.uses.get(x, []))
        while frontier and len(reach) < _GELU_MAX_NODES:
            u = frontier.pop()
            if u in reach or u in self.absorbed or u in self.emitted:
                continue
            node = self.nodes[u]
            if node.op in _ELEMENTWISE and not node.control_inputs:
                reach.add(u)
                frontier.extend(self.uses.get((u, 0), []))
        group: list[str] = []
        for u in sorted(reach, key=self.position.__getitem__):
            ok = True
            for t in self.nodes[u].inputs:
                c = self.const(t)
                if t == x or (t[1] == 0 and t[0] in group):
                    continue
                if not (isinstance(c, np.ndarray) and c.size == 1 and c.dtype == dtype):
                    ok = False
            if ok:
                group.append(u)
        for sink in group:
            members = self.ancestors(sink, group, x)
            if len(members) >= 3 and self.closed(members, sink, x):
                kind = self.value_kind(members, sink, x, dtype, kinds)
                if kind is not None:
                    return kind, members
        return None

    def ancestors(self, sink: str, group: list[str], x: TensorId) -> list[str]:
        found = {sink}
        stack = [sink]
        while stack:
            for t in self.nodes[stack.pop()].inputs:
                if t[0] in group and t[0] not in found:
                    found.add(t[0])
                    stack.append(t[0])
        return [u for u in group if u in found]

    def closed(self, members: list[str], sink: str, x: TensorId) -> bool:
        """Whether x and every member but ``sink`` are read only inside the group (and may vanish)."""
        inside = set(members)
        if not set(self.uses.get(x, [])) <= inside:
            return False
        for u in members:
            if u == sink:
                continue
            if u in self.pinned or u in self.fetched_nodes or (u, 0) in self.fed:
                return False
            if not set(self.uses.get((u, 0), [])) <= inside:
                return False
        return sink not in self.multi_port

    def value_kind(
        self, members: list[str], sink: str, x: TensorId, dtype: np.dtype[Any], kinds: dict[str, Any]
    ) -> str | None:
        values: dict[TensorId, Any] = {x: _PROBE.astype(dtype)}
        ctx = OpContext()
        try:
            with np.errstate(all="ignore"):
                for u in members:
                    ins = [values[t] if t in values else self.const(t) for t in self.nodes[u].inputs]
                    values[(u, 0)] = np.asarray(self.graph.kernels[u](ctx, ins)[0], np.float64)
        except Exception:
            return None
        got = values[(sink, 0)]
        if got.shape != _PROBE.shape:
            return None
        for kind, ref in kinds.items():
            if np.all(np.abs(got - ref) <= 2e-6 * (1.0 + np.abs(ref))):
                return kind
        return None

    # --- output ------------------------------------------------------------------------------------------

    def emit(
        self,
        base: Node,
        chain: list[str],
        w: Any,
        scale: Any,
        biases: tuple[Any, TensorId | None],
        act: str | None,
        dtype: np.dtype[Any],
        transpose_b: bool,
    ) -> None:
        name = chain[-1]
        nd = node_def_pb2.NodeDef(name=name, device=base.device)
        for key in base.attrs:
            nd.attr[key].CopyFrom(base.attrs[key])
        inputs = [input_name(base.inputs[0])]
        if np.all(scale == 1.0):
            inputs.append(input_name(base.inputs[1]))
        else:
            if base.op == "DepthwiseConv2dNative":
                scaled = w.astype(np.float64) * scale.reshape(w.shape[2], w.shape[3])
            elif transpose_b:
                scaled = w.astype(np.float64) * scale[:, None]
            else:
                scaled = w.astype(np.float64) * scale
            inputs.append(self.constant(f"{name}/_folded_filter", scaled.astype(dtype)))
        bias, bias_tensor = biases
        fused = bias is not None or act is not None
        if fused:
            nd.op = _PRODUCTS[base.op]
            if bias_tensor is not None:
                inputs.append(input_name(bias_tensor))
            else:
                bias = np.zeros(len(scale)) if bias is None else bias
                inputs.append(self.constant(f"{name}/_folded_bias", np.asarray(bias).astype(dtype)))
            nd.attr["fused_ops"].CopyFrom(attr_value(["BiasAdd"] + ([act] if act else [])))
            nd.attr["num_args"].i = 1
            nd.attr["epsilon"].f = 0.0001
            if nd.op == "_FusedConv2D":
                nd.attr["TArgs"].CopyFrom(attr_value([dtype]))
            if act == "LeakyRelu":
                nd.attr["leakyrelu_alpha"].f = self.nodes[name].attr_float("alpha", 0.2)
        else:
            nd.op = base.op
        self.replace_chain(nd, inputs, chain)

    def replace_chain(self, nd: node_def_pb2.NodeDef, inputs: list[str], chain: list[str]) -> None:
        """Writes ``nd`` with ``inputs`` in place of ``chain``: it takes the name of the chain's last node,
        absorbs the others, and keeps their control inputs from outside the chain."""
        controls: dict[str, None] = {}
        for member in chain:
            for c in self.nodes[member].control_inputs:
                if c not in chain:
                    controls[c] = None
        nd.input.extend(inputs + [f"^{c}" for c in controls])
        self.out[nd.name] = nd
        self.emitted.add(nd.name)
        self.absorbed.update(chain[:-1])
        self.nodes[nd.name] = Node(nd)

    def constant(self, name: str, value: Any) -> str:
        while name in self.graph.nodes or name in self.out:
            name += "_"
        nd = node_def_pb2.NodeDef(name=name, op="Const")
        nd.attr["dtype"].CopyFrom(attr_value(value.dtype))
        nd.attr["value"].CopyFrom(attr_value(np.ascontiguousarray(value)))
        self.out[name] = nd
        return name
