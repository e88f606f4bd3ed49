"""Variables: VariableV2/Assign (reference style) and VarHandleOp/ReadVariableOp/AssignVariableOp (resources).

Their values live in the session's ``ResourceContainer`` (``OpContext.resources``), keyed by
``(container, shared_name)``, the node's name standing in for an empty shared_name. A stored value is a
read-only array that is replaced, never written into, so arrays handed out earlier keep their values.
Both kinds of variable share that namespace (TensorFlow keeps them apart by type).

Reference variables. The evaluator passes values, not references, so:

- ``VariableV2`` outputs the variable's current value. Until it is initialized it outputs an
  ``UninitializedValue`` instead, which lets ``Assign`` run (TensorFlow's initializers read the variable
  node too) while any kernel that uses it as an array fails with TensorFlow's FailedPreconditionError
  "Attempting to use uninitialized value <name>", naming the consuming node.
- ``Assign``, ``AssignAdd`` and ``AssignSub`` find their variable through the *name* of the node feeding
  their first input (``node_def.input[0]``, read when the graph is loaded). Each ``VariableV2`` records,
  when it runs, which key its node name stands for (in the reserved entry ``REF_VARIABLES`` of the
  container), so a ``container`` or ``shared_name`` attr is honoured. That first input must come straight
  from the ``VariableV2`` node (not through an Identity), as in the graphs TensorFlow writes.

Resource variables: ``VarHandleOp`` outputs a scalar object array holding a ``VariableHandle``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Final, NoReturn

import numpy as np

from poolserve.runtime.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from poolserve.runtime.kernels._common import _type_name
from poolserve.runtime.kernels.registry import Compute, OpContext, ResourceContainer, kernel
from poolserve.runtime.node import Node, parse_input

# The container entry mapping each VariableV2 node name to its variable's key. No variable has this key:
# an empty shared_name is replaced by the (non-empty) node name.
REF_VARIABLES: Final = ("", "")
# Read-modify-write updates (AssignAdd, ...) of concurrent steps must not interleave.
_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class VariableHandle:
    """What a DT_RESOURCE tensor made by VarHandleOp holds."""

    container: str
    name: str
    dtype: int
    shape: tuple[int, ...] | None

    @property
    def key(self) -> tuple[str, str]:
        return (self.container, self.name)


class UninitializedValue:
    """What VariableV2 outputs before its variable is initialized: any use as an array raises
    FailedPreconditionError "Attempting to use uninitialized value <name>", as TensorFlow does."""

    __slots__ = ("_variable",)

    def __init__(self, variable: str) -> None:
        self._variable = variable

    def _fail(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise FailedPreconditionError(f"Attempting to use uninitialized value {self._variable}")

    __array__ = __array_ufunc__ = __array_function__ = _fail
    __bool__ = __len__ = __iter__ = __float__ = __int__ = __index__ = __getitem__ = _fail

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # protocol probes (copy, pickle, ...) expect AttributeError
            raise AttributeError(name)
        self._fail()

    def __repr__(self) -> str:
        return f"<uninitialized value of variable {self._variable}>"


@dataclass(frozen=True, slots=True)
class _RefVariable:
    key: tuple[str, str]
    dtype: np.dtype[Any]
    # The shape of the uninitialized tensor, which Assign's validate_shape compares against.
    initial_shape: tuple[int, ...]


def _shape_str(shape: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _stored(value: Any, dtype: np.dtype[Any]) -> Any:
    """A private, read-only copy of a value to keep in the container."""
    arr = np.array(value, dtype=dtype, copy=True)
    arr.flags.writeable = False
    return arr


def _check_value_dtype(node: Node, value: Any, dtype: np.dtype[Any]) -> None:
    if np.asarray(value).dtype != dtype:
        raise InvalidArgumentError(
            f"{node.op} expects a value of type {dtype}, got {np.asarray(value).dtype}", node.name
        )


# --- reference variables ------------------------------------------------------------------------------------


@kernel("VariableV2", stateful=True)
def variable_v2(node: Node) -> Compute:
    dtype = node.attr_dtype("dtype")
    shape = node.attr_shape("shape", None)
    container = node.attr_str("container", "")
    key = (container, node.attr_str("shared_name", "") or node.name)
    initial_shape = shape if shape is not None and all(d >= 0 for d in shape) else ()
    record = _RefVariable(key, dtype, initial_shape)
    uninitialized = UninitializedValue(node.name)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        values = ctx.resources.values
        refs = values.get(REF_VARIABLES)
        if refs is None:
            refs = values.setdefault(REF_VARIABLES, {})
        refs[node.name] = record
        value = values.get(key)
        return (uninitialized if value is None else value,)

    return compute


def _ref_target(node: Node) -> str:
    """The name of the node feeding the first input: the VariableV2 whose variable this op updates."""
    if not node.node_def.input:
        raise InvalidArgumentError(f"Node '{node.name}' (op '{node.op}') has no inputs", node.name)
    name, _, is_control = parse_input(node.node_def.input[0])
    if is_control:
        raise InvalidArgumentError(f"Node '{node.name}' (op '{node.op}'): its first input is a control input")
    return name


def _lookup_ref(node: Node, resources: ResourceContainer, target: str) -> _RefVariable:
    record = resources.values.get(REF_VARIABLES, {}).get(target)
    if record is None:
        raise InvalidArgumentError(
            f"{node.op} must be fed by a VariableV2 node directly; input '{target}' is not one", node.name
        )
    return record  # type: ignore[no-any-return]


@kernel("Assign", stateful=True)
def assign(node: Node) -> Compute:
    target = _ref_target(node)
    validate_shape = node.attr_bool("validate_shape", True)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        current, value = inputs
        var = _lookup_ref(node, ctx.resources, target)
        _check_value_dtype(node, value, var.dtype)
        if validate_shape:
            lhs = var.initial_shape if isinstance(current, UninitializedValue) else current.shape
            if lhs != value.shape:
                raise InvalidArgumentError(
                    "Assign requires shapes of both tensors to match. "
                    f"lhs shape= {_shape_str(lhs)} rhs shape= {_shape_str(value.shape)}"
                )
        new = _stored(value, var.dtype)
        with _LOCK:
            ctx.resources.values[var.key] = new
        return (new,)

    return compute


def _ref_update(sign: int) -> Any:
    def factory(node: Node) -> Compute:
        target = _ref_target(node)

        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            value = inputs[1]
            var = _lookup_ref(node, ctx.resources, target)
            _check_value_dtype(node, value, var.dtype)
            with _LOCK:
                old = ctx.resources.values.get(var.key)
                if old is None:
                    raise FailedPreconditionError(f"Attempting to use uninitialized value {target}")
                if old.shape != value.shape:
                    raise InvalidArgumentError("Parameters and update must be the same size")
                new = np.asarray(old + value if sign > 0 else old - value)
                new.flags.writeable = False
                ctx.resources.values[var.key] = new
            return (new,)

        return compute

    return factory


kernel("AssignAdd", stateful=True)(_ref_update(+1))
kernel("AssignSub", stateful=True)(_ref_update(-1))


@kernel("IsVariableInitialized", stateful=True)
def is_variable_initialized(node: Node) -> Compute:
    yes, no = np.asarray(True), np.asarray(False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (no if isinstance(inputs[0], UninitializedValue) else yes,)

    return compute


# --- resource variables -------------------------------------------------------------------------------------


@kernel("VarHandleOp", stateful=True)
def var_handle_op(node: Node) -> Compute:
    handle = VariableHandle(
        container=node.attr_str("container", ""),
        name=node.attr_str("shared_name", "") or node.name,
        dtype=node.attr_type("dtype"),
        shape=node.attr_shape("shape", None),
    )
    out = np.empty((), dtype=object)
    out[()] = handle
    out.flags.writeable = False
    outputs = (out,)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return outputs

    return compute


def _handle(node: Node, value: Any) -> VariableHandle:
    h = value.item() if isinstance(value, np.ndarray) and value.shape == () else value
    if not isinstance(h, VariableHandle):
        raise InvalidArgumentError(f"{node.op} expects a variable handle made by VarHandleOp, got {h!r}")
    return h


def _not_found(h: VariableHandle) -> str:
    return f"Resource {h.container or 'localhost'}/{h.name}/N10tensorflow3VarE does not exist."


def _value(node: Node, ctx: OpContext, handle: Any, dtype: np.dtype[Any]) -> Any:
    """A resource variable's value, checked to exist and to be of ``dtype``, in TensorFlow's words."""
    h = _handle(node, handle)
    value = ctx.resources.values.get(h.key)
    if value is None:
        raise FailedPreconditionError(
            f"Could not find variable {h.name}. This could mean that the variable has been deleted. "
            f"In TF1, it can also mean the variable is uninitialized. Debug info: "
            f"container={h.container or 'localhost'}, status error message={_not_found(h)}"
        )
    if value.dtype != dtype:
        raise InvalidArgumentError(
            f"Trying to read variable with wrong dtype. Expected {_type_name(dtype)} "
            f"got {_type_name(value.dtype)}"
        )
    return value


@kernel("ReadVariableOp", stateful=True)
def read_variable_op(node: Node) -> Compute:
    dtype = node.attr_dtype("dtype")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        return (_value(node, ctx, inputs[0], dtype),)

    return compute


@kernel("AssignVariableOp", stateful=True, outputs=0)
def assign_variable_op(node: Node) -> Compute:
    dtype = node.attr_dtype("dtype")
    validate_shape = node.attr_bool("validate_shape", False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        h = _handle(node, inputs[0])
        value = inputs[1]
        _check_value_dtype(node, value, dtype)
        new = _stored(value, dtype)
        with _LOCK:
            old = ctx.resources.values.get(h.key)
            if old is not None:
                if old.dtype != dtype:
                    raise InvalidArgumentError(
                        f"Trying to assign variable with wrong dtype. Expected {_type_name(old.dtype)} "
                        f"got {_type_name(dtype)}"
                    )
                if validate_shape and old.shape != new.shape:
                    raise InvalidArgumentError(
                        "Trying to assign to variable with tensor with wrong shape. "
                        f"Expected {_shape_str(old.shape)} got {_shape_str(new.shape)}"
                    )
            ctx.resources.values[h.key] = new
        return ()

    return compute


def _resource_update(sign: int) -> Any:
    def factory(node: Node) -> Compute:
        dtype = node.attr_dtype("dtype")

        def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
            h = _handle(node, inputs[0])
            value = inputs[1]
            _check_value_dtype(node, value, dtype)
            with _LOCK:
                old = ctx.resources.values.get(h.key)
                if old is None:
                    raise NotFoundError(_not_found(h))
                if old.dtype != dtype:
                    raise InvalidArgumentError("DType of variable handle and value does not match.")
                if old.shape != value.shape:
                    raise InvalidArgumentError(
                        f"Cannot update variable with shape {_shape_str(old.shape)} using a Tensor "
                        f"with shape {_shape_str(value.shape)}, shapes must be equal."
                    )
                new = np.asarray(old + value if sign > 0 else old - value)
                new.flags.writeable = False
                ctx.resources.values[h.key] = new
            return ()

        return compute

    return factory


kernel("AssignAddVariableOp", stateful=True, outputs=0)(_resource_update(+1))
kernel("AssignSubVariableOp", stateful=True, outputs=0)(_resource_update(-1))


@kernel("VarIsInitializedOp", stateful=True)
def var_is_initialized_op(node: Node) -> Compute:
    yes, no = np.asarray(True), np.asarray(False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        h = _handle(node, inputs[0])
        return (yes if h.key in ctx.resources.values else no,)

    return compute


@kernel("ResourceGather", stateful=True)
def resource_gather(node: Node) -> Compute:
    """GatherV2 on a resource variable's value, along its first axis after ``batch_dims`` (what
    ``tf.nn.embedding_lookup`` writes for a resource variable)."""
    from poolserve.runtime.kernels.gather_ops import _gather

    dtype = node.attr_dtype("dtype")
    batch_dims = node.attr_int("batch_dims", 0)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        value = _value(node, ctx, inputs[0], dtype)
        indices = inputs[1]
        if value.ndim <= batch_dims:
            raise InvalidArgumentError(
                f"params must be at least {batch_dims + 1} dimensional, got {value.ndim}"
            )
        return (_gather(value, indices, batch_dims, batch_dims),)

    return compute
