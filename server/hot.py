"""The inference routes' server-side path as one coroutine.

``create_app`` stacks three middlewares (``ServingMiddleware``: ids, ``max_in_flight``, the size limit,
disconnects, metrics; ``AdmissionMiddleware``; ``BodyTimeoutMiddleware``), then Starlette's exception
middleware and route wrapper, then ``adapter.serve`` with its Request and Response. Each layer wraps
``receive`` and ``send`` in closures of its own, and a request of the example MLP made ~520 Python calls
where a bare app makes ~150. ``HotPath`` does what those layers do for an inference route, in the same
order and with the same answers, in one frame: the body is read once, the adapter's answer goes out as
one start and one body message with the request id among its headers, and the bookkeeping (admission's
ticket, in-flight count, trace, metrics) happens in one ``finally``.

Every other route, and an inference route of an app whose middleware is not the three above (a test's,
say), takes the layered stack; middleware added after ``create_app`` (a worker's or replica's header)
wraps this path as it wraps the stack.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from poolserve.runtime.errors import OpError
from poolserve.server import codec, errors
from poolserve.server.admission import (
    _TICKET_KEY,
    _Decision,
    in_flight_refusal,
    over_connections_headers,
    over_connections_message,
    scope_request_id,
)
from poolserve.server.limits import in_time, receive_until
from poolserve.server.protocol import (
    BODY_IN_KEY,
    BODY_VIEW_KEY,
    OVER_CONNECTIONS_KEY,
    SEND_VIEWS_KEY,
    WholeBody,
    arrival,
    declared_length,
)
from poolserve.server.service import InferenceService, RequestInfo, attach_info, new_request_id

log = logging.getLogger("poolserve")

# seconds after its body is in that a request still being served starts watching for a disconnect, here and
# in the serving middleware (``DisconnectWatch``): the many that answer sooner cost no watcher task
WATCH_AFTER = 0.02

_JSON = (b"content-type", b"application/json")

# an answer's body: bytes, or parts sent one after another without joining them (a large binary tensor's
# bytes as a view of its array: ``server.adapter.Encoded``), each a bytes-like object of unsigned bytes
Body = bytes | list[bytes | memoryview]
# what an inference route's fast endpoint returns: status, headers (besides content-length), body
Answer = tuple[int, list[tuple[bytes, bytes]], Body]
FastEndpoint = Callable[[Request, bytes | memoryview], Awaitable[Answer]]


class _Cut(Exception):
    """The client went away before its body was in."""


class DisconnectWatch:
    """Cancels a request's task when its client disconnects, once watching has started (``start``, or
    ``start_later``: after ``WATCH_AFTER``, so the many requests answered sooner cost no watcher task).
    ``complete`` is set by the caller once the answer's last part is sent: a disconnect after it cancels
    nothing. ``disconnected``: the task was cancelled for it."""

    __slots__ = ("_timer", "_watcher", "complete", "disconnected", "gone", "loop", "receive", "task")

    def __init__(self, receive: Receive) -> None:
        self.receive = receive
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.gone: asyncio.Event | None = None  # set when the client disconnects
        self.complete = False
        self.disconnected = False
        self._watcher: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def start_later(self) -> None:
        self._timer = self.loop.call_later(WATCH_AFTER, self.start)

    def start(self) -> asyncio.Event:
        if self.gone is None:
            self.gone = asyncio.Event()
        if self._watcher is None and not self.complete:
            self._watcher = self.loop.create_task(self._watch(self.gone))
        return self.gone

    async def wait_gone(self) -> Message:
        """What ``receive()`` answers once the body is in: the watcher owns the connection's channel."""
        await self.start().wait()
        return {"type": "http.disconnect"}

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._watcher is not None:
            self._watcher.cancel()

    async def _watch(self, gone: asyncio.Event) -> None:
        message = await self.receive()
        if message["type"] == "http.disconnect":
            gone.set()
            if not self.complete and self.task is not None:
                self.disconnected = True
                self.task.cancel()


