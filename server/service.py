"""The one call every protocol adapter makes: ``await service.infer(request)``.

Adapters decode a body into an ``InferRequest`` (feeds as numpy arrays, keyed by public names, aliases or
graph tensor names), await ``InferenceService.infer`` and encode the ``InferResult``. The service owns the
models, the server's RunHandlerPool default, the trace store and the metrics; the runtime runs the step
(``Session.arun``: the pool rule, the wait for a run handler, the step, its deadline). The event loop never
runs a kernel nor blocks; cancelling the awaiting task (client gone) cancels the step.

A request's facts flow one way: the HTTP middleware fixes its id and arrival (``RequestInfo``, in the ASGI
scope), the adapter copies them into the ``InferRequest``, and the deadline counts from that arrival.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from poolserve.proto import config_pb2
from poolserve.runtime import run_handler, threadpool
from poolserve.runtime.deadline import SERVER_DEFAULT, TIMEOUT_IN_MS, Deadline
from poolserve.runtime.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    OpError,
    PermissionDeniedError,
    UnavailableError,
)
from poolserve.runtime.run_handler import RunHandlerPool
from poolserve.runtime.session import StepRecord
from poolserve.runtime.tensor import as_array
from poolserve.runtime.threadpool import KernelThreads
from poolserve.runtime.types import Array
from poolserve.server.admission import Admission
from poolserve.server.auth import AdminToken
from poolserve.server.batching import BatchInfo
from poolserve.server.config import Config
from poolserve.server.errors import http_status
from poolserve.server.metrics import Metrics
from poolserve.server.models import ModelEntry
from poolserve.server.repository import Repository
from poolserve.server.statistics import Statistics
from poolserve.server.trace_db import open_trace_store
from poolserve.server.traces import Span, TraceRecord

log = logging.getLogger("poolserve")


# --- per-request facts -----------------------------------------------------------------------------------


# a server that refused a request this recently is taken to be past its capacity: no step runs on the event
# loop (``InferenceService.loop_free``)
QUIET_AFTER_REFUSAL_S = 1.0


class RequestInfo(NamedTuple):
    """What the HTTP middleware fixes when a request arrives."""

    request_id: str
    received_at: float  # time.monotonic()


_SCOPE_KEY = "poolserve.request"
_ID_PREFIX = os.urandom(8).hex()  # random per process
_id_counter = itertools.count()


def new_request_id() -> str:
    """32 hex digits, as a uuid4's: a random per-process prefix and a counter (unique without a system call
    per request)."""
    return f"{_ID_PREFIX}{next(_id_counter):016x}"


def attach_info(scope: MutableMapping[str, Any], info: RequestInfo) -> None:
    scope[_SCOPE_KEY] = info


def request_info(scope: MutableMapping[str, Any]) -> RequestInfo:
    """The request's id and arrival, as the middleware fixed them (fresh ones outside the middleware)."""
    info: RequestInfo | None = scope.get(_SCOPE_KEY)
    return info if info is not None else RequestInfo(new_request_id(), time.monotonic())


# --- requests and results -------------------------------------------------------------------------------


@dataclass
class InferRequest:
    """One inference call. ``feeds`` and ``fetches`` use public names, aliases or graph tensor names;
    empty ``fetches`` means the model's outputs. ``trace`` asks for the trace in the result.
    ``use_run_handler_pool`` None means: the run options' flag if set, else the server's default.
    ``request_id`` and ``received_at`` (time.monotonic(), where the deadline starts) come from the HTTP
    request's ``RequestInfo``; a fresh id and now by default."""

    model: str
    feeds: dict[str, Array]
    fetches: list[str] = field(default_factory=list)
    version: int | None = None
    targets: list[str] = field(default_factory=list)
    run_options: config_pb2.RunOptions | None = None
    trace: bool = False
    use_run_handler_pool: bool | None = None
    request_id: str = ""
    received_at: float = 0.0
    signature_name: str | None = None  # None: the model's default signature
    # the setting a client used that became run_options.timeout_in_ms, for a deadline's message (None:
    # RunOptions itself); set by the adapter that turned it into the option
    timeout_source: str | None = None

    def __post_init__(self) -> None:
        if not self.request_id:
            self.request_id = new_request_id()
        if not self.received_at:
            self.received_at = time.monotonic()


