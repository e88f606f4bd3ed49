"""Running plans with v1 control flow: frames, iterations and dead tensors, as TensorFlow's executor does.

A graph made by ``tf.compat.v1.cond`` / ``tf.compat.v1.while_loop`` steers data with Switch, Merge, Enter,
Exit and NextIteration. A plan holding any of them runs here instead of the executor's plain loop (which
stays as it is, so graphs without control flow pay nothing):

- every value is tagged with a *frame* (one instance per loop entry: the root frame, or a child made by an
  Enter in a parent frame's iteration) and an *iteration* of it; a node is ready when all its inputs of one
  (frame, iteration) have arrived, so each node runs once per iteration it is reached in;
- Switch sends its data to one port and a *dead* tensor to the other (_SwitchN, a lowered ``tf.switch_case``,
  to one of N ports, the others dead); a node with a dead input does not run and its outputs are dead; a
  Merge runs on its first live input (output 1 is that input's index), or is dead when every input it can
  get in that iteration is dead;
- Enter moves a tensor into iteration 0 of its child frame (``is_constant``: into every iteration, a loop
  invariant); NextIteration into the next iteration (at most ``parallel_iterations`` run at once, later
  ones wait as TensorFlow's do); Exit out to the parent frame. A dead Exit reaches the parent only when
  its frame is done and the Exit never carried a live value (a loop in a branch not taken), and a dead
  NextIteration stops there.

An iteration is done when nothing of it is ready or running, it has no live child frame, and the iteration
before it is done (iteration 0: when every Enter of the frame arrived); a frame is done when all its
iterations are. Ready nodes of every frame and iteration wait in one stack, last ready first (so a loop body
finishes before the next iteration runs ahead). As in TensorFlow's executor, ready nodes of a frame run in
parallel, and so do nodes of different iterations (up to ``parallel_iterations``): a worker computes a
kernel with no lock held and routes its outputs under the run's lock, and starts more workers on the
step's scheduler when more expensive nodes (by learned cost, as outside frames) are ready than workers are
free (``FrameWorkers``). The step's status is checked between nodes, so a deadline or a cancellation stops
a loop between any two nodes of it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels.control_flow_ops import (
    CONTROL_FLOW_OPS,
    ENTER_OPS,
    EXIT_OPS,
    MERGE_OPS,
    NEXT_ITERATION_OPS,
    SWITCH_N_OPS,
    SWITCH_OPS,
)
from poolserve.runtime.kernels.functional_ops import truthy
from poolserve.runtime.threadpool import kernel_clock

if TYPE_CHECKING:
    from poolserve.runtime.executor import Plan, PlanNode, Step

# node kinds (those below ENTER route their outputs within their own frame and iteration)
NORMAL, SWITCH, SWITCH_N, MERGE, TRIGGER, ENTER, EXIT, NEXT = range(8)
# how an edge reaches its consumer (FrameInfo.routes): READY, at once to a consumer it alone makes ready
# (READY_EXIT: an Exit, whose dead value its frame remembers instead of running it); JOIN, to a consumer of
# several producer edges, through the iteration's pending counts; GENERAL, the rest (Merge, readers of feeds)
GENERAL, JOIN, READY, READY_EXIT = range(4)


class _Dead:
    """The value of a dead tensor (an untaken branch's)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DEAD"


DEAD: Any = _Dead()


def has_control_flow(ops: Sequence[str]) -> bool:
    return any(op in CONTROL_FLOW_OPS for op in ops)


class FrameInfo:
    """What running a plan with frames needs, computed once per plan: node kinds, edges by input position
    (the plain plan keeps producers only), pending counts, and each frame's number of Enters."""

    def __init__(self, plan: Plan) -> None:
        nodes = plan.nodes
        index_of = plan.index_of
        n = len(nodes)
        self.kind = [NORMAL] * n
        self.frame_name = [""] * n
        self.is_constant = [False] * n
        self.parallel = [10] * n
        # per node: its input values as far as they are fixed (constants, feeds); None where an executed
        # node produces them
        self.static_inputs: list[list[Any]] = []
        self.out_edges: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]  # (port, dst, position)
        self.control_out: list[list[int]] = [[] for _ in range(n)]
        self.pending = [0] * n  # non-Merge: executed producers' edges; Merge: control edges only
        # Merge: how many dead inputs make it dead, in iteration 0 and in later ones (a loop's Merge gets
        # its Enter in iteration 0 and its NextIteration afterwards)
        self.merge_dead = [(0, 0)] * n
        self.enters: dict[str, int] = {}
        for pn in nodes:
            op = pn.op
            i = pn.index
            if op in SWITCH_OPS:
                self.kind[i] = SWITCH
            elif op in SWITCH_N_OPS:
                self.kind[i] = SWITCH_N
            elif op in MERGE_OPS:
                self.kind[i] = MERGE
            elif op in ENTER_OPS:
                self.kind[i] = ENTER
                name = pn.node.attr_str("frame_name")
                self.frame_name[i] = name
                self.is_constant[i] = pn.node.attr_bool("is_constant", False)
                self.parallel[i] = max(1, pn.node.attr_int("parallel_iterations", 10))
                self.enters[name] = self.enters.get(name, 0) + 1
            elif op in EXIT_OPS:
                self.kind[i] = EXIT
            elif op in NEXT_ITERATION_OPS:
                self.kind[i] = NEXT
            elif op == "ControlTrigger":
                self.kind[i] = TRIGGER
        for pn in nodes:
            i = pn.index
            static: list[Any] = []
            from_next = 0
            dynamic = 0
            for pos, ((src, port), slot) in enumerate(zip(pn.node.inputs, pn.in_slots, strict=True)):
                p = index_of.get(src)
                if p is None or (src, port) in plan.feeds:
                    static.append(plan.template[slot] if slot >= len(plan.feeds) else slot)
                    continue
                static.append(None)
                self.out_edges[p].append((port, i, pos))
                dynamic += 1
                if self.kind[p] == NEXT:
                    from_next += 1
            self.static_inputs.append(static)
            controls = [index_of[c] for c in pn.node.control_inputs if c in index_of]
            for c in controls:
                self.control_out[c].append(i)
            if self.kind[i] == MERGE:
                self.pending[i] = len(controls)
                if from_next:
                    self.merge_dead[i] = (dynamic - from_next, from_next)
                else:
                    self.merge_dead[i] = (dynamic, dynamic)
            else:
                self.pending[i] = dynamic + len(controls)
        # feeds: static_inputs holds their slot number (an int), resolved per step
        self.feed_positions = [
            [
                pos
                for pos, (t, s) in enumerate(zip(pn.node.inputs, pn.in_slots, strict=True))
                if s < len(plan.feeds)
            ]
            for pn in nodes
        ]
        self.roots = [
            pn.index for pn in nodes if self.kind[pn.index] != MERGE and self.pending[pn.index] == 0
        ]
        # per node: not a Merge, and one producer edge (ready on its first delivery)
        self.single = [k != MERGE and p == 1 for k, p in zip(self.kind, self.pending, strict=True)]
        # per node: whether a consumer runs a kernel that may be expensive (only kernels registered as
        # expensive are timed and can turn out so): only then may finishing it call for more workers
        self.feeds_expensive = [
            any(
                self.kind[d] == NORMAL and nodes[d].measure
                for d in [dst for _, dst, _ in self.out_edges[i]] + self.control_out[i]
            )
            for i in range(n)
        ]
        # per node: a kernel never timed (so never expensive) or a routing op, feeding no timed kernel
        self.plain = [
            not self.feeds_expensive[pn.index] and (self.kind[pn.index] != NORMAL or not pn.measure)
            for pn in nodes
        ]
        # per node: its out edges as (port, dst, position, how), READY and JOIN only to a consumer that is no
        # Merge, ControlTrigger or reader of a feed (its inputs are its static ones and what edges bring)
        self.routes: list[tuple[tuple[int, int, int, int], ...]] = [
            tuple((port, dst, pos, self._how(dst)) for port, dst, pos in self.out_edges[i]) for i in range(n)
        ]
        self.computed = [k in (NORMAL, TRIGGER) for k in self.kind]
        self.dead_outs = [(DEAD,) * pn.num_outputs for pn in nodes]

    def _how(self, dst: int) -> int:
        kind = self.kind[dst]
        if kind in (MERGE, TRIGGER) or self.feed_positions[dst]:
            return GENERAL
        if self.pending[dst] > 1:
            return JOIN
        return READY_EXIT if kind == EXIT else READY


