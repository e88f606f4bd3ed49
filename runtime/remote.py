"""``RemoteSession``: ``Session("http://host:port")`` runs the same program against a poolserve server.

As TensorFlow's GrpcSession does against a master: creating the session ships the GraphDef once (or,
with ``http://host:port/v1/models/NAME``, binds to a model the server serves, shipping nothing); ``run``
sends feeds, fetches, targets and the whole RunOptions, and gets the outputs and RunMetadata back;
``close`` deletes the server's session. Errors come back as the same OpError subclasses.

Values are sent as TensorProtos: arrays keep their dtype; Python lists and scalars are sent as numpy
makes them, with float64 and int64 narrowed to float32 and int32 (the server then converts them to the
placeholder's dtype only where that loses nothing, as ``Session.run`` does with arrays).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
from google.protobuf.message import DecodeError, Message

from poolserve.proto import config_pb2, graph_pb2, serving_pb2, tensor_pb2
from poolserve.runtime.deadline import Deadline
from poolserve.runtime.errors import (
    CancelledError,
    Code,
    InvalidArgumentError,
    OpError,
    UnavailableError,
    error_class,
)
from poolserve.runtime.fetches import FetchMapper, as_output, is_op_name
from poolserve.runtime.graph import Graph
from poolserve.runtime.http_client import Connections, ProtocolError
from poolserve.runtime.session import CLOSED_MESSAGE, RunFuture, Session, StepRecord, callable_of
from poolserve.runtime.targets import DeviceAttributes, register_session_factory, split_args
from poolserve.runtime.tensor import as_array, fill_tensor_proto, to_ndarray
from poolserve.runtime.types import Feeds, Fetches

PROTOBUF = "application/x-protobuf"
M = TypeVar("M", bound=Message)
# Extra seconds the HTTP client waits past a run's own timeout_in_ms for the server's answer.
_TIMEOUT_SLACK_S = 5.0
# Runs in flight at once through submit()/arun() on one session (each holds a thread and a connection).
MAX_SUBMIT_THREADS = 16
# fetch structures whose wire form a session keeps (a client inventing fetch lists starts it over)
_MAX_FETCH_PLANS = 1024
_MODEL_PATH = re.compile(r"/v1/models/([^/]+)/?")


def _encode(proto: tensor_pb2.TensorProto, value: Any) -> None:
    """Writes a fed value into the request's TensorProto in place (see the module docstring)."""
    if isinstance(value, np.ndarray):
        fill_tensor_proto(proto, value)
        return
    arr = as_array(value)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    elif arr.dtype == np.int64:
        arr = arr.astype(np.int32)
    fill_tensor_proto(proto, arr)


