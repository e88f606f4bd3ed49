"""Graph transforms for graphs that call functions: inline every call, restore stripped default attrs.

TF2 exports put the model in the GraphDef's ``FunctionDefLibrary`` and call it with
``StatefulPartitionedCall``/``PartitionedCall`` (or a node whose op is the function's name). The executor
runs plain graphs only, so ``inline_functions`` rewrites each call, as TensorFlow's function inliner does,
into the function's nodes under ``<call node>/``:

- function-internal tensor references ``node:output_arg:index`` become ``<call>/node:port``, the port
  being the flat output index (earlier output args' lengths, from the op's OpDef, plus ``index``);
  references to an input arg become the call's matching input;
- the call node itself becomes an ``IdentityN`` of the function's results (a ``NoOp`` when there are none)
  with control edges from its ``control_ret`` nodes, so the call's consumers, data or control, still see
  every side effect (variable reads, assignments) finish first;
- the call's control inputs reach the body through ``<call>/input_control_node``, a NoOp every
  input-less body node waits on.

Calls inside the inlined bodies are inlined in turn. Functional control flow (If, Case, While) is not inlined:
its kernels (``kernels/functional_ops.py``) run the branch and loop functions, each compiled once from
``FunctionLibrary.function_graph``: the same inlining, applied to one call of the function fed by
Placeholders.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from poolserve.proto import function_pb2, graph_pb2, node_def_pb2, op_def_pb2, types_pb2
from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError

CALL_OPS = frozenset({"StatefulPartitionedCall", "PartitionedCall"})
# Ops that run functions of the library at run time: a graph keeping one of them keeps its library
FUNCTIONAL_OPS = frozenset({"If", "StatelessIf", "Case", "StatelessCase", "While", "StatelessWhile"})
# Nesting deeper than this is taken for recursion (TensorFlow graphs cannot recurse without While).
MAX_DEPTH = 64
# Output arg names of common multi-output ops, used when a graph comes without its ops' OpDefs
# (a SavedModel carries them in stripped_op_list). Ops with one output arg need no entry.
_OUTPUT_ARGS: dict[str, tuple[str, ...]] = {
    "FusedBatchNorm": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"),
    "FusedBatchNormV2": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"),
    "FusedBatchNormV3": (
        "y",
        "batch_mean",
        "batch_variance",
        "reserve_space_1",
        "reserve_space_2",
        "reserve_space_3",
    ),
    "TopKV2": ("values", "indices"),
    "Unique": ("y", "idx"),
}


def add_default_attrs(graph_def: graph_pb2.GraphDef, op_defs: Mapping[str, op_def_pb2.OpDef]) -> None:
    """Puts back the attrs a SavedModel stripped for having their default values (in place), in the graph's
    nodes and in its functions' bodies, as TensorFlow's loader does before running the graph."""

    def fill(nodes: Iterable[node_def_pb2.NodeDef]) -> None:
        for nd in nodes:
            op_def = op_defs.get(nd.op)
            if op_def is None:
                continue
            for attr in op_def.attr:
                if attr.HasField("default_value") and attr.name not in nd.attr:
                    nd.attr[attr.name].CopyFrom(attr.default_value)

    fill(graph_def.node)
    for fdef in graph_def.library.function:
        fill(fdef.node_def)


def called_function(nd: node_def_pb2.NodeDef, library: Mapping[str, function_pb2.FunctionDef]) -> str | None:
    """The library function a node calls, or None."""
    if nd.op in CALL_OPS:
        return nd.attr["f"].func.name
    return nd.op if nd.op in library else None


class _Inliner:
    def __init__(
        self,
        graph_def: graph_pb2.GraphDef,
        op_defs: Mapping[str, op_def_pb2.OpDef],
        library: Mapping[str, function_pb2.FunctionDef] | None = None,
    ) -> None:
        self.library = (
            library if library is not None else {f.signature.name: f for f in graph_def.library.function}
        )
        self.op_defs = op_defs
        self.names = {nd.name for nd in graph_def.node}

    def _output_args(self, nd: node_def_pb2.NodeDef) -> list[tuple[str, int]] | None:
        """(name, length) of each output arg of a node's op, or None when its OpDef is unknown."""
        fname = called_function(nd, self.library)
        if nd.op in CALL_OPS:
            return [("output", len(nd.attr["Tout"].list.type))]
        op_def = self.library[fname].signature if fname is not None else self.op_defs.get(nd.op)
        if op_def is None:
            names = _OUTPUT_ARGS.get(nd.op)
            return None if names is None else [(n, 1) for n in names]
        out = []
        for arg in op_def.output_arg:
            if arg.number_attr:
                out.append((arg.name, int(nd.attr[arg.number_attr].i)))
            elif arg.type_list_attr:
                out.append((arg.name, len(nd.attr[arg.type_list_attr].list.type)))
            else:
                out.append((arg.name, 1))
        return out

    def _port(self, fname: str, body: Mapping[str, node_def_pb2.NodeDef], ref: str) -> tuple[str, int]:
        """A function-internal ``node:output_arg:index`` -> (node, flat port)."""
        node, arg, index = ref.split(":")
        nd = body.get(node)
        if nd is None or not index.isdigit():
            raise InvalidArgumentError(f"function '{fname}': input '{ref}' refers to no node of the function")
        args = self._output_args(nd)
        if args is None:  # no OpDef: an op with one output arg (most ops)
            return node, int(index)
        offset = 0
        for name, length in args:
            if name == arg:
                return node, offset + int(index)
            offset += length
        raise InvalidArgumentError(
            f"function '{fname}': input '{ref}' names output '{arg}', which op '{nd.op}' does not have"
        )

    def expand(self, call: node_def_pb2.NodeDef, fname: str, depth: int) -> list[node_def_pb2.NodeDef]:
        """The call's replacement: the body's nodes and the call node as IdentityN (or NoOp)."""
        fdef = self.library.get(fname)
        if fdef is None:
            raise InvalidArgumentError(f"Node '{call.name}' calls function '{fname}', which the graph lacks")
        if depth > MAX_DEPTH:
            raise InvalidArgumentError(f"Node '{call.name}': functions nest deeper than {MAX_DEPTH} calls")
        sig = fdef.signature
        prefix = call.name + "/"
        data = [i for i in call.input if not i.startswith("^")]
        controls = [i for i in call.input if i.startswith("^")]
        if any(a.number_attr or a.type_list_attr for a in sig.input_arg):
            raise UnimplementedError(f"function '{fname}' has list-typed inputs; only traced functions load")
        if len(data) != len(sig.input_arg):
            raise InvalidArgumentError(
                f"Node '{call.name}' passes {len(data)} inputs to function '{fname}', which takes "
                f"{len(sig.input_arg)}"
            )
        args = {a.name: src for a, src in zip(sig.input_arg, data, strict=True)}
        body = {nd.name: nd for nd in fdef.node_def}
        control_node = prefix + "input_control_node"

        def rewrite(ref: str) -> str:
            if ref.startswith("^"):
                if ref[1:] not in body:
                    raise InvalidArgumentError(f"function '{fname}': control input '{ref}' names no node")
                return "^" + prefix + ref[1:]
            if ref.count(":") == 2:
                node, port = self._port(fname, body, ref)
                return f"{prefix}{node}:{port}"
            name = ref.partition(":")[0]
            if name not in args:
                raise InvalidArgumentError(f"function '{fname}': input '{ref}' is neither an arg nor a node")
            return args[name]

        out: list[node_def_pb2.NodeDef] = []
        if controls:
            out.append(node_def_pb2.NodeDef(name=control_node, op="NoOp", input=controls))
        for nd in fdef.node_def:
            for key, value in nd.attr.items():
                if value.WhichOneof("value") == "placeholder":
                    raise UnimplementedError(
                        f"function '{fname}': node '{nd.name}' attr '{key}' is a placeholder "
                        f"('{value.placeholder}'); only traced (concrete) functions load"
                    )
            new = node_def_pb2.NodeDef()
            new.CopyFrom(nd)
            new.name = prefix + nd.name
            if new.name in self.names:
                raise InvalidArgumentError(
                    f"inlining '{fname}' into '{call.name}' makes a duplicate node '{new.name}'"
                )
            self.names.add(new.name)
            del new.input[:]
            new.input.extend(rewrite(i) for i in nd.input)
            if controls and not any(i.partition(":")[0].lstrip("^") in body for i in nd.input):
                new.input.append("^" + control_node)
            out.append(new)

        results = [rewrite(fdef.ret[a.name]) for a in sig.output_arg]
        waits = ["^" + prefix + name for name in sorted(fdef.control_ret.values())]
        if results:
            types = self._result_types(call, sig)
            ret = node_def_pb2.NodeDef(name=call.name, op="IdentityN", input=results + waits)
            ret.attr["T"].list.type.extend(types)
        else:
            ret = node_def_pb2.NodeDef(name=call.name, op="NoOp", input=waits)
        ret.device = call.device
        out.append(ret)
        return out

    @staticmethod
    def _result_types(call: node_def_pb2.NodeDef, sig: op_def_pb2.OpDef) -> list[types_pb2.DataType]:
        if call.op in CALL_OPS:
            return list(call.attr["Tout"].list.type)
        return [a.type if a.type else call.attr[a.type_attr].type for a in sig.output_arg]


