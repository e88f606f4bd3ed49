"""What ``Session.make_callable`` returns, in process: a call whose feeds and fetches were fixed when it
was made, bound to its plan, so that a call does only what its values and options require.

Resolved once, at creation: the names, the signature (plan and result order), the checks of each fed value
(an array of the placeholder's dtype and shape is taken as it is, anything else goes through
``prepare_feed``), the slots the results are read from, and the plan's nodes in one topological order.

A step that would run from start to end on the calling thread anyway runs here as a straight loop over
that order (``SerialStep``), with no pending counts, locks or closures: the executor runs every node of a
step inline when none of them is expensive (cheap nodes never leave the thread that made them ready), when
the caller's thread is the scheduler (``inter_op_thread_pool = -1``), and on a RunHandlerPool slot taken by
the caller (``Session._enter_pool``). Any topological order is one the executor could have run. Deadlines
and ``Session.close`` cancel it between nodes, as they cancel a step; errors name the node as the
executor's do. Everything else (traces, partition graphs, memory limits, v1 control flow, expensive nodes
that could run in parallel, a run handler) takes ``Session``'s own path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from poolserve.proto import config_pb2
from poolserve.runtime.calls import Signature
from poolserve.runtime.deadline import Deadline
from poolserve.runtime.errors import CancelledError, OpError, ResourceExhaustedError
from poolserve.runtime.executor import Plan, PlanNode, kernel_error
from poolserve.runtime.fetches import as_output, outputs
from poolserve.runtime.graph import Graph, prepare_feed
from poolserve.runtime.kernels.registry import OpContext
from poolserve.runtime.metadata import OOM_HINT
from poolserve.runtime.threadpool import kernel_clock
from poolserve.runtime.types import TensorId

if TYPE_CHECKING:
    from poolserve.runtime.session import Session

# (kernel, input slots, first output slot, the node if its kernel is timed, the node, the input slots it may
# write into: cleared before it runs, runtime/inplace.py)
_Instr = tuple[Any, tuple[int, ...], int, PlanNode | None, PlanNode, tuple[int, ...]]


class SerialProgram:
    """A plan's nodes in one topological order, for steps run from start to end on one thread."""

    __slots__ = ("code", "measured", "plan")

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        pending = plan.initial_pending.copy()
        ready = list(reversed(plan.roots))
        order: list[PlanNode] = []
        while ready:
            pn = plan.nodes[ready.pop()]
            order.append(pn)
            for c in reversed(pn.consumers):
                pending[c] -= 1
                if pending[c] == 0:
                    ready.append(c)
        assert len(order) == plan.num_nodes, "a plan's graph is acyclic"
        self.code: tuple[_Instr, ...] = tuple(
            (pn.compute, pn.in_slots, pn.out_base, pn if pn.measure else None, pn, pn.donate) for pn in order
        )
        # nodes whose kernels are timed: only they can be (or become) expensive
        self.measured = tuple(pn for pn in plan.nodes if pn.measure)

    def all_cheap(self) -> bool:
        """No node is expensive now: the executor would run every node of a step on the caller's thread."""
        return not any(pn.expensive for pn in self.measured)


class SerialStep:
    """A step run by ``SerialProgram.run`` on the calling thread; what deadlines and ``Session.close``
    cancel (the executor's ``Step`` interface they use: ``finished``, ``cancel``)."""

    __slots__ = ("__weakref__", "finished", "status")

    def __init__(self) -> None:
        self.status: OpError | None = None
        self.finished = False

    def cancel(self, error: OpError | None = None) -> None:
        # the running loop reads status between nodes; a step already over keeps its result
        if not self.finished and self.status is None:
            self.status = error or CancelledError("Run call was cancelled")

    def cancelled(self) -> bool:
        return self.status is not None


