"""bfloat16 nodes run the float32 kernels: inputs widened, outputs rounded back, decided once per node.

A node whose type attrs say bfloat16 (``T``, ``dtype``, ``SrcT``/``DstT``...) is bound, when its graph is
loaded, to the kernel of the same node with those attrs made float32, wrapped so that bfloat16 inputs are
widened to float32 (exactly) and the outputs its op declares bfloat16 are rounded to bfloat16. That is
what TensorFlow's CPU kernels compute for elementwise ops, reductions and Conv2D (float32 arithmetic,
one round to nearest even per op, which ``ml_dtypes`` casts do). Measured with TensorFlow 2.21
(``tools/make_bfloat16_fixture.py``), its MatMul and BatchMatMul accumulate in float32 and *truncate*
the result, and ``Cast`` with ``Truncate=true`` truncates: those ops round that way here too.

Some of TensorFlow's bfloat16 kernels are Eigen expressions evaluated in bfloat16, rounding after every
step. Two whose steps are fixed are followed here (``STEPWISE``: Sigmoid, SquaredDifference); the others
(Softmax, AvgPool, DepthwiseConv2dNative, Einsum) sum in an order that depends on the machine's vector
width, and their answers differ by a few units in the last place (bfloat16 keeps 8 bits), as README's
bfloat16 section measures.

Ops that only move or hold values (``NATIVE``: constants, placeholders, identities, reshapes, slices,
gathers, concatenations, transposes, control flow, variables, Bitcast, which must see the 16-bit
patterns) run on the bfloat16 arrays as they are, and
so do calls and functional ops, whose attrs are lists of types: their bodies' nodes are bound the same way.
Nothing of this touches a graph without bfloat16.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from poolserve.proto import node_def_pb2, types_pb2
from poolserve.runtime import op_types
from poolserve.runtime.dtypes import BFLOAT16
from poolserve.runtime.kernels.registry import Compute, Factory, OpContext
from poolserve.runtime.node import Node

_FLOAT32 = np.dtype(np.float32)
_BF16_TYPES = (types_pb2.DT_BFLOAT16, types_pb2.DT_BFLOAT16_REF)
_HIGH = 1 if sys.byteorder == "little" else 0  # the uint16 holding a float32's sign, exponent and top bits

# ops whose kernels take bfloat16 arrays as they are: they compute nothing with the values, only move them
# (tests/test_bfloat16.py runs each one that moves values both ways). Through float32 they would copy a
# tensor three times: a 256 x 1024 Transpose took 238 us so and takes 1.5 us as it is
_NATIVE_OPS = (
    "Const Placeholder PlaceholderWithDefault Identity IdentityN StopGradient Snapshot PreventGradient "
    "Reshape Squeeze ExpandDims EnsureShape Shape ShapeN Size Rank Bitcast "
    "Transpose ConcatV2 Pack Unpack Slice StridedSlice GatherV2 Tile ReverseV2 Split Pad Fill ZerosLike "
    "Switch RefSwitch _SwitchN Merge RefMerge Enter RefEnter Exit RefExit NextIteration RefNextIteration "
    "VariableV2 Assign VarHandleOp ReadVariableOp AssignVariableOp"
)
NATIVE = frozenset(_NATIVE_OPS.split())

# ops whose TensorFlow CPU kernel truncates its float32 result to bfloat16 instead of rounding it
# (measured: tools/make_bfloat16_fixture.py --check)
TRUNCATING = frozenset(("MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"))


def involves(node: Node) -> bool:
    """Whether the node computes in bfloat16: one of its (scalar) type attrs is DT_BFLOAT16."""
    for value in node.attrs.values():
        if value.WhichOneof("value") == "type" and value.type in _BF16_TYPES:
            return True
    return False


def round_to_bfloat16(x: Any) -> Any:
    """float32 -> bfloat16, to nearest even (TensorFlow's Cast and its elementwise kernels)."""
    return np.asarray(x).astype(BFLOAT16)


def truncate_to_bfloat16(x: Any) -> Any:
    """float32 -> bfloat16 keeping the upper 16 bits (TensorFlow's MatMul, ``Cast`` with ``Truncate``): the
    high half of each float32, one copy (2 us for 64 values; a shift and a narrowing cast took 14)."""
    a = np.asarray(x, dtype=_FLOAT32)
    halves = np.ascontiguousarray(a).view(np.uint16)  # ascontiguousarray makes a 0-d array 1-d
    return halves[..., _HIGH::2].copy().view(BFLOAT16).reshape(a.shape)


def _steps_rounded(x: Any) -> Any:
    """One step of an expression TensorFlow evaluates in bfloat16: the float32 value it rounds to."""
    return np.asarray(x).astype(BFLOAT16).astype(_FLOAT32)


def _sigmoid(x: Any) -> Any:
    # Eigen's logistic: e / (1 + e) with e = exp(x), each step rounded, and 1 where e overflows
    with np.errstate(over="ignore", invalid="ignore"):
        e = _steps_rounded(np.exp(x))
        return np.where(np.isinf(e), _FLOAT32.type(1), e / _steps_rounded(e + 1))


def _squared_difference(x: Any, y: Any) -> Any:
    d = _steps_rounded(np.subtract(x, y))
    return d * d


# ops whose TensorFlow bfloat16 kernel rounds between its steps (measured: tools/make_bfloat16_fixture.py
# --check): the steps on widened inputs; the result is rounded as any other op's
STEPWISE: dict[str, Callable[..., Any]] = {"Sigmoid": _sigmoid, "SquaredDifference": _squared_difference}


def float32_node(node: Node) -> Node:
    """A copy of ``node`` whose bfloat16 type attrs (lists too) are float32."""
    nd = node_def_pb2.NodeDef()
    nd.CopyFrom(node.node_def)
    for value in nd.attr.values():
        kind = value.WhichOneof("value")
        if kind == "type" and value.type in _BF16_TYPES:
            value.type = types_pb2.DT_FLOAT
        elif kind == "list" and any(t in _BF16_TYPES for t in value.list.type):
            types = [types_pb2.DT_FLOAT if t in _BF16_TYPES else t for t in value.list.type]
            del value.list.type[:]
            value.list.type.extend(types)
    copy = Node(nd, node.index)
    copy.library = node.library
    return copy


def _rounding(node: Node) -> Callable[[Any], Any]:
    if node.op in TRUNCATING or (node.op == "Cast" and node.attr_bool("Truncate", False)):
        return truncate_to_bfloat16
    return round_to_bfloat16


def bind(factory: Factory, node: Node, num_outputs: int) -> Compute:
    """The kernel of a node that ``involves`` bfloat16: its own for ``NATIVE`` ops, else the float32 kernel
    between the casts. Raises what the factory raises."""
    if node.op in NATIVE:
        return factory(node)
    inner = factory(float32_node(node))
    steps = STEPWISE.get(node.op)
    if steps is not None:
        inner = _stepwise(steps, inner)
    rounded = tuple(p for p in range(num_outputs) if op_types.output_dtype(node, p) in _BF16_TYPES)
    unknown = all(op_types.output_dtype(node, p) is None for p in range(num_outputs))
    return _wrap(inner, rounded, unknown, _rounding(node))


def _stepwise(steps: Callable[..., Any], checked: Compute) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> Sequence[Any]:
        try:
            return (steps(*inputs),)
        except ValueError:  # shapes that do not broadcast: the float32 kernel says so, naming them
            return checked(ctx, inputs)

    return compute


def _wrap(inner: Compute, rounded: tuple[int, ...], unknown: bool, to_bf16: Callable[[Any], Any]) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> Sequence[Any]:
        widened = [x.astype(_FLOAT32) if getattr(x, "dtype", None) is BFLOAT16 else x for x in inputs]
        outputs = list(inner(ctx, widened))
        # an op the output table does not know: its float32 results are taken for bfloat16 ones
        ports = range(len(outputs)) if unknown else rounded
        for p in ports:
            v = outputs[p]
            if getattr(v, "dtype", None) == _FLOAT32:
                outputs[p] = to_bf16(v)
        return outputs

    return compute
