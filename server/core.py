"""The one call every protocol adapter makes: ``await runtime.infer(request)``.

Adapters decode a body into an ``InferRequest`` (feeds as numpy arrays, keyed by public names, aliases or
graph tensor names), await ``Runtime.infer`` and encode the ``InferResult``. The event loop never runs a
kernel nor blocks: with the RunHandlerPool on, a handler is awaited (``get_async``), the step is submitted
with it and its future awaited; cancelling the awaiting task (client gone, deadline) cancels the step.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import math
import os
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from poolserve.proto import config_pb2, types_pb2
from poolserve.runtime import run_handler
from poolserve.runtime.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    OpError,
    UnavailableError,
)
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.node import Node, parse_tensor_name
from poolserve.runtime.run_handler import RunHandler, RunHandlerPool
from poolserve.runtime.session import Session
from poolserve.runtime.types import Array
from poolserve.server.config import Config, ModelConfig
from poolserve.server.errors import http_status
from poolserve.server.metrics import Metrics
from poolserve.server.traces import Span, TraceRecord, TraceStore

log = logging.getLogger("poolserve")

_NOT_OUTPUTS = frozenset({"NoOp", "Const", "Placeholder", "PlaceholderWithDefault", "Assert"})
_PLACEHOLDERS = ("Placeholder", "PlaceholderWithDefault")
# attrs that name an op's output dtype, in the order they are tried
_DTYPE_ATTRS = ("dtype", "out_type", "output_type", "DstT", "Tout", "T")


# --- per-request context -------------------------------------------------------------------------------


@dataclass
class RequestContext:
    """What the HTTP middleware knows about the request being served (id, arrival) and what the core
    tells it back (model, whether a trace was stored, when compute ended)."""

    request_id: str
    received_at: float  # time.monotonic()
    model: str = ""
    traced: bool = False
    compute_end: float | None = None


_context: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar(
    "poolserve_request", default=None
)


def current_context() -> RequestContext | None:
    return _context.get()


def set_context(ctx: RequestContext | None) -> contextvars.Token[RequestContext | None]:
    return _context.set(ctx)


def reset_context(token: contextvars.Token[RequestContext | None]) -> None:
    _context.reset(token)


_ID_PREFIX = os.urandom(8).hex()  # random per process
_id_counter = itertools.count()


def new_request_id() -> str:
    """32 hex digits, as a uuid4's: a random per-process prefix and a counter (unique without a system call
    per request)."""
    return f"{_ID_PREFIX}{next(_id_counter):016x}"


# --- models ---------------------------------------------------------------------------------------------


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
    """Best effort from the node's attrs; else the dtype of its first input (Identity-like ops)."""
    for attr in _DTYPE_ATTRS:
        if node.has_attr(attr):
            value = node.attr(attr)
            if isinstance(value, int) and value > 0:
                return value
            if isinstance(value, list) and port < len(value):
                return int(value[port])
    if node.inputs and depth < 16:
        src, src_port = node.inputs[0]
        return _output_dtype(graph, graph.nodes[src], src_port, depth + 1)
    return types_pb2.DT_INVALID


def _spec(graph: Graph, name: str, tensor: str) -> TensorSpec:
    node_name, port = graph.tensor(tensor)
    node = graph.nodes[node_name]
    dtype = _output_dtype(graph, node, port)
    return TensorSpec(name, f"{node_name}:{port}", dtype, _output_shape(node, port))


def default_inputs(graph: Graph) -> list[TensorSpec]:
    """The graph's Placeholder nodes, in GraphDef order."""
    return [_spec(graph, n.name, f"{n.name}:0") for n in graph.nodes.values() if n.op in _PLACEHOLDERS]


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
            out.append(_spec(graph, _public_name(node.name, port), f"{node.name}:{port}"))
    return out