@dataclass
class Timings:
    """Monotonic timestamps of a request's phases (seconds) and the run handler that served it."""

    received_at: float
    decoded_at: float = 0.0
    handler_at: float = 0.0
    compute_end: float = 0.0
    used_pool: bool = False
    handler_id: int | None = None
    loop_thread: int = 0
    batch: BatchInfo | None = None  # the batch the request ran in (dynamic batching)

    @property
    def handler_wait_seconds(self) -> float:
        return self.handler_at - self.decoded_at if self.handler_at else 0.0

    @property
    def compute_seconds(self) -> float:
        return self.compute_end - self.handler_at if self.compute_end and self.handler_at else 0.0


@dataclass
class InferResult:
    """Outputs keyed by the names the request fetched (the model's public output names by default).
    ``run_metadata`` and ``trace`` (Chrome trace JSON) are set when the request asked for a trace."""

    outputs: dict[str, Array]
    request_id: str
    model: str
    version: int
    run_metadata: config_pb2.RunMetadata | None = None
    trace: dict[str, Any] | None = None
    timings: Timings | None = None


# --- the service ----------------------------------------------------------------------------------------


class PoolDefault(Protocol):
    """The server's RunHandlerPool default: a plain value, or one that several workers share
    (server/workers.py)."""

    enabled: bool


class _PoolDefault:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled


class InferenceService:
    """One server's models, its RunHandlerPool default, trace store and metrics, and the inference path."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.admin_token = AdminToken(config.server.admin_token, config.server.admin_token_file)
        self.pool_default: PoolDefault = _PoolDefault(config.run_handler_pool.enabled)
        self.models: dict[str, dict[int, ModelEntry]] = {}
        self.traces = open_trace_store(config.traces)
        # requests being served (kept by the HTTP middleware and the gRPC handlers, on the event loop)
        self.in_flight = 0
        # the queue's measured cost and the per-client counts, shared by HTTP and gRPC (server.admission)
        self.admission = Admission()
        self.metrics = Metrics(
            self.pool_stats, self.traces.__len__, lambda: self.steps_running, lambda: self.in_flight
        )
        self.ready = False
        self.draining = False
        self._pool: RunHandlerPool | None = None
        self._pool_order: tuple[bool, float] | None = None  # the pool's (fair, stretch) before start()
        self._shared_options: dict[tuple[int, bool], config_pb2.RunOptions] = {}
        # BLAS threads of the steps the RunHandlerPool does not run (it sets them for its own): n such
        # steps at once share the cores, so they never oversubscribe them (the issue measured 241 req/s at
        # 8 clients with every kernel on all cores, 295-308 with one thread each). Unchanged when the
        # user set intra_op_threads.
        self._kernel_threads = KernelThreads()
        self._unpooled_steps = 0
        # the models' versions, their states and polling (server/repository.py); it keeps self.models
        self.repository = Repository(config, self.models, self._prepare)
        # Triton's statistics of the versions served (their counters: ModelEntry.stats)
        self.statistics = Statistics()

    # --- lifetime ----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Makes the RunHandlerPool and loads every configured model (blocking: run it off the loop)."""
        sys.setswitchinterval(self.config.runtime.gil_switch_interval_ms / 1000.0)
        if not self.config.runtime.intra_op_threads:
            threadpool.keep_core_for_loop()
            self._kernel_threads = KernelThreads()  # with the budget that leaves
        self._pool = self._configure_pool()
        self._kernel_threads.running(1)  # finds the BLAS libraries now, not in the first request
        self._kernel_threads.running(0)
        self.repository.start()
        self.ready = True

    def _configure_pool(self) -> RunHandlerPool:
        cfg = self.config.run_handler_pool
        try:
            pool = run_handler.configure_pool(cfg.threads, cfg.max_concurrent_handlers)
            # the pool is process-global: close() gives it back its order (a library's sessions in the
            # same process keep theirs once an in-process app is gone)
            self._pool_order = (pool.fair, pool.stretch)
            pool.stretch = cfg.deadline_stretch
            pool.fair = cfg.policy == "fair"
            return pool
        except InvalidArgumentError as e:
            # the pool is process-global: a second app in the same process shares the first one's
            log.warning("using the existing RunHandlerPool: %s", e)
            return run_handler.get_pool()

    def close(self) -> None:
        self.ready = False
        self.statistics.close()
        self.repository.close()
        for versions in self.models.values():
            for entry in versions.values():
                entry.session.close()
        self.traces.close()
        if self._pool is not None and self._pool_order is not None:
            self._pool.fair, self._pool.stretch = self._pool_order
            self._pool_order = None

    def alone(self, arrivals: int | None = None) -> bool:
        """No request is in flight but the caller's, and none came to admission after it (``arrivals``:
        the admission's count when it arrived, ``Ticket.arrivals``; None: not known): its decode and encode
        may run on the event loop up to ``codec.ALONE_BYTES``, with nothing there for them to delay.

        Why the arrivals: past its capacity a shedding server refuses most requests at their headers, and
        at times held one request in flight or none; taken for alone, that one decoded and ran its step on
        the event loop while the refused ones' bytes waited in their sockets (the example cnn at 3-5x of
        its capacity: event loop lag p99 0.4-0.6 s, a fifth of the stalled samples in decoding and
        convolutions on the loop). In a closed loop, too, a body of 32 KiB or more decoded on the loop held
        up the next requests' reads (see ``loop_free``)."""
        if self.in_flight > 1:
            return False
        return arrivals is None or arrivals == self.admission.arrivals

    def loop_free(self) -> bool:
        """No request is in flight but the caller's, and admission refused none in the last
        ``QUIET_AFTER_REFUSAL_S``: a step under ``ALONE_STEP_S`` of CPU may run on the event loop
        (``Session.arun(alone=True)``), with no hand-off to a thread and back.

        Laxer than ``alone``: in a closed loop requests arrive all the time and are answered one by one, and
        under ``alone``'s rule no step ran on the loop. The four example models at 8 clients, pool on / off
        (``poolserve loadtest --compare-pool``): 0.91-0.99x throughput and p99 1.06-1.36x with ``alone``
        for the steps (a2f55aa), 1.25-1.54x and 0.42x with this. Past capacity (a refusal within the last
        second) steps leave the loop as before."""
        if self.in_flight > 1:
            return False
        return time.monotonic() - self.admission.refused_at >= QUIET_AFTER_REFUSAL_S

    def not_ready(self) -> str:
        """Why the server is not ready, or "": starting, draining, or (strict readiness) a model of the
        config that does not serve."""
        if self.draining:
            return "the server is shutting down"
        if not self.ready:
            return "the server is starting"
        if self.config.server.strict_readiness:
            return self.repository.unready()
        return ""

    @property
    def pool_enabled(self) -> bool:
        return self.pool_default.enabled

    @pool_enabled.setter
    def pool_enabled(self, value: bool) -> None:
        self.pool_default.enabled = value

    def add_model(self, entry: ModelEntry) -> None:
        """Serves an entry loaded outside the config (the repository neither polls nor unloads it)."""
        self._prepare(entry)
        self.models.setdefault(entry.name, {})[entry.version] = entry

    def _prepare(self, entry: ModelEntry) -> None:
        if entry.batcher is not None:
            entry.batcher.observe = self._observe_batch(entry.name)
            entry.batcher.executed = entry.stats.executed
            entry.batcher.busy = lambda: self.in_flight > 1

    @property
    def pool(self) -> RunHandlerPool:
        if self._pool is None:
            self._pool = self._configure_pool()
        return self._pool

    def pool_stats(self) -> run_handler.PoolStats | None:
        pool = self._pool or run_handler.current_pool()
        return pool.stats() if pool is not None else None

    @property
    def steps_running(self) -> int:
        """Steps started by the models' sessions and not yet ended."""
        return sum(e.session.steps_running for versions in self.models.values() for e in versions.values())

    # --- lookups -----------------------------------------------------------------------------------------

    def model(self, name: str, version: int | None = None) -> ModelEntry:
        """The model (its latest available version by default); NotFoundError naming it otherwise,
        UnavailableError when it is configured but not loaded (see ``repository.lookup``)."""
        return self.repository.lookup(name, version)

    def list_models(self) -> list[ModelEntry]:
        return [e for name in sorted(self.models) for _, e in sorted(self.models[name].items())]

    def check_admin(self, headers: Mapping[str, str]) -> None:
        """Refuses a request without the current admin token, when one is set (UnauthenticatedError,
        server/auth.py)."""
        self.admin_token.check(headers)

    def guard_options(self, options: config_pb2.RunOptions | None) -> None:
        """Refuses what a client's RunOptions may not do on this server: ``debug_options`` dumps write
        files, so they are refused (PermissionDeniedError, 403) unless ``[server] debug_dump_dir`` names a
        folder, and then every file:// URL must lie under it (a relative one is taken from it, an absolute
        one must be inside it; each is rewritten to its absolute path there). Called for every request
        that carries RunOptions of its own (native ``:run``, remote sessions)."""
        if options is None or not options.HasField("debug_options"):
            return
        watches = options.debug_options.debug_tensor_watch_opts
        if not any(w.debug_urls for w in watches):
            return
        folder = self.config.server.debug_dump_dir
        if not folder:
            raise PermissionDeniedError(
                "RunOptions.debug_options would write files on the server, which this server does not "
                "allow: set [server] debug_dump_dir to a folder for the dumps"
            )
        root = Path(folder).resolve()
        for w in watches:
            for i, url in enumerate(w.debug_urls):
                if not url.startswith("file://"):
                    continue  # the runtime refuses other schemes with its own message
                path = (root / url[len("file://") :]).resolve()  # an absolute path stays one
                if not path.is_relative_to(root):
                    raise PermissionDeniedError(
                        f"Debug URL {url!r} leads out of the server's debug_dump_dir ({root}): give a path "
                        "relative to it, e.g. file://run1"
                    )
                w.debug_urls[i] = f"file://{path}"

    def timeout_ms(self, options: config_pb2.RunOptions | None) -> int:
        if options is not None and options.timeout_in_ms > 0:
            return int(options.timeout_in_ms)
        return self.config.server.default_timeout_ms

    # --- inference ---------------------------------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResult:
        """Runs one request; raises OpError subclasses (DeadlineExceededError at the deadline)."""
        timings = Timings(request.received_at, loop_thread=threading.get_ident())
        entry: ModelEntry | None = None
        options = request.run_options
        asked = request.trace or (options is not None and options.trace_level > 0)
        rate = self.config.traces.sample_rate
        traced = asked or (rate > 0 and random.random() < rate)
        run_metadata = config_pb2.RunMetadata() if traced else None
        status = 200
        trace_json: dict[str, Any] | None = None
        try:
            entry = self.model(request.model, request.version)
            self.guard_options(options)
            outputs = await self._run(entry, request, options, traced, run_metadata, timings)
        except OpError as e:
            status = http_status(e.code)
            if isinstance(e, DeadlineExceededError):
                self.metrics.child(self.metrics.timeouts, entry.name if entry else request.model).inc()
            raise
        except asyncio.CancelledError:
            status = 499
            raise
        finally:
            if not timings.compute_end:
                timings.compute_end = time.monotonic()
            if traced:
                record = self._record_trace(request, entry, status, run_metadata, timings)
                trace_json = record.chrome_trace() if asked else None
        return InferResult(
            outputs,
            request.request_id,
            entry.name,
            entry.version,
            run_metadata if asked else None,
            trace_json,
            timings,
        )

    async def _run(
        self,
        entry: ModelEntry,
        request: InferRequest,
        given: config_pb2.RunOptions | None,
        traced: bool,
        run_metadata: config_pb2.RunMetadata | None,
        timings: Timings,
    ) -> dict[str, Array]:
        if self.draining and not self.ready:
            raise UnavailableError("The server is shutting down")
        timeout_ms = self.timeout_ms(given)
        if given is not None and given.timeout_in_ms > 0:
            source = request.timeout_source or TIMEOUT_IN_MS
        else:
            source = SERVER_DEFAULT
        deadline = Deadline(timeout_ms, request.received_at, source) if timeout_ms > 0 else None
        entry = entry.for_signature(request.signature_name)
        feeds = entry.feeds(request.feeds)
        names = request.fetches or [s.name for s in entry.outputs]
        fetches = entry.fetches(names)
        for t in request.targets:
            if t not in entry.graph.nodes:
                raise InvalidArgumentError(f"Model '{entry.name}' has no node '{t}' to run as a target")
        if not fetches and not request.targets:
            raise InvalidArgumentError(f"Model '{entry.name}' has no outputs: name fetches or targets")
        use_pool = request.use_run_handler_pool
        if use_pool is None:
            use_pool = (given is not None and given.experimental.use_run_handler_pool) or self.pool_enabled
        options = self._run_options(given, timeout_ms, use_pool, traced)
        timings.decoded_at = time.monotonic()
        if deadline is not None:
            deadline.check("decoding the request")
        batcher = entry.batcher
        lone: BatchInfo | None = None  # a batch of this request alone, run by the path below
        if batcher is not None and not request.targets and _batchable_options(given):
            rows = batcher.batchable(feeds)
            lone = batcher.claim_alone(rows) if rows else None
            if rows and lone is None:
                priority = given.experimental.run_handler_pool_options.priority if given is not None else 0
                got = await batcher.run(feeds, fetches, rows, use_pool, deadline, priority, traced)
                if got is not None:
                    values, info, metadata = got
                    if run_metadata is not None and metadata is not None:
                        run_metadata.CopyFrom(metadata)
                    timings.batch = info
                    timings.handler_at = info.started_at
                    timings.used_pool = use_pool
                    timings.compute_end = time.monotonic()
                    return _by_name(names, values)
        # the session decides whether the pool runs the step (TensorFlow's rule), waits for a run handler
        # within the deadline and cancels the step at it; cancelling this task cancels the step
        record = StepRecord()
        pooled = entry.session.uses_run_handler_pool(options)
        try:  # from here on, a batch slot claimed above is given back however the step ends
            if not pooled:
                self._unpooled_steps += 1
                self._kernel_threads.running(self._unpooled_steps)
            values = await entry.session.arun(
                fetches + list(request.targets) if request.targets else fetches,
                feeds,
                options,
                run_metadata,
                deadline=deadline,
                record=record,
                alone=self.loop_free(),
            )
            if lone is not None:
                assert batcher is not None
                batcher.learn(fetches, lone.rows, values)
        finally:
            if lone is not None:
                assert batcher is not None
                batcher.end_alone(lone)
                timings.batch = lone
            if not pooled:
                self._unpooled_steps -= 1
                self._kernel_threads.running(self._unpooled_steps)
            timings.handler_at = record.started_at
            timings.used_pool = record.used_pool
            timings.handler_id = record.handler_id
            if record.started_at:
                self.metrics.child(self.metrics.handler_wait, entry.name).observe(
                    timings.handler_wait_seconds
                )
        timings.compute_end = time.monotonic()
        step = timings.compute_end - timings.handler_at if timings.handler_at else 0.0
        entry.stats.executed(_batch_size(entry, feeds), step)
        return _by_name(names, values[: len(names)])

    def _observe_batch(self, model: str) -> Callable[[int, float], None]:
        size = self.metrics.child(self.metrics.batch_size, model)
        delay = self.metrics.child(self.metrics.batch_queue_delay, model)

        def observe(rows: int, waited: float) -> None:
            size.observe(rows)
            delay.observe(waited)

        return observe

    def _run_options(
        self, given: config_pb2.RunOptions | None, timeout_ms: int, use_pool: bool, traced: bool
    ) -> config_pb2.RunOptions:
        """The RunOptions a step runs with. Requests that set none share one per (timeout, pool): a
        RunOptions handed to a session is never changed afterwards."""
        if given is None and not traced:
            key = (timeout_ms, use_pool)
            shared = self._shared_options.get(key)
            if shared is None:
                shared = config_pb2.RunOptions(timeout_in_ms=timeout_ms)
                shared.experimental.use_run_handler_pool = use_pool
                self._shared_options[key] = shared
            return shared
        options = config_pb2.RunOptions()
        if given is not None:
            options.CopyFrom(given)
        options.timeout_in_ms = timeout_ms
        if traced and options.trace_level == config_pb2.RunOptions.NO_TRACE:
            options.trace_level = config_pb2.RunOptions.FULL_TRACE
        options.experimental.use_run_handler_pool = use_pool
        return options

    def _record_trace(
        self,
        request: InferRequest,
        entry: ModelEntry | None,
        status: int,
        run_metadata: config_pb2.RunMetadata | None,
        t: Timings,
    ) -> TraceRecord:
        spans = [
            Span("receive+decode", t.received_at, t.decoded_at or t.compute_end, {"thread": t.loop_thread})
        ]
        if t.decoded_at and t.handler_at:
            compute: dict[str, Any] = {"handler": t.handler_id, "threads": _step_threads(run_metadata)}
            if t.batch is not None:  # the handler is the batch's; its wait is the wait for the batch
                batch = {"batch": t.batch.batch_id, "rows": t.batch.rows, "members": t.batch.members}
                spans.append(Span("wait for batch", t.decoded_at, t.handler_at, batch))
                compute = batch | {"threads": compute["threads"]}
            else:
                wait = {"handler": t.handler_id, "run_handler_pool": t.used_pool, "thread": t.loop_thread}
                spans.append(Span("wait for run handler", t.decoded_at, t.handler_at, wait))
            spans.append(Span("compute", t.handler_at, t.compute_end, compute))
        record = TraceRecord(
            request.request_id,
            entry.name if entry is not None else request.model,
            status,
            spans,
            run_metadata,
            start_monotonic=t.received_at,
        )
        self.traces.add(record)
        return record


