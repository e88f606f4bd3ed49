"""The executor: a signature's pruned graph compiled once into a ``Plan``, then run as ``Step``s.

A plan holds integer slots, not names: feeds take the first slots, then every node's outputs; constants
(Const nodes and folded constant-only subgraphs) are pre-filled in a template the step copies. Per node it
keeps the bound kernel, its input slots, its consumers and its pending count.

A step runs TensorFlow's dataflow rule: when a node finishes, consumers whose inputs are all ready become
ready; cheap ones run inline on the same thread, expensive ones go to the scheduler (an inter-op pool or a
run handler), except the last expensive one, which runs inline when nothing else is ready. Cost estimates
of expensive kernels are learned from measured times, so a kernel that turns out cheap runs inline.

Plans with v1 control flow (Switch, Merge, Enter...) have ``frames`` and run in ``runtime/frames.py``
instead, with frames, iterations and dead tensors; the loops here never see them. Steps with a memory limit
or a trace count live bytes (``runtime/step_memory.py``) in the instrumented loop; others pay nothing.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from poolserve.runtime.errors import (
    CancelledError,
    InternalError,
    InvalidArgumentError,
    OpError,
    ResourceExhaustedError,
)
from poolserve.runtime.frames import FrameInfo, has_control_flow, run_frames
from poolserve.runtime.graph import Graph
from poolserve.runtime.kernels.registry import Compute, OpContext, ResourceContainer
from poolserve.runtime.node import Node
from poolserve.runtime.step_memory import StepMemory
from poolserve.runtime.step_way import StepWay
from poolserve.runtime.threadpool import CallerThread, Scheduler, kernel_clock
from poolserve.runtime.types import TensorId

if TYPE_CHECKING:
    from poolserve.runtime.callables import SerialProgram

# A kernel whose learned cost is above this many microseconds is dispatched to the pool; below it, the
# hand-off costs more than it saves: ~25 us to wake a thread, ~100 us when the sender holds the GIL,
# and BLAS kernels already use every core. Measured on the fixtures (benchmarks/bench_executor.py):
# 40 us made conv_transpose 4x slower than inline; 100-1000 us were alike on the fixtures.
EXPENSIVE_THRESHOLD_US = 250.0
# Learned estimates move as (9 * previous + measured) / 10; they start high, as TensorFlow's do.
_INITIAL_COST_US = 1000.0
# A timed kernel reads its thread's CPU clock on its first SAMPLE_FIRST runs, then on one run in
# SAMPLE_EVERY (the others only read the wall clock, for kernel_clock). That clock is a system call, not a
# vDSO read: 0.8-1.6 us on this project's 2-core VM, two per timed kernel. branches2.b1 read it 12 times a
# step of ~200 us; MobileNetV2 108 times a step.
SAMPLE_FIRST = 16
SAMPLE_EVERY = 8

DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0"


def kernel_error(node: Node | PlanNode, err: BaseException) -> OpError:
    """A failure inside a kernel as an OpError naming the node, in TensorFlow's ``[[{{node x}}]]`` style."""
    suffix = f"\n\t [[{{{{node {node.name}}}}}]]"
    if isinstance(err, OpError):
        if err.node_name is None or err.node_name == node.name:
            if not err.message.endswith(suffix):
                err.message += suffix
            err.node_name = node.name
        return err
    if isinstance(err, MemoryError):
        return ResourceExhaustedError(f"OOM when allocating an output of {node.op}{suffix}", node.name)
    if isinstance(err, (ValueError, TypeError, IndexError, KeyError, ZeroDivisionError, FloatingPointError)):
        return InvalidArgumentError(f"{node.op} failed: {err}{suffix}", node.name)
    return InternalError(f"{node.op} failed: {type(err).__name__}: {err}{suffix}", node.name)