class _Iteration:
    __slots__ = ("dead", "frames", "inputs", "merges", "ops", "pending")

    def __init__(self) -> None:
        self.pending: dict[int, int] = {}
        self.dead: set[int] = set()
        self.inputs: dict[int, list[Any]] = {}
        # Merge -> [control edges pending, live input index or -1, dead inputs, value, fired]
        self.merges: dict[int, list[Any]] = {}
        self.ops = 0  # nodes of this iteration ready or running
        self.frames = 0  # child frames entered from this iteration and not done


class _Frame:
    __slots__ = (
        "children",
        "count",
        "dead_exits",
        "deferred",
        "done",
        "invariants",
        "iterations",
        "live_exits",
        "max_parallel",
        "name",
        "outstanding",
        "parent",
        "parent_iter",
        "pending_enters",
    )

    def __init__(
        self, name: str, parent: _Frame | None, parent_iter: int, max_parallel: int, enters: int
    ) -> None:
        self.name = name
        self.parent = parent
        self.parent_iter = parent_iter
        self.max_parallel = max_parallel
        self.pending_enters = enters
        self.iterations: dict[int, _Iteration] = {0: _Iteration()}
        self.count = 0  # the latest iteration started
        self.outstanding = 1  # iterations started and not done
        self.invariants: list[tuple[int, list[Any], bool]] = []
        self.deferred: list[tuple[int, list[Any]]] = []  # NextIteration outputs waiting for a free iteration
        self.dead_exits: dict[int, None] = {}  # Exits that got a dead value (each iteration's but the last)
        self.live_exits: set[int] = set()
        self.children: dict[tuple[int, str], _Frame] = {}
        self.done = False