def inline_functions(
    graph_def: graph_pb2.GraphDef,
    op_defs: Mapping[str, op_def_pb2.OpDef] | None = None,
    library: Mapping[str, function_pb2.FunctionDef] | None = None,
) -> graph_pb2.GraphDef:
    """A copy of ``graph_def`` with every function call replaced by the function's body (nested calls too).
    ``op_defs`` (op name -> OpDef, e.g. a SavedModel's stripped_op_list) resolve functions' output refs;
    ``library`` stands for the graph's own FunctionDefLibrary."""
    inliner = _Inliner(graph_def, op_defs or {}, library)
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    stack: list[tuple[node_def_pb2.NodeDef, int]] = [(nd, 0) for nd in reversed(graph_def.node)]
    while stack:
        nd, depth = stack.pop()
        fname = called_function(nd, inliner.library)
        if fname is None:
            out.node.append(nd)
            continue
        expanded = inliner.expand(nd, fname, depth + 1)
        stack.extend((n, depth + 1) for n in reversed(expanded[:-1]))
        out.node.append(expanded[-1])  # the call node's replacement is never a call
    return out


def prune_graph_def(graph_def: graph_pb2.GraphDef, keep: Iterable[str]) -> graph_pb2.GraphDef:
    """The nodes ``keep`` (node or tensor names) need, in GraphDef order, with the library kept: what a
    SavedModel's signatures and restore op use, so unused parts (the saver's SaveV2...) need no kernel."""
    nodes = {nd.name: nd for nd in graph_def.node}
    needed: set[str] = set()
    stack = [k.lstrip("^").partition(":")[0] for k in keep]
    while stack:
        name = stack.pop()
        if name in needed or name not in nodes:
            continue
        needed.add(name)
        stack.extend(i.lstrip("^").partition(":")[0] for i in nodes[name].input)
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    out.node.extend(nd for nd in graph_def.node if nd.name in needed)
    return out