class PlanNode:
    """One executed node of a plan."""

    __slots__ = (
        "compute",
        "consumers",
        "cost_us",
        "donate",
        "expensive",
        "in_slots",
        "index",
        "label",
        "learned",
        "measure",
        "name",
        "node",
        "num_outputs",
        "op",
        "out_base",
        "samples",
        "skip",
        "wall",
    )

    def __init__(
        self, index: int, node: Node, compute: Compute, expensive: bool, blocking: bool = False
    ) -> None:
        self.index = index
        self.node = node
        self.name = node.name
        self.op = node.op
        self.compute = compute
        self.in_slots: tuple[int, ...] = ()
        self.out_base = 0
        self.num_outputs = 0
        self.consumers: tuple[int, ...] = ()
        # input slots that die at this node and that its kernel may write its output into: the step clears
        # them before calling it, so that only the kernel's input list holds them (runtime/inplace.py)
        self.donate: tuple[int, ...] = ()
        # Only kernels registered as expensive are timed; cheap ones always run inline. A kernel's cost is
        # the CPU time of its thread: wall time counted the waits for the GIL and the cores, and on a busy
        # machine it sent 0.1 ms matmuls to other threads, where they waited on each other (branches4.b16,
        # one caller: 2.4 ms a step on the pool's threads against 0.9 ms on one thread). A kernel that
        # may wait without computing (``blocking``) is timed by the clock: its wait is what a thread saves.
        self.measure = expensive
        self.wall = blocking
        self.expensive = expensive
        self.cost_us = _INITIAL_COST_US if expensive else 0.0
        self.learned = False
        self.samples = 0
        self.skip = 0  # runs left before the next one that measures its CPU time (see SAMPLE_EVERY)
        self.label = ""

    def learn(self, elapsed_us: float) -> None:
        if self.learned:
            self.cost_us = (9.0 * self.cost_us + elapsed_us) / 10.0
        else:  # the first measurement replaces the guess
            self.cost_us = elapsed_us
            self.learned = True
        self.expensive = self.cost_us > EXPENSIVE_THRESHOLD_US
        self.samples += 1
        if self.samples >= SAMPLE_FIRST:
            self.skip = SAMPLE_EVERY - 1


class ConstantFolder:
    """Per-session values of constant-only nodes, computed once (node name -> outputs)."""

    def __init__(self, graph: Graph, enabled: bool = True, max_bytes: int = 10 << 20) -> None:
        self.graph = graph
        self.enabled = enabled
        self.max_bytes = max_bytes
        self._values: dict[str, Sequence[Any] | None] = {}
        self._lock = threading.Lock()

    def extended(self, graph: Graph) -> ConstantFolder:
        """A folder for ``graph``, a graph this one's nodes were added to (``Session.extend``): nodes keep
        their values, so what was folded is not folded again."""
        folder = ConstantFolder(graph, self.enabled, self.max_bytes)
        with self._lock:
            folder._values = dict(self._values)
        return folder

    def fold(self, node: Node, inputs: list[Any]) -> Sequence[Any] | None:
        """The node's outputs if it can be folded (None: run it every step)."""
        with self._lock:
            if node.name in self._values:
                return self._values[node.name]
        outputs: Sequence[Any] | None
        try:
            with np.errstate(all="ignore"):
                outputs = self.graph.kernels[node.name](OpContext(ResourceContainer()), inputs)
            if sum(getattr(o, "nbytes", 0) for o in outputs) > self.max_bytes:
                outputs = None
        except Exception:
            outputs = None  # let the step fail on it, with the step's error handling
        if outputs is not None:
            for o in outputs:
                if isinstance(o, np.ndarray):
                    o.flags.writeable = False
        with self._lock:
            self._values[node.name] = outputs
        return outputs

    def foldable(self, node: Node) -> bool:
        kdef = self.graph.kernel_defs[node.name]
        return self.enabled and bool(node.inputs) and not kdef.stateful


def _timeline_label(node: Node) -> str:
    inputs = [f"{src}" if port == 0 else f"{src}:{port}" for src, port in node.inputs]
    return f"{node.name} = {node.op}({', '.join(inputs)})"


