"""The gRPC front end: grpcio's asyncio server, on the HTTP server's event loop, over the same service.

Two protocols, each an adapter like the HTTP ones: KServe v2's ``inference.GRPCInferenceService``
(``server.kserve_grpc``) and TF Serving's ``tensorflow.serving.PredictionService`` and ``ModelService``
(``server.tfserving_grpc``). An inference call takes the HTTP path's steps (``serve``): admission
(``server.max_in_flight``, shared with HTTP), the model lookup, the adapter's decode (tensors through
``server.codec``), ``InferenceService.infer`` (deadline, pool, batching, trace, metrics), the adapter's
encode. What gRPC adds:

- the call's deadline becomes the step's ``RunOptions.timeout_in_ms`` (the smaller of it and a timeout the
  request names), so the step stops at it and the caller gets DEADLINE_EXCEEDED;
- a call the client cancels cancels its handler task, and with it the step (as an HTTP disconnect does);
- errors answer with the canonical code as the gRPC status (``errors.grpc_status``, TF Serving's rule)
  and the error's message; the unexpected with INTERNAL and the request id, logged with its traceback;
- the request id is the ``x-request-id`` metadata (or a fresh one), sent back as trailing metadata.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, Generic, TypeVar

import grpc

from poolserve.proto import config_pb2
from poolserve.runtime.deadline import GRPC_DEADLINE
from poolserve.runtime.errors import OpError, UnavailableError
from poolserve.server import codec
from poolserve.server.admission import MAX_CLIENT_ID
from poolserve.server.errors import grpc_status, http_status
from poolserve.server.models import ModelEntry
from poolserve.server.service import InferenceService, InferRequest, InferResult, new_request_id

log = logging.getLogger("poolserve")

M = TypeVar("M")  # the request message
C = TypeVar("C")  # what an adapter keeps from a request for its answer
R = TypeVar("R")  # the response message

REQUEST_ID_KEY = "x-request-id"
# a call cancelled this close to its deadline was cancelled by it (the client's clock runs out first: the
# server counts from the request's arrival)
_DEADLINE_SLACK_S = 0.05
_MAX_ID_LENGTH = 128


class GrpcAdapter(ABC, Generic[M, C, R]):
    """A protocol's envelope over gRPC (``server.adapter.Adapter``'s counterpart): ``model`` reads which
    model the message names, ``decode`` makes the ``InferRequest``, ``encode`` the answer."""

    endpoint: str  # the metrics' endpoint label: the method's path

    @abstractmethod
    def model(self, message: M) -> tuple[str, int | str | None]:
        """The model the message names, and its version: a number, a label, or None (the latest)."""

    @abstractmethod
    def decode(self, message: M, entry: ModelEntry) -> tuple[InferRequest, C]: ...

    @abstractmethod
    def encode(self, result: InferResult, context: C) -> R: ...

    def decode_size(self, message: M) -> int:
        """Bytes of typed values ``decode`` converts one by one (raw bytes cost no parsing)."""
        return 0


def _request_id(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_KEY and isinstance(value, str):
            rid = value.strip()
            if 0 < len(rid) <= _MAX_ID_LENGTH and rid.isprintable():
                return rid
    return new_request_id()


def client_of(context: grpc.aio.ServicerContext[Any, Any], service: InferenceService) -> str | None:
    """Who makes the call, for ``max_in_flight_per_client`` (None without a limit): the client header's
    value in the call's metadata, else the peer's address (gRPC's ``ipv4:127.0.0.1:5000`` without the
    port)."""
    settings = service.config.server
    if settings.max_in_flight_per_client <= 0:
        return None
    header = settings.client_header.lower()
    for key, value in context.invocation_metadata() or ():
        if key == header and isinstance(value, str) and value.strip():
            return value.strip()[:MAX_CLIENT_ID]
    peer = context.peer() or "unknown"
    return peer.rpartition(":")[0] or peer


def apply_deadline(request: InferRequest, remaining: float | None) -> None:
    """The call's deadline (``remaining`` seconds from now) as the step's timeout, unless the request
    names a shorter one."""
    if remaining is None:
        return
    ms = max(1, math.ceil(remaining * 1000))
    options = request.run_options
    if options is None:
        options = request.run_options = config_pb2.RunOptions()
    if options.timeout_in_ms <= 0 or options.timeout_in_ms > ms:
        options.timeout_in_ms = ms
        request.timeout_source = GRPC_DEADLINE


async def infer_once(
    adapter: GrpcAdapter[M, C, R],
    service: InferenceService,
    message: M,
    remaining: Callable[[], float | None],
    request_id: str,
    received: float,
    client: str | None = None,
) -> R:
    """One inference, the way ``server.adapter.serve`` and the HTTP middleware take one: admission, the
    model lookup, decode, ``InferenceService.infer`` (``remaining()``: the seconds left of the call's
    deadline), encode; counted in the metrics and closing its trace. OpErrors are the caller's to answer.
    Admission is the HTTP requests' (``Admission.arrive``): the same queue's cost, shedding and per-client
    limit (``client``), from the call's deadline or ``server.default_timeout_ms``."""
    limit = service.config.server.max_in_flight
    if service.in_flight >= limit:
        service.metrics.rejected.inc()
        service.metrics.count_request("", adapter.endpoint, 503, None)
        raise UnavailableError(f"The server is at its limit of {limit} requests in flight; retry later")
    status = 500
    model = ""
    service.in_flight += 1
    try:
        name, version = adapter.model(message)
        if isinstance(version, str):  # a label: the version the config names for it
            version = service.repository.label_version(name, version)
        # the call holds its model version to its answer, as an HTTP request does (server.adapter.serve)
        with service.repository.hold(name, version) as entry:
            model = entry.name
            settings = service.config.server
            left = remaining()
            timeout_ms = math.ceil(left * 1000) if left is not None else settings.default_timeout_ms
            ticket = service.admission.arrive(
                model,
                received,
                max(1, timeout_ms),
                client=client,
                limit=settings.max_in_flight_per_client,
                shed=settings.shed,
                source=GRPC_DEADLINE if left is not None else None,
            )
            try:
                infer, kept = await codec.sized(
                    adapter.decode_size(message),
                    adapter.decode,
                    message,
                    entry,
                    alone=service.alone(ticket.arrivals),
                )
                infer.request_id, infer.received_at = request_id, received
                apply_deadline(infer, remaining())
                result = await service.infer(infer)
                answer = adapter.encode(result, kept)
                status = 200
            except BaseException:  # an error, a deadline, a call cancelled: a failed request of this version
                entry.stats.failed(received, time.monotonic())
                raise
            else:
                if result.timings is not None:
                    entry.stats.succeeded(result.timings, time.monotonic())
            finally:
                service.admission.release(ticket, status == 200, time.monotonic())
        return answer
    except OpError as e:
        status = http_status(e.code)
        raise
    except asyncio.CancelledError:
        # gRPC cancels the handler when the client cancels, and when the deadline passes first; a client
        # whose own deadline passed cancels a moment before the server's copy of it expires
        left = remaining()
        if left is not None and left <= _DEADLINE_SLACK_S:
            status = 504
            if model:
                service.metrics.child(service.metrics.timeouts, model).inc()
            log.info("request %s: the call's deadline passed; its work was cancelled", request_id)
        else:
            status = 499
            log.info("request %s: the client cancelled the call; its work was cancelled", request_id)
        raise
    finally:
        service.in_flight -= 1
        end = time.monotonic()
        service.traces.finish(request_id, status, end)
        service.metrics.count_request(model, adapter.endpoint, status, end - received if model else None)


