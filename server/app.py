"""The ASGI app: protocol routers, the serving middleware, and the operational endpoints.

``create_app(config)`` loads the models at once (so a test client can use the app without running its
lifespan) and returns a FastAPI app. The middleware gives every request an id (``X-Request-Id`` echoed or
a fresh one of 32 hex digits), limits body size (413), sheds load past ``max_in_flight`` (503 +
Retry-After), cancels the request's work when the client disconnects, turns unexpected exceptions into a
logged 500, and records metrics and the trace's last span. The inference routes get all of that, and
admission and the body timeout, from one coroutine instead (``server.hot.HotPath``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse
from google.protobuf import json_format
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.runtime.errors import (
    InvalidArgumentError,
    NotFoundError,
)
from poolserve.server import admission, codec, errors, kserve, native, openapi, sessions, tfserving
from poolserve.server.config import Config
from poolserve.server.errors import REQUEST_ID_HEADER
from poolserve.server.hot import DisconnectWatch, HotPath, count_request, too_large_message
from poolserve.server.idle import IdleMemoryRelease, resident_bytes
from poolserve.server.limits import BodyTimeoutMiddleware
from poolserve.server.protocol import arrival, declared_length
from poolserve.server.routes import ServingApp
from poolserve.server.service import InferenceService, RequestInfo, attach_info, new_request_id

log = logging.getLogger("poolserve")

# requests that compute, and count against max_in_flight
_WORK_METHODS = frozenset({"POST"})


class ServingMiddleware:
    def __init__(self, app: ASGIApp, service: InferenceService) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        service = self.service
        server = service.config.server
        metrics = service.metrics
        info = RequestInfo(admission.scope_request_id(scope, new_request_id), arrival(scope))
        attach_info(scope, info)
        rid_header = (REQUEST_ID_HEADER.lower().encode(), info.request_id.encode("latin-1"))
        state: dict[str, Any] = {"status": 500, "started": False}
        work = scope["method"] in _WORK_METHODS
        watch = DisconnectWatch(receive)

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                state["started"] = True
                headers = [h for h in message.get("headers", []) if h[0].lower() != rid_header[0]]
                message["headers"] = [*headers, rid_header]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                watch.complete = True
            await send(message)

        async def answer(response: Response) -> None:
            await response(scope, receive, send_wrapper)

        if work and service.in_flight >= server.max_in_flight:
            metrics.rejected.inc()
            service.admission.refuse()
            refused = admission.in_flight_refusal(server.max_in_flight)
            await answer(errors.error_response(refused, refused.headers))
            self._count(scope, info, state["status"])
            return
        length = declared_length(scope)
        if length is not None and length > server.max_request_bytes:
            await answer(self._too_large())
            self._count(scope, info, state["status"])
            return

        received = 0
        body_done = False

        async def receive_wrapper() -> Message:
            nonlocal received, body_done
            if body_done:
                return await watch.wait_gone()
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > server.max_request_bytes:
                    raise StarletteHTTPException(413, too_large_message(server.max_request_bytes))
                if not message.get("more_body", False) and work:
                    body_done = True
                    # a request still computing after WATCH_AFTER listens for a disconnect, to cancel its work
                    watch.start_later()
            return message

        if work:
            service.in_flight += 1
        try:
            await self.app(scope, receive_wrapper, send_wrapper)
        except asyncio.CancelledError:
            if not watch.disconnected or watch.task is None:
                raise
            watch.task.uncancel()
            state["status"] = 499
            log.info("request %s: the client disconnected; its work was cancelled", info.request_id)
        except Exception:
            log.exception("request %s failed with an unexpected error", info.request_id)
            if not state["started"]:
                await answer(JSONResponse(errors.internal_error_body(info.request_id), status_code=500))
        finally:
            watch.stop()
            if work:
                service.in_flight -= 1
            end = time.monotonic()
            if work:
                service.traces.finish(info.request_id, state["status"], end)
            self._count(scope, info, state["status"], end)

    def _too_large(self) -> Response:
        return errors.status_response(413, too_large_message(self.service.config.server.max_request_bytes))

    def _count(self, scope: Scope, info: RequestInfo, status: int, end: float | None = None) -> None:
        count_request(self.service, scope, info, status, end)


# --- operational endpoints -------------------------------------------------------------------------------


class PoolSetting(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    enabled: bool


def _pool_state(service: InferenceService) -> dict[str, Any]:
    body: dict[str, Any] = {"enabled": service.pool_enabled}
    stats = service.pool_stats()
    if stats is not None:
        body.update(
            active_handlers=stats.active_handlers,
            waiting_requests=stats.waiting_requests,
            queued_closures=stats.queued_closures,
            threads=stats.threads,
            max_handlers=stats.max_handlers,
            policy=stats.policy,
            deadline_stretch=stats.stretch,
            kernel_threads=stats.kernel_threads,
        )
    return body


def _json(body: Any, status: int = 200) -> Response:
    return Response(codec.dumps(body), status_code=status, media_type="application/json")


def operations_router(service: InferenceService) -> APIRouter:
    api = APIRouter()

    @api.get("/v1/health/live")
    async def live() -> dict[str, bool]:
        return {"live": True}

    @api.get("/v1/health/ready")
    async def ready() -> Response:
        reason = service.not_ready()
        if not reason:
            return _json({"ready": True})
        return _json({"ready": False, "error": f"The server is not ready: {reason}"}, 503)

    @api.get("/metrics")
    async def metrics() -> Response:
        data, content_type = service.metrics.exposition()
        return Response(data, media_type=content_type)

    @api.get("/v1/runtime/run_handler_pool")
    async def get_pool() -> dict[str, Any]:
        return _pool_state(service)

    @api.put("/v1/runtime/run_handler_pool")
    async def put_pool(request: Request) -> dict[str, Any]:
        service.check_admin(request.headers)
        # read the body ourselves: a bare `curl -d` sends it form-encoded, and it is still JSON
        data = codec.loads(await request.body(), codec.SETTINGS_DEPTH)
        try:
            setting = PoolSetting.model_validate(data)
        except ValidationError as e:
            problems = "; ".join(
                f"{'.'.join(map(str, err['loc'])) or 'body'}: {err['msg']}" for err in e.errors()
            )
            raise InvalidArgumentError(f'Expected {{"enabled": true|false}}: {problems}') from None
        service.pool_enabled = setting.enabled
        log.info("run handler pool default set to %s", setting.enabled)
        return _pool_state(service)

    @api.get("/v1/runtime/process")
    async def process() -> dict[str, Any]:
        return {"pid": os.getpid(), "rss_bytes": resident_bytes()}

    @api.get("/v1/traces")
    async def list_traces(limit: int = Query(100, ge=1, le=10000)) -> dict[str, Any]:
        return {"traces": [r.summary() for r in service.traces.recent(limit)]}

    @api.get("/v1/traces:merge")
    async def merge_traces(ids: str = "") -> Response:
        wanted = [_trace_id(i) for i in (p.strip() for p in ids.split(",")) if i]
        if not wanted:
            raise InvalidArgumentError("Give the request ids to merge: /v1/traces:merge?ids=a,b")
        return _json(service.traces.merge(wanted))

    @api.get("/v1/traces/{request_id}")
    async def get_trace(request_id: str, format: str = "chrome") -> Response:
        record = service.traces.get(_trace_id(request_id))
        if format == "chrome":
            return _json(record.chrome_trace())
        if format == "run_metadata":
            if record.run_metadata is None:
                raise NotFoundError(f"The trace of request '{request_id}' has no RunMetadata")
            return _json(json_format.MessageToDict(record.run_metadata))
        raise InvalidArgumentError(f"Unknown trace format '{format}': use chrome or run_metadata")

    return api


def _trace_id(request_id: str) -> str:
    """A request id as the server takes them from X-Request-Id (1-128 printable characters); anything else
    could never name a trace, so it is refused rather than looked up (and echoed back whole)."""
    if 0 < len(request_id) <= admission.MAX_REQUEST_ID and request_id.isprintable():
        return request_id
    shown = repr(request_id[:32]) + ("..." if len(request_id) > 32 else "")
    raise InvalidArgumentError(
        f"{shown} is not a request id: request ids are 1 to {admission.MAX_REQUEST_ID} printable characters"
    )


# --- the app ---------------------------------------------------------------------------------------------


def create_app(config: Config, service: InferenceService | None = None) -> FastAPI:
    """The server's app. Models load here (blocking); the lifespan's end drains and closes them."""
    if service is None:
        service = InferenceService(config)
        service.start()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log.info("poolserve ready: %d model(s): %s", len(service.models), ", ".join(sorted(service.models)))
        service.admission.loop_lag.start()
        idle = IdleMemoryRelease(
            service.config.server.release_memory_idle_s,
            arrivals=lambda: service.admission.arrivals,
            busy=lambda: service.in_flight > 0 or service.steps_running > 0,
        )
        app.state.idle_memory = idle
        idle.start()
        try:
            yield
        finally:
            idle.stop()
            service.admission.loop_lag.stop()
            service.draining = True
            service.ready = False
            await _drain(app, service)
            store.close_all()
            service.close()

    store = sessions.SessionStore(service)
    app = ServingApp(title="poolserve", lifespan=lifespan, docs_url="/docs", redoc_url=None)
    openapi.install(app, service)
    app.state.service = service
    app.state.sessions = store
    app.state.admission = service.admission
    errors.install(app)
    # The inference routes first, as plain Starlette routes: they take nearly all the traffic, and
    # matched ahead of the included routers and without FastAPI's per-request dependency solving they cost
    # less (they read their own body and path parameters; the app's exception handlers still apply).
    app.serve_hot(
        [
            *native.inference_routes(service),
            *tfserving.inference_routes(service),
            *kserve.inference_routes(service),
            sessions.run_route(service, store),
        ]
    )
    # the routers' routes go straight into the app's list: FastAPI 0.165's include_router wraps each router
    # in a matcher that walks every route of it per request (316 us for GET /v1/health/live, 2/3 of it in
    # matching, measured with cProfile)
    for api in (
        native.router(service),
        tfserving.router(service),
        kserve.router(service),
        operations_router(service),
        admission.router(app.state.admission),
        sessions.router(service, store),
    ):
        app.router.routes.extend(api.routes)
    # the last added runs first: ids, metrics and max_in_flight, then admission (sheds before the body
    # is read), then the body read timeout
    paths = admission.InferPaths([r.path for r in app.hot_routes])
    app.add_middleware(BodyTimeoutMiddleware, timeout_ms=config.server.body_timeout_ms)
    app.add_middleware(
        admission.AdmissionMiddleware, service=service, admission=service.admission, paths=paths
    )
    app.add_middleware(ServingMiddleware, service=service)
    # the three above, the exception handlers and the route's wrapping, for the inference routes, in one
    # coroutine (server/hot.py)
    decision = admission._Decision(service, service.admission, paths)
    app.hot_layers = (ServingMiddleware, admission.AdmissionMiddleware, BodyTimeoutMiddleware)
    app.hot_core = lambda a: HotPath(a, service, decision, config.server.body_timeout_ms)
    # the same decision, made by the HTTP protocol at the end of the headers (cli.run_server gives it)
    app.state.early_admission = admission.EarlyAdmission(service, service.admission, paths, new_request_id)
    return app


async def _drain(app: FastAPI, service: InferenceService) -> None:
    """Waits (up to drain_seconds) for the requests still computing."""
    deadline = time.monotonic() + service.config.server.drain_seconds
    while (service.steps_running > 0 or service.in_flight > 0) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