class Plan:
    """The compiled form of one signature (feeds, fetches, targets) of a graph."""

    def __init__(
        self,
        graph: Graph,
        feeds: Sequence[TensorId],
        fetches: Sequence[TensorId],
        targets: Sequence[str] = (),
        folder: ConstantFolder | None = None,
        wrap: Callable[[Node, Compute], Compute] | None = None,
    ) -> None:
        self.graph = graph
        self.feeds = list(feeds)
        self.fetches = list(fetches)
        self.targets = list(targets)
        # CPU seconds a step of this plan takes on the RunHandlerPool's threads, learned as node costs are
        # (0 = not yet measured): the pool's hint of how long a step will run
        self.cpu = 0.0
        # of that, the share spent in timed kernels (numpy runs them without the GIL); -1 until measured
        self.kernel_share = -1.0
        # a kernel that may wait without computing: the CPU measured says nothing of the time a step takes
        self.blocking = False
        # steps left before the next one whose thread CPU time is measured (see SAMPLE_EVERY), and how
        # many were (see learn_cpu)
        self.cpu_skip = 0
        self.cpu_samples = 0
        # values fed to the last step whose CPU a pool slot measured (0: none yet): a step fed many more
        # is expected to cost that much more (``expected_cpu``)
        self.feed_size = 0
        # the last step of it that ended ran expensive nodes on two threads at once: the next one's kernels
        # get a share of the cores each, not all of them (see RunHandler.expect)
        self.parallel = False
        # the last step of it that ended had no expensive node ready: it ran on one thread from start to
        # end, with nothing to hand off or to preempt (see Session._enter_pool)
        self.cheap = False
        # its nodes in one topological order (callables.SerialProgram), made the first time a step of it
        # may run from start to end on its caller's thread (Session._run_serial)
        self.serial: SerialProgram | None = None
        # which way its lone steps run, executor or straight loop, from their measured times
        self.way = StepWay()
        pruned = graph.prune(fetches, targets, feeds)
        graph.runnable(pruned)  # a node poolserve cannot run fails the signature that needs it, here
        self.pruned = pruned

        feed_set = set(self.feeds)
        slot_of: dict[TensorId, int] = {t: i for i, t in enumerate(self.feeds)}
        template: list[Any] = [None] * len(self.feeds)
        constant: set[str] = set()  # nodes whose outputs are all pre-filled
        self.folded: list[str] = []
        self.nodes: list[PlanNode] = []
        index_of: dict[str, int] = {}

        for node in pruned:
            outputs = graph.num_outputs[node.name]
            value: Sequence[Any] | None = None
            controls_constant = all(c in constant for c in node.control_inputs)
            if node.op == "Const" and not node.control_inputs:
                value = graph.kernels[node.name](OpContext(), [])
            elif (
                folder is not None
                and outputs > 0
                and controls_constant
                and folder.foldable(node)
                and all(t not in feed_set and t[0] in constant and t in slot_of for t in node.inputs)
            ):
                value = folder.fold(node, [template[slot_of[t]] for t in node.inputs])
                if value is not None:
                    self.folded.append(node.name)
            # A node runs (or is folded) though one of its outputs is fed when it is a target, or another
            # of its outputs is needed: as in TensorFlow, what reads a fed output reads the fed value (a fed
            # Placeholder run as a target fails as unfed), so fed outputs keep their feed slots
            if value is not None:
                constant.add(node.name)
                for port in range(outputs):
                    if (node.name, port) not in feed_set:
                        slot_of[(node.name, port)] = len(template)
                    template.append(value[port])
                continue
            kdef = graph.kernel_defs[node.name]
            compute = graph.kernels[node.name]
            if wrap is not None:
                compute = wrap(node, compute)
            pn = PlanNode(len(self.nodes), node, compute, kdef.expensive, kdef.blocking)
            self.blocking = self.blocking or kdef.blocking
            pn.out_base = len(template)
            pn.num_outputs = outputs
            pn.label = _timeline_label(node)
            for port in range(outputs):
                if (node.name, port) not in feed_set:
                    slot_of[(node.name, port)] = len(template)
                template.append(None)
            index_of[node.name] = pn.index
            self.nodes.append(pn)

        consumers: list[list[int]] = [[] for _ in self.nodes]
        pending = [0] * len(self.nodes)
        for pn in self.nodes:
            node = pn.node
            pn.in_slots = tuple(slot_of[t] for t in node.inputs)
            producers = {src for src, port in node.inputs if (src, port) not in feed_set}
            producers.update(node.control_inputs)
            producers &= index_of.keys()
            pending[pn.index] = len(producers)
            for p in producers:
                consumers[index_of[p]].append(pn.index)
        for pn in self.nodes:
            pn.consumers = tuple(consumers[pn.index])

        self.template = template
        self.initial_pending = pending
        self.roots = [pn.index for pn in self.nodes if pending[pn.index] == 0]
        self.fetch_slots = [slot_of[t] for t in self.fetches]
        self.slot_of = slot_of
        self.index_of = index_of
        # per slot, how many inputs read it (StepMemory's, made by the first step that counts memory)
        self.slot_uses: list[int] | None = None
        # v1 control flow (Switch, Merge, Enter...): the plan runs with frames (runtime/frames.py)
        self.frames: FrameInfo | None = None
        if has_control_flow([pn.op for pn in self.nodes]):
            self.frames = FrameInfo(self)

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    def learn_cpu(self, seconds: float, kernel: float = -1.0) -> None:
        """Learns a step's thread CPU time; ``kernel``, when measured, the part of it in timed kernels."""
        # a blocking plan stays unmeasured (cost 0): the fast lanes (``Session._enter_pool``, ``arun``'s
        # steps on the event loop) take only plans measured cheap, and a sleeping kernel would look free
        # The first step pays once for what later steps reuse (buffers, caches, lazily built kernels): the
        # second measure replaces it rather than averaging with it. Averaged, a cold first step of a tiny
        # graph (3 nodes, 0.2 ms warm) kept it above SLOT_STEP_S for a dozen steps on a slower machine.
        if seconds > 0.0 and not self.blocking:
            fresh = self.cpu_samples <= 1
            self.cpu = seconds if fresh else (9.0 * self.cpu + seconds) / 10.0
            if kernel >= 0.0:
                share = min(1.0, kernel / seconds)
                known = self.kernel_share >= 0.0 and not fresh
                self.kernel_share = (9.0 * self.kernel_share + share) / 10.0 if known else share
            self.cpu_samples += 1
            if self.cpu_samples >= SAMPLE_FIRST:
                self.cpu_skip = SAMPLE_EVERY - 1

    def measures_cpu(self, feeds: list[Any]) -> bool:
        """Whether the step about to run on a pool slot, fed ``feeds``, reads its thread's CPU clock (then
        ``learn_cpu``); the others are charged the learned ``cpu`` (see SAMPLE_EVERY). A measured step's feed
        size is remembered (``feed_size``, for ``expected_cpu``). Read once per step."""
        if self.cpu_skip:
            self.cpu_skip -= 1
            return False
        self.feed_size = feed_size(feeds)
        return True