@dataclass
class ModelEntry:
    """A loaded model: its session and its public inputs/outputs."""

    name: str
    version: int
    session: Session
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    path: str = ""
    _by_input: dict[str, TensorSpec] = field(default_factory=dict, repr=False)
    _by_output: dict[str, TensorSpec] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._by_input = {s.name: s for s in self.inputs}
        self._by_output = {s.name: s for s in self.outputs}

    @property
    def graph(self) -> Graph:
        return self.session.graph

    def _lookup(self, name: str, kind: str, table: dict[str, TensorSpec]) -> TensorSpec:
        spec = table.get(name)
        if spec is not None:
            return spec
        # any tensor of the graph by its own name ("x:0", "x", "layer/out:1")
        try:
            node_name, port = parse_tensor_name(name)
            canonical = f"{node_name}:{port}"
            for s in table.values():
                if s.tensor == canonical:
                    return s
            return _spec(self.graph, name, name)
        except OpError:
            pass
        valid = ", ".join(sorted(table)) or "(none)"
        raise InvalidArgumentError(
            f"Model '{self.name}' has no {kind} '{name}'; its {kind}s are: {valid}"
            " (a graph tensor name 'node:port' works too)"
        )

    def input_spec(self, name: str) -> TensorSpec:
        """The spec of a public input name, an alias, or any graph tensor; InvalidArgumentError if none."""
        return self._lookup(name, "input", self._by_input)

    def output_spec(self, name: str) -> TensorSpec:
        return self._lookup(name, "output", self._by_output)

    def resolve_input(self, name: str) -> str:
        return self.input_spec(name).tensor

    def resolve_output(self, name: str) -> str:
        return self.output_spec(name).tensor


def load_model(mc: ModelConfig, config: Config) -> ModelEntry:
    """Loads a configured model into a Session. Errors name the model."""
    try:
        graph = Graph(load_graph_def(mc.path))
    except OpError as e:
        raise type(e)(f"model '{mc.name}': {e.message}", e.node_name) from None
    proto = mc.config_proto()
    if config.runtime.inter_op_threads and not proto.inter_op_parallelism_threads:
        proto.inter_op_parallelism_threads = config.runtime.inter_op_threads
    if config.runtime.intra_op_threads and not proto.intra_op_parallelism_threads:
        proto.intra_op_parallelism_threads = config.runtime.intra_op_threads
    session = Session(graph, proto, memory_limit_bytes=config.runtime.memory_limit_bytes)
    return make_entry(mc.name, mc.version, session, mc.inputs, mc.outputs, str(mc.path))


def make_entry(
    name: str,
    version: int,
    session: Session,
    inputs: dict[str, str] | None = None,
    outputs: dict[str, str] | None = None,
    path: str = "",
) -> ModelEntry:
    graph = session.graph

    def specs(aliases: dict[str, str], kind: str) -> list[TensorSpec]:
        out = []
        for alias, tensor in aliases.items():
            try:
                out.append(_spec(graph, alias, tensor))
            except OpError as e:
                raise InvalidArgumentError(f"model '{name}': {kind} '{alias}': {e.message}") from None
        return out

    ins = specs(inputs, "input") if inputs else default_inputs(graph)
    outs = specs(outputs, "output") if outputs else default_outputs(graph)
    return ModelEntry(name, version, session, ins, outs, path)


# --- requests and results -------------------------------------------------------------------------------


@dataclass
class InferRequest:
    """One inference call. ``feeds`` and ``fetches`` use public names, aliases or graph tensor names;
    empty ``fetches`` means the model's outputs. ``trace`` asks for the trace in the result.
    ``use_run_handler_pool`` None means: the run options' flag if set, else the server's default.
    ``request_id`` and ``received_at`` default to the HTTP request's (set by the middleware)."""

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

    def __post_init__(self) -> None:
        ctx = _context.get()
        if not self.request_id:
            self.request_id = ctx.request_id if ctx is not None else new_request_id()
        if not self.received_at:
            self.received_at = ctx.received_at if ctx is not None else time.monotonic()


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


