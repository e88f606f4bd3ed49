"""Functional control flow: If, StatelessIf, Case, StatelessCase, While, StatelessWhile, and calls that
inlining did not reach.

Each function a node names is compiled once per graph library (``FunctionLibrary.compiled``) into a graph
and a ``Plan`` whose feeds are the function's args and whose fetches are its results. The kernel runs that
plan as a nested ``Step`` on its own thread (``CallerThread``: nothing is handed off, so a loop never waits
for a pool its own step may be occupying) with the caller's resources, so variables are shared.

A While checks ``OpContext.cancelled`` before each iteration: a deadline or a closed session stops it
between iterations, as TensorFlow's cancellation manager does. Nested steps inherit the check, so an inner
loop stops too. In a traced step (``OpContext.trace``) the nested step is traced too and its records join the
caller's, named ``<calling node>/<function node>``, so step_stats and the timeline show function bodies.
When the caller counts live bytes (a memory limit, a trace), the nested step's tensors count in the caller's
limit and peak while they are alive (``StepMemory`` with a parent).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from poolserve.runtime import dtypes
from poolserve.runtime.errors import CancelledError, InternalError, InvalidArgumentError
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node
from poolserve.runtime.threadpool import CallerThread

if TYPE_CHECKING:
    from poolserve.runtime.executor import Plan


_CALLER = CallerThread()


class FunctionBody:
    """One library function, compiled: ``run(ctx, args)`` returns its results."""

    __slots__ = ("name", "num_args", "num_results", "plan")

    def __init__(self, name: str, plan: Plan, num_args: int, num_results: int) -> None:
        self.name = name
        self.plan = plan
        self.num_args = num_args
        self.num_results = num_results

    def run(self, ctx: OpContext, args: list[Any], caller: str) -> list[Any]:
        """The function's results for ``args``; a failure inside names the inner node, then ``caller``."""
        # Imported here: the executor imports the graph, which imports the kernels.
        from poolserve.runtime.executor import Step, StepTrace

        finished: list[Step] = []
        outer = ctx.trace
        trace = StepTrace(self.plan.num_nodes, keep_values=outer.keep_values) if outer is not None else None
        step = Step(
            self.plan, args, ctx.resources, _CALLER, finished.append, trace=trace, parent_memory=ctx.memory
        )
        step.ctx.cancelled = ctx.cancelled
        step.start(inline=True)
        if step.memory is not None:
            # the body's results become the calling kernel's outputs, which the caller counts
            step.memory.release()
        if trace is not None:
            # a traced step shows the function's nodes, named under the calling node's
            outer.adopt(trace, caller, self.plan)
        if not finished:  # CallerThread runs every node before start returns
            raise InternalError(f"function '{self.name}' did not finish on its caller's thread")
        error = step.status
        if error is not None:
            # TensorFlow lists the frames of a failure inside functions: the inner node, then its callers
            error.message += f"\n\t [[{{{{node {caller}}}}}]]"
            raise error
        return step.fetched()


def _compile(node: Node, name: str) -> FunctionBody:
    from poolserve.runtime.executor import ConstantFolder, Plan
    from poolserve.runtime.graph import Graph

    library = node.library
    assert library is not None  # checked by instantiate
    graph_def, args, num_results = library.function_graph(name)
    graph = Graph(graph_def, library)
    fetches = [(name, i) for i in range(num_results)]
    # the call node is the target too: with no results it is a NoOp waiting for the side effects
    plan = Plan(graph, [(a, 0) for a in args], fetches, [name], ConstantFolder(graph))
    return FunctionBody(name, plan, len(args), num_results)


def instantiate(node: Node, attr: str) -> FunctionBody:
    """The compiled function named by ``node``'s func attr ``attr`` (made on first use, then shared)."""
    return _body(node, attr, node.attr(attr))


def instantiate_list(node: Node, attr: str) -> list[FunctionBody]:
    """The compiled functions named by ``node``'s list(func) attr ``attr`` (at least one)."""
    values = node.attr(attr)
    if not isinstance(values, list) or not values:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): attr '{attr}' must list at least one function", node.name
        )
    return [_body(node, attr, v) for v in values]


def _body(node: Node, attr: str, value: Any) -> FunctionBody:
    name = getattr(value, "name", None)
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"Node '{node.name}' (op '{node.op}'): attr '{attr}' must name a function")
    library = node.library
    if library is None or name not in library:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): attr '{attr}' names function '{name}', which the graph's "
            "function library lacks",
            node.name,
        )
    with library.lock:
        body = library.compiled.get(name)
        if body is None:
            if name in library.compiling:
                raise InvalidArgumentError(
                    f"Node '{node.name}' (op '{node.op}'): function '{name}' calls itself; recursive "
                    "functions are not supported",
                    node.name,
                )
            library.compiling.add(name)
            try:
                body = library.compiled[name] = _compile(node, name)
            finally:
                library.compiling.discard(name)
    if not isinstance(body, FunctionBody):
        raise InternalError(f"function '{name}' was compiled to {type(body).__name__}")
    return body


def truthy(value: Any) -> bool:
    """TensorFlow's rule for If/While conditions: a scalar is true when non-zero (a number) or non-empty
    (a string); any other tensor when it has elements."""
    arr = np.asarray(value)
    if arr.ndim > 0:
        return arr.size > 0
    item = arr.item()
    if isinstance(item, (bytes, str)):
        return len(item) > 0
    return bool(item)