def feed_size(feeds: list[Any]) -> int:
    """How many values a step is fed (a value without a size counts as one)."""
    total = 0
    for v in feeds:
        total += getattr(v, "size", 1)
    return total


def expected_cpu(plan: Plan, feeds: list[Any]) -> float:
    """The CPU seconds a step of ``plan`` fed ``feeds`` is expected to take: the plan's learned cost, scaled
    up when the step is fed more values than the last measured one (``Plan.feed_size``). The cost is learned
    per plan, not per shape: a batch of 256 through a plan learned on single rows would otherwise count as
    short and run on an event loop, where nothing stops it at its deadline."""
    cpu = plan.cpu
    known = plan.feed_size
    if known and cpu > 0.0:
        size = feed_size(feeds)
        if size > known:
            return cpu * size / known
    return cpu


class NodeRecord:
    """What tracing records about one executed node (times in nanoseconds since the epoch)."""

    __slots__ = (
        "bytes_in_use",
        "end_ns",
        "index",
        "label",
        "name",
        "outputs",
        "scheduled_ns",
        "start_ns",
        "thread_id",
    )

    def __init__(
        self,
        index: int,
        scheduled_ns: int,
        start_ns: int,
        end_ns: int,
        outputs: Sequence[Any],
        bytes_in_use: int = 0,
    ) -> None:
        self.index = index
        # the step's live bytes once this node's outputs were allocated (StepMemory.live)
        self.bytes_in_use = bytes_in_use
        # a node of a function some node of the step ran (If, While, a call; index -1): its name under
        # the caller's, "caller/node", and its timeline label; empty for the plan's own nodes
        self.name = ""
        self.label = ""
        self.scheduled_ns = scheduled_ns
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.thread_id = threading.get_ident()
        self.outputs = outputs