async def serve(
    adapter: GrpcAdapter[M, C, R],
    service: InferenceService,
    message: M,
    context: grpc.aio.ServicerContext[Any, Any],
) -> R:
    """One unary inference call: its errors answer with their gRPC status."""
    received = time.monotonic()
    request_id = _request_id(context)
    context.set_trailing_metadata(((REQUEST_ID_KEY, request_id),))
    try:
        client = client_of(context, service)
        return await infer_once(
            adapter, service, message, context.time_remaining, request_id, received, client
        )
    except OpError as e:
        await context.abort(grpc_status(e.code), e.message)
        raise  # abort raises; this line is never reached
    except Exception:
        log.exception("request %s failed with an unexpected error", request_id)
        await context.abort(grpc.StatusCode.INTERNAL, f"internal error (request id {request_id})")
        raise


S = TypeVar("S")  # a stream's answer message

# requests of one stream read ahead of the answer being written: they run concurrently (and batch with
# each other), their answers go back in order
STREAM_WINDOW = 16


async def serve_stream(
    adapter: GrpcAdapter[M, C, R],
    service: InferenceService,
    messages: AsyncIterator[M],
    context: grpc.aio.ServicerContext[Any, Any],
    answer: Callable[[M, R | None, str], S],
) -> AsyncGenerator[S]:
    """A bidirectional stream of inferences: each request answered in order, ``answer(request, response,
    "")``, or with its error, ``answer(request, None, message)``; an error does not end the stream. The
    requests are ``<x-request-id>.<n>`` (n from 0) for metrics and traces."""
    base = _request_id(context)
    context.set_trailing_metadata(((REQUEST_ID_KEY, base),))
    client = client_of(context, service)
    pending: asyncio.Queue[tuple[M, str, asyncio.Task[R]] | BaseException | None]
    pending = asyncio.Queue(maxsize=STREAM_WINDOW)

    async def read() -> None:
        n = 0
        try:
            async for message in messages:
                rid = f"{base}.{n}"
                n += 1
                work = infer_once(
                    adapter, service, message, context.time_remaining, rid, time.monotonic(), client
                )
                await pending.put((message, rid, asyncio.ensure_future(work)))
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the stream broke: the writer raises it after the answers before it
            await pending.put(e)
            return
        await pending.put(None)

    reader = asyncio.create_task(read())
    try:
        while (item := await pending.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            message, rid, task = item
            try:
                response = answer(message, await task, "")
            except OpError as e:
                response = answer(message, None, e.message)
            except Exception:
                log.exception("request %s failed with an unexpected error", rid)
                response = answer(message, None, f"internal error (request id {rid})")
            yield response
    finally:
        reader.cancel()
        while not pending.empty():
            left = pending.get_nowait()
            if isinstance(left, tuple):
                task = left[2]
                task.cancel()
                if task.done() and not task.cancelled():
                    task.exception()  # retrieved: an answer nobody will read is no error to report


Handler = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]