def run_serial(program: SerialProgram, values: list[Any], ctx: OpContext, step: SerialStep) -> None:
    """Runs every node in order, filling ``values``; a failure (or a cancellation) is left in
    ``step.status``, as the executor leaves it in its step's."""
    perf = time.perf_counter
    cpu = time.thread_time
    clock = kernel_clock
    for compute, in_slots, base, timed, pn, donate in program.code:
        if step.status is not None:
            return
        try:
            if donate:  # never timed (runtime/inplace.py)
                args = [values[s] for s in in_slots]
                for s in donate:
                    values[s] = None
                outs = compute(ctx, args)
                del args
            elif timed is None:
                outs = compute(ctx, [values[s] for s in in_slots])
            elif timed.skip:  # not a sampled run (executor.SAMPLE_EVERY): the wall clock only
                timed.skip -= 1
                t0 = perf()
                outs = compute(ctx, [values[s] for s in in_slots])
                clock.seconds += perf() - t0
            else:
                c0 = cpu()
                t0 = perf()
                outs = compute(ctx, [values[s] for s in in_slots])
                elapsed = perf() - t0
                # as the executor learns it: the thread's CPU time, or the clock's for a blocking kernel
                timed.learn(elapsed * 1e6 if timed.wall else (cpu() - c0) * 1e6)
                clock.seconds += elapsed
        except BaseException as e:
            if step.status is None:
                step.status = kernel_error(pn, e)
            return
        for o in outs:
            values[base] = o
            base += 1
        o, outs = None, ()  # the values hold them now: a consumer may find itself their sole holder


def _feed_check(graph: Graph, tid: TensorId) -> Callable[[Any], Any]:
    """Checks a value fed for ``tid`` as ``prepare_feed`` does, taking an array of the tensor's own dtype
    and a fitting shape as it is (what ``prepare_feed`` would return for it) without its steps."""
    spec = graph.feed_spec(tid)
    if spec is None or spec[1].kind == "O":  # strings are checked item by item
        return lambda v: prepare_feed(graph, tid, v)
    _, np_want, shape = spec
    if shape is None:

        def check_any_shape(v: Any) -> Any:
            if type(v) is np.ndarray and v.dtype is np_want:
                return v
            return prepare_feed(graph, tid, v)

        return check_any_shape
    rank = len(shape)
    known = tuple((i, d) for i, d in enumerate(shape) if d >= 0)
    if len(known) == rank:
        full = tuple(shape)

        def check_full(v: Any) -> Any:
            if type(v) is np.ndarray and v.dtype is np_want and v.shape == full:
                return v
            return prepare_feed(graph, tid, v)

        return check_full

    def check(v: Any) -> Any:
        if type(v) is np.ndarray and v.dtype is np_want:
            s = v.shape
            if len(s) == rank:
                for i, d in known:
                    if s[i] != d:
                        break
                else:
                    return v
        return prepare_feed(graph, tid, v)

    return check