class StepTrace:
    """Per-step trace state: node records and the time each node became ready."""

    def __init__(self, num_nodes: int, scheduler_label: str = "", keep_values: bool = True) -> None:
        self.records: list[NodeRecord] = []
        # False: a record describes its outputs (dtype, shape, bytes) without holding their buffers, for a
        # step traced only to report its allocations (RunOptions.report_tensor_allocations_upon_oom)
        self.keep_values = keep_values
        self.ready_ns = [0] * num_nodes
        self.start_ns = time.time_ns()
        self.thread_names: dict[int, str] = {}
        # names what scheduled the step (e.g. its run handler): step_stats' thread names carry it
        self.scheduler_label = scheduler_label

    def adopt(self, inner: StepTrace, caller: str, plan: Plan) -> None:
        """Takes the records of a function's step (of ``plan``, run by the node named ``caller``), naming
        its nodes under the caller's name, as TensorFlow's timeline shows function bodies."""
        for rec in inner.records:
            if not rec.name:
                pn = plan.nodes[rec.index]
                rec.name, rec.label = pn.name, pn.label
            rec.name = f"{caller}/{rec.name}"
            rec.label = _label_under(caller, rec.label)
            rec.index = -1
            self.records.append(rec)
        for tid, name in inner.thread_names.items():
            self.thread_names.setdefault(tid, name)

    def record(self, rec: NodeRecord) -> None:
        self.records.append(rec)  # list.append is atomic
        if rec.thread_id not in self.thread_names:
            name = threading.current_thread().name
            self.thread_names[rec.thread_id] = (
                f"{name} ({self.scheduler_label})" if self.scheduler_label else name
            )


def _label_under(caller: str, label: str) -> str:
    """``"x = Op(a, b:1)"`` -> ``"caller/x = Op(caller/a, caller/b:1)"``: a function body's node and the
    inputs it reads, named as the step_stats name them (so a timeline joins them)."""
    name, sep, rest = label.partition(" = ")
    op, paren, inputs = rest.partition("(")
    if not sep or not paren or not inputs.endswith(")"):
        return f"{caller}/{label}"
    read = ", ".join(f"{caller}/{i}" for i in inputs[:-1].split(", ") if i)
    return f"{caller}/{name} = {op}({read})"


def _described(value: Any) -> Any:
    """An array's dtype, shape and nbytes without its buffer (a zero-strided view of one element)."""
    if isinstance(value, np.ndarray):
        return np.broadcast_to(np.zeros((), value.dtype), value.shape)
    return value


_step_ids = itertools.count(1)


