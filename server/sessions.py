"""Remote sessions: the server side of ``Session("http://host:port")`` (``runtime/remote.py``).

TensorFlow's master service over HTTP, with its messages (``proto/serving.proto``) as protobuf bodies:

- ``POST /v1/sessions`` (CreateSessionRequest): a session on a shipped GraphDef (needs the admin token when
  one is set), or bound to a served model (``model``), which ships nothing and shares the session of the
  model's version served then (each call holds that version, as an inference request does);
- ``POST /v1/sessions/{handle}:run`` (RunStepRequest), ``:extend``, ``:partial_run_setup``;
- ``DELETE /v1/sessions/{handle}``: closes it; its runs in flight end with CancelledError.

Errors are the server's JSON error bodies, whose ``code`` the client turns back into the same OpError.
Sessions idle past ``[sessions] idle_seconds`` are dropped; ``max_sessions`` and ``max_graph_bytes`` bound
what clients can make the server hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import secrets
import time
from collections.abc import Iterator
from typing import Any, TypeVar

from fastapi import APIRouter, Request, Response
from google.protobuf.message import DecodeError, Message

from poolserve.proto import config_pb2, serving_pb2
from poolserve.runtime.deadline import SERVER_DEFAULT, Deadline
from poolserve.runtime.errors import (
    CancelledError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    UnavailableError,
)
from poolserve.runtime.fetches import is_op_name
from poolserve.runtime.session import Session
from poolserve.runtime.tensor import fill_tensor_proto, to_ndarray
from poolserve.server import codec
from poolserve.server.routes import Route
from poolserve.server.service import InferenceService

PROTOBUF = "application/x-protobuf"
M = TypeVar("M", bound=Message)


@dataclasses.dataclass
class RemoteEntry:
    """A session a client holds by handle."""

    handle: str
    session: Session
    owned: bool  # made for this handle (closed with it), not a served model's
    graph_bytes: int
    last_used: float
    version: int = 0
    runs: set[asyncio.Task[Any]] = dataclasses.field(default_factory=set)
    closed: bool = False
    # bound to a served model: its name and the version it was bound to (each call holds that version, so
    # an unload waits for the call, and a call after the unload gets a clear NotFoundError)
    model: tuple[str, int] | None = None

    @contextlib.contextmanager
    def held(self, service: InferenceService) -> Iterator[Session]:
        """The session for one call: a bound session's model version stays loaded until the block ends."""
        if self.model is None:
            yield self.session
            return
        name, version = self.model
        try:
            hold = service.repository.hold(name, version)
        except (NotFoundError, UnavailableError) as e:
            raise type(e)(
                f"This session was bound to version {version} of model '{name}', which is no longer "
                f"served: {e.message}"
            ) from None
        with hold as entry:
            yield entry.session


class SessionStore:
    """The server's remote sessions by handle, bounded in number, graph bytes and idle time."""

    def __init__(self, service: InferenceService) -> None:
        self.service = service
        self.settings = service.config.sessions
        self._entries: dict[str, RemoteEntry] = {}
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._entries)

    def create(self, request: serving_pb2.CreateSessionRequest, graph_bytes: int) -> RemoteEntry:
        self.sweep()
        if len(self._entries) >= self.settings.max_sessions:
            raise ResourceExhaustedError(
                f"The server holds its limit of {self.settings.max_sessions} remote sessions ([sessions] "
                "max_sessions): close one first"
            )
        if request.model:
            if request.HasField("graph_def") and len(request.graph_def.node):
                raise InvalidArgumentError("Give either a graph_def or a model to bind to, not both")
            entry_model = self.service.model(request.model)
            session, owned = entry_model.session, False
            bound = (entry_model.name, entry_model.version)
        else:
            held = self.graph_bytes()
            if held + graph_bytes > self.settings.max_graph_bytes:
                raise ResourceExhaustedError(
                    f"A graph of {graph_bytes} bytes would take the remote sessions past their limit of "
                    f"{self.settings.max_graph_bytes} bytes ([sessions] max_graph_bytes; {held} held)"
                )
            config = request.config if request.HasField("config") else None
            session = Session(
                request.graph_def, config, memory_limit_bytes=self.service.config.runtime.memory_limit_bytes
            )
            owned, bound = True, None
        handle = f"session_{next(self._ids)}_{secrets.token_hex(6)}"
        entry = RemoteEntry(
            handle, session, owned, graph_bytes if owned else 0, time.monotonic(), model=bound
        )
        self._entries[handle] = entry
        return entry

    def graph_bytes(self) -> int:
        """The bytes of the graphs clients shipped to the sessions held."""
        return sum(e.graph_bytes for e in self._entries.values())

    @property
    def steps_running(self) -> int:
        """Steps of the remote sessions that have started and not yet ended."""
        return sum(e.session.steps_running for e in self._entries.values() if e.owned)

    def get(self, handle: str) -> RemoteEntry:
        entry = self._entries.get(handle)
        if entry is None:
            raise NotFoundError(
                f"Session handle '{handle}' is not found: it was closed, or dropped after "
                f"{self.settings.idle_seconds:g} s idle ([sessions] idle_seconds)"
            )
        entry.last_used = time.monotonic()
        return entry

    def close(self, handle: str) -> None:
        entry = self._entries.pop(handle, None)
        if entry is None:
            raise NotFoundError(f"Session handle '{handle}' is not found: closed already, or never made")
        self._close(entry)

    def _close(self, entry: RemoteEntry) -> None:
        entry.closed = True
        for task in entry.runs:
            task.cancel()
        if entry.owned:
            entry.session.close()

    def sweep(self) -> None:
        """Drops sessions idle past ``idle_seconds`` (none with a run in flight)."""
        limit = time.monotonic() - self.settings.idle_seconds
        for handle, entry in list(self._entries.items()):
            if entry.last_used < limit and not entry.runs:
                del self._entries[handle]
                self._close(entry)

    def reset(self, containers: list[str]) -> int:
        """TensorFlow's Reset on this server's remote sessions: clears their containers (all when none are
        named) and closes them. Returns how many there were."""
        entries = list(self._entries.values())
        self._entries.clear()
        for entry in entries:
            if entry.owned:
                entry.session.clear_containers(containers)
            self._close(entry)
        return len(entries)

    def close_all(self) -> None:
        for entry in self._entries.values():
            self._close(entry)
        self._entries.clear()