def uses_functions(graph_def: graph_pb2.GraphDef) -> bool:
    """Whether some node runs a library function at run time (functional control flow)."""
    return any(nd.op in FUNCTIONAL_OPS for nd in graph_def.node)


class FunctionLibrary:
    """A graph's functions, for the kernels that run them (TF's ``FunctionLibraryRuntime``): the FunctionDefs
    by name, the OpDefs their output refs need, and the kernels' compiled bodies, made once per function."""

    def __init__(
        self,
        library: function_pb2.FunctionDefLibrary,
        op_defs: Mapping[str, op_def_pb2.OpDef] | None = None,
    ) -> None:
        self.functions = {f.signature.name: f for f in library.function}
        self.op_defs = dict(op_defs or {})
        # function name -> what the kernels compiled from it (their business, hence Any)
        self.compiled: dict[str, Any] = {}
        # held while compiling: a body that calls functions compiles them too, on the same thread
        self.lock = threading.RLock()
        self.compiling: set[str] = set()

    def __contains__(self, name: object) -> bool:
        return name in self.functions

    def function_graph(self, name: str) -> tuple[graph_pb2.GraphDef, list[str], int]:
        """A graph computing function ``name``: one Placeholder per input arg (named as the arg), the body's
        nodes under ``<name>/`` and ``<name>`` itself, an IdentityN of the results (a NoOp without results)
        that waits for the function's side effects. Returns (graph, the args' node names, number of
        results). Calls inside the body are inlined as ``inline_functions`` inlines them."""
        fdef = self.functions[name]
        sig = fdef.signature
        graph_def = graph_pb2.GraphDef()
        call = node_def_pb2.NodeDef(name=name, op="PartitionedCall")
        call.attr["f"].func.name = name
        for arg in list(sig.input_arg) + list(sig.output_arg):
            if not arg.type:
                raise UnimplementedError(
                    f"function '{name}': arg '{arg.name}' has no fixed type (a polymorphic function); only "
                    "traced (concrete) functions run"
                )
        for arg in sig.input_arg:
            ph = graph_def.node.add(name=arg.name, op="Placeholder")
            ph.attr["dtype"].type = arg.type
            call.input.append(arg.name)
        call.attr["Tout"].list.type.extend(a.type for a in sig.output_arg)
        graph_def.node.append(call)
        graph = inline_functions(graph_def, self.op_defs, self.functions)
        return graph, [a.name for a in sig.input_arg], len(sig.output_arg)


__all__ = [
    "CALL_OPS",
    "FUNCTIONAL_OPS",
    "FunctionLibrary",
    "add_default_attrs",
    "called_function",
    "inline_functions",
    "prune_graph_def",
    "uses_functions",
]