class Step:
    """One execution of a plan. ``done(step)`` is called exactly once, when no node of it is running."""

    __slots__ = (
        "__weakref__",
        "_finished",
        "_lock",
        "_pending",
        "_remaining",
        "_running",
        "ctx",
        "done",
        "heavy",
        "inline_all",
        "memory",
        "memory_limit",
        "plan",
        "preempted",
        "saturated",
        "schedule",
        "spawned",
        "status",
        "step_id",
        "trace",
        "values",
    )

    def __init__(
        self,
        plan: Plan,
        feed_values: Sequence[Any],
        resources: ResourceContainer,
        scheduler: Scheduler,
        done: Callable[[Step], None],
        trace: StepTrace | None = None,
        memory_limit: int | None = None,
        parent_memory: StepMemory | None = None,
    ) -> None:
        self.plan = plan
        self.step_id = next(_step_ids)
        values = plan.template.copy()
        values[: len(feed_values)] = feed_values
        self.values: list[Any] = values
        self.ctx = OpContext(resources, self.step_id)
        self.ctx.trace = trace
        self.schedule = scheduler.schedule
        # on the caller's thread there is nothing to hand off to: every node runs inline
        self.inline_all = isinstance(scheduler, CallerThread)
        # under load, other requests wait for the cores anyway: parallel branches would only add hand-offs
        self.saturated: Callable[[], bool] = getattr(scheduler, "saturated", _never)
        # a more urgent request waits for a thread: this step's next expensive nodes go back to the queue
        self.preempted: Callable[[], bool] = getattr(scheduler, "preempted", _never)
        self.done = done
        self.trace = trace
        self.memory_limit = memory_limit
        # live-bytes accounting: only steps with a limit or a trace pay for it; a function body's step counts
        # in its caller's (parent_memory)
        self.memory = (
            StepMemory(plan, memory_limit, parent_memory)
            if memory_limit is not None or trace is not None or parent_memory is not None
            else None
        )
        self.ctx.memory = self.memory
        self.status: OpError | None = None
        self._pending = plan.initial_pending.copy()
        self._remaining = plan.num_nodes
        self._running = 0
        self._finished = False
        self._lock = threading.Lock()
        self.spawned = False  # it gave an expensive node a thread of its own while it ran others
        self.heavy = False  # an expensive node was ready in it

    # --- control -----------------------------------------------------------------------------------------

    def start(self, inline: bool = False) -> None:
        """Dispatches the root nodes.

        Cheap roots run together: on the calling thread with ``inline`` (a synchronous caller would only
        wait otherwise), else in one closure. Each expensive root gets a closure of its own, except that
        the caller takes one when it has nothing cheap to do.
        """
        if self.plan.frames is not None:
            # control flow: a worker runs the step, starting more for parallel branches (runtime/frames.py)
            if inline:
                self._run_frames()
            else:
                self.schedule(self._run_frames)
            return
        roots = self.plan.roots
        if not roots:
            self._running += 1
            self._exit()
            return
        if self.trace is not None:
            now = time.time_ns()
            for r in roots:
                self.trace.ready_ns[r] = now
        cheap, expensive = _split(self.plan.nodes, roots, self.inline_all)
        if expensive:
            self.heavy = True
        if inline and not cheap and expensive:
            cheap.append(expensive.pop())
        if expensive and (cheap or len(expensive) > 1):
            self.spawned = True
        for r in expensive:
            self.schedule(self._closure([r]))
        if cheap:
            if inline:
                self._run(cheap)
            else:
                self.schedule(lambda: self._run(cheap))

    def cancel(self, error: OpError | None = None) -> None:
        """Stops the step: no further node starts; ``done`` fires once running nodes return."""
        with self._lock:
            if self._finished or self.status is not None:
                return
            self.status = error or CancelledError("Run call was cancelled")
            fire = self._running == 0
            if fire:
                self._finished = True
        if fire:
            self.done(self)

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def bytes_allocated(self) -> int:
        """Bytes the step's nodes produced so far, freed or not (0 when memory is not counted)."""
        return self.memory.allocated if self.memory is not None else 0

    def fetched(self) -> list[Any]:
        values = self.values
        return [values[s] for s in self.plan.fetch_slots]

    # --- running -----------------------------------------------------------------------------------------

    def _closure(self, indices: list[int]) -> Callable[[], None]:
        """A closure that runs these ready nodes (and, inline, what they make ready)."""
        return lambda: self._run(indices)

    def _fail(self, err: OpError) -> None:
        with self._lock:
            if self.status is None:
                self.status = err

    def _exit(self) -> None:
        with self._lock:
            self._running -= 1
            fire = (
                not self._finished
                and self._running == 0
                and (self._remaining == 0 or self.status is not None)
            )
            if fire:
                self._finished = True
        if fire:
            self.plan.parallel = self.spawned
            self.plan.cheap = not self.heavy and self.status is None and self.plan.frames is None
            self.done(self)

    def _run(self, stack: list[int]) -> None:
        """Runs the given ready nodes and, inline, whatever they make ready (see the module docstring)."""
        with self._lock:
            if self._finished:
                return
            self._running += 1
        try:
            if self.memory is None:
                self._loop(stack)
            else:
                self._loop_instrumented(stack)
        except BaseException as e:  # a bug in the executor itself: fail the step, never hang it
            self._fail(InternalError(f"executor failure: {type(e).__name__}: {e}"))
        finally:
            self._exit()

    def _run_frames(self) -> None:
        with self._lock:
            if self._finished:
                return
            self._running += 1
        try:
            # the step's last worker sets _remaining to 0 when every node of it has run
            run_frames(self)
        except BaseException as e:  # a bug in the executor itself: fail the step, never hang it
            self._fail(InternalError(f"executor failure: {type(e).__name__}: {e}"))
        finally:
            self._exit()

    def _loop(self, stack: list[int]) -> None:
        nodes = self.plan.nodes
        values = self.values
        pending = self._pending
        lock = self._lock
        ctx = self.ctx
        schedule = self.schedule
        inline_all = self.inline_all
        pop = stack.pop
        perf = time.perf_counter
        cpu = time.thread_time
        clock = kernel_clock
        while stack:
            if self.status is not None:
                return
            node = nodes[pop()]
            try:
                if node.donate:
                    outs = node.compute(ctx, _donated(values, node))
                elif node.measure:
                    if node.skip:  # not a sampled run: the wall clock only (a vDSO read)
                        node.skip -= 1
                        t0 = perf()
                        outs = node.compute(ctx, [values[s] for s in node.in_slots])
                        elapsed = perf() - t0
                    else:
                        c0 = cpu()
                        t0 = perf()
                        outs = node.compute(ctx, [values[s] for s in node.in_slots])
                        elapsed = perf() - t0
                        node.learn(elapsed * 1e6 if node.wall else (cpu() - c0) * 1e6)
                    clock.seconds += elapsed
                else:
                    outs = node.compute(ctx, [values[s] for s in node.in_slots])
            except BaseException as e:
                self._fail(kernel_error(node, e))
                return
            b = node.out_base
            for o in outs:
                values[b] = o
                b += 1
            o, outs = (
                None,
                (),
            )  # the step's values hold them now: a consumer may find itself their sole holder
            expensive: list[int] | None = None
            with lock:
                self._remaining -= 1
                for c in node.consumers:
                    n = pending[c] - 1
                    pending[c] = n
                    if n == 0:
                        if nodes[c].expensive and not inline_all:
                            if expensive is None:
                                expensive = [c]
                            else:
                                expensive.append(c)
                        else:
                            stack.append(c)
            if expensive is not None:
                self.heavy = True
                if self.saturated():
                    if self.preempted():
                        schedule(self._closure(expensive))
                    else:
                        stack.extend(expensive)
                    continue
                last = expensive.pop() if not stack else None
                if expensive:
                    self.spawned = True
                for c in expensive:
                    schedule(self._closure([c]))
                if last is not None:
                    stack.append(last)

    def _loop_instrumented(self, stack: list[int]) -> None:
        """The same loop with tracing and memory accounting (only steps that ask for them pay for it)."""
        nodes = self.plan.nodes
        values = self.values
        pending = self._pending
        lock = self._lock
        ctx = self.ctx
        trace = self.trace
        memory = self.memory
        while stack:
            if self.status is not None:
                return
            node = nodes[stack.pop()]
            c0 = time.thread_time_ns()
            start = time.time_ns()
            args = [values[s] for s in node.in_slots]
            if node.donate:
                for s in node.donate:
                    values[s] = None
            try:
                outs = node.compute(ctx, args)
            except BaseException as e:
                self._fail(kernel_error(node, e))
                return
            end = time.time_ns()
            if node.measure:
                node.learn((end - start if node.wall else time.thread_time_ns() - c0) / 1e3)
                kernel_clock.seconds += (end - start) / 1e9
            in_use = 0
            if memory is not None:
                # a donated input the kernel wrote into is the output's buffer: not a second allocation
                error, in_use = memory.allocate(node, outs, args if node.donate else None)
                if error is not None:
                    self._fail(error)
                    return
            if trace is not None:
                kept = outs if trace.keep_values else [_described(o) for o in outs]
                trace.record(NodeRecord(node.index, trace.ready_ns[node.index], start, end, kept, in_use))
            b = node.out_base
            for o in outs:
                values[b] = o
                b += 1
            o, outs = (
                None,
                (),
            )  # the step's values hold them now: a consumer may find itself their sole holder
            ready: list[int] = []
            with lock:
                self._remaining -= 1
                for c in node.consumers:
                    n = pending[c] - 1
                    pending[c] = n
                    if n == 0:
                        ready.append(c)
            if trace is not None and ready:
                now = time.time_ns()
                for c in ready:
                    trace.ready_ns[c] = now
            inline_all = self.inline_all or (bool(ready) and self.saturated())
            cheap, expensive = _split(nodes, ready, False)
            if expensive:
                self.heavy = True
            if inline_all and not self.inline_all and expensive and self.preempted():
                self.schedule(self._closure(expensive))
                expensive = []
            elif inline_all:
                cheap += expensive
                expensive = []
            stack.extend(cheap)
            last = expensive.pop() if expensive and not stack else None
            if expensive:
                self.spawned = True
            for c in expensive:
                self.schedule(self._closure([c]))
            if last is not None:
                stack.append(last)

    def live_tensors(self) -> list[tuple[int, str]]:
        """(bytes, node name) of the outputs this step holds alive, largest first (for the OOM report):
        freed tensors are not listed when the step counts memory."""
        live = self.memory.live_slots() if self.memory is not None else None
        sizes: dict[str, int] = {}
        for pn in self.plan.nodes:
            for port in range(pn.num_outputs):
                slot = pn.out_base + port
                if live is not None and slot not in live and slot not in self.plan.fetch_slots:
                    continue
                v = self.values[slot]
                if v is not None:
                    sizes[pn.name] = sizes.get(pn.name, 0) + int(getattr(v, "nbytes", 0))
        return sorted(((b, n) for n, b in sizes.items() if b), reverse=True)