def guarded(fn: Handler) -> Handler:
    """A non-inference call (health, metadata, status) whose OpErrors answer with their gRPC status."""

    async def call(message: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            return await fn(message, context)
        except OpError as e:
            await context.abort(grpc_status(e.code), e.message)

    call.__name__ = fn.__name__
    return call


# --- the server -----------------------------------------------------------------------------------------


def _address(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):  # an IPv6 address
        host = f"[{host}]"
    return f"{host}:{port}"


class GrpcServer:
    """grpcio's asyncio server with both protocols' services over ``service``. ``start`` on the event loop
    that serves HTTP (grpc.aio runs its calls on the loop it starts on)."""

    def __init__(self, service: InferenceService, reuse_port: bool = False) -> None:
        self.service = service
        self._server: grpc.aio.Server | None = None
        self.port = 0
        self._reuse_port = reuse_port  # worker processes share one port

    async def start(self, host: str, port: int) -> int:
        """Listens on ``host:port`` (port 0: a free one) and returns the port; RuntimeError when it cannot
        bind."""
        from poolserve.server import kserve_grpc, tfserving_grpc  # they import the generated stubs

        limit = self.service.config.server.max_request_bytes
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", -1),
                # without this a second server binds the same port and shares its calls, silently (what
                # worker processes of one server want)
                ("grpc.so_reuseport", int(self._reuse_port)),
            ]
        )
        kserve_grpc.add_to_server(server, self.service)
        tfserving_grpc.add_to_server(server, self.service)
        try:
            self.port = server.add_insecure_port(_address(host, port))
        except RuntimeError as e:
            raise RuntimeError(f"cannot listen for gRPC on {_address(host, port)}: {e}") from None
        await server.start()
        self._server = server
        log.info("poolserve gRPC listening on %s", _address(host, self.port))
        return self.port

    async def stop(self, grace: float | None) -> None:
        """Refuses new calls at once; calls in flight get ``grace`` seconds to finish, then are cancelled."""
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