class RemoteSession(Session):
    """A session on a poolserve server (see the module docstring). ``token`` is the server's admin token,
    needed to ship a graph when the server sets one; ``timeout`` bounds the calls that are not runs."""

    def __init__(
        self,
        target: str | graph_pb2.GraphDef | Graph | None = None,
        graph: graph_pb2.GraphDef | Graph | config_pb2.ConfigProto | None = None,
        config: config_pb2.ConfigProto | None = None,
        *,
        token: str | None = None,
        timeout: float = 60.0,
        **unused: Any,
    ) -> None:
        target, graph, config = split_args(target, graph, config)
        url = urllib.parse.urlsplit(target)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise InvalidArgumentError(f"A remote session's target is http(s)://host:port; got '{target}'")
        model = ""
        if url.path not in ("", "/"):
            match = _MODEL_PATH.fullmatch(url.path)
            if match is None:
                raise InvalidArgumentError(
                    f"Target '{target}': the only path a target may have is /v1/models/NAME"
                )
            model = urllib.parse.unquote(match[1])
        if model and graph is not None and len(_graph_def(graph).node):
            raise InvalidArgumentError(f"Target '{target}' binds to a served model: give no graph")
        self.target = target
        self._closed = False
        self._lock = threading.Lock()
        self._in_flight = 0
        self._timeout = timeout
        self._http = Connections(url, token, timeout)
        self._submits: concurrent.futures.ThreadPoolExecutor | None = None  # made by the first submit()
        self._fetch_plans: dict[Any, tuple[FetchMapper, list[str], list[str], list[int | None]]] = {}
        self._graph_def = graph_pb2.GraphDef() if graph is None else _copy(_graph_def(graph))
        request = serving_pb2.CreateSessionRequest(model=model)
        if not model:
            request.graph_def.CopyFrom(self._graph_def)
            if config is not None:
                request.config.CopyFrom(config)
        try:
            created = self._call("POST", "/v1/sessions", request, serving_pb2.CreateSessionResponse)
        except BaseException:
            self._http.close()
            raise
        self._handle = created.session_handle
        self._version = created.graph_version

    # --- the wire ----------------------------------------------------------------------------------------

    def _call(
        self, method: str, path: str, body: Message | None, answer: type[M], timeout: float | None = -1.0
    ) -> M:
        """One call; ``timeout`` in seconds for the answer (-1: the session's ``timeout``; None: none)."""
        content = body.SerializeToString() if body is not None else b""
        wait = self._timeout if timeout is not None and timeout < 0 else timeout
        try:
            status, data = self._http.request(method, path, content, wait)
        except TimeoutError as e:
            raise UnavailableError(f"{self.target} did not answer in time: {e}") from None
        except (OSError, ProtocolError) as e:
            raise UnavailableError(f"Cannot reach {self.target}: {e}") from None
        if status != 200:
            raise _error(status, data, self.target)
        parsed = answer()
        try:
            parsed.ParseFromString(data)
        except DecodeError as e:
            raise UnavailableError(f"{self.target} sent a malformed {answer.DESCRIPTOR.name}: {e}") from None
        return parsed

    def _path(self, verb: str = "") -> str:
        return f"/v1/sessions/{self._handle}{verb}"

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(CLOSED_MESSAGE)

    def _enter(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError(CLOSED_MESSAGE)
            self._in_flight += 1

    def _exit(self) -> None:
        with self._lock:
            self._in_flight -= 1

    # --- the session -------------------------------------------------------------------------------------

    @property
    def graph(self) -> Graph:
        return Graph(self._graph_def)

    @property
    def graph_def(self) -> graph_pb2.GraphDef:
        """The graph this client shipped (empty for a session bound to a served model)."""
        return self._graph_def

    def extend(self, graph_def: graph_pb2.GraphDef) -> None:
        self._enter()
        try:
            request = serving_pb2.ExtendSessionRequest(
                session_handle=self._handle, graph_def=graph_def, current_graph_version=self._version
            )
            answer = self._call("POST", self._path(":extend"), request, serving_pb2.ExtendSessionResponse)
            self._version = answer.new_graph_version
            self._graph_def.node.extend(graph_def.node)
        finally:
            self._exit()

    def run(
        self,
        fetches: Fetches,
        feed_dict: Feeds | None = None,
        options: config_pb2.RunOptions | None = None,
        run_metadata: config_pb2.RunMetadata | None = None,
    ) -> Any:
        return self._run(fetches, feed_dict, options, run_metadata, "")

    def _run(
        self,
        fetches: Fetches,
        feed_dict: Feeds | None,
        options: config_pb2.RunOptions | None,
        run_metadata: config_pb2.RunMetadata | None,
        partial: str,
    ) -> Any:
        self._enter()
        try:
            mapper, fetch_names, targets, picks = self._fetch_plan(fetches)
            request = serving_pb2.RunStepRequest(
                session_handle=self._handle, partial_run_handle=partial, fetch=fetch_names, target=targets
            )
            for name, value in (feed_dict or {}).items():
                if not isinstance(name, str):
                    raise TypeError(f"feed_dict keys must be tensor names, got {name!r}")
                _encode(request.feed.add(name=name).tensor, value)
            if options is not None:
                request.options.CopyFrom(options)
            # a run may take as long as it takes, as in TensorFlow, unless it sets its own timeout
            wait = None
            if options is not None and options.timeout_in_ms > 0:
                wait = options.timeout_in_ms / 1000.0 + _TIMEOUT_SLACK_S
            answer = self._call("POST", self._path(":run"), request, serving_pb2.RunStepResponse, wait)
            if len(answer.tensor) != len(fetch_names):
                raise UnavailableError(
                    f"{self.target} answered {len(answer.tensor)} tensors for {len(fetch_names)} fetches"
                )
            values = [to_ndarray(t.tensor, t.name) for t in answer.tensor]
            # as a local Session returns them: 0-d results as numpy scalars, a fed tensor as it was fed
            fed = {f"{n}:0" if is_op_name(n) else n for n in feed_dict or ()}
            values = [v if name in fed else as_output(v) for name, v in zip(fetch_names, values, strict=True)]
            if run_metadata is not None:
                run_metadata.CopyFrom(answer.metadata)
            return mapper.build([None if i is None else values[i] for i in picks])
        finally:
            self._exit()

    def _fetch_plan(self, fetches: Fetches) -> tuple[FetchMapper, list[str], list[str], list[int | None]]:
        """How a fetch structure goes on the wire: its mapper, the tensors to fetch (each once), the
        operations to run, and per name of the mapper the index of its value (None: an operation). Kept
        for flat fetch lists, as ``Calls`` keeps what a local run resolves."""
        key: Any = None
        if isinstance(fetches, str) or (
            type(fetches) in (list, tuple) and all(isinstance(f, str) for f in fetches)
        ):
            key = (type(fetches), fetches if isinstance(fetches, str) else tuple(fetches))
            cached = self._fetch_plans.get(key)
            if cached is not None:
                return cached
        mapper = FetchMapper(fetches)
        unique: dict[str, int] = {}
        targets: list[str] = []
        picks: list[int | None] = []
        for name in mapper.names:
            if is_op_name(name):
                if name not in targets:
                    targets.append(name)
                picks.append(None)
                continue
            if name not in unique:
                unique[name] = len(unique)
            picks.append(unique[name])
        plan = (mapper, list(unique), targets, picks)
        if key is not None:
            if len(self._fetch_plans) >= _MAX_FETCH_PLANS:
                self._fetch_plans.clear()
            self._fetch_plans[key] = plan
        return plan

    def partial_run_setup(self, fetches: Fetches, feeds: Sequence[str] | None = None) -> str:
        self._enter()
        try:
            request = serving_pb2.PartialRunSetupRequest(session_handle=self._handle, feed=list(feeds or ()))
            for name in FetchMapper(fetches).names:
                (request.target if is_op_name(name) else request.fetch).append(name)
            path = self._path(":partial_run_setup")
            return self._call("POST", path, request, serving_pb2.PartialRunSetupResponse).partial_run_handle
        finally:
            self._exit()

    def partial_run(self, handle: str, fetches: Fetches, feed_dict: Feeds | None = None) -> Any:
        return self._run(fetches, feed_dict, None, None, handle)

    def make_callable(
        self, fetches: Fetches, feed_list: Sequence[str] | None = None, accept_options: bool = False
    ) -> Callable[..., Any]:
        names = list(feed_list or ())

        def call(
            values: Sequence[Any],
            options: config_pb2.RunOptions | None,
            run_metadata: config_pb2.RunMetadata | None,
        ) -> Any:
            return self.run(fetches, dict(zip(names, values, strict=True)), options, run_metadata)

        return callable_of(len(names), call, accept_options)

    def list_devices(self) -> list[DeviceAttributes]:
        self._enter()
        try:
            answer = self._call("GET", self._path("/devices"), None, serving_pb2.ListDevicesResponse)
        finally:
            self._exit()
        devices = answer.local_device
        return [DeviceAttributes(d.name, d.device_type, d.memory_limit, d.incarnation) for d in devices]

    def submit(
        self,
        fetches: Fetches,
        feed_dict: Feeds | None = None,
        options: config_pb2.RunOptions | None = None,
        run_metadata: config_pb2.RunMetadata | None = None,
    ) -> RunFuture:
        """Starts the run on one of the session's submit threads (each with a connection of its own;
        at most ``MAX_SUBMIT_THREADS`` run at once, the others queue) and returns at once. ``cancel()`` on
        the future drops the call's connection: the server reads it as the client going away and cancels
        the step; the future ends with CancelledError."""
        self._check_open()
        future = RunFuture()
        call = _RemoteCall()
        future._step = call
        future.set_running_or_notify_cancel()

        def work() -> None:
            call.bind(self._http)
            try:
                result = self.run(fetches, feed_dict, options, run_metadata)
            except BaseException as e:
                error = CancelledError("Run call was cancelled") if call.cancelled else e
                future.set_exception(error)
            else:
                future.set_result(result)
            finally:
                call.done()

        with self._lock:
            if self._submits is None:
                self._submits = concurrent.futures.ThreadPoolExecutor(MAX_SUBMIT_THREADS, "remote_run")
            self._submits.submit(work)
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
        """``run`` for asyncio code: the call runs on a thread (``submit``) and the loop awaits it.
        Cancelling the awaiting task cancels the step on the server. ``deadline``, when the options set no
        timeout, becomes the run's ``timeout_in_ms``; ``record`` is not filled in (the server's pool ran
        the step, or not); ``alone`` changes nothing (the step runs on the server)."""
        if deadline is not None and (options is None or options.timeout_in_ms <= 0):
            bounded = config_pb2.RunOptions()
            if options is not None:
                bounded.CopyFrom(options)
            bounded.timeout_in_ms = max(1, deadline.wait_ms())
            options = bounded
        future = self.submit(fetches, feed_dict, options, run_metadata)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            raise

    @property
    def steps_running(self) -> int:
        return self._in_flight

    def close(self) -> None:
        """Deletes the server's session: its runs in flight end with CancelledError."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._call("DELETE", self._path(), None, serving_pb2.CloseSessionResponse)
        except OpError:
            pass  # the server dropped it already (idle, restarted): closed either way
        finally:
            # let runs in flight read the server's answer before the connections go
            deadline = time.monotonic() + self._timeout
            while self._in_flight and time.monotonic() < deadline:
                time.sleep(0.005)
            self._http.close()
            if self._submits is not None:  # calls still queued run and find the session closed
                self._submits.shutdown(wait=False)

    @property
    def closed(self) -> bool:
        return self._closed

    @classmethod
    def _reset(cls, target: str, containers: list[str], **kwargs: Any) -> None:
        """Resets the server's remote sessions (needs the admin token when the server sets one): their
        containers are cleared and they are closed; the models the server serves are not touched."""
        connections = Connections(urllib.parse.urlsplit(target), kwargs.get("token"), 60.0)
        body = serving_pb2.ResetRequest(container=containers).SerializeToString()
        try:
            status, data = connections.request("POST", "/v1/sessions:reset", body, 60.0)
        except (OSError, ProtocolError) as e:
            raise UnavailableError(f"Cannot reach {target}: {e}") from None
        finally:
            connections.close()
        if status != 200:
            raise _error(status, data, target)

    def __del__(self) -> None:
        connections = getattr(self, "_http", None)
        if connections is not None and not self._closed:
            connections.close()  # no call to a server that may be gone at interpreter exit


def _graph_def(graph: graph_pb2.GraphDef | Graph | config_pb2.ConfigProto) -> graph_pb2.GraphDef:
    if isinstance(graph, Graph):
        return graph.graph_def
    if isinstance(graph, graph_pb2.GraphDef):
        return graph
    raise InvalidArgumentError(f"graph must be a GraphDef or a Graph; got {type(graph).__name__}")


def _copy(graph_def: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
    copy = graph_pb2.GraphDef()
    copy.CopyFrom(graph_def)
    return copy


class _RemoteCall:
    """A ``submit``ted call as the RunFuture sees its step: ``cancel`` aborts its connection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connections: Connections | None = None
        self._thread = 0
        self.cancelled = False
        self._finished = False

    @property
    def finished(self) -> bool:
        return self._finished

    def bind(self, connections: Connections) -> None:
        with self._lock:
            self._connections, self._thread = connections, threading.get_ident()
            cancelled = self.cancelled
        if cancelled:
            connections.abort(self._thread)

    def cancel(self, error: OpError | None = None) -> None:
        with self._lock:
            if self._finished:
                return
            self.cancelled = True
            connections, thread = self._connections, self._thread
        if connections is not None:
            connections.abort(thread)

    def done(self) -> None:
        with self._lock:
            self._finished = True
            connections, thread = self._connections, self._thread
        if connections is not None:
            connections.finish_call(thread)


def _error(status: int, data: bytes, target: str) -> OpError:
    """The OpError a server's error answer stands for (its JSON body names the canonical code)."""
    message = f"{target} answered HTTP {status}"
    code: Code = Code.UNKNOWN
    python = None
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    if isinstance(body, Mapping):
        message = str(body.get("error", message))
        try:
            code = Code[str(body.get("code", "UNKNOWN"))]
        except KeyError:
            code = Code.UNKNOWN
        python = body.get("python_error")  # ValueError or TypeError where TensorFlow's client raises them
    return error_class(code, python if isinstance(python, str) else None)(message)


register_session_factory("http", RemoteSession)
register_session_factory("https", RemoteSession)