# a ready node: (node, frame, iteration, the iteration's state, dead, inputs)
Entry = tuple[int, _Frame, int, _Iteration, bool, list[Any]]


class FrameRun:
    """One step's run of a plan with frames (see the module docstring)."""

    def __init__(self, step: Step, info: FrameInfo) -> None:
        self.step = step
        self.info = info
        self.plan = step.plan
        self.root = _Frame("", None, 0, 1, 0)
        self.ready: list[Entry] = []
        self._ctx = step.ctx
        self._computes = [pn.compute for pn in step.plan.nodes]

    # --- delivering values ----------------------------------------------------------------------------------

    def _push(
        self, node: int, frame: _Frame, it: int, state: _Iteration, dead: bool, inputs: list[Any]
    ) -> None:
        state.ops += 1
        self.ready.append((node, frame, it, state, dead, inputs))

    def _inputs(self, node: int) -> list[Any]:
        values = list(self.info.static_inputs[node])
        feeds = self.info.feed_positions[node]
        if feeds:
            for pos in feeds:
                values[pos] = self.step.values[values[pos]]
        return values

    def _deliver(self, frame: _Frame, it: int, state: _Iteration, dst: int, pos: int, value: Any) -> None:
        info = self.info
        if info.kind[dst] == MERGE:
            m = state.merges.get(dst)
            if m is None:
                m = state.merges[dst] = [info.pending[dst], -1, 0, None, False]
            if m[4]:
                return  # fired already: later inputs are ignored
            if value is DEAD:
                m[2] += 1
                expect = info.merge_dead[dst][0 if it == 0 else 1]
                if m[1] < 0 and m[2] >= expect and m[0] == 0:
                    m[4] = True
                    self._push(dst, frame, it, state, True, [])
            elif m[1] < 0:
                m[1] = pos
                m[3] = value
                if m[0] == 0:
                    m[4] = True
                    self._push(dst, frame, it, state, False, [value, np.int32(pos)])
            return
        if info.pending[dst] == 1:
            # one producer edge: ready at once, no per-iteration bookkeeping (a reader of a feed, say)
            first = self._inputs(dst)
            first[pos] = value
            self._push(dst, frame, it, state, value is DEAD and info.kind[dst] != TRIGGER, first)
            return
        inputs = state.inputs.get(dst)
        if inputs is None:
            inputs = state.inputs[dst] = self._inputs(dst)
        inputs[pos] = value
        if value is DEAD:
            state.dead.add(dst)
        self._arrived(frame, it, state, dst)

    def _deliver_control(self, frame: _Frame, it: int, state: _Iteration, dst: int, dead: bool) -> None:
        info = self.info
        if info.kind[dst] == MERGE:
            m = state.merges.get(dst)
            if m is None:
                m = state.merges[dst] = [info.pending[dst], -1, 0, None, False]
            m[0] -= 1
            if m[0] == 0 and not m[4]:
                if m[1] >= 0:
                    m[4] = True
                    self._push(dst, frame, it, state, False, [m[3], np.int32(m[1])])
                elif m[2] >= info.merge_dead[dst][0 if it == 0 else 1]:
                    m[4] = True
                    self._push(dst, frame, it, state, True, [])
            return
        if info.pending[dst] == 1:
            # its only producer edge (a Const or NoOp in a loop body, run once per iteration)
            self._push(dst, frame, it, state, dead and info.kind[dst] != TRIGGER, self._inputs(dst))
            return
        if state.inputs.get(dst) is None:
            state.inputs[dst] = self._inputs(dst)
        if dead:
            state.dead.add(dst)
        self._arrived(frame, it, state, dst)

    def _arrived(self, frame: _Frame, it: int, state: _Iteration, dst: int) -> None:
        left = state.pending.get(dst, self.info.pending[dst]) - 1
        if left:
            state.pending[dst] = left
            return
        state.pending.pop(dst, None)
        dead = dst in state.dead and self.info.kind[dst] != TRIGGER
        state.dead.discard(dst)
        self._push(dst, frame, it, state, dead, state.inputs.pop(dst))

    def _activate(
        self, frame: _Frame, it: int, state: _Iteration, node: int, outs: Sequence[Any], dead: bool
    ) -> None:
        """Delivers a node's outputs (and its control edge) to its consumers in (frame, iteration)."""
        info = self.info
        ready = self.ready
        static = info.static_inputs
        for port, dst, pos, how in info.routes[node]:
            value = outs[port]
            if how >= READY:
                # the consumer's only producer edge: ready at once (the loop body's common case, inlined)
                if value is DEAD:
                    if how == READY_EXIT:
                        # as in TensorFlow's executor: a dead Exit is remembered by its frame, not run
                        frame.dead_exits[dst] = None
                        continue
                    inputs = list(static[dst])
                    inputs[pos] = value
                    state.ops += 1
                    ready.append((dst, frame, it, state, True, inputs))
                else:
                    inputs = list(static[dst])
                    inputs[pos] = value
                    state.ops += 1
                    ready.append((dst, frame, it, state, False, inputs))
            elif how == JOIN:
                # one of several producer edges (inlined _deliver for the common case)
                waiting = state.inputs.get(dst)
                if waiting is None:
                    inputs = state.inputs[dst] = list(static[dst])
                    left = info.pending[dst] - 1
                else:
                    inputs = waiting
                    left = state.pending[dst] - 1
                inputs[pos] = value
                if value is DEAD:
                    state.dead.add(dst)
                if left:
                    state.pending[dst] = left
                else:
                    del state.inputs[dst]
                    state.ops += 1
                    ready.append((dst, frame, it, state, dst in state.dead, inputs))
            else:
                self._deliver(frame, it, state, dst, pos, value)
        for dst in info.control_out[node]:
            if info.single[dst] and info.kind[dst] != TRIGGER:
                state.ops += 1
                ready.append((dst, frame, it, state, dead, self._inputs(dst)))
            else:
                self._deliver_control(frame, it, state, dst, dead)

    # --- frames and iterations ------------------------------------------------------------------------------

    def _child(self, frame: _Frame, it: int, enter: int) -> _Frame:
        name = self.info.frame_name[enter]
        child = frame.children.get((it, name))
        if child is None:
            child = _Frame(name, frame, it, self.info.parallel[enter], self.info.enters[name])
            frame.children[(it, name)] = child
            frame.iterations[it].frames += 1
        return child

    def _next_iteration(self, frame: _Frame) -> None:
        """Starts the frame's next iteration: loop invariants and waiting NextIteration outputs enter it."""
        frame.count += 1
        state = frame.iterations[frame.count] = _Iteration()
        frame.outstanding += 1
        for node, outs, dead in frame.invariants:
            self._activate(frame, frame.count, state, node, outs, dead)
        deferred, frame.deferred = frame.deferred, []
        for node, outs in deferred:
            self._activate(frame, frame.count, state, node, outs, False)

    def _iteration_done(self, frame: _Frame, it: int) -> bool:
        state = frame.iterations[it]
        if state.ops or state.frames:
            return False
        if it == 0:
            return frame.pending_enters == 0
        return it - 1 not in frame.iterations

    def _cleanup(self, frame: _Frame, it: int) -> None:
        """Drops the iterations that are done from ``it`` on; a frame with none left is done: its dead Exits
        go to the parent, whose iteration may be done in turn."""
        while frame.parent is not None:
            while it <= frame.count and it in frame.iterations and self._iteration_done(frame, it):
                del frame.iterations[it]
                frame.outstanding -= 1
                it += 1
                if frame.deferred:
                    self._next_iteration(frame)
            if frame.pending_enters or frame.outstanding:
                return
            frame.done = True
            parent, parent_iter = frame.parent, frame.parent_iter
            parent_state = parent.iterations[parent_iter]
            for node in frame.dead_exits:
                if node not in frame.live_exits:
                    if parent is self.root:
                        self.step.values[self.plan.nodes[node].out_base] = DEAD
                    self._activate(parent, parent_iter, parent_state, node, [DEAD], True)
            del parent.children[(parent_iter, frame.name)]
            parent_state.frames -= 1
            frame, it = parent, parent_iter

    # --- running --------------------------------------------------------------------------------------------

    def start(self) -> None:
        state = self.root.iterations[0]
        for r in reversed(self.info.roots):
            self._push(r, self.root, 0, state, False, self._inputs(r))

    def run_node(
        self, node: int, frame: _Frame, it: int, state: _Iteration, dead: bool, inputs: list[Any]
    ) -> Sequence[Any] | None:
        """Runs one ready node (its kernel unless dead or a routing op) and routes its outputs. Returns its
        outputs (None when it was dead and did not run), for tracing and memory accounting."""
        if dead:
            self.finish(node, frame, it, state, True, self.info.dead_outs[node])
            return None
        outs = (
            self._computes[node](self._ctx, inputs) if self.info.computed[node] else self.routed(node, inputs)
        )
        self.finish(node, frame, it, state, False, outs)
        return outs

    def routed(self, node: int, inputs: list[Any]) -> Sequence[Any]:
        """The outputs of a live routing op (Switch, _SwitchN, Merge, Enter, Exit, NextIteration)."""
        kind = self.info.kind[node]
        if kind == SWITCH:
            pred = inputs[1]
            if type(pred) is not np.bool_:  # (what comparisons and LoopCond give: a scalar, checked)
                if np.ndim(pred) != 0:
                    raise InvalidArgumentError(
                        f"The second input must be a scalar, but it has shape {list(np.shape(pred))}"
                    )
                pred = truthy(pred)
            return [DEAD, inputs[0]] if pred else [inputs[0], DEAD]
        if kind == SWITCH_N:
            index = inputs[1]
            if np.ndim(index) != 0:
                shape = ",".join(str(d) for d in np.shape(index))
                raise InvalidArgumentError(f"The second input must be a scalar, but it has shape [{shape}]")
            outs = list(self.info.dead_outs[node])
            i = int(index)
            outs[i if 0 <= i < len(outs) else -1] = inputs[0]  # out of range: the last port, the default
            return outs
        if kind == MERGE:
            return inputs
        return [inputs[0]]

    def finish(
        self, node: int, frame: _Frame, it: int, state: _Iteration, dead: bool, outs: Sequence[Any]
    ) -> None:
        """Routes a node's outputs to its consumers, frames and iterations (under the run's lock)."""
        kind = self.info.kind[node]
        if frame is self.root:
            values = self.step.values
            b = self.plan.nodes[node].out_base
            for o in outs:
                values[b] = o
                b += 1
        if kind < ENTER:
            self._activate(frame, it, state, node, outs, dead)
        elif kind == ENTER:
            info = self.info
            child = self._child(frame, it, node)
            if info.is_constant[node]:
                child.invariants.append((node, list(outs), dead))
                for i in range(child.count + 1):
                    if i in child.iterations:
                        self._activate(child, i, child.iterations[i], node, outs, dead)
            else:
                self._activate(child, 0, child.iterations[0], node, outs, dead)
            child.pending_enters -= 1
            if not child.pending_enters:
                self._cleanup(child, 0)
        elif kind == EXIT:
            if dead:
                frame.dead_exits[node] = None
            elif frame.parent is not None:
                frame.live_exits.add(node)
                if frame.parent is self.root:  # the Exit's value is the root frame's: it may be fetched
                    self.step.values[self.plan.nodes[node].out_base] = outs[0]
                self._activate(
                    frame.parent,
                    frame.parent_iter,
                    frame.parent.iterations[frame.parent_iter],
                    node,
                    outs,
                    False,
                )
        elif not dead:  # NextIteration (a dead one ends the loop's deadness here)
            if it == frame.count and frame.outstanding >= frame.max_parallel:
                frame.deferred.append((node, list(outs)))
            else:
                if it == frame.count:
                    self._next_iteration(frame)
                self._activate(frame, it + 1, frame.iterations[it + 1], node, outs, False)
        state.ops -= 1
        if not state.ops and not state.frames and frame.parent is not None:
            self._cleanup(frame, it)

    def check_fetches(self) -> InvalidArgumentError | None:
        """A fetched tensor that is dead (or never computed) fails the step, as in TensorFlow."""
        values = self.step.values
        for t, slot in zip(self.plan.fetches, self.plan.fetch_slots, strict=True):
            v = values[slot]
            if v is None or v is DEAD:
                name = f"{t[0]}:{t[1]}"
                why = "is dead (it is on a branch the step did not take)" if v is DEAD else "was not computed"
                return InvalidArgumentError(f"Fetched tensor '{name}' {why}")
        return None


