"""``Session``: TensorFlow's DirectSession on the numpy executor.

Per signature (feeds -> fetches / targets / debug watches) the pruned, constant-folded graph is compiled
once into a ``Plan`` and cached under DirectSession's key, in the caller's order and sorted. Per call only
the feeds are checked and a step is started. ``run`` waits for it; ``submit`` returns a future, so asyncio
code awaits a step without parking a thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from poolserve.proto import config_pb2, graph_pb2
from poolserve.runtime import aio
from poolserve.runtime.callables import SerialProgram, SerialStep, SessionCallable, run_serial
from poolserve.runtime.calls import Calls, Signature
from poolserve.runtime.deadline import (
    OPERATION_TIMEOUT,
    Cancellable,
    Deadline,
    deadline_timer,
    watch_cancellation,
)
from poolserve.runtime.debug import watch_summary
from poolserve.runtime.errors import (
    InvalidArgumentError,
    OpError,
    ResourceExhaustedError,
)
from poolserve.runtime.executor import (
    DEVICE,
    ConstantFolder,
    Plan,
    Step,
    StepTrace,
    _step_ids,
    expected_cpu,
)
from poolserve.runtime.fetches import outputs
from poolserve.runtime.frames import DEAD
from poolserve.runtime.functions import FunctionLibrary
from poolserve.runtime.graph import Graph
from poolserve.runtime.kernels.registry import OpContext, ResourceContainer
from poolserve.runtime.memory import keep_freed_memory
from poolserve.runtime.metadata import OOM_HINT, fill_cost_graph, fill_step_stats, oom_report, plan_graph_def
from poolserve.runtime.partial_run import PartialRuns
from poolserve.runtime.run_handler import INTERP_SHARE, SLOT_STEP_S, RunHandler, RunHandlerPool, get_pool
from poolserve.runtime.targets import DeviceAttributes, session_factory, split_args
from poolserve.runtime.threadpool import (
    CallerThread,
    Scheduler,
    ThreadPool,
    default_num_threads,
    default_pool,
    global_pool,
    kernel_clock,
    set_intra_op_threads,
)
from poolserve.runtime.types import Feeds, Fetches, TensorId

CLOSED_MESSAGE = "Attempted to use a closed Session."
# ``arun`` runs a step expected to take less thread CPU time than this on the event loop itself, as a
# hand-rolled FastAPI endpoint would: the hand-off to a thread and back cost 7-40 us a call on the
# example models (mlp 238 -> 198 us with the pool off, 261 -> 255 us with it on; best of 4 x 1500 calls)
INLINE_STEP_S = 200e-6
# ``arun(alone=True)``: the caller's loop has nothing else to do (a server with no other request in flight),
# so a step expected to take less CPU than this runs on the loop too, with no hand-off to a pool thread and
# back, unless the plan ran branches in parallel before.
ALONE_STEP_S = 2e-3


# --- the session -----------------------------------------------------------------------------------------


class RunFuture(concurrent.futures.Future[Any]):
    """A running step's result. ``cancel()`` cancels the step itself (CancelledError, as TensorFlow's)."""

    _step: Cancellable | None = None

    def cancel(self) -> bool:
        step = self._step
        if step is None or step.finished:
            return False
        step.cancel()
        return True


@dataclasses.dataclass
class StepRecord:
    """How a step of ``Session.arun`` ran, for a server's timings and traces (filled in as it goes)."""

    used_pool: bool = False  # the RunHandlerPool scheduled it
    handler_id: int | None = None  # its run handler (unique in the process)
    started_at: float = 0.0  # time.monotonic() when the step started, after any wait for a handler


_live: weakref.WeakSet[Session] = weakref.WeakSet()  # in-process sessions not yet closed, for reset()
# TensorFlow's name for the container of resources whose op names none
DEFAULT_CONTAINER = "localhost"


def interpreter_only(plan: Plan) -> bool:
    """Whether ``plan``'s steps need the interpreter only: no expensive node, and its measured steps spent
    under ``INTERP_SHARE`` of their CPU in timed kernels (unmeasured: no)."""
    return plan.cheap and 0.0 <= plan.kernel_share < INTERP_SHARE