# --- the runtime ----------------------------------------------------------------------------------------


class Runtime:
    """Owns the models, the RunHandlerPool default, the trace store and the metrics of one server."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.pool_enabled: bool = config.run_handler_pool.enabled
        self.models: dict[str, dict[int, ModelEntry]] = {}
        self.traces = TraceStore(config.traces.capacity, config.traces.capacity_bytes)
        self.in_flight = 0  # HTTP requests being served (kept by the app's middleware, on the event loop)
        self.metrics = Metrics(
            self.pool_stats, self.traces.__len__, lambda: self.steps_running, lambda: self.in_flight
        )
        self.ready = False
        self.draining = False
        self.steps_running = 0
        self._steps_lock = threading.Lock()
        self._pool: RunHandlerPool | None = None
        self._shared_options: dict[tuple[int, bool], config_pb2.RunOptions] = {}

    # --- lifetime ----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Makes the RunHandlerPool and loads every configured model (blocking: run it off the loop)."""
        sys.setswitchinterval(self.config.runtime.gil_switch_interval_ms / 1000.0)
        self._pool = self._configure_pool()
        for mc in self.config.models:
            self.add_model(load_model(mc, self.config))
        self.ready = True

    def _configure_pool(self) -> RunHandlerPool:
        cfg = self.config.run_handler_pool
        try:
            pool = run_handler.configure_pool(cfg.threads, cfg.max_concurrent_handlers)
            pool.stretch = cfg.deadline_stretch
            return pool
        except InvalidArgumentError as e:
            # the pool is process-global: a second app in the same process shares the first one's
            log.warning("using the existing RunHandlerPool: %s", e)
            return run_handler.get_pool()

    def close(self) -> None:
        self.ready = False
        for versions in self.models.values():
            for entry in versions.values():
                entry.session.close()

    def add_model(self, entry: ModelEntry) -> None:
        self.models.setdefault(entry.name, {})[entry.version] = entry

    @property
    def pool(self) -> RunHandlerPool:
        if self._pool is None:
            self._pool = self._configure_pool()
        return self._pool

    def pool_stats(self) -> run_handler.PoolStats | None:
        pool = self._pool or run_handler.current_pool()
        return pool.stats() if pool is not None else None

    # --- lookups -----------------------------------------------------------------------------------------

    def model(self, name: str, version: int | None = None) -> ModelEntry:
        """The model (its latest version by default); NotFoundError naming it otherwise. The first model a
        request looks up labels its metrics."""
        versions = self.models.get(name)
        if not versions:
            known = ", ".join(sorted(self.models)) or "(none)"
            raise NotFoundError(f"Model '{name}' not found; the server has: {known}")
        entry = versions[max(versions)] if version is None else versions.get(version)
        if entry is None:
            have = ", ".join(str(v) for v in sorted(versions))
            raise NotFoundError(f"Model '{name}' has no version {version}; it has: {have}")
        ctx = _context.get()
        if ctx is not None and not ctx.model:
            ctx.model = name  # labels the request's metrics (only names of models that exist)
        return entry

    def list_models(self) -> list[ModelEntry]:
        return [e for name in sorted(self.models) for _, e in sorted(self.models[name].items())]

    def resolve_input(self, model: str | ModelEntry, name: str) -> str:
        entry = self.model(model) if isinstance(model, str) else model
        return entry.resolve_input(name)

    def resolve_output(self, model: str | ModelEntry, name: str) -> str:
        entry = self.model(model) if isinstance(model, str) else model
        return entry.resolve_output(name)

    def timeout_ms(self, options: config_pb2.RunOptions | None) -> int:
        if options is not None and options.timeout_in_ms > 0:
            return int(options.timeout_in_ms)
        return self.config.server.default_timeout_ms

    # --- inference ---------------------------------------------------------------------------------------

    async def infer(self, request: InferRequest) -> InferResult:
        """Runs one request; raises OpError subclasses (DeadlineExceededError at the deadline)."""
        ctx = _context.get()
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
            if ctx is not None:
                ctx.compute_end = timings.compute_end
            if traced:
                record = self._record_trace(request, entry, status, run_metadata, timings)
                if ctx is not None:
                    ctx.traced = True
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
        feeds: dict[str, Array] = {}
        for name, value in request.feeds.items():
            tensor = entry.resolve_input(name)
            if tensor in feeds:
                raise InvalidArgumentError(f"Tensor '{tensor}' is fed twice (as '{name}' and another name)")
            feeds[tensor] = value
        names = request.fetches or [s.name for s in entry.outputs]
        fetches = [entry.resolve_output(n) for n in names]
        targets = list(request.targets)
        for t in targets:
            if t not in entry.graph.nodes:
                raise InvalidArgumentError(f"Model '{entry.name}' has no node '{t}' to run as a target")
        if not fetches and not targets:
            raise InvalidArgumentError(f"Model '{entry.name}' has no outputs: name fetches or targets")
        timeout_ms = self.timeout_ms(given)
        use_pool = request.use_run_handler_pool
        if use_pool is None:
            use_pool = (given is not None and given.experimental.use_run_handler_pool) or self.pool_enabled
        options = self._run_options(given, timeout_ms, use_pool, traced)

        timings.decoded_at = time.monotonic()
        remaining_ms = self._remaining_ms(timeout_ms, request.received_at, "decoding the request")
        handler: RunHandler | None = None
        if use_pool:
            priority = int(options.experimental.run_handler_pool_options.priority)
            wait_ms = math.ceil(remaining_ms) if timeout_ms > 0 else 0
            handler = await self.pool.get_async(0, wait_ms, priority)
            timings.used_pool = True
            timings.handler_id = handler.id
        timings.handler_at = time.monotonic()
        self.metrics.child(self.metrics.handler_wait, entry.name).observe(timings.handler_wait_seconds)
        try:
            self._remaining_ms(timeout_ms, request.received_at, "waiting for a run handler")
        except DeadlineExceededError:
            if handler is not None:
                handler.release()
            raise
        # the step releases the handler however it ends (also when starting it raises); cancelling this
        # task (timeout backstop, client disconnect) cancels the step
        waiter = entry.session.arun(
            fetches,
            feeds,
            options,
            run_metadata,
            handler=handler,
            started=request.received_at,
            on_step_end=self._step_ended,
        )
        with self._steps_lock:
            self.steps_running += 1
        # arun answers DeadlineExceededError at the deadline, even while one long kernel still runs
        values = await waiter
        timings.compute_end = time.monotonic()
        return dict(zip(names, values, strict=True))

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

    @staticmethod
    def _remaining_ms(timeout_ms: int, received_at: float, phase: str) -> float:
        if timeout_ms <= 0:
            return 0.0
        remaining = timeout_ms - (time.monotonic() - received_at) * 1000.0
        if remaining <= 0:
            raise DeadlineExceededError(
                f"The deadline of {timeout_ms} ms passed while {phase} (RunOptions.timeout_in_ms or the "
                "server's default_timeout_ms)"
            )
        return remaining

    def _step_ended(self) -> None:
        with self._steps_lock:
            self.steps_running -= 1

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
            spans.append(
                Span(
                    "wait for run handler",
                    t.decoded_at,
                    t.handler_at,
                    {"handler": t.handler_id, "run_handler_pool": t.used_pool, "thread": t.loop_thread},
                )
            )
            threads = _step_threads(run_metadata)
            spans.append(
                Span("compute", t.handler_at, t.compute_end, {"handler": t.handler_id, "threads": threads})
            )
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
    "ModelEntry",
    "RequestContext",
    "Runtime",
    "TensorSpec",
    "Timings",
    "current_context",
    "load_model",
    "make_entry",
    "new_request_id",
]