class SessionCallable:
    """The run function of one ``make_callable`` (``callable_of`` wraps it): its feeds' values, in
    feed_list's order, with the call's options and metadata. See the module docstring."""

    def __init__(
        self,
        session: Session,
        fetches: Any,
        feed_ids: list[TensorId],
        signature: Callable[[config_pb2.RunOptions | None], tuple[Signature, list[int]]],
        slot_step_s: float,
    ) -> None:
        self._session = session
        self._slot_step_s = slot_step_s
        self._signature = signature
        sig, order = self._default = signature(None)
        plan = sig.plan
        self._plan = plan
        graph = session.graph
        # (position in feed_list, check) per plan feed, in plan order
        self._feeds = [(i, _feed_check(graph, feed_ids[i])) for i in order]
        self._program = SerialProgram(plan) if plan.frames is None else None
        self._out_slots = sig.out_slots
        self._fed = len(plan.feeds)
        self._mapper = sig.mapper
        # one computed tensor fetched by name: its value is the result, no structure to rebuild
        single = self._out_slots[0] if isinstance(fetches, str) else None
        self._single: int | None = single if single is not None and single >= self._fed else None

    def __call__(
        self,
        values: Sequence[Any],
        options: config_pb2.RunOptions | None,
        run_metadata: config_pb2.RunMetadata | None,
    ) -> Any:
        session = self._session
        session._check_open()
        if run_metadata is not None:  # the steps run here fill nothing: it is left empty, as TensorFlow's
            run_metadata.Clear()
        if options is not None and options.HasField("debug_options"):
            sig, order = self._signature(options)
            feeds = [prepare_feed(session.graph, sig.plan.feeds[k], values[i]) for k, i in enumerate(order)]
            return self._slow(sig, feeds, options, run_metadata)
        feeds = [check(values[i]) for i, check in self._feeds]
        program = self._program
        if program is None or session._memory_limit is not None:
            return self._slow(self._default[0], feeds, options, run_metadata)
        if options is None:
            if session._config.operation_timeout_in_ms > 0 or not program.all_cheap():
                return self._slow(self._default[0], feeds, options, run_metadata)
            return self._run(program, feeds, None)
        if (
            options.trace_level
            or options.output_partition_graphs
            or options.report_tensor_allocations_upon_oom
        ):
            return self._slow(self._default[0], feeds, options, run_metadata)
        if session.uses_run_handler_pool(options) and not session._bypasses_pool(self._plan, feeds, options):
            return self._run_pooled(program, feeds, options, run_metadata)
        index = options.inter_op_thread_pool
        if not (index == -1 or (index == 0 and program.all_cheap())):
            return self._slow(self._default[0], feeds, options, run_metadata)
        return self._run(program, feeds, session.deadline(options))

    def _slow(
        self,
        sig: Signature,
        feeds: list[Any],
        options: config_pb2.RunOptions | None,
        run_metadata: config_pb2.RunMetadata | None,
    ) -> Any:
        session = self._session
        scheduler = session._scheduler(options)
        if options is not None and options.output_partition_graphs:
            session._check_partition_graphs()
        return session._run_prepared(sig, feeds, scheduler, options, run_metadata, session.deadline(options))

    def _run_pooled(
        self,
        program: SerialProgram,
        feeds: list[Any],
        options: config_pb2.RunOptions,
        run_metadata: config_pb2.RunMetadata | None,
    ) -> Any:
        """A run on the RunHandlerPool: on a slot of it, on this thread, when the session's rule for short
        steps takes one (``Session._enter_pool``); the slot is given back with the step's CPU time."""
        session = self._session
        deadline = session.deadline(options)
        slot = session._enter_pool(
            self._default[0], feeds, options, self._slot_step_s, True, deadline, wait=True
        )
        if slot is None:
            return self._slow(self._default[0], feeds, options, run_metadata)
        pool, slot_id, priority = slot
        plan = self._plan
        measure = plan.measures_cpu(feeds)  # as Session._run_in_slot
        t0 = time.thread_time() if measure else 0.0
        k0 = kernel_clock.seconds
        ok = False
        try:
            if deadline is not None:
                deadline.check("starting the step")
            result = self._run(program, feeds, deadline)
            ok = True
        finally:
            cpu = time.thread_time() - t0 if measure else plan.cpu
            kernel = kernel_clock.seconds - k0
            pool.leave(plan, priority, cpu, kernel, slot_id)
        if ok and measure:
            plan.learn_cpu(cpu, kernel)
        return result

    def _run(self, program: SerialProgram, feeds: list[Any], deadline: Deadline | None) -> Any:
        values, error = self._session._step_serially(program, feeds, deadline)
        if error is None:
            try:
                if self._single is not None:
                    return as_output(values[self._single], values, self._fed)
                return self._mapper.build(outputs(values, self._out_slots, self._fed))
            except OpError:
                raise
            except Exception as e:  # as the executor's results: a failure is an OpError
                raise OpError(f"failed to build the run's results: {e}") from None
        if isinstance(error, ResourceExhaustedError) and "OOM" in error.message:
            error = ResourceExhaustedError(f"{error.message}\n{OOM_HINT}", error.node_name)
        raise error


__all__ = ["SerialProgram", "SerialStep", "SessionCallable", "run_serial"]
