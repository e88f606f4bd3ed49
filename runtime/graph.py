"""Graphs: load a GraphDef, validate it, order it, prune it.

``Graph(graph_def)`` checks what TensorFlow's importer checks (unique names, existing inputs and ports,
valid attrs, no cycles but a v1 loop's back edges) and binds every node's kernel once. A node poolserve
cannot run (an op it has no kernel for, a dtype numpy cannot hold such as float8) is no error until a
step needs it, as in TensorFlow, whose kernels are made per pruned graph: a SavedModel's training ops or
a second signature's unsupported op do not stop the others from running (``unavailable``, ``runnable``).
``prune`` keeps what some fetches and targets need, with fed tensors cutting the graph.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import message, text_format

from poolserve.proto import graph_pb2, node_def_pb2, types_pb2
from poolserve.runtime import bfloat16, dtypes, kernels, op_types
from poolserve.runtime.errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidArgumentValueError,
    NotFoundError,
    NotFoundTypeError,
    NotFoundValueError,
    OpError,
    UnimplementedError,
)
from poolserve.runtime.functions import FunctionLibrary
from poolserve.runtime.kernels.control_flow_ops import NEXT_ITERATION_OPS
from poolserve.runtime.kernels.registry import Compute, KernelDef
from poolserve.runtime.node import Node, parse_tensor_name
from poolserve.runtime.tensor import as_array, shape_from_proto
from poolserve.runtime.types import TensorId


def load_graph_def(path: str | Path) -> graph_pb2.GraphDef:
    """Reads a binary (``.pb``) or text (``.pbtxt``/``.txt``) GraphDef."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise NotFoundError(f"GraphDef file not found: {path}") from None
    except OSError as e:
        raise InvalidArgumentError(f"cannot read GraphDef file {path}: {e.strerror}") from None
    graph_def = graph_pb2.GraphDef()
    text = path.suffix in (".pbtxt", ".txt")
    try:
        if text:
            text_format.Parse(data.decode("utf-8"), graph_def, allow_unknown_field=True)
        else:
            graph_def.ParseFromString(data)
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError) as e:
        kind = "text" if text else "binary"
        raise InvalidArgumentError(f"{path} is not a valid {kind} GraphDef: {e}") from None
    return graph_def