def _donated(values: list[Any], node: PlanNode) -> list[Any]:
    """The node's inputs, with the slots it may write into cleared from the step's values: its input list
    then holds them alone (only elementwise kernels that never measure their cost donate)."""
    args = [values[s] for s in node.in_slots]
    for s in node.donate:
        values[s] = None
    return args


def _never() -> bool:
    return False


def _split(nodes: list[PlanNode], ready: list[int], inline_all: bool) -> tuple[list[int], list[int]]:
    """``ready`` as (cheap, expensive), reading each node's flag once: steps of one plan run at once and
    learn its costs, so the flag can flip between two reads, and a node read as expensive, then as cheap,
    would be in neither list (never run: its step would hang)."""
    if inline_all:
        return list(ready), []
    cheap: list[int] = []
    expensive: list[int] = []
    for i in ready:
        (expensive if nodes[i].expensive else cheap).append(i)
    return cheap, expensive


def run_plan_inline(
    plan: Plan, feed_values: Iterable[Any], resources: ResourceContainer | None = None
) -> list[Any]:
    """Runs a plan to completion on the calling thread and returns the fetched values."""
    result: list[Step] = []
    step = Step(plan, list(feed_values), resources or ResourceContainer(), CallerThread(), result.append)
    with np.errstate(all="ignore"):
        step.start(inline=True)
    if not result:
        raise InternalError("inline step did not finish")
    if step.status is not None:
        raise step.status
    return step.fetched()