# --- routes ----------------------------------------------------------------------------------------------


async def _read(request: Request, message: type[M]) -> M:
    body = await request.body()
    content_type = request.headers.get("content-type", "").split(";")[0].strip()
    if content_type != PROTOBUF:
        raise InvalidArgumentError(
            f"Remote session calls take a protobuf body (Content-Type: {PROTOBUF}); got '{content_type}'"
        )
    parsed = message()
    try:
        parsed.ParseFromString(body)
    except DecodeError as e:
        raise InvalidArgumentError(f"The body is not a valid {message.DESCRIPTOR.name}: {e}") from None
    return parsed


def _answer(message: Message) -> Response:
    return Response(message.SerializeToString(), media_type=PROTOBUF)


def _feeds(request: serving_pb2.RunStepRequest, fill_limit: int) -> dict[str, Any]:
    codec.check_tensor_protos([(f.name, f.tensor) for f in request.feed], fill_limit)
    feeds: dict[str, Any] = {}
    for f in request.feed:
        if f.name in feeds:
            raise InvalidArgumentError(f"Tensor '{f.name}' is fed twice")
        feeds[f.name] = to_ndarray(f.tensor, f.name)
    return feeds


async def _run(
    entry: RemoteEntry,
    request: serving_pb2.RunStepRequest,
    service: InferenceService,
    metadata: config_pb2.RunMetadata,
) -> Any:
    if entry.model is None:  # a session of its own: nothing to hold
        return await _run_held(entry.session, request, service, metadata)
    with entry.held(service) as session:
        return await _run_held(session, request, service, metadata)


async def _run_held(
    session: Session,
    request: serving_pb2.RunStepRequest,
    service: InferenceService,
    metadata: config_pb2.RunMetadata,
) -> Any:
    limit = service.config.server.max_request_bytes  # what its filled feeds may expand to
    if request.partial_run_handle:
        return await asyncio.to_thread(_partial_run, session, request, limit)
    feeds = _feeds(request, limit)
    fetches = [*request.fetch, *request.target]
    options = request.options if request.HasField("options") else None
    service.guard_options(options)
    # RunOptions.timeout_in_ms, else the session's ConfigProto.operation_timeout_in_ms, as in process; a run
    # that sets neither gets the server's default, as every other request does
    deadline = session.deadline(options)
    if deadline is None and service.timeout_ms(None) > 0:
        deadline = Deadline(service.timeout_ms(None), source=SERVER_DEFAULT)
    values = await session.arun(fetches, feeds, options, metadata, deadline=deadline)
    return values[: len(request.fetch)]


def _partial_run(session: Session, request: serving_pb2.RunStepRequest, fill_limit: int) -> Any:
    feeds = _feeds(request, fill_limit)
    values = session.partial_run(request.partial_run_handle, [*request.fetch, *request.target], feeds)
    return values[: len(request.fetch)]