class Session:
    """Runs a graph. ``Session(target="", graph=None, config=None)`` as TensorFlow's: an empty ``target``
    runs in this process; ``http://host:port`` runs against a poolserve server (``RemoteSession``), and
    other schemes as registered with ``register_session_factory``. ``config`` is a ``ConfigProto``.

    Where TensorFlow would take a device memory limit, poolserve takes ``memory_limit_bytes``: a per-step
    limit on the bytes of tensors a step allocates; a step over it fails with ResourceExhaustedError (OOM).
    The server sets it from ``[runtime] memory_limit_bytes``. ``run_handler_pool`` gives the session a
    RunHandlerPool of its own (tests, benchmarks); by default runs that use one share the process-global pool.
    """

    def __new__(cls, target: Any = None, graph: Any = None, config: Any = None, **kwargs: Any) -> Session:
        if cls is Session:
            # Python then calls the chosen class's __init__ with these same arguments
            cls = session_factory(split_args(target, graph, config)[0])
        return object.__new__(cls)

    def __init__(
        self,
        target: str | graph_pb2.GraphDef | Graph | None = None,
        graph: graph_pb2.GraphDef | Graph | config_pb2.ConfigProto | None = None,
        config: config_pb2.ConfigProto | None = None,
        *,
        memory_limit_bytes: int | None = None,
        run_handler_pool: RunHandlerPool | None = None,
    ) -> None:
        target, graph, config = split_args(target, graph, config)
        if target:
            raise InvalidArgumentError(f"An in-process Session takes the empty target; got '{target}'")
        if graph is not None and not isinstance(graph, (graph_pb2.GraphDef, Graph)):
            raise InvalidArgumentError(f"graph must be a GraphDef or a Graph; got {type(graph).__name__}")
        self.target: str = target
        _live.add(self)
        self._config = config if config is not None else config_pb2.ConfigProto()
        self._run_handler_pool = run_handler_pool
        if graph is None:
            graph = graph_pb2.GraphDef()
        self._graph = graph if isinstance(graph, Graph) else Graph(graph)
        self._resources = ResourceContainer()
        self._folder = self._make_folder(self._graph)
        self._calls = Calls(self._graph, self._folder, self._config)
        self._lock = threading.Lock()
        self._active: set[Cancellable] = set()  # steps running (Step, callables' SerialStep)
        self._closed = False
        self._memory_limit = memory_limit_bytes
        self._partial = PartialRuns()
        self._owned_pools: list[ThreadPool] = []
        self._pools: list[Scheduler] = self._make_pools()
        if self._config.intra_op_parallelism_threads > 0:
            set_intra_op_threads(self._config.intra_op_parallelism_threads)
        keep_freed_memory()  # once per process: kernels' temporaries reuse memory instead of faulting it in

    # --- configuration -----------------------------------------------------------------------------------

    def _make_folder(self, graph: Graph) -> ConstantFolder:
        opts = self._config.graph_options.optimizer_options
        # TensorFlow: opt_level L1 (the default) turns folding on; at L0 only do_constant_folding does
        enabled = opts.do_constant_folding or opts.opt_level != config_pb2.OptimizerOptions.L0
        max_bytes = opts.max_folded_constant_in_bytes or (10 << 20)
        return ConstantFolder(graph, enabled, max_bytes)

    def _make_pools(self) -> list[Scheduler]:
        cfg = self._config
        inter = cfg.inter_op_parallelism_threads
        if cfg.session_inter_op_thread_pool:
            pools: list[Scheduler] = []
            for i, opt in enumerate(cfg.session_inter_op_thread_pool):
                threads = opt.num_threads if opt.num_threads > 0 else (inter or default_num_threads())
                if opt.global_name:
                    pools.append(global_pool(opt.global_name, threads))
                else:
                    pool = ThreadPool(threads, f"session_pool_{i}")
                    self._owned_pools.append(pool)
                    pools.append(pool)
            return pools
        if cfg.use_per_session_threads:
            pool = ThreadPool(inter or default_num_threads(), "session_inter_op")
            self._owned_pools.append(pool)
            return [pool]
        return [default_pool(inter or default_num_threads())]

    @property
    def graph(self) -> Graph:
        return self._graph

    @property
    def graph_def(self) -> graph_pb2.GraphDef:
        return self._graph.graph_def

    def extend(self, graph_def: graph_pb2.GraphDef) -> None:
        """Adds nodes to the session's graph (existing nodes cannot be redefined)."""
        self._check_open()
        merged = graph_pb2.GraphDef()
        merged.CopyFrom(self._graph.graph_def)
        merged.node.extend(graph_def.node)
        if graph_def.HasField("library"):
            merged.library.MergeFrom(graph_def.library)
        if graph_def.HasField("versions") and not merged.HasField("versions"):
            merged.versions.CopyFrom(graph_def.versions)
        library = self._graph.library  # compiled functions are kept; a SavedModel's OpDefs too
        if library is not None and graph_def.library.function:
            library = FunctionLibrary(merged.library, library.op_defs)
        graph = Graph(merged, library)
        with self._lock:
            folder = self._folder.extended(graph)
            self._graph, self._folder = graph, folder
            self._calls = Calls(graph, folder, self._config)

    # --- running -----------------------------------------------------------------------------------------

    def _scheduler(self, options: config_pb2.RunOptions | None) -> Scheduler:
        index = options.inter_op_thread_pool if options is not None else 0
        if index == -1:
            return _CALLER
        if index < -1 or index >= len(self._pools):
            raise InvalidArgumentError(f"Invalid inter_op_thread_pool: {index}")
        return self._pools[index]

    def uses_run_handler_pool(self, options: config_pb2.RunOptions | None) -> bool:
        """Whether a run with these options goes through the RunHandlerPool. TensorFlow's rule: asked for
        (``experimental.use_run_handler_pool``), and not overridden by per-session threads, the caller's
        thread (``inter_op_thread_pool = -1``) or an explicit session pool. The one place this is decided."""
        if options is None or not options.experimental.use_run_handler_pool:
            return False
        if self._config.use_per_session_threads or options.inter_op_thread_pool == -1:
            return False
        return not (options.inter_op_thread_pool > 0 and self._config.session_inter_op_thread_pool)

    def run_handler_pool(self) -> RunHandlerPool:
        """The RunHandlerPool this session's runs use: the one it was given, else the process-global pool
        (made from this session's thread options if it is the first)."""
        if self._run_handler_pool is not None:
            return self._run_handler_pool
        return get_pool(self._config.inter_op_parallelism_threads)

    def deadline(self, options: config_pb2.RunOptions | None, start: float | None = None) -> Deadline | None:
        """The deadline of a run with these options, counted from ``start`` (default now):
        ``RunOptions.timeout_in_ms``, else ``ConfigProto.operation_timeout_in_ms``; None for neither."""
        if options is not None and options.timeout_in_ms > 0:
            return Deadline(options.timeout_in_ms, start)
        if self._config.operation_timeout_in_ms > 0:
            return Deadline(self._config.operation_timeout_in_ms, start, OPERATION_TIMEOUT)
        return None

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(CLOSED_MESSAGE)

    def _prepare(
        self, fetches: Fetches, feed_dict: Feeds | None, options: config_pb2.RunOptions | None
    ) -> tuple[Signature, list[Any], Scheduler]:
        """Everything a call can get wrong, checked before it waits for anything: the session is open, the
        names exist, the feeds fit, the thread pool index is valid."""
        self._check_open()
        sig, feed_values = self._calls.resolve(fetches, feed_dict, options)
        if options is not None and options.output_partition_graphs:
            self._check_partition_graphs()
        return sig, feed_values, self._scheduler(options)

    def _check_partition_graphs(self) -> None:
        """A run asks for its partition graphs: refused where the config disables them (TensorFlow's rule,
        and message)."""
        if self._config.experimental.disable_output_partition_graphs:
            raise InvalidArgumentError(
                "RunOptions.output_partition_graphs() is not supported when disable_output_partition_graphs "
                "is true."
            )

    def _take_handler(
        self, options: config_pb2.RunOptions | None, deadline: Deadline | None
    ) -> RunHandler | None:
        """A run handler if this run uses the pool (waiting, within the deadline, while all are taken)."""
        if not self.uses_run_handler_pool(options):
            return None
        assert options is not None
        priority = options.experimental.run_handler_pool_options.priority
        handler = self.run_handler_pool().get(0, deadline.wait_ms() if deadline else 0, priority)
        return self._check_handler(handler, deadline)

    def _enter_pool(
        self,
        sig: Signature,
        feeds: list[Any],
        options: config_pb2.RunOptions | None,
        below: float,
        cheap: bool = False,
        deadline: Deadline | None = None,
        wait: bool = False,
        loop: bool = False,
    ) -> tuple[RunHandlerPool, int, int] | None:
        """The RunHandlerPool and the id of a slot taken for this caller (``RunHandlerPool.enter``), if
        this run uses the pool, its step is expected to take less than ``below`` seconds of CPU
        (``expected_cpu``: the plan's, scaled up for a larger feed) and a slot is
        free (or a place in the lane beside the slots). With ``cheap``, also a plan of any cost whose
        last step had no expensive node (``Plan.cheap``): a run handler would only add its bookkeeping
        (chain200.b1, one caller: 1.55 ms of CPU a step against 1.50 without the pool), as such a step
        runs on one thread from start to end anyway, with nothing to preempt it between. With ``wait``
        (a synchronous caller), it waits for a slot when none is free (``RunHandlerPool.enter_wait``), at
        most until ``deadline``. A cheap plan whose steps spent almost nothing in timed kernels
        (``INTERP_SHARE``) needs only the interpreter: it may take the pool's lane whatever the slots hold.
        With ``loop`` (an event loop that would otherwise run the short step itself without the pool), it
        runs the step on the loop when no slot is free, unless a higher priority is active."""
        plan = sig.plan
        short = 0.0 < expected_cpu(plan, feeds) < below
        if not (short or (cheap and plan.cheap and plan.cpu > 0.0)):
            return None
        if not self.uses_run_handler_pool(options):
            return None
        assert options is not None
        pool = self.run_handler_pool()
        priority = options.experimental.run_handler_pool_options.priority
        interp = interpreter_only(plan)
        if wait:
            timeout = None if deadline is None else deadline.remaining_ms() / 1000.0
            slot_id = pool.enter_wait(priority, short, plan, timeout, interp)
        else:
            slot_id = pool.enter(priority, short, plan, interp, loop)
        return None if slot_id is None else (pool, slot_id, priority)

    def _bypasses_pool(self, plan: Plan, feeds: list[Any], options: config_pb2.RunOptions) -> bool:
        """Whether a synchronous run that asked for the RunHandlerPool runs as without it: a short step
        (expected to take under ``SLOT_STEP_S`` of CPU) while the pool holds no long work
        (``RunHandlerPool.holds_long_work``).

        Why: such a step is bound by the GIL, and the pool has nothing to protect it from. Its order
        costs a wake-up and a hand-off of the GIL per step, where threads without the pool run their own
        steps back to back until the GIL's switch interval. On two cores, 8 callers in a closed loop,
        branches2.b1 (100-150 us of CPU a step) ran at 0.72-0.84x its no-pool throughput through a slot;
        open loops at 0.7-0.9 of the no-pool capacity overloaded the pool (p99 2-300x). Schemes that
        hand over less often traded the p99 back (see the README: a combining runner, a kept slot).
        Once a long step is in the pool, short ones take slots again, so the long work is not starved
        (without the pool, branches8.b64 beside branches1.b1 had a p99 of 480 ms, 68 ms with it). A request
        of a priority above 0 never bypasses it, and while one is in the pool no request does: they queue
        in priority order. The plan's cost must have been measured on a slot, which notes the size of the
        feed it was measured on (``expected_cpu`` scales it up for a larger one).

        An interpreter-only step (``INTERP_SHARE``) keeps to the pool: it never lets the GIL go, so
        without the pool one thread runs step after step for the whole switch interval while the others
        wait. chain200.b1 (about 0.5 ms) had a p99 of 50-100 ms without the pool, 15-32 ms in the pool's
        order, and 76-92 ms when it bypassed it; steps whose kernels let the GIL go interleave without it
        (branches2.b1: 5-9 ms)."""
        if options.experimental.run_handler_pool_options.priority > 0:
            return False
        if not plan.feed_size:  # its cost not yet measured on a slot, with its feed's size
            return False
        if interpreter_only(plan):
            return False
        return 0.0 < expected_cpu(plan, feeds) < SLOT_STEP_S and not self.run_handler_pool().holds_long_work()

    def _run_in_slot(
        self,
        slot: tuple[RunHandlerPool, int, int],
        sig: Signature,
        feeds: list[Any],
        options: config_pb2.RunOptions | None,
        run_metadata: config_pb2.RunMetadata | None,
        on_done: Callable[[Any, OpError | None], None],
        deadline: Deadline | None,
        timer: bool,
    ) -> None:
        """Runs a short step from start to end on this thread, on the pool slot ``_enter_pool`` took. Its
        cost is this thread's CPU time (wall time would count the GIL and the cores taken by others, and
        push a busy server's short plans off this path), measured on the plan's sampled steps; the others
        are charged the cost learned (``Plan.measures_cpu``)."""
        assert options is not None
        pool, slot_id, priority = slot
        plan = sig.plan
        measure = plan.measures_cpu(feeds)
        t0 = time.thread_time() if measure else 0.0
        k0 = kernel_clock.seconds
        try:
            if deadline is not None:
                deadline.check("starting the step")
            if self._serial_ok(plan, options):
                ran = self._run_serial(sig, feeds, options, run_metadata, on_done, deadline, timer)
            else:
                step, _ = self._launch(
                    sig,
                    feeds,
                    _CALLER,
                    options,
                    run_metadata,
                    on_done,
                    True,
                    None,
                    deadline,
                    timer,
                    slot_id=slot_id,
                )
                ran = step.status is None  # every node ran inline: the step is over
        finally:
            cpu = time.thread_time() - t0 if measure else plan.cpu
            kernel = kernel_clock.seconds - k0
            pool.leave(plan, priority, cpu, kernel, slot_id)
        # the CPU time includes the answer: a traced step's metadata would count as the plan's cost
        if (
            measure
            and ran
            and not (
                options.trace_level
                or options.output_partition_graphs
                or options.report_tensor_allocations_upon_oom
            )
        ):
            plan.learn_cpu(cpu, kernel)

    def _serial_ok(self, plan: Plan, options: config_pb2.RunOptions | None) -> bool:
        """Whether a step on the caller's slot may run as a straight loop over the plan's nodes
        (``_run_serial``): what the executor does there (every node inline, one thread), less its pending
        counts, lock and hand-offs per node. Not for what only the executor's step records or handles:
        traces and partition graphs, the OOM report, a memory limit, debug watches, v1 control flow."""
        if plan.frames is not None or self._memory_limit is not None:
            return False
        return options is None or not (
            options.trace_level
            or options.output_partition_graphs
            or options.report_tensor_allocations_upon_oom
            or options.HasField("debug_options")
        )

    def _on_caller_only(
        self, plan: Plan, scheduler: Scheduler, options: config_pb2.RunOptions | None
    ) -> bool:
        """Whether the executor would run a synchronous step of ``plan`` wholly on its caller's thread, as
        a straight loop may (``_serial_ok``): the caller's thread is the scheduler
        (``inter_op_thread_pool = -1``), or no node of the plan is expensive now (cheap nodes never leave
        the thread that made them ready), as ``make_callable``'s calls decide."""
        if not self._serial_ok(plan, options):
            return False
        return scheduler is _CALLER or _serial_program(plan).all_cheap()

    def _step_serially(
        self, program: SerialProgram, feeds: list[Any], deadline: Deadline | None
    ) -> tuple[list[Any], OpError | None]:
        """Runs ``program`` over ``feeds`` on this thread (``callables.run_serial``) as a step that
        ``close()`` and the deadline thread (``deadline``, if given) cancel between nodes; the step's values
        and its error."""
        step = SerialStep()
        ctx = OpContext(self._resources, next(_step_ids))
        ctx.cancelled = step.cancelled
        values = program.plan.template.copy()
        values[: len(feeds)] = feeds
        with self._lock:
            self._check_open()
            self._active.add(step)  # close() cancels it as it cancels a Step
        try:
            if deadline is not None:
                deadline_timer.add(deadline, step)
            with np.errstate(all="ignore"):
                run_serial(program, values, ctx, step)
        finally:
            step.finished = True
            with self._lock:
                self._active.discard(step)
        return values, step.status

    def _run_serial(
        self,
        sig: Signature,
        feeds: list[Any],
        options: config_pb2.RunOptions | None,
        run_metadata: config_pb2.RunMetadata | None,
        on_done: Callable[[Any, OpError | None], None],
        deadline: Deadline | None,
        timer: bool,
        cheap: bool = True,
    ) -> bool:
        """Runs a step on this thread as ``make_callable``'s calls do (``callables.run_serial``), calls
        ``on_done`` as ``_launch``'s step would, and says whether every node ran. 200 elementwise nodes on
        [1, 256] (chain200.b1), one caller on a pool slot: 689 us a step through the executor, 514 so.
        ``cheap``: what the step leaves in ``Plan.cheap`` (a lone step of a plan with expensive nodes
        leaves False, as the executor would)."""
        plan = sig.plan
        values, error = self._step_serially(_serial_program(plan), feeds, deadline if timer else None)
        ran = error is None
        result: Any = None
        try:
            if error is None:
                # as the executor leaves a step that ran every node on one thread (Step._exit)
                plan.parallel = False
                plan.cheap = cheap
                result = sig.mapper.build(outputs(values, sig.out_slots, len(plan.feeds)))
            elif isinstance(error, ResourceExhaustedError) and "OOM" in error.message:
                error = ResourceExhaustedError(f"{error.message}\n{OOM_HINT}", error.node_name)
            if run_metadata is not None:
                self._fill_metadata(run_metadata, plan, None, options)
        except OpError as e:
            error = error or e
        except Exception as e:  # never leave a caller waiting
            error = error or OpError(f"failed to build the run's results: {e}")
        on_done(result, error)
        return ran

    def _check_handler(self, handler: RunHandler, deadline: Deadline | None) -> RunHandler:
        try:
            self._check_open()
            if deadline is not None:
                deadline.check("waiting for a run handler")
        except BaseException:
            handler.release()
            raise
        return handler

    def _launch(
        self,
        sig: Signature,
        feed_values: list[Any],
        scheduler: Scheduler,
        options: config_pb2.RunOptions | None,
        run_metadata: config_pb2.RunMetadata | None,
        on_done: Callable[[Any, OpError | None], None],
        inline: bool,
        handler: RunHandler | None,
        deadline: Deadline | None,
        timer: bool = True,
        short: bool = False,
        slot_id: int | None = None,
    ) -> tuple[Step, bool]:
        """Starts a step. With a run handler, every closure of the step goes through it, and it is
        released when the step ends, however it ends. ``timer``: the deadline thread cancels the step at
        its deadline (``arun`` uses a timer of its event loop instead). ``short``: the caller, which must
        not wait (an event loop), runs the step itself if the pool has a slot free at once. ``slot_id``:
        the step runs on a pool slot the caller took (``_run_in_slot``), under this id.

        Returns the step, and whether the caller must call ``handler.help()`` (it took a slot, or waits
        for one)."""
        caller = False  # the caller calls handler.help() after this
        if handler is not None:
            scheduler = handler
            plan_parallel = sig.plan.parallel
            if inline:
                caller = True
                # the caller runs the step now if the pool has a slot free, else when it grants one
                inline = handler.begin(sig.plan.cpu, sig.plan.learn_cpu, sig.plan, parallel=plan_parallel)
            elif short:
                inline = caller = handler.begin(
                    sig.plan.cpu, sig.plan.learn_cpu, sig.plan, wait=False, parallel=plan_parallel
                )
            else:
                handler.expect(sig.plan.cpu, sig.plan.learn_cpu, sig.plan, plan_parallel)
        elif short:
            inline = True
        trace_level = options.trace_level if options is not None else 0
        report_oom = options is not None and options.report_tensor_allocations_upon_oom
        trace: StepTrace | None = None
        if trace_level > 0 or report_oom:
            # as TensorFlow's DirectSession, a step that reports its allocations upon OOM collects its
            # step_stats, and the run's RunMetadata gets them (without holding the outputs' buffers)
            pool_id = handler.id if handler is not None else slot_id
            label = f"run handler {pool_id}" if pool_id is not None else ""
            trace = StepTrace(sig.plan.num_nodes, label, keep_values=trace_level > 0)

        def done(step: Step) -> None:
            if handler is not None:
                if step.status is not None:
                    handler.learn = None  # a step cut short says nothing of the plan's cost
                handler.release()
            with self._lock:
                self._active.discard(step)
            error = step.status
            result: Any = None
            try:
                if error is None:
                    result = sig.mapper.build(outputs(step.values, sig.out_slots, len(sig.plan.feeds)))
                elif isinstance(error, ResourceExhaustedError) and "OOM" in error.message:
                    extra = oom_report(step) if report_oom else OOM_HINT
                    error = ResourceExhaustedError(f"{error.message}\n{extra}", error.node_name)
                if run_metadata is not None:
                    self._fill_metadata(run_metadata, sig.plan, trace, options)
            except OpError as e:
                error = error or e
            except Exception as e:  # never leave a caller waiting
                error = error or OpError(f"failed to build the run's results: {e}")
            step.values = []
            on_done(result, error)

        step = Step(
            sig.plan,
            feed_values,
            self._resources,
            scheduler,
            done,
            trace=trace,
            memory_limit=self._memory_limit,
        )
        watch_cancellation(step)
        with self._lock:
            if self._closed:
                if handler is not None:
                    handler.release()
                    if caller:
                        handler.help()  # gives back the slot begin() may have taken
                raise RuntimeError(CLOSED_MESSAGE)
            self._active.add(step)
        if deadline is not None and timer:
            deadline_timer.add(deadline, step)
        step.start(inline=inline or scheduler is _CALLER)
        return step, caller

    def _fill_metadata(
        self,
        run_metadata: config_pb2.RunMetadata,
        plan: Plan,
        trace: StepTrace | None,
        options: config_pb2.RunOptions | None,
    ) -> None:
        """Fills the RunMetadata a run was given, replacing what it held (TensorFlow parses each run's
        metadata into it): an untraced run leaves it empty. The cost graph comes with a trace_level. A run
        whose fetches are all fed leaves it as it was: TensorFlow's client runs nothing for it."""
        if not plan.nodes and all(slot < len(plan.feeds) for slot in plan.fetch_slots):
            return
        run_metadata.Clear()
        if trace is not None:
            fill_step_stats(run_metadata.step_stats, plan, trace)
            if options is not None and options.trace_level > 0:
                fill_cost_graph(run_metadata.cost_graph, plan, trace)
        if options is not None and options.output_partition_graphs:
            run_metadata.partition_graphs.add().CopyFrom(plan_graph_def(plan))

    def run(
        self,
        fetches: Fetches,
        feed_dict: Feeds | None = None,
        options: config_pb2.RunOptions | None = None,
        run_metadata: config_pb2.RunMetadata | None = None,
    ) -> Any:
        """Runs the step on this thread and the inter-op pool (or the RunHandlerPool) and returns the
        fetched values."""
        deadline = self.deadline(options)
        sig, feeds, scheduler = self._prepare(fetches, feed_dict, options)
        return self._run_prepared(sig, feeds, scheduler, options, run_metadata, deadline)

    def _run_prepared(
        self,
        sig: Signature,
        feeds: list[Any],
        scheduler: Scheduler,
        options: config_pb2.RunOptions | None,
        run_metadata: config_pb2.RunMetadata | None,
        deadline: Deadline | None,
    ) -> Any:
        box: list[Any] = []
        finished = threading.Lock()  # released when the step ends: cheaper to make than an Event
        finished.acquire()

        def on_done(result: Any, error: OpError | None) -> None:
            box.append((result, error))
            finished.release()

        with np.errstate(all="ignore"):
            pooled = self.uses_run_handler_pool(options)
            if pooled:  # a short step while the pool holds no long work runs as without the pool
                assert options is not None
                pooled = not self._bypasses_pool(sig.plan, feeds, options)
            slot = (
                self._enter_pool(sig, feeds, options, SLOT_STEP_S, True, deadline, wait=True)
                if pooled
                else None
            )
            way, loop, start = None, False, 0.0
            if slot is not None:
                self._run_in_slot(slot, sig, feeds, options, run_metadata, on_done, deadline, True)
            elif not pooled and self._on_caller_only(sig.plan, scheduler, options):
                self._run_serial(sig, feeds, options, run_metadata, on_done, deadline, True)
            elif not pooled and not self._active and self._serial_ok(sig.plan, options):
                # a lone step: the plan's record says which way runs it sooner (runtime/step_way.py)
                way = sig.plan.way
                loop = way.loop()
                start = time.perf_counter()
                if loop:  # the plan has expensive nodes (else _on_caller_only took it): not cheap
                    self._run_serial(sig, feeds, options, run_metadata, on_done, deadline, True, False)
                else:
                    self._launch(sig, feeds, scheduler, options, run_metadata, on_done, True, None, deadline)
            else:
                handler = self._take_handler(options, deadline) if pooled else None
                self._launch(sig, feeds, scheduler, options, run_metadata, on_done, True, handler, deadline)
                if handler is not None:
                    handler.help()
        finished.acquire()
        result, error = box[0]
        if error is not None:
            raise error
        if way is not None:
            way.learn(loop, time.perf_counter() - start)
        return result

    def make_callable(
        self, fetches: Fetches, feed_list: Sequence[str] | None = None, accept_options: bool = False
    ) -> Callable[..., Any]:
        """A function that runs ``fetches`` with the tensors of ``feed_list`` fed, in that order, as its
        arguments (TensorFlow's ``Session.make_callable``). The names are resolved and the plan compiled
        once, here; a call only checks its values. With ``accept_options``, or a ``feed_list`` (as in
        TensorFlow), it also takes ``options=`` and ``run_metadata=`` keywords."""
        self._check_open()
        graph = self._graph
        feed_ids = [graph.feed_tensor(n) for n in feed_list or ()]
        if len(set(feed_ids)) != len(feed_ids):
            raise InvalidArgumentError(f"A tensor is fed twice in feed_list {list(feed_list or ())}")
        bound: dict[str, tuple[Signature, list[int]]] = {}

        def signature(options: config_pb2.RunOptions | None) -> tuple[Signature, list[int]]:
            watches = watch_summary(options)
            entry = bound.get(watches)
            if entry is None:
                sig = self._calls.bind(fetches, feed_ids, options)
                entry = bound[watches] = (sig, [feed_ids.index(t) for t in sig.plan.feeds])
            return entry

        run = SessionCallable(self, fetches, feed_ids, signature, SLOT_STEP_S)
        return callable_of(len(feed_ids), run, takes_options(feed_list, accept_options))

    def list_devices(self) -> list[DeviceAttributes]:
        """The devices this session runs on: this machine's CPU (TensorFlow's ``Session.list_devices``)."""
        return [DeviceAttributes(DEVICE, "CPU", self._memory_limit or 0, 0)]

    def submit(
        self,
        fetches: Fetches,
        feed_dict: Feeds | None = None,
        options: config_pb2.RunOptions | None = None,
        run_metadata: config_pb2.RunMetadata | None = None,
    ) -> RunFuture:
        """Starts the step on the inter-op pool (or the RunHandlerPool: then it waits here while every
        handler is taken) and returns; the future resolves when the step ends.

        Errors in the arguments (unknown tensors, bad feeds) are raised here, not through the future.
        ``asyncio.wrap_future`` turns it into an awaitable; cancelling that cancels the step.
        """
        future = RunFuture()

        def on_done(result: Any, error: OpError | None) -> None:
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        deadline = self.deadline(options)
        sig, feeds, scheduler = self._prepare(fetches, feed_dict, options)
        handler = self._take_handler(options, deadline)
        future.set_running_or_notify_cancel()
        future._step, _ = self._launch(
            sig, feeds, scheduler, options, run_metadata, on_done, False, handler, deadline
        )
        return future

    async def arun(
        self,
        fetches: Fetches,
        feed_dict: Feeds | None = None,
        options: config_pb2.RunOptions | None = None,
        run_metadata: config_pb2.RunMetadata | None = None,
        *,
        deadline: Deadline | None = None,
        record: StepRecord | None = None,
        alone: bool = False,
    ) -> Any:
        """``run`` for asyncio code; the event loop never waits for a step, and runs only short ones itself.

        The call is checked first; then, if the run uses the RunHandlerPool (``uses_run_handler_pool``), a
        run handler is awaited; the step runs on the pool's threads (or the inter-op pool) and the loop
        is woken once when it ends. Cancelling the awaiting task cancels the step.

        ``deadline`` is when the answer is due (a server makes it when the request arrives, so the wait
        before this call counts); by default it comes from the options, counted from now. It bounds the
        wait for a handler and cancels the step; if one long kernel keeps the step from stopping, the
        call still answers DeadlineExceededError shortly after. ``record`` is filled in as the call goes:
        whether the pool ran the step, its handler, when the step started. ``alone``: the loop has nothing
        else to do (no other request in flight): a step under ``ALONE_STEP_S`` of CPU (not one whose
        branches ran in parallel) runs on the loop when a slot is free, where the limit is otherwise
        ``INLINE_STEP_S`` (the expected cost: ``expected_cpu``). Nothing stops a step the loop runs itself,
        so one that ends past its deadline answers DeadlineExceededError, not its late result.
        """
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = self.deadline(options)
        sig, feeds, scheduler = self._prepare(fetches, feed_dict, options)
        below = ALONE_STEP_S if alone and not sig.plan.parallel else INLINE_STEP_S
        slot = self._enter_pool(sig, feeds, options, below, loop=True)
        if slot is not None:  # a short step, a free slot: it runs here, on the loop, with no hand-off
            if record is not None:
                record.used_pool = True
                record.handler_id = slot[1]
                record.started_at = time.monotonic()
            box: list[tuple[Any, OpError | None]] = []
            self._run_in_slot(
                slot, sig, feeds, options, run_metadata, lambda r, e: box.append((r, e)), deadline, False
            )
            result, error = box[0]
            if error is not None:
                raise error
            if deadline is not None and time.monotonic() >= deadline.at:  # nothing stops it on the loop
                raise deadline.step_error()
            return result
        handler: RunHandler | None = None
        if self.uses_run_handler_pool(options):
            assert options is not None
            priority = options.experimental.run_handler_pool_options.priority
            handler = await self.run_handler_pool().get_async(
                0, deadline.wait_ms() if deadline else 0, priority
            )
            self._check_handler(handler, deadline)
            if record is not None:
                record.used_pool = True
                record.handler_id = handler.id
        if record is not None:
            record.started_at = time.monotonic()
        future: asyncio.Future[Any] = loop.create_future()
        inbox = aio.inbox(loop)

        def on_done(result: Any, error: OpError | None) -> None:
            inbox.post(future, result, error)

        # a step expected to take less CPU than a thread hand-off costs (or, ``alone``, than ALONE_STEP_S)
        # runs here, on the loop, when the pool has a slot free at once
        short = 0.0 < expected_cpu(sig.plan, feeds) < below and scheduler is not _CALLER
        step, took_slot = self._launch(
            sig, feeds, scheduler, options, run_metadata, on_done, False, handler, deadline, False, short
        )
        if took_slot:
            assert handler is not None
            handler.help()  # gives the slot back (the step's nodes all ran inline: it is over)
            if deadline is not None and time.monotonic() >= deadline.at:  # as on a slot, above
                raise deadline.step_error()
        # The deadline is a timer of this loop, not of the deadline thread: nothing crosses threads, and a
        # finished step is not kept alive until its deadline (a 30 s default kept every step of the last
        # second or more alive, which made the garbage collector's full passes long)
        timers: list[asyncio.TimerHandle] = []
        if deadline is not None:
            delay = max(0.0, deadline.remaining_ms() / 1000.0)
            timers.append(loop.call_later(delay, aio.deadline_passed, future, step, deadline, timers))
        try:
            return await future
        except asyncio.CancelledError:
            step.cancel()
            raise
        finally:
            for t in timers:
                t.cancel()

    @property
    def steps_running(self) -> int:
        """Steps of this session that have started and not yet ended."""
        return len(self._active)

    # --- partial runs ------------------------------------------------------------------------------------

    def partial_run_setup(self, fetches: Fetches, feeds: Sequence[str] | None = None) -> str:
        """Declares the fetches and feeds of a partial run; returns its handle."""
        self._check_open()
        return self._partial.setup(self._graph, fetches, feeds)

    def partial_run(self, handle: str, fetches: Fetches, feed_dict: Feeds | None = None) -> Any:
        """Feeds more values and fetches more tensors of a partial run; each node runs at most once."""
        self._check_open()
        return self._partial.run(
            self._graph, self._folder, handle, fetches, feed_dict, self._run_plan_collect
        )

    def _run_plan_collect(self, plan: Plan, feed_values: list[Any]) -> dict[TensorId, Any]:
        """Runs a plan and returns every tensor it computed (partial runs keep them for later calls)."""
        box: list[Step] = []
        event = threading.Event()

        def done(step: Step) -> None:
            box.append(step)
            event.set()

        step = Step(plan, feed_values, self._resources, self._pools[0], done, memory_limit=self._memory_limit)
        watch_cancellation(step)
        with self._lock:
            self._active.add(step)
        try:
            with np.errstate(all="ignore"):
                step.start(inline=True)
            event.wait()
        finally:
            with self._lock:
                self._active.discard(step)
        if step.status is not None:
            raise step.status
        out: dict[TensorId, Any] = {}
        for tid, slot in plan.slot_of.items():
            value = step.values[slot]
            if value is not None and value is not DEAD:
                out[tid] = value
        return out

    # --- lifetime ----------------------------------------------------------------------------------------

    @staticmethod
    def reset(target: str = "", containers: Sequence[str] | None = None, **kwargs: Any) -> None:
        """TensorFlow's ``Session.reset``: clears the named resource containers (every one when none are
        named) of the sessions on ``target`` and closes those sessions, without waiting for their running
        steps; sessions made afterwards start clean. ``kwargs`` go to the target's session class (a remote
        target takes ``token``)."""
        target, _, _ = split_args(target, None, None)
        session_factory(target)._reset(target, list(containers or ()), **kwargs)

    @classmethod
    def _reset(cls, target: str, containers: list[str], **kwargs: Any) -> None:
        sessions = [s for s in list(_live) if not s.closed]
        for s in sessions:
            s.clear_containers(containers)
        for s in sessions:
            s.close()

    def clear_containers(self, containers: Sequence[str] = ()) -> None:
        """Drops the state (variables) in these resource containers; in every one when none are named."""
        values = self._resources.values
        if not containers:
            values.clear()
            return
        names = set(containers)
        for key in list(values):
            if (key[0] or DEFAULT_CONTAINER) in names:
                del values[key]

    def close(self) -> None:
        """Cancels steps in flight ("Run call was cancelled"); later calls raise RuntimeError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            active = list(self._active)
        for step in active:
            step.cancel()
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and any(not s.finished for s in active):
            time.sleep(0.001)
        for pool in self._owned_pools:
            pool.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Session:
        _default_stack().append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _pop_default(self)
        self.close()

    @contextlib.contextmanager
    def as_default(self) -> Iterator[Session]:
        """Makes this the default session of the calling thread inside the ``with`` block, without closing it
        at the end (as TensorFlow's ``as_default``)."""
        _default_stack().append(self)
        try:
            yield self
        finally:
            _pop_default(self)

    def __del__(self) -> None:
        for pool in getattr(self, "_owned_pools", ()):
            pool.close()


def takes_options(feed_list: Sequence[str] | None, accept_options: bool) -> bool:
    """Whether a callable takes ``options=`` and ``run_metadata=``: with ``accept_options``, and, as in
    TensorFlow (whose callable with a feed_list passes its keywords on to ``Session.run``), whenever a
    feed_list is given, even an empty one."""
    return accept_options or feed_list is not None


def callable_of(
    count: int,
    run: Callable[[Sequence[Any], config_pb2.RunOptions | None, config_pb2.RunMetadata | None], Any],
    accept_options: bool,
) -> Callable[..., Any]:
    """What ``make_callable`` returns: a function of ``count`` feed values (in feed_list's order), and with
    ``accept_options`` also ``options=`` and ``run_metadata=`` keywords, that calls ``run``."""

    def call_with_options(
        *values: Any,
        options: config_pb2.RunOptions | None = None,
        run_metadata: config_pb2.RunMetadata | None = None,
    ) -> Any:
        if len(values) != count:
            raise _count_error(count, len(values))
        return run(values, options, run_metadata)

    def call(*values: Any) -> Any:  # one call less per call than forwarding to call_with_options
        if len(values) != count:
            raise _count_error(count, len(values))
        return run(values, None, None)

    return call_with_options if accept_options else call


def _count_error(count: int, got: int) -> InvalidArgumentError:
    return InvalidArgumentError(f"The callable takes {count} value(s), in feed_list's order; got {got}")


class InteractiveSession(Session):
    """A session that makes itself the default on creation (for shells and notebooks), as TensorFlow's: a
    later ``get_default_session()`` on this thread returns it until it is closed. With a target it is that
    target's session (``Session(target)``), interactive."""

    def __new__(
        cls, target: Any = None, graph: Any = None, config: Any = None, **kwargs: Any
    ) -> InteractiveSession:
        factory = session_factory(split_args(target, graph, config)[0])
        kind = _interactive(factory) if cls is InteractiveSession and factory is not Session else cls
        return object.__new__(kind)

    def __init__(
        self,
        target: str | graph_pb2.GraphDef | Graph | None = None,
        graph: graph_pb2.GraphDef | Graph | config_pb2.ConfigProto | None = None,
        config: config_pb2.ConfigProto | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(target, graph, config, **kwargs)
        _default_stack().append(self)

    def close(self) -> None:
        _pop_default(self)
        super().close()


_interactive_kinds: dict[type[Session], type[InteractiveSession]] = {}


def _interactive(factory: type[Session]) -> type[InteractiveSession]:
    """An InteractiveSession of another target's kind (a RemoteSession, say)."""
    kind = _interactive_kinds.get(factory)
    if kind is None:
        name = f"Interactive{factory.__name__}"
        kind = _interactive_kinds[factory] = type(name, (InteractiveSession, factory), {})
    return kind


_defaults = threading.local()


def _default_stack() -> list[Session]:
    stack: list[Session] | None = getattr(_defaults, "stack", None)
    if stack is None:
        stack = _defaults.stack = []
    return stack


def _pop_default(session: Session) -> None:
    stack = _default_stack()
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is session:
            del stack[i]
            return


def get_default_session() -> Session | None:
    """The innermost session made default on this thread (``with sess:``, ``as_default()``, or an
    ``InteractiveSession``), or None."""
    stack = _default_stack()
    return stack[-1] if stack else None


_CALLER = CallerThread()


def _serial_program(plan: Plan) -> SerialProgram:
    """The plan's nodes in one topological order, made once per plan (``Plan.serial``)."""
    program = plan.serial
    if program is None:
        program = plan.serial = SerialProgram(plan)
    return program


__all__ = [
    "CLOSED_MESSAGE",
    "InteractiveSession",
    "RunFuture",
    "Session",
    "StepRecord",
    "get_default_session",
]