def _caster(node: Node, attr: str, count: int, what: str) -> Callable[[list[Any]], list[Any]]:
    """A function that checks a function's results against the node's declared types (``attr``) and gives
    them the declared numpy dtype, as TensorFlow's outputs always have it."""
    types = node.attr_types(attr)
    if len(types) != count:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): attr '{attr}' lists {len(types)} types but {what} has "
            f"{count} results",
            node.name,
        )
    want = [dtypes.as_numpy_dtype(t) for t in types]

    def cast(values: list[Any]) -> list[Any]:
        out = []
        for v, dt in zip(values, want, strict=True):
            if dt != np.dtype(object) and getattr(v, "dtype", dt) != dt:
                v = np.asarray(v, dtype=dt)
            out.append(v)
        return out

    return cast


def _check_args(node: Node, body: FunctionBody, count: int, what: str) -> None:
    if body.num_args != count:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): {what} '{body.name}' takes {body.num_args} inputs but the "
            f"node passes {count}",
            node.name,
        )


# Never constant-folded (stateful=True): folding would run a whole loop while a plan is built, outside
# any deadline. Expensive: a branch or a loop can be long; the executor learns when one is cheap.


@kernel("If", "StatelessIf", expensive=True, stateful=True, outputs=lambda node: len(node.attr_types("Tout")))
def if_op(node: Node) -> Compute:
    then_body = instantiate(node, "then_branch")
    else_body = instantiate(node, "else_branch")
    num_args = len(node.inputs) - 1
    for body, what in ((then_body, "then_branch"), (else_body, "else_branch")):
        _check_args(node, body, num_args, what)
    cast = _caster(node, "Tout", then_body.num_results, "then_branch")
    name = node.name
    _caster(node, "Tout", else_body.num_results, "else_branch")

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        body = then_body if truthy(inputs[0]) else else_body
        return cast(body.run(ctx, inputs[1:], name))

    return compute


@kernel(
    "Case", "StatelessCase", expensive=True, stateful=True, outputs=lambda node: len(node.attr_types("Tout"))
)
def case_op(node: Node) -> Compute:
    """``tf.switch_case``: runs branch ``branch_index`` (an int32 scalar) of ``branches`` on the other inputs.
    An index out of range runs the last branch, the default, as TensorFlow's kernel does."""
    bodies = instantiate_list(node, "branches")
    num_args = len(node.inputs) - 1
    for i, body in enumerate(bodies):
        _check_args(node, body, num_args, f"branches[{i}]")
        _caster(node, "Tout", body.num_results, f"branches[{i}]")  # checks the branch's result count
    cast = _caster(node, "Tout", bodies[0].num_results, "branches[0]")
    last = len(bodies) - 1
    name = node.name

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        index = inputs[0]
        if np.ndim(index) != 0:
            raise InvalidArgumentError("branch_index must be scalar", name)
        i = int(index)
        body = bodies[i if 0 <= i <= last else last]
        return cast(body.run(ctx, inputs[1:], name))

    return compute


@kernel(
    "While", "StatelessWhile", expensive=True, stateful=True, outputs=lambda node: len(node.attr_types("T"))
)
def while_op(node: Node) -> Compute:
    cond = instantiate(node, "cond")
    body = instantiate(node, "body")
    count = len(node.attr_types("T"))
    if len(node.inputs) != count:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): {len(node.inputs)} inputs, but attr 'T' lists {count} "
            "types",
            node.name,
        )
    _check_args(node, cond, count, "cond")
    _check_args(node, body, count, "body")
    if cond.num_results != 1:
        raise InvalidArgumentError(
            f"Node '{node.name}' (op '{node.op}'): cond '{cond.name}' must return one tensor, not "
            f"{cond.num_results}",
            node.name,
        )
    cast = _caster(node, "T", body.num_results, "body")
    name = node.name
    # parallel_iterations only bounds TensorFlow's pipelining of iterations; these run one after another

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        values = cast(inputs)
        memory = ctx.memory
        held = 0  # bytes of the loop variables an iteration made, alive until the next one replaces them
        try:
            while True:
                if ctx.cancelled():
                    raise CancelledError(
                        f"While loop '{node.name}' was cancelled between iterations", node.name
                    )
                (go,) = cond.run(ctx, values, name)
                if not truthy(go):
                    return values
                # the declared types every iteration: a kernel's dtype drift must not compound in the loop
                values = cast(body.run(ctx, values, name))
                if memory is not None:
                    size = sum(int(getattr(v, "nbytes", 0)) for v in values)
                    memory.hold(size - held)
                    held = size
        finally:
            if held:
                # the loop's results are the node's outputs, counted as the caller's from here
                memory.hold(-held)

    return compute


@kernel(
    "PartitionedCall",
    "StatefulPartitionedCall",
    expensive=True,
    stateful=True,
    outputs=lambda node: len(node.attr_types("Tout")),
)
def call_op(node: Node) -> Compute:
    """Calls inlining did not reach: a graph run as given (``inline_functions`` removes the others)."""
    body = instantiate(node, "f")
    _check_args(node, body, len(node.inputs), "function")
    cast = _caster(node, "Tout", body.num_results, "function")
    name = node.name

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        return cast(body.run(ctx, inputs, name))

    return compute
