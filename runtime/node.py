"""One node of a graph: its parsed inputs and typed access to its attrs.

Attr accessors raise ``InvalidArgumentError`` naming the node, its op and the attr, so a kernel's factory can
read its attrs without checking them itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numpy as np

from poolserve.proto import attr_value_pb2, node_def_pb2
from poolserve.runtime import dtypes
from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError

if TYPE_CHECKING:
    from poolserve.runtime.functions import FunctionLibrary

_REQUIRED: Final = object()


def parse_input(spec: str) -> tuple[str, int, bool]:
    """``"n"`` -> (n, 0, False); ``"n:2"`` -> (n, 2, False); ``"^n"`` -> (n, -1, True)."""
    if spec.startswith("^"):
        return spec[1:], -1, True
    name, sep, port = spec.rpartition(":")
    if sep and port.isdigit():
        return name, int(port), False
    return spec, 0, False


def parse_tensor_name(name: str) -> tuple[str, int]:
    """``"x:1"`` -> ("x", 1); ``"x"`` -> ("x", 0). Raises for control inputs and bad ports."""
    if not name or name.startswith("^"):
        raise InvalidArgumentError(f"'{name}' is not a tensor name (expected 'node' or 'node:port')")
    node, sep, port = name.rpartition(":")
    if not sep:
        return name, 0
    if not port.isdigit() or not node:
        raise InvalidArgumentError(f"'{name}' is not a tensor name (expected 'node' or 'node:port')")
    return node, int(port)


def tensor_name(node: str, port: int) -> str:
    return f"{node}:{port}"


def input_name(t: tuple[str, int]) -> str:
    """A tensor as a NodeDef's input names it: ``node`` for output 0, else ``node:port``."""
    return t[0] if t[1] == 0 else f"{t[0]}:{t[1]}"


def decode_attr(value: attr_value_pb2.AttrValue) -> Any:
    """An AttrValue as a plain Python value (shapes as tuples, tensors as arrays, lists as lists)."""
    from poolserve.runtime.tensor import shape_from_proto, to_ndarray

    case = value.WhichOneof("value")
    if case is None:
        return None
    if case in ("s", "i", "f", "b", "placeholder"):
        return getattr(value, case)
    if case == "type":
        return int(value.type)
    if case == "shape":
        return shape_from_proto(value.shape)
    if case == "tensor":
        return to_ndarray(value.tensor)
    if case == "func":
        return value.func
    lst = value.list
    for field in ("s", "i", "f", "b", "type"):
        items = getattr(lst, field)
        if len(items):
            return [int(t) for t in items] if field == "type" else list(items)
    if len(lst.shape):
        return [shape_from_proto(s) for s in lst.shape]
    if len(lst.tensor):
        return [to_ndarray(t) for t in lst.tensor]
    if len(lst.func):
        return list(lst.func)
    return []