def run_route(service: InferenceService, store: SessionStore) -> Route:
    """``:run``, the hot call, as a plain Starlette route (see ``server.app``)."""

    async def run(request: Request) -> Response:
        handle = request.path_params["handle"]
        step = await _read(request, serving_pb2.RunStepRequest)
        entry = store.get(handle)
        if step.session_handle and step.session_handle != handle:
            raise InvalidArgumentError(
                f"The body names session '{step.session_handle}' but the path names '{handle}'"
            )
        # the run goes on in this request's own task (a task of its own cost a turn of the loop): closing
        # the session cancels it
        task = asyncio.current_task()
        assert task is not None
        response = serving_pb2.RunStepResponse()
        entry.runs.add(task)
        try:
            values = await _run(entry, step, service, response.metadata)
        except asyncio.CancelledError:
            if not entry.closed:
                raise  # the client went away: the middleware answers for it
            task.uncancel()
            # the words of a local session (and TensorFlow's DirectSession) for a run its close() cut short
            raise CancelledError("Run call was cancelled") from None
        finally:
            entry.runs.discard(task)
        for name, value in zip(step.fetch, values, strict=True):
            fill_tensor_proto(response.tensor.add(name=name).tensor, value)  # in place: no copy
        return _answer(response)

    return Route("/v1/sessions/{handle}:run", run, methods=["POST"])


def router(service: InferenceService, store: SessionStore) -> APIRouter:
    api = APIRouter()

    @api.post("/v1/sessions")
    async def create(request: Request) -> Response:
        create_request = await _read(request, serving_pb2.CreateSessionRequest)
        graph_bytes = create_request.graph_def.ByteSize()
        if not create_request.model:
            service.check_admin(request.headers)  # a shipped graph runs code paths of the client's choosing
        entry = store.create(create_request, graph_bytes)
        return _answer(serving_pb2.CreateSessionResponse(session_handle=entry.handle, graph_version=0))

    @api.post("/v1/sessions/{handle}:extend")
    async def extend(handle: str, request: Request) -> Response:
        body = await _read(request, serving_pb2.ExtendSessionRequest)
        entry = store.get(handle)
        if not entry.owned:
            raise InvalidArgumentError("A session bound to a served model cannot be extended")
        service.check_admin(request.headers)
        if body.current_graph_version != entry.version:
            raise InvalidArgumentError(
                f"The session's graph is at version {entry.version}, not {body.current_graph_version}: "
                "another client extended it"
            )
        added = body.graph_def.ByteSize()
        if store.graph_bytes() + added > store.settings.max_graph_bytes:
            raise ResourceExhaustedError(
                f"Extending by {added} bytes would take the remote sessions past their limit of "
                f"{store.settings.max_graph_bytes} bytes ([sessions] max_graph_bytes)"
            )
        await asyncio.to_thread(entry.session.extend, body.graph_def)
        entry.graph_bytes += added
        entry.version += 1
        return _answer(serving_pb2.ExtendSessionResponse(new_graph_version=entry.version))

    @api.post("/v1/sessions/{handle}:partial_run_setup")
    async def partial_run_setup(handle: str, request: Request) -> Response:
        body = await _read(request, serving_pb2.PartialRunSetupRequest)
        entry = store.get(handle)
        names = [*body.fetch, *body.target]
        for name in body.target:
            if not is_op_name(name):
                raise InvalidArgumentError(f"Target '{name}' names a tensor: targets are operation names")
        with entry.held(service) as session:
            partial = session.partial_run_setup(names, list(body.feed))
        return _answer(serving_pb2.PartialRunSetupResponse(partial_run_handle=partial))

    @api.post("/v1/sessions:reset")
    async def reset(request: Request) -> Response:
        body = await _read(request, serving_pb2.ResetRequest)
        service.check_admin(request.headers)  # it ends every client's sessions
        store.reset(list(body.container))
        return _answer(serving_pb2.ResetResponse())

    @api.delete("/v1/sessions/{handle}")
    async def close(handle: str) -> Response:
        store.close(handle)
        return _answer(serving_pb2.CloseSessionResponse())

    @api.get("/v1/sessions/{handle}/devices")
    async def devices(handle: str) -> Response:
        entry = store.get(handle)
        response = serving_pb2.ListDevicesResponse()
        with entry.held(service) as session:
            devices = session.list_devices()
        for d in devices:
            response.local_device.add(
                name=d.name, device_type=d.device_type, memory_limit=d.memory_limit_bytes
            )
        return _answer(response)

    return api