def _batch_size(entry: ModelEntry, feeds: Mapping[str, Array]) -> int:
    """A step's batch size, for the statistics: 1 for a model without batching (as Triton counts one), a
    batching model's request's rows (dimension 0 of its inputs)."""
    if entry.batcher is not None:
        for value in feeds.values():
            if isinstance(value, np.ndarray) and value.ndim:
                return int(value.shape[0])
    return 1


def _batchable_options(given: config_pb2.RunOptions | None) -> bool:
    """Options a batch can honour for each member (else the request runs alone): timeout, priority,
    pool and trace level, nothing that changes what the step does."""
    if given is None:
        return True
    return not (
        given.HasField("debug_options")
        or given.inter_op_thread_pool
        or given.output_partition_graphs
        or given.report_tensor_allocations_upon_oom
    )


def _by_name(names: list[str], values: list[Any]) -> dict[str, Array]:
    """A step's outputs by the request's names, as arrays: ``Session.arun`` returns a 0-d result as a numpy
    scalar (``bytes`` for a string), as TensorFlow's ``Session.run`` does; the encoders take arrays."""
    return {n: v if type(v) is np.ndarray else as_array(v) for n, v in zip(names, values, strict=True)}


def _step_threads(run_metadata: config_pb2.RunMetadata | None) -> list[int]:
    if run_metadata is None:
        return []
    ids: set[int] = set()
    for dev in run_metadata.step_stats.dev_stats:
        ids.update(ns.thread_id for ns in dev.node_stats)
    return sorted(ids)


__all__ = [
    "InferRequest",
    "InferResult",
    "InferenceService",
    "RequestInfo",
    "Timings",
    "attach_info",
    "new_request_id",
    "request_info",
]