class Node:
    """A NodeDef with its inputs parsed: data inputs as (node, port), control inputs by name."""

    __slots__ = ("attrs", "control_inputs", "device", "index", "inputs", "library", "name", "node_def", "op")

    def __init__(self, node_def: node_def_pb2.NodeDef, index: int = 0) -> None:
        self.node_def = node_def
        self.name: str = node_def.name
        self.op: str = node_def.op
        self.device: str = node_def.device
        self.index = index
        data: list[tuple[str, int]] = []
        control: list[str] = []
        for spec in node_def.input:
            src, port, is_control = parse_input(spec)
            if is_control:
                control.append(src)
            else:
                if control:
                    raise InvalidArgumentError(
                        f"Node '{self.name}' (op '{self.op}'): data input '{spec}' after a control input"
                    )
                data.append((src, port))
        self.inputs: tuple[tuple[str, int], ...] = tuple(data)
        self.control_inputs: tuple[str, ...] = tuple(control)
        self.attrs = node_def.attr
        # the functions of the node's graph, which kernels of If, While and calls run (TF's
        # OpKernelConstruction::function_library); set by Graph before kernels are bound
        self.library: FunctionLibrary | None = None

    def __repr__(self) -> str:
        return f"Node({self.name!r}, op={self.op!r})"

    # --- attrs -------------------------------------------------------------------------------------------

    def _error(self, attr: str, problem: str) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"Node '{self.name}' (op '{self.op}'): attr '{attr}' {problem}", self.name
        )

    def has_attr(self, name: str) -> bool:
        return name in self.attrs

    def _get(self, name: str, case: str, default: Any) -> Any:
        if name not in self.attrs:
            if default is _REQUIRED:
                raise self._error(name, "is missing")
            return None
        value = self.attrs[name]
        actual = value.WhichOneof("value")
        if actual != case:
            raise self._error(name, f"must be {case}, got {actual or 'nothing'}")
        return value

    def attr(self, name: str, default: Any = _REQUIRED) -> Any:
        """The attr as a plain Python value, whatever its kind."""
        if name not in self.attrs:
            if default is _REQUIRED:
                raise self._error(name, "is missing")
            return default
        try:
            return decode_attr(self.attrs[name])
        except InvalidArgumentError as e:
            raise self._error(name, f"is invalid: {e.message}") from None

    def attr_int(self, name: str, default: Any = _REQUIRED) -> int:
        v = self._get(name, "i", default)
        return int(default) if v is None else int(v.i)

    def attr_float(self, name: str, default: Any = _REQUIRED) -> float:
        v = self._get(name, "f", default)
        return float(default) if v is None else float(v.f)

    def attr_bool(self, name: str, default: Any = _REQUIRED) -> bool:
        v = self._get(name, "b", default)
        return bool(default) if v is None else bool(v.b)

    def attr_str(self, name: str, default: Any = _REQUIRED, choices: tuple[str, ...] | None = None) -> str:
        v = self._get(name, "s", default)
        if v is None:
            return str(default)
        try:
            s: str = v.s.decode("utf-8")
        except UnicodeDecodeError:
            raise self._error(name, "is not valid UTF-8") from None
        if choices is not None and s not in choices:
            raise self._error(name, f"must be one of {', '.join(choices)}, got '{s}'")
        return s

    def attr_type(self, name: str, default: Any = _REQUIRED) -> int:
        """A DataType attr; checks that numpy can hold the type."""
        v = self._get(name, "type", default)
        code = int(default) if v is None else int(v.type)
        try:
            dtypes.as_numpy_dtype(code)
        except UnimplementedError as e:  # a valid DataType numpy cannot hold (float8): unsupported, not bad
            message = f"Node '{self.name}' (op '{self.op}'): attr '{name}': {e.message}"
            raise UnimplementedError(message, self.name) from None
        except Exception as e:
            raise self._error(name, str(e)) from None
        return code

    def attr_dtype(self, name: str, default: Any = _REQUIRED) -> np.dtype[Any]:
        """A DataType attr as a numpy dtype."""
        return dtypes.as_numpy_dtype(self.attr_type(name, default))

    def attr_ints(self, name: str, default: Any = _REQUIRED, length: int | None = None) -> list[int]:
        if name not in self.attrs and default is not _REQUIRED:
            return list(default)
        v = self._get(name, "list", default)
        lst = v.list
        if len(lst.s) or len(lst.f) or len(lst.b) or len(lst.type) or len(lst.shape) or len(lst.tensor):
            raise self._error(name, "must be a list of ints")
        out = [int(i) for i in lst.i]
        if length is not None and len(out) != length:
            raise self._error(name, f"must have {length} values, got {len(out)}")
        return out

    def attr_types(self, name: str, default: Any = _REQUIRED) -> list[int]:
        if name not in self.attrs and default is not _REQUIRED:
            return list(default)
        v = self._get(name, "list", default)
        return [int(t) for t in v.list.type]

    def attr_shape(self, name: str, default: Any = _REQUIRED) -> tuple[int, ...] | None:
        """A shape attr: a tuple with -1 for unknown dims, None for unknown rank (or when absent)."""
        from poolserve.runtime.tensor import shape_from_proto

        if name not in self.attrs and default is not _REQUIRED:
            return default  # type: ignore[no-any-return]
        v = self._get(name, "shape", default)
        return shape_from_proto(v.shape)

    def attr_tensor(self, name: str) -> np.ndarray[Any, Any]:
        from poolserve.runtime.tensor import to_ndarray

        v = self._get(name, "tensor", _REQUIRED)
        try:
            return to_ndarray(v.tensor, name=f"Node '{self.name}' attr '{name}'")
        except InvalidArgumentError as e:
            raise InvalidArgumentError(e.message, self.name) from None
