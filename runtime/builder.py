"""Writes GraphDefs without TensorFlow.

Every method adds one node and returns its output tensor name(s) ("dense/MatMul:0"), so graphs read
like the TensorFlow code that would have made them::

    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 4))
    y = b.relu(b.bias_add(b.matmul(x, b.constant(w)), b.constant(bias)))
    graph_def = b.graph_def
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from poolserve.proto import attr_value_pb2, graph_pb2, tensor_pb2, tensor_shape_pb2
from poolserve.runtime import dtypes
from poolserve.runtime.tensor import as_array, from_ndarray, shape_to_proto

# Producer version of the GraphDefs TensorFlow 2.x writes.
GRAPH_DEF_VERSION = 1882


def shape(dims: Sequence[int | None] | None) -> tensor_shape_pb2.TensorShapeProto:
    """A shape attr value; None dims are unknown, None itself is an unknown rank."""
    return shape_to_proto(None if dims is None else [-1 if d is None else d for d in dims])


def attr_value(value: Any) -> attr_value_pb2.AttrValue:
    """Python -> AttrValue. numpy dtypes/types become ``type``; use ``shape()`` for shapes."""
    if isinstance(value, attr_value_pb2.AttrValue):
        return value
    out = attr_value_pb2.AttrValue()
    if isinstance(value, tensor_shape_pb2.TensorShapeProto):
        out.shape.CopyFrom(value)
    elif isinstance(value, tensor_pb2.TensorProto):
        out.tensor.CopyFrom(value)
    elif isinstance(value, np.ndarray):
        out.tensor.CopyFrom(from_ndarray(value))
    elif isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        out.type = dtypes.from_numpy(value)  # type: ignore[assignment]
    elif isinstance(value, bool):
        out.b = value
    elif isinstance(value, int):
        out.i = value
    elif isinstance(value, float):
        out.f = value
    elif isinstance(value, str):
        out.s = value.encode("utf-8")
    elif isinstance(value, bytes):
        out.s = value
    elif isinstance(value, (list, tuple)):
        lst = out.list
        lst.SetInParent()
        for v in value:
            if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
                lst.type.append(dtypes.from_numpy(v))  # type: ignore[arg-type]
            elif isinstance(v, bool):
                lst.b.append(v)
            elif isinstance(v, int):
                lst.i.append(v)
            elif isinstance(v, float):
                lst.f.append(v)
            elif isinstance(v, str):
                lst.s.append(v.encode("utf-8"))
            elif isinstance(v, bytes):
                lst.s.append(v)
            elif isinstance(v, tensor_shape_pb2.TensorShapeProto):
                lst.shape.append(v)
            else:
                raise TypeError(f"cannot encode list item {v!r} as an attr")
    else:
        raise TypeError(f"cannot encode {value!r} as an attr")
    return out


class GraphBuilder:
    """Builds a GraphDef node by node. Names are made unique as TensorFlow does ("add", "add_1", ...)."""

    def __init__(self) -> None:
        self.graph_def = graph_pb2.GraphDef()
        self.graph_def.versions.producer = GRAPH_DEF_VERSION
        self._names: set[str] = set()
        self._scope: list[str] = []
        self._dtypes: dict[str, int] = {}

    # --- core --------------------------------------------------------------------------------------------

    def unique_name(self, name: str) -> str:
        full = "/".join([*self._scope, name])
        candidate, i = full, 0
        while candidate in self._names:
            i += 1
            candidate = f"{full}_{i}"
        self._names.add(candidate)
        return candidate

    def scope(self, name: str) -> _Scope:
        """``with b.scope("dense"):`` prefixes node names with ``dense/``."""
        return _Scope(self, name)

    def op(
        self,
        op_type: str,
        inputs: Iterable[str] = (),
        attrs: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        num_outputs: int = 1,
        control_inputs: Iterable[str] = (),
    ) -> Any:
        """Adds any node. Returns its tensor name, or a list of them when ``num_outputs != 1``."""
        node = self.graph_def.node.add()
        node.name = self.unique_name(name or op_type)
        node.op = op_type
        node.input.extend(_input_name(i) for i in inputs)
        node.input.extend("^" + c.split(":")[0].lstrip("^") for c in control_inputs)
        for key, value in (attrs or {}).items():
            node.attr[key].CopyFrom(attr_value(value))
        if num_outputs == 1:
            return f"{node.name}:0"
        return [f"{node.name}:{i}" for i in range(num_outputs)]

    def dtype_of(self, tensor: str) -> int:
        """The dtype recorded for a tensor made by ``placeholder``/``constant`` or typed ops (else float)."""
        return self._dtypes.get(tensor, self._dtypes.get(tensor.split(":")[0] + ":0", 1))

    def _typed(self, tensor: str, dtype: int) -> str:
        self._dtypes[tensor] = dtype
        return tensor

    def _t(self, *inputs: str) -> dict[str, Any]:
        return {"T": _type_attr(self.dtype_of(inputs[0]))}

    # --- sources -----------------------------------------------------------------------------------------

    def placeholder(
        self, name: str, dtype: Any = np.float32, dims: Sequence[int | None] | None = None
    ) -> str:
        code = dtypes.from_numpy(dtype)
        attrs: dict[str, Any] = {"dtype": _type_attr(code)}
        attrs["shape"] = shape(dims)
        return self._typed(self.op("Placeholder", (), attrs, name=name), code)

    def constant(self, value: Any, dtype: Any = None, name: str = "Const") -> str:
        arr = as_array(value)
        if dtype is not None:
            arr = arr.astype(dtype)
        elif arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        elif arr.dtype == np.int64 and not isinstance(value, np.ndarray):
            arr = arr.astype(np.int32)
        code = dtypes.from_numpy(arr.dtype)
        t = self.op("Const", (), {"dtype": _type_attr(code), "value": from_ndarray(arr)}, name=name)
        return self._typed(t, code)

    # --- common ops (anything else: ``op``) --------------------------------------------------------------

    def identity(self, x: str, name: str = "Identity") -> str:
        return self._typed(self.op("Identity", [x], self._t(x), name=name), self.dtype_of(x))

    def binary(self, op_type: str, x: str, y: str, name: str | None = None) -> str:
        return self._typed(self.op(op_type, [x, y], self._t(x), name=name), self.dtype_of(x))

    def unary(self, op_type: str, x: str, name: str | None = None) -> str:
        return self._typed(self.op(op_type, [x], self._t(x), name=name), self.dtype_of(x))

    def add(self, x: str, y: str, name: str = "add") -> str:
        return self.binary("AddV2", x, y, name)

    def mul(self, x: str, y: str, name: str = "mul") -> str:
        return self.binary("Mul", x, y, name)

    def relu(self, x: str, name: str = "Relu") -> str:
        return self.unary("Relu", x, name)

    def matmul(
        self, a: str, b: str, transpose_a: bool = False, transpose_b: bool = False, name: str = "MatMul"
    ) -> str:
        attrs = {**self._t(a), "transpose_a": transpose_a, "transpose_b": transpose_b}
        return self._typed(self.op("MatMul", [a, b], attrs, name=name), self.dtype_of(a))

    def bias_add(self, x: str, bias: str, data_format: str = "NHWC", name: str = "BiasAdd") -> str:
        attrs = {**self._t(x), "data_format": data_format}
        return self._typed(self.op("BiasAdd", [x, bias], attrs, name=name), self.dtype_of(x))

    def conv2d(
        self,
        x: str,
        filters: str,
        strides: Sequence[int] = (1, 1, 1, 1),
        padding: str = "SAME",
        data_format: str = "NHWC",
        dilations: Sequence[int] = (1, 1, 1, 1),
        name: str = "Conv2D",
    ) -> str:
        attrs = {
            **self._t(x),
            "strides": list(strides),
            "padding": padding,
            "data_format": data_format,
            "dilations": list(dilations),
        }
        return self._typed(self.op("Conv2D", [x, filters], attrs, name=name), self.dtype_of(x))

    def reshape(self, x: str, dims: Sequence[int], name: str = "Reshape") -> str:
        s = self.constant(np.asarray(dims, dtype=np.int32), name=f"{name}/shape")
        attrs = {**self._t(x), "Tshape": _type_attr(3)}
        return self._typed(self.op("Reshape", [x, s], attrs, name=name), self.dtype_of(x))

    def softmax(self, x: str, name: str = "Softmax") -> str:
        return self.unary("Softmax", x, name)

    def no_op(self, name: str = "NoOp", control_inputs: Iterable[str] = ()) -> str:
        return str(self.op("NoOp", (), name=name, control_inputs=control_inputs)).split(":")[0]


class _Scope:
    def __init__(self, builder: GraphBuilder, name: str) -> None:
        self.builder, self.name = builder, name

    def __enter__(self) -> None:
        self.builder._scope.append(self.name)

    def __exit__(self, *exc: object) -> None:
        self.builder._scope.pop()


def _input_name(tensor: str) -> str:
    node, _, port = tensor.rpartition(":")
    if node and port == "0":
        return node
    return tensor


def _type_attr(code: int) -> attr_value_pb2.AttrValue:
    v = attr_value_pb2.AttrValue()
    v.type = code  # type: ignore[assignment]
    return v