class Graph:
    """A validated graph. Nodes keep GraphDef order; ``order`` is a topological order of them.

    ``library``: the functions its If/While nodes run; by default the GraphDef's own library (a function's
    body graph shares its caller's, and a SavedModel's adds the OpDefs of its stripped_op_list).
    """

    def __init__(self, graph_def: graph_pb2.GraphDef, library: FunctionLibrary | None = None) -> None:
        self.graph_def = graph_def
        if library is None and graph_def.library.function:
            library = FunctionLibrary(graph_def.library)
        self.library = library
        self.nodes: dict[str, Node] = {}
        for i, nd in enumerate(graph_def.node):
            if not nd.name:
                raise InvalidArgumentError(f"Node #{i} (op '{nd.op}') has no name")
            if nd.name in self.nodes:
                raise InvalidArgumentError(f"Duplicate node name in graph: '{nd.name}'", nd.name)
            node = self.nodes[nd.name] = Node(nd, i)
            node.library = library

        self.kernel_defs: dict[str, KernelDef] = {}
        self.num_outputs: dict[str, int] = {}
        # nodes a step cannot run, and why (raised by a plan that needs one: see ``runnable``)
        self.unavailable: dict[str, OpError] = {}
        for node in self.nodes.values():
            self._define(node)
        self._count_unknown_outputs(self.nodes.values())
        self._check_inputs()
        self.order: list[Node] = self._topological_order()
        self.position = {node.name: i for i, node in enumerate(self.order)}
        self._feed_specs: dict[TensorId, tuple[int, np.dtype[Any], tuple[int, ...] | None] | None] = {}
        self.kernels: dict[str, Compute] = {}
        for node in self.order:
            self.kernels[node.name] = self._bind(node)

    @classmethod
    def load(cls, path: str | Path) -> Graph:
        return cls(load_graph_def(path))

    def rewritten(self, node_defs: Iterable[node_def_pb2.NodeDef]) -> Graph:
        """This graph with nodes replaced (same name) or added (new name), as the graph optimizer makes them.

        Untouched nodes keep their parsed form and bound kernel; only the given nodes are checked and bound,
        then the whole graph is ordered again (a cycle is an error, as on load).
        """
        changed = {nd.name: nd for nd in node_defs}
        graph_def = graph_pb2.GraphDef()
        graph_def.versions.CopyFrom(self.graph_def.versions)
        graph_def.library.CopyFrom(self.graph_def.library)
        kept = [nd for nd in self.graph_def.node if nd.name not in changed]
        graph_def.node.extend(kept)
        graph_def.node.extend(changed.values())
        new = object.__new__(Graph)
        new.graph_def = graph_def
        new.library = self.library
        new.nodes = {name: node for name, node in self.nodes.items() if name not in changed}
        new.kernel_defs = {name: k for name, k in self.kernel_defs.items() if name not in changed}
        new.num_outputs = {name: n for name, n in self.num_outputs.items() if name not in changed}
        new.kernels = {name: k for name, k in self.kernels.items() if name not in changed}
        new.unavailable = {name: e for name, e in self.unavailable.items() if name not in changed}
        added = []
        for i, nd in enumerate(graph_def.node[len(kept) :], start=len(kept)):
            node = Node(nd, i)
            node.library = self.library
            new.nodes[nd.name] = node
            new._define(node)
            added.append(node)
        new._count_unknown_outputs(added)
        new._check_inputs()
        new.order = new._topological_order()
        new.position = {node.name: i for i, node in enumerate(new.order)}
        new._feed_specs = {}
        for name in changed:
            new.kernels[name] = new._bind(new.nodes[name])
        return new

    def _define(self, node: Node) -> None:
        """The node's kernel definition and output count; an op with no kernel gets a stand-in that fails
        when run (its outputs are counted from its consumers, ``_count_unknown_outputs``)."""
        try:
            kdef = kernels.lookup(node)
        except NotFoundError as e:
            self.unavailable[node.name] = UnimplementedError(e.message, node.name)
            kdef = KernelDef(node.op, self._unavailable_kernel, False, True, 0)
        self.kernel_defs[node.name] = kdef
        self.num_outputs[node.name] = kdef.outputs(node)

    def _count_unknown_outputs(self, nodes: Iterable[Node]) -> None:
        """Output counts of ``nodes`` that have no kernel: what their consumers read (TensorFlow would
        know them from the op's definition; a node's ``_output_shapes`` says too)."""
        unknown = {n.name for n in nodes if n.name in self.unavailable and self.num_outputs[n.name] == 0}
        if not unknown:
            return
        for name in unknown:
            shapes = self.nodes[name].attrs.get("_output_shapes")
            self.num_outputs[name] = max(1, len(shapes.list.shape) if shapes is not None else 0)
        for node in self.nodes.values():
            for src, port in node.inputs:
                if src in unknown and port >= self.num_outputs[src]:
                    self.num_outputs[src] = port + 1

    def _unavailable_kernel(self, node: Node) -> Compute:
        def compute(ctx: Any, inputs: list[Any]) -> Any:
            raise self.unavailable_error(node.name)

        return compute

    def unavailable_error(self, name: str) -> OpError:
        """A fresh copy of the error that makes node ``name`` unrunnable."""
        e = self.unavailable[name]
        return type(e)(e.message, e.node_name)

    def runnable(self, nodes: Iterable[Node]) -> None:
        """Raises why a step over ``nodes`` (a pruned graph) cannot run: the first of them poolserve has no
        kernel or dtype for."""
        if self.unavailable:
            for node in nodes:
                if node.name in self.unavailable:
                    raise self.unavailable_error(node.name)

    def _bind(self, node: Node) -> Compute:
        if node.name in self.unavailable:
            return self._unavailable_kernel(node)
        try:
            factory = self.kernel_defs[node.name].factory
            if bfloat16.involves(node):  # float32 kernels between casts, chosen here once
                return bfloat16.bind(factory, node, self.num_outputs[node.name])
            return factory(node)
        except UnimplementedError as e:  # a dtype or attr value poolserve cannot run: an error once needed
            self.unavailable[node.name] = UnimplementedError(e.message, node.name)
            return self._unavailable_kernel(node)
        except OpError as e:
            if e.node_name is None:
                e.node_name = node.name
            raise
        except (ValueError, TypeError, IndexError, KeyError) as e:
            raise InvalidArgumentError(
                f"Node '{node.name}' (op '{node.op}'): invalid attrs: {e}", node.name
            ) from None

    def _check_inputs(self) -> None:
        for node in self.nodes.values():
            for src, port in node.inputs:
                if src not in self.nodes:
                    raise InvalidArgumentError(
                        f"Node '{node.name}' (op '{node.op}'): input '{src}:{port}' refers to unknown node "
                        f"'{src}'",
                        node.name,
                    )
                if port >= self.num_outputs[src]:
                    raise InvalidArgumentError(
                        f"Node '{node.name}' (op '{node.op}'): input '{src}:{port}' refers to output {port} "
                        f"of '{src}' (op '{self.nodes[src].op}'), which has {self.num_outputs[src]} outputs",
                        node.name,
                    )
            for src in node.control_inputs:
                if src not in self.nodes:
                    raise InvalidArgumentError(
                        f"Node '{node.name}' (op '{node.op}'): control input '^{src}' refers to unknown node "
                        f"'{src}'",
                        node.name,
                    )

    def _topological_order(self) -> list[Node]:
        """GraphDef nodes ordered so that each comes after its inputs. TensorFlow allows a cycle only
        through NextIteration (a v1 loop's back edge into its Merge), so edges out of NextIteration are not
        ordered: any other cycle is an error."""
        pending: dict[str, int] = {}
        consumers: dict[str, list[str]] = {name: [] for name in self.nodes}
        for node in self.nodes.values():
            deps = {src for src, _ in node.inputs} | set(node.control_inputs)
            deps = {d for d in deps if self.nodes[d].op not in NEXT_ITERATION_OPS}
            pending[node.name] = len(deps)
            for src in deps:
                consumers[src].append(node.name)
        ready = [node.name for node in self.nodes.values() if pending[node.name] == 0]
        order: list[Node] = []
        while ready:
            name = ready.pop()
            order.append(self.nodes[name])
            for c in consumers[name]:
                pending[c] -= 1
                if pending[c] == 0:
                    ready.append(c)
        if len(order) != len(self.nodes):
            stuck = sorted(n for n, count in pending.items() if count > 0)
            first = self.nodes[stuck[0]]
            raise InvalidArgumentError(
                f"Graph has a cycle: node '{first.name}' (op '{first.op}') and {len(stuck) - 1} other "
                f"node(s) wait on each other: {', '.join(stuck[:5])}{' ...' if len(stuck) > 5 else ''}",
                first.name,
            )
        return order

    # --- lookups -----------------------------------------------------------------------------------------

    def tensor(self, name: str) -> TensorId:
        """Resolves ``"node:port"`` (or ``"node"`` for port 0), checking that it exists."""
        node, port = parse_tensor_name(name)
        if node not in self.nodes:
            raise NotFoundError(f"Tensor '{name}' not found: the graph has no node '{node}'")
        if port >= self.num_outputs[node]:
            raise NotFoundError(
                f"Tensor '{name}' not found: node '{node}' (op '{self.nodes[node].op}') has "
                f"{self.num_outputs[node]} outputs"
            )
        return node, port

    def feed_tensor(self, name: object) -> TensorId:
        """``tensor`` for a feed_dict key; its errors are also TypeErrors, as TensorFlow's "Cannot interpret
        feed_dict key as Tensor" is. An operation's name stands for its output 0 (``"x"`` for ``"x:0"``):
        TensorFlow refuses it, poolserve keeps taking it, as the servers' clients name inputs by node."""
        if not isinstance(name, str):
            raise InvalidArgumentTypeError(f"feed_dict keys must be tensor names, got {name!r}")
        try:
            return self.tensor(name)
        except NotFoundError as e:
            raise NotFoundTypeError(e.message) from None
        except InvalidArgumentError as e:
            raise InvalidArgumentTypeError(e.message) from None

    def fetch_tensor(self, name: str) -> TensorId:
        """``tensor`` for a fetch; its errors are also ValueErrors, as TensorFlow's "cannot be interpreted as
        a Tensor" is."""
        try:
            return self.tensor(name)
        except NotFoundError as e:
            raise NotFoundValueError(e.message) from None
        except InvalidArgumentError as e:
            raise InvalidArgumentValueError(e.message) from None

    def fetch_node(self, name: str) -> Node:
        """``node`` for an operation fetched or run as a target; a missing one is also a ValueError."""
        try:
            return self.nodes[name]
        except KeyError:
            raise NotFoundValueError(f"Node '{name}' not found in the graph") from None

    def feed_spec(self, tensor: TensorId) -> tuple[int, np.dtype[Any], tuple[int, ...] | None] | None:
        """(dtype, numpy dtype, shape) a value fed for ``tensor`` must have, read once. A placeholder's from
        its attrs; any other tensor's dtype from its op's definition (``op_types``) and its shape where the
        graph tells it (a Const's value, ``_output_shapes``; else None: any shape). None when the dtype is
        not known: the value is then taken as given."""
        try:
            return self._feed_specs[tensor]
        except KeyError:
            pass
        name, port = tensor
        node = self.nodes[name]
        spec = None
        if node.op in ("Placeholder", "PlaceholderWithDefault"):
            want = node.attr_type("dtype")
            spec = (want, dtypes.as_numpy_dtype(want), node.attr_shape("shape", None))
        else:
            code = op_types.output_dtype(node, port)
            try:
                np_want = dtypes.as_numpy_dtype(code) if code else None
            except OpError:  # a dtype numpy cannot hold (float8): nothing to convert to
                np_want = None
            if code and np_want is not None:
                spec = (code, np_want, _known_shape(node, port))
        self._feed_specs[tensor] = spec
        return spec

    def node(self, name: str) -> Node:
        try:
            return self.nodes[name]
        except KeyError:
            raise NotFoundError(f"Node '{name}' not found in the graph") from None

    # --- pruning -----------------------------------------------------------------------------------------

    def prune(
        self,
        fetches: Iterable[TensorId],
        targets: Iterable[str] = (),
        feeds: Iterable[TensorId] = (),
    ) -> list[Node]:
        """The nodes needed to compute ``fetches`` and run ``targets``, in topological order.

        A fed tensor is not computed: its producer is kept only if something else needs it.
        """
        fed = set(feeds)
        needed: set[str] = set()
        stack: list[str] = []
        for name, port in fetches:
            if (name, port) not in fed:
                stack.append(name)
        for t in targets:
            self.node(t)
            stack.append(t)
        while stack:
            name = stack.pop()
            if name in needed:
                continue
            needed.add(name)
            current = self.nodes[name]
            for src, port in current.inputs:
                if (src, port) not in fed and src not in needed:
                    stack.append(src)
            for src in current.control_inputs:
                if src not in needed:
                    stack.append(src)
        return sorted((self.nodes[n] for n in needed), key=lambda n: self.position[n.name])

    def subgraph_def(self, nodes: Iterable[Node]) -> graph_pb2.GraphDef:
        """A GraphDef of the given nodes (e.g. the pruned graph a step ran)."""
        out = graph_pb2.GraphDef()
        out.versions.CopyFrom(self.graph_def.versions)
        out.node.extend(n.node_def for n in nodes)
        return out