def too_large_message(limit: int) -> str:
    return f"The request body is larger than max_request_bytes ({limit})"


def count_request(
    service: InferenceService, scope: Scope, info: RequestInfo, status: int, end: float | None = None
) -> None:
    """The request in the metrics, by its route's path template and the model it named (no label per
    made-up name: an unknown model counts under "")."""
    route = scope.get("route")
    endpoint = getattr(route, "path", None) or "unmatched"
    model = scope.get("path_params", {}).get("model", "")
    if model not in service.models:
        model = ""
    elapsed = (end or time.monotonic()) - info.received_at if model else None
    service.metrics.count_request(model, endpoint, status, elapsed)


class HotPath:
    """An inference route's request, start to end (see the module's text). ``scope["route"]`` is the
    matched route (``routes.Route``); its ``fast`` endpoint, when it has one, takes the request and its
    body and returns the answer's parts; otherwise its endpoint is called and returns a Response."""

    def __init__(
        self, app: Any, service: InferenceService, decision: _Decision, body_timeout_ms: int
    ) -> None:
        self.app = app
        self.service = service
        self.decision = decision
        self.body_timeout = body_timeout_ms / 1000.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        service = self.service
        server = service.config.server
        info = RequestInfo(scope_request_id(scope, new_request_id), arrival(scope))
        attach_info(scope, info)
        rid = info.request_id.encode("latin-1")
        status = 500
        started = False
        watch: DisconnectWatch | None = None

        async def answer(code: int, headers: list[tuple[bytes, bytes]], body: Body) -> None:
            nonlocal status, started
            status, started = code, True
            parts = body if isinstance(body, list) else [body]
            if len(parts) > 1 and not scope.get(SEND_VIEWS_KEY):  # bytes only, one message
                parts = [b"".join(parts)]
            headers.append((b"content-length", str(sum(len(p) for p in parts)).encode()))
            headers.append((b"x-request-id", rid))
            await send({"type": "http.response.start", "status": code, "headers": headers})
            if watch is not None:
                watch.complete = True
            for part in parts[:-1]:
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": parts[-1]})

        async def refuse(error: OpError) -> None:
            headers = [_JSON, *errors.raw_headers(getattr(error, "headers", None))]
            body = codec.dumps(errors.error_body(error.message, error.code))
            await answer(errors.http_status(error.code), headers, body)

        # the serving middleware's checks, then admission's, in their order
        if service.in_flight >= server.max_in_flight:
            service.metrics.rejected.inc()
            service.admission.refuse()
            await refuse(in_flight_refusal(server.max_in_flight))
            self._count(scope, info, status)
            return
        length = declared_length(scope)
        if length is not None and length > server.max_request_bytes:
            await answer(*_status_answer(413, self._too_large()))
            self._count(scope, info, status)
            return
        if scope.get(OVER_CONNECTIONS_KEY):
            service.admission.refuse()
            message = over_connections_message(server.max_connections)
            await answer(*_status_answer(503, message, errors.raw_headers(over_connections_headers())))
            self._count(scope, info, status)
            return
        decision = self.decision
        ticket = scope.get(_TICKET_KEY)  # admitted by the protocol already
        if ticket is None:
            target = decision.target(scope)
            if target is not None:
                try:
                    ticket = decision.decide(scope, target[0])
                except OpError as e:
                    await refuse(e)
                    decision.count(scope, e)
                    self._count(scope, info, status)
                    return
                scope[_TICKET_KEY] = ticket

        watch = DisconnectWatch(receive)
        route = scope["route"]
        service.in_flight += 1
        try:
            body = await self._body(scope, receive)
            # a request still computing after WATCH_AFTER listens for a disconnect, to cancel its work
            watch.start_later()
            fast: FastEndpoint | None = getattr(route, "fast", None)
            if fast is not None:
                await answer(*await fast(Request(scope), body))
            else:
                sent = False

                async def replay() -> Message:  # the body once, then the watcher's news
                    nonlocal sent
                    if not sent:
                        sent = True
                        return {"type": "http.request", "body": bytes(body), "more_body": False}
                    return await watch.wait_gone()

                request = Request(scope, replay)
                response: Response = await route.endpoint(request)
                await answer(*_parts(response))
        except asyncio.CancelledError:
            if not watch.disconnected or watch.task is None:
                raise
            watch.task.uncancel()
            status = 499
            log.info("request %s: the client disconnected; its work was cancelled", info.request_id)
        except _Cut:
            status = 499
            log.info("request %s: the client disconnected before its body was in", info.request_id)
        except Exception as e:
            await self._failed(scope, info, e, started, answer)
        finally:
            watch.stop()
            end = time.monotonic()
            if ticket is not None:
                decision.admission.release(ticket, status == 200, end)
            service.in_flight -= 1
            service.traces.finish(info.request_id, status, end)
            self._count(scope, info, status, end)

    async def _body(self, scope: Scope, receive: Receive) -> bytes | memoryview:
        """The whole body, within max_request_bytes (413) and body_timeout_ms from arrival (408): a view of
        the buffer the protocol read it into when it read it whole (``WholeBody``), else bytes."""
        limit = self.service.config.server.max_request_bytes
        whole: WholeBody | None = scope.get(BODY_VIEW_KEY)
        if whole is not None:
            if not scope.get(BODY_IN_KEY):
                until = arrival(scope) + self.body_timeout
                await in_time(whole.wait(), until, self.body_timeout)
            view = whole.take()
            if view is not None:
                if len(view) > limit:
                    raise HTTPException(413, self._too_large())
                return view
        if scope.get(BODY_IN_KEY):  # all of it is in: receive() answers at once
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body", False):
                body: bytes = message.get("body", b"")
                if len(body) > limit:
                    raise HTTPException(413, self._too_large())
                return body
            return await self._rest(scope, receive, message)
        return await self._rest(scope, receive, None)

    async def _rest(self, scope: Scope, receive: Receive, first: Message | None) -> bytes:
        limit = self.service.config.server.max_request_bytes
        until = arrival(scope) + self.body_timeout
        chunks: list[bytes] = []
        received = 0
        message = first
        while True:
            if message is None:
                message = await receive_until(receive, until, self.body_timeout)
            if message["type"] == "http.disconnect":
                raise _Cut
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > limit:
                raise HTTPException(413, self._too_large())
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
            message = None

    async def _failed(
        self,
        scope: Scope,
        info: RequestInfo,
        error: Exception,
        started: bool,
        answer: Callable[[int, list[tuple[bytes, bytes]], Body], Awaitable[None]],
    ) -> None:
        """The answer to an exception: the app's handler for its type (OpError, HTTPException, ...), else
        a logged 500 with the request id."""
        handler = None if started else self._handler(error)
        if handler is None:
            log.exception("request %s failed with an unexpected error", info.request_id, exc_info=error)
            if not started:
                await answer(500, [_JSON], codec.dumps(errors.internal_error_body(info.request_id)))
            return
        response: Response = await handler(Request(scope), error)
        await answer(*_parts(response))

    def _handler(self, error: Exception) -> Any:
        handlers = self.app.exception_handlers
        for cls in type(error).__mro__:
            if cls in handlers and cls is not Exception:
                return handlers[cls]
        return None

    def _too_large(self) -> str:
        return too_large_message(self.service.config.server.max_request_bytes)

    def _count(self, scope: Scope, info: RequestInfo, status: int, end: float | None = None) -> None:
        count_request(self.service, scope, info, status, end)


def _status_answer(
    status: int, message: str, headers: list[tuple[bytes, bytes]] | None = None
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    return status, [_JSON, *(headers or [])], codec.dumps(errors.status_body(status, message))


def _parts(response: Response) -> Answer:
    """A Starlette Response as ``answer`` sends it (it adds content-length and the request id itself)."""
    headers = [h for h in response.raw_headers if h[0] not in (b"content-length", b"x-request-id")]
    return response.status_code, headers, bytes(response.body)