class FrameWorkers:
    """Runs a step of a plan with frames on as many threads as it has expensive nodes ready at once.

    Ready nodes of every frame and iteration wait in one stack (``FrameRun.ready``). A worker pops the
    latest, computes its kernel with no lock held, then routes its outputs under the run's lock; routing
    ops and dead nodes are handled under the lock without a kernel call. When more expensive nodes are
    ready than workers are free to take them, the worker schedules more workers (``Step.schedule``: the
    inter-op pool or the run handler), as the plain executor hands off expensive nodes; a worker ends when
    the stack is empty, and the last one to finish completes the step. On the caller's thread
    (``inter_op_thread_pool = -1``) or a saturated scheduler, one worker runs everything.
    """

    def __init__(self, step: Step) -> None:
        info = step.plan.frames
        assert info is not None
        self.step = step
        self.info = info
        self.run = FrameRun(step, info)
        self.lock = threading.Lock()
        self.workers = 0  # workers started and not ended
        self.computing = 0  # workers inside a kernel now
        self.completed = False
        from poolserve.runtime.executor import NodeRecord, kernel_error  # (executor imports this module)

        self._record = NodeRecord
        self._kernel_error = kernel_error

    def start(self) -> None:
        self.run.start()
        self.workers = 1

    def spawn(self) -> None:
        """A scheduled worker: counted in the step's running closures while it works."""
        step = self.step
        with step._lock:
            if step._finished:
                with self.lock:
                    self.workers -= 1
                return
            step._running += 1
        try:
            self.work()
        except BaseException as e:  # a bug in the executor itself: fail the step, never hang it
            from poolserve.runtime.errors import InternalError

            step._fail(InternalError(f"executor failure: {type(e).__name__}: {e}"))
            with self.lock:
                self.workers -= 1
                self.computing = 0
        finally:
            step._exit()

    def work(self) -> None:
        """Runs ready nodes until none is left. Routing ops, dead nodes and cheap kernels run under the run's
        lock, as one thread would run them; only an expensive kernel (by learned cost) is computed with the
        lock released, so other workers route and compute meanwhile. While this worker is the only one, it
        keeps the lock from node to node (no other thread can want it): a loop with nothing to run in
        parallel pays no more than one thread running it would."""
        step = self.step
        run = self.run
        ready = run.ready
        nodes = step.plan.nodes
        info = self.info
        kinds = info.kind
        computed = info.computed
        dead_outs = info.dead_outs
        computes = run._computes
        ctx = step.ctx
        lock = self.lock
        parallel = not step.inline_all
        counted = step.memory is not None or step.trace is not None
        routed = run.routed
        finish = run.finish
        kernel_error = self._kernel_error
        feeds_expensive = info.feeds_expensive
        # nodes that need none of the checks below: run as one thread would run them
        plain = [False] * len(nodes) if counted else info.plain if parallel else [True] * len(nodes)
        entry: Entry | None = None
        node = -1
        while True:
            extra = 0
            stop = False
            with lock:
                try:
                    while True:
                        if step.status is not None or not ready:
                            stop = True
                            break
                        entry = ready.pop()
                        node, frame, it, state, dead, inputs = entry
                        if plain[node]:
                            if dead:
                                finish(node, frame, it, state, True, dead_outs[node])
                            elif computed[node]:
                                finish(node, frame, it, state, False, computes[node](ctx, inputs))
                            else:
                                finish(node, frame, it, state, False, routed(node, inputs))
                            if self.workers == 1:
                                continue  # no other worker waits for the lock
                            entry = None
                            break
                        pn = nodes[node]
                        if parallel and pn.expensive and not dead and kinds[node] == NORMAL:
                            self.computing += 1
                            break
                        # under the lock, as one thread runs them: a routing op, a dead node or a cheap kernel
                        check = parallel and feeds_expensive[node]
                        before = len(ready)
                        if counted:
                            if not self._counted(entry, pn):
                                stop = True
                                break
                        else:
                            run.run_node(*entry)
                        if check and len(ready) > max(before, 1) and self._expensive(before):
                            extra = self._wanted()
                            self.workers += extra
                        entry = None
                        if extra or self.workers > 1:
                            break
                except BaseException as e:
                    step._fail(kernel_error(nodes[node], e))
                    stop = True
            if stop:
                break
            if entry is not None:
                # an expensive kernel: computed with the lock released
                pn = nodes[node]
                before = self._step(entry, pn)
                if before < 0:
                    break
                with lock:
                    if feeds_expensive[node] and len(ready) > max(before, 1) and self._expensive(before):
                        extra = self._wanted()
                        self.workers += extra
                entry = None
            if extra:
                if step.saturated():
                    with lock:
                        self.workers -= extra
                else:
                    for _ in range(extra):
                        step.schedule(self.spawn)
        self._end()

    def _end(self) -> None:
        """This worker ends; the last one completes the step."""
        step = self.step
        run = self.run
        ready = run.ready
        lock = self.lock
        with lock:
            self.workers -= 1
            last = not self.completed and (
                step.status is not None or (not ready and self.computing == 0 and self.workers == 0)
            )
            if last and step.status is None:
                self.completed = True
                missing = run.check_fetches()
                if missing is not None:
                    step._fail(missing)
                with step._lock:
                    step._remaining = 0

    def _counted(self, entry: Entry, pn: PlanNode) -> bool:
        """``run_node`` for a step that traces or counts memory (under the lock); False when the node's
        outputs are over the limit."""
        node, frame, it, state, dead, inputs = entry
        start = time.time_ns() if self.step.trace is not None else 0
        computed = not dead and self.info.computed[node]
        if dead:
            outs: Sequence[Any] = self.info.dead_outs[node]
        else:
            outs = pn.compute(self.step.ctx, inputs) if computed else self.run.routed(node, inputs)
        if not dead and not self._account(pn, frame, computed, outs, start):
            return False
        self.run.finish(node, frame, it, state, dead, outs)
        return True

    def _account(self, pn: PlanNode, frame: _Frame, computed: bool, outs: Sequence[Any], start: int) -> bool:
        """Memory accounting and tracing of a node that ran; False when its outputs are over the limit."""
        step = self.step
        memory = step.memory
        in_use = 0
        if memory is not None:
            error = None
            if not computed:
                in_use = memory.in_use()  # routing ops pass tensors on: nothing allocated
            elif frame is self.run.root:
                error, in_use = memory.allocate(pn, outs)
            else:
                # values inside loop frames are dropped with their iteration: counted as they are made
                error, in_use = memory.transient(pn, outs)
            if error is not None:
                step._fail(error)
                return False
        if step.trace is not None:
            step.trace.record(self._record(pn.index, 0, start, time.time_ns(), outs, in_use))
        return True

    def _step(self, entry: Entry, pn: PlanNode) -> int:
        """Computes an expensive kernel with the run's lock released, then routes its outputs under it.
        Returns the stack's length before routing (what is above it was made ready by this node), or -1
        when the step failed."""
        step = self.step
        node, frame, it, state, _, inputs = entry
        start = time.time_ns() if step.trace is not None else 0
        try:
            if pn.measure and pn.skip:  # not a sampled run (executor.SAMPLE_EVERY): the wall clock only
                pn.skip -= 1
                t0 = time.perf_counter()
                outs = pn.compute(step.ctx, inputs)
                kernel_clock.seconds += time.perf_counter() - t0
            elif pn.measure:
                c0 = time.thread_time()
                t0 = time.perf_counter()
                outs = pn.compute(step.ctx, inputs)
                elapsed = time.perf_counter() - t0
                # the thread's CPU time, or the clock's for a blocking kernel (see PlanNode)
                pn.learn(elapsed * 1e6 if pn.wall else (time.thread_time() - c0) * 1e6)
                kernel_clock.seconds += elapsed
            else:
                outs = pn.compute(step.ctx, inputs)
            ok = (step.memory is None and step.trace is None) or self._account(pn, frame, True, outs, start)
        except BaseException as e:
            step._fail(self._kernel_error(pn, e))
            ok = False
        with self.lock:
            self.computing -= 1
            if not ok:
                return -1
            before = len(self.run.ready)
            try:
                self.run.finish(node, frame, it, state, False, outs)
            except BaseException as e:
                step._fail(self._kernel_error(pn, e))
                return -1
            return before

    def _expensive(self, start: int) -> bool:
        """Whether a ready node from ``start`` on in the stack is an expensive kernel."""
        nodes = self.step.plan.nodes
        kinds = self.info.kind
        ready = self.run.ready
        for k in range(start, len(ready)):
            entry = ready[k]
            if not entry[4] and kinds[entry[0]] == NORMAL and nodes[entry[0]].expensive:
                return True
        return False

    def _wanted(self) -> int:
        """More workers to start: expensive ready nodes beyond the workers free to take them."""
        nodes = self.step.plan.nodes
        kinds = self.info.kind
        expensive = 0
        for entry in self.run.ready:
            if not entry[4] and kinds[entry[0]] == NORMAL and nodes[entry[0]].expensive:
                expensive += 1
        free = self.workers - self.computing
        return max(0, expensive - free)


def run_frames(step: Step) -> None:
    """Runs a step of a plan with frames to completion (``Step`` calls it on the thread it gives the step;
    more workers may run on the scheduler's threads meanwhile)."""
    workers = FrameWorkers(step)
    workers.start()
    workers.work()