def _known_shape(node: Node, port: int) -> tuple[int, ...] | None:
    """The shape the graph gives a node's output: a Const's value's, or the ``_output_shapes`` attr
    TensorFlow writes when asked (``add_shapes``); None when it gives none."""
    attrs = node.attrs
    if node.op == "Const" and "value" in attrs and attrs["value"].HasField("tensor"):
        return shape_from_proto(attrs["value"].tensor.tensor_shape)
    if "_output_shapes" in attrs:
        shapes = attrs["_output_shapes"].list.shape
        if port < len(shapes):
            return shape_from_proto(shapes[port])
    return None


def _shape_text(shape: tuple[int, ...] | None) -> str:
    if shape is None:
        return "<unknown>"
    return "(" + ", ".join("?" if d < 0 else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _name(tensor: TensorId) -> str:
    return f"{tensor[0]}:{tensor[1]}"


def prepare_feed(graph: Graph, tensor: TensorId, value: Any) -> np.ndarray[Any, Any]:
    """Converts a fed value to an array and checks it against the tensor's dtype and shape
    (``Graph.feed_spec``: a placeholder's, or what the graph tells of any other tensor, as TensorFlow
    checks every fed tensor).

    Lists and scalars are converted to the tensor's dtype; an array of another dtype is accepted only
    when the cast loses nothing (``int32`` into ``float32`` is fine, ``float64`` into ``int32`` is not).
    Integers out of an integer dtype's range are refused (numpy would wrap them), and so are numbers fed
    to a string tensor. A tensor whose dtype the graph does not tell takes the value as given.
    """
    spec = graph.feed_spec(tensor)
    if spec is None:
        return as_array(value)
    want, np_want, shape = spec
    if type(value) is np.ndarray and value.dtype is np_want and np_want.kind != "O":
        arr = value  # what a server feeds: nothing to convert (strings are checked item by item)
    else:
        arr = _convert(value, want, np_want, tensor)
    if shape is not None and (
        len(shape) != arr.ndim or any(d >= 0 and d != s for d, s in zip(shape, arr.shape, strict=False))
    ):
        raise InvalidArgumentValueError(
            f"Cannot feed value of shape {_shape_text(arr.shape)} for Tensor '{_name(tensor)}', which has "
            f"shape {_shape_text(shape)}"
        )
    return arr


def _convert(value: Any, want: int, np_want: np.dtype[Any], tensor: TensorId) -> np.ndarray[Any, Any]:
    """``value`` as an array of dtype ``want`` (``prepare_feed``'s rules); errors name the tensor."""
    try:
        if np_want.kind == "O" and want != types_pb2.DT_STRING:  # resources, variants: Python objects
            return as_array(value, want)
        arr = as_array(value)  # an array's own dtype, or numpy's for lists and scalars (str as bytes)
    except OpError as e:  # an object array holding something else than str or bytes
        raise InvalidArgumentTypeError(f"Cannot feed the value {_where(tensor, want)}: {e.message}") from None
    except (ValueError, TypeError, OverflowError) as e:
        raise _conversion_error(e, tensor, want) from None
    have = arr.dtype
    if have == np_want:
        return arr
    if want == types_pb2.DT_STRING:
        raise InvalidArgumentTypeError(
            f"Cannot feed a value of dtype {have} {_where(tensor, want)}: feed str or bytes"
        )
    if (
        isinstance(value, np.ndarray)
        and have.kind not in "SUO"
        and (not np.can_cast(have, np_want, "same_kind") or (have.kind == "f" and np_want.kind in "iub"))
    ):
        raise InvalidArgumentTypeError(f"Cannot feed value of dtype {have} {_where(tensor, want)}")
    bounds = _INT_RANGE.get(np_want)
    if bounds is not None and have.kind in "iu" and arr.size and not np.can_cast(have, np_want, "safe"):
        low, high = arr.min(), arr.max()
        if low < bounds[0] or high > bounds[1]:
            raise InvalidArgumentTypeError(
                f"Cannot feed value {low if low < bounds[0] else high} {_where(tensor, want)}: it is out "
                f"of the range of {np_want} [{bounds[0]}, {bounds[1]}]"
            )
    try:
        return arr.astype(np_want, copy=False)
    except (ValueError, TypeError, OverflowError) as e:
        raise _conversion_error(e, tensor, want) from None


# the values each integer dtype holds (np.iinfo takes microseconds to make)
_INT_RANGE: dict[np.dtype[Any], tuple[int, int]] = {
    np.dtype(t): (int(np.iinfo(t).min), int(np.iinfo(t).max))
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
}


def _where(tensor: TensorId, want: int) -> str:
    return f"for Tensor '{_name(tensor)}', which has dtype {dtypes.name(want)}"


def _conversion_error(e: Exception, tensor: TensorId, want: int) -> InvalidArgumentError:
    """numpy could not convert a fed value: TensorFlow's error would be numpy's (ValueError for text that
    is no number, TypeError otherwise), and so is this one's Python class."""
    kind = InvalidArgumentValueError if isinstance(e, ValueError) else InvalidArgumentTypeError
    return kind(f"Cannot convert the value fed {_where(tensor, want)}: {e}")
