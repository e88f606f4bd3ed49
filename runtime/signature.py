"""A graph's signature: the tensors a caller feeds and fetches, with their dtypes and shapes.

What a server needs to describe a model (KServe metadata, TF Serving's ``signature_def``) and to map the names
clients use onto graph tensors, read from the graph once. By default the inputs are the graph's Placeholders
and the outputs every port of its terminal nodes; aliases (public name -> ``"node:port"``) override either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from poolserve.proto import types_pb2
from poolserve.runtime import op_types
from poolserve.runtime.errors import InvalidArgumentError, OpError
from poolserve.runtime.graph import Graph
from poolserve.runtime.node import Node, parse_tensor_name

_NOT_OUTPUTS = frozenset({"NoOp", "Const", "Placeholder", "PlaceholderWithDefault", "Assert"})
_PLACEHOLDERS = ("Placeholder", "PlaceholderWithDefault")
# how far an Identity-like chain is followed back to find a dtype
_MAX_DTYPE_DEPTH = 16


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output. ``name`` is public (node name, ``node:N`` for ports > 0, or an alias);
    ``tensor`` is the graph tensor ``node:port``; ``dtype`` a TF DataType (0 when unknown); ``shape`` has
    -1 for unknown dimensions and is None when even the rank is unknown."""

    name: str
    tensor: str
    dtype: int
    shape: tuple[int, ...] | None


def _public_name(node: str, port: int) -> str:
    return node if port == 0 else f"{node}:{port}"


def _output_shape(node: Node, port: int) -> tuple[int, ...] | None:
    if node.op in _PLACEHOLDERS and port == 0:
        return node.attr_shape("shape", None)
    if node.has_attr("_output_shapes"):
        shapes = node.attr("_output_shapes")
        if isinstance(shapes, list) and port < len(shapes):
            shape: tuple[int, ...] | None = shapes[port]
            return shape
    return None


def _output_dtype(graph: Graph, node: Node, port: int, depth: int = 0) -> int:
    """From the op's definition and the node's attrs (``op_types``); for a node without the attrs its
    definition reads, the dtype of its first input (Identity-like ops written by hand)."""
    known = op_types.output_dtype(node, port)
    if known is not None:
        return known
    if node.inputs and depth < _MAX_DTYPE_DEPTH:
        src, src_port = node.inputs[0]
        return _output_dtype(graph, graph.nodes[src], src_port, depth + 1)
    return types_pb2.DT_INVALID


def tensor_spec(graph: Graph, tensor: str, name: str | None = None) -> TensorSpec:
    """The spec of one graph tensor (``"node:port"`` or ``"node"``), published as ``name`` (default: the
    tensor's own name). NotFoundError if the graph has no such tensor."""
    node_name, port = graph.tensor(tensor)
    node = graph.nodes[node_name]
    dtype = _output_dtype(graph, node, port)
    public = name if name is not None else _public_name(node_name, port)
    return TensorSpec(public, f"{node_name}:{port}", dtype, _output_shape(node, port))


def default_inputs(graph: Graph) -> list[TensorSpec]:
    """The graph's Placeholder nodes, in GraphDef order."""
    return [tensor_spec(graph, n.name, n.name) for n in graph.nodes.values() if n.op in _PLACEHOLDERS]


def default_outputs(graph: Graph) -> list[TensorSpec]:
    """Every output port of the terminal nodes (no consumers), except NoOp/Const/Placeholder."""
    consumed: set[str] = set()
    for node in graph.nodes.values():
        consumed.update(src for src, _ in node.inputs)
        consumed.update(node.control_inputs)
    out = []
    for node in graph.nodes.values():
        if node.name in consumed or node.op in _NOT_OUTPUTS:
            continue
        for port in range(graph.num_outputs[node.name]):
            out.append(tensor_spec(graph, f"{node.name}:{port}"))
    return out


@dataclass(frozen=True)
class Signature:
    """A graph's public inputs and outputs, and the lookup of any name a caller may use for them: a public
    name or alias first, then any tensor of the graph by its own name (``"x"``, ``"x:0"``, ``"a/b:1"``)."""

    graph: Graph = field(repr=False)
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    _by_input: dict[str, TensorSpec] = field(default_factory=dict, repr=False, compare=False)
    _by_output: dict[str, TensorSpec] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_input.update((s.name, s) for s in self.inputs)
        self._by_output.update((s.name, s) for s in self.outputs)

    @classmethod
    def of(
        cls,
        graph: Graph,
        inputs: Mapping[str, str] | None = None,
        outputs: Mapping[str, str] | None = None,
    ) -> Signature:
        """The graph's signature; ``inputs``/``outputs`` (public name -> tensor) replace the defaults.
        An alias naming no tensor of the graph is an InvalidArgumentError naming the alias."""

        def aliased(aliases: Mapping[str, str], kind: str) -> tuple[TensorSpec, ...]:
            out = []
            for alias, tensor in aliases.items():
                try:
                    out.append(tensor_spec(graph, tensor, alias))
                except OpError as e:
                    raise InvalidArgumentError(f"{kind} '{alias}': {e.message}") from None
            return tuple(out)

        ins = aliased(inputs, "input") if inputs else tuple(default_inputs(graph))
        outs = aliased(outputs, "output") if outputs else tuple(default_outputs(graph))
        return cls(graph, ins, outs)

    def check_runnable(self) -> None:
        """Raises why this signature cannot run (UnimplementedError naming the node with an op or dtype
        poolserve has no kernel for), if a step from its inputs to its outputs would need such a node."""
        graph = self.graph
        feeds = [graph.tensor(s.tensor) for s in self.inputs]
        graph.runnable(graph.prune([graph.tensor(s.tensor) for s in self.outputs], (), feeds))

    def input(self, name: str) -> TensorSpec:
        """The spec a caller's input name stands for; InvalidArgumentError listing the inputs if none."""
        return self._lookup(name, "input", self._by_input)

    def output(self, name: str) -> TensorSpec:
        return self._lookup(name, "output", self._by_output)

    def _lookup(self, name: str, kind: str, table: dict[str, TensorSpec]) -> TensorSpec:
        spec = table.get(name)
        if spec is not None:
            return spec
        try:
            node_name, port = parse_tensor_name(name)
            canonical = f"{node_name}:{port}"
            for s in table.values():
                if s.tensor == canonical:
                    return s
            return tensor_spec(self.graph, name, name)
        except OpError:
            valid = ", ".join(sorted(table)) or "(none)"
            raise InvalidArgumentError(
                f"no {kind} '{name}'; its {kind}s are: {valid} (a graph tensor name 'node:port' works too)"
            ) from None


__all__ = ["Signature", "TensorSpec", "default_inputs", "default_outputs", "tensor_spec"]
