"""server/hot.py: an inference route's request in one coroutine, with the answers the layered middleware
gives: ids, size limit while reading, body timeout, disconnects, error handlers, metrics, admission."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from starlette.types import Message
from support import GATES, asgi_scope, gate_op

from poolserve.runtime.builder import GraphBuilder
from poolserve.server import codec
from poolserve.server.app import create_app
from poolserve.server.config import make_config
from poolserve.server.hot import HotPath
from poolserve.server.routes import ServingApp
from poolserve.server.workers import WorkerHeader


def make_app(tmp_path: Path, gate: bool = False, **server: Any) -> ServingApp:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    y = gate_op(b, x, "hot_gate")[0] if gate else x
    b.mul(y, b.constant(np.float32(2.0), name="two"), name="out")
    (tmp_path / "m.pb").write_bytes(b.graph_def.SerializeToString())
    app = create_app(
        make_config({"server": server, "models": [{"name": "m", "path": str(tmp_path / "m.pb")}]})
    )
    assert isinstance(app, ServingApp)
    return app


BODY = codec.dumps({"feeds": {"x": [[1.0, 2.0, 3.0]]}})


async def call(
    app: Any,
    chunks: list[bytes],
    headers: list[tuple[bytes, bytes]] | None = None,
    then: float | None = None,
    path: str = "/v1/models/m:run",
    extra: dict[str, Any] | None = None,
) -> list[Message]:
    """The messages ``app`` sends for a POST whose body comes in ``chunks``; ``then``: seconds after the
    body that the client disconnects (None: it stays); ``extra``: keys added to the scope."""
    scope = {**asgi_scope(path, [(b"host", b"t"), *(headers or [])]), **(extra or {})}
    left = list(chunks)
    sent: list[Message] = []

    async def receive() -> Message:
        if left:
            chunk = left.pop(0)
            if chunk == b"<late>":
                await asyncio.sleep(1.0)
                chunk = b""
            if chunk == b"<gone>":
                return {"type": "http.disconnect"}
            return {"type": "http.request", "body": chunk, "more_body": bool(left)}
        await asyncio.sleep(then if then is not None else 60)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await asyncio.wait_for(app(scope, receive, send), 10)
    return sent


def answer(sent: list[Message]) -> tuple[int, dict[bytes, bytes], Any]:
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    headers = dict(sent[0]["headers"])
    assert len(headers) == len(sent[0]["headers"]), "a header is repeated"
    body = sent[1]["body"]
    assert int(headers[b"content-length"]) == len(body)
    return sent[0]["status"], headers, codec.loads(body) if body else None


def requests(app: ServingApp, status: str) -> float:
    value = app.state.service.metrics.registry.get_sample_value(
        "poolserve_requests_total", {"model": "m", "endpoint": "/v1/models/{model}:run", "status": status}
    )
    return value or 0.0


def test_inference_routes_take_the_hot_path_and_answer_as_the_stack_did(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    status, headers, body = answer(asyncio.run(call(app, [BODY], [(b"x-request-id", b"abc-1")])))
    assert status == 200 and body["outputs"]["out"]["data"] == [2.0, 4.0, 6.0]
    assert headers[b"x-request-id"] == b"abc-1" and headers[b"content-type"] == b"application/json"
    assert isinstance(app._hot, HotPath)  # nothing else around it
    assert requests(app, "200") == 1
    service = app.state.service
    assert service.in_flight == 0 and not service.admission.open
    # a mistake: the app's handler's answer, with a fresh id
    status, headers, body = answer(asyncio.run(call(app, [codec.dumps({"feeds": {"x": [1.0]}})])))
    assert status == 400 and "shape" in body["error"] and len(headers[b"x-request-id"]) == 32
    assert requests(app, "400") == 1


def test_a_body_in_chunks_past_max_request_bytes_is_refused_as_it_comes(tmp_path: Path) -> None:
    app = make_app(tmp_path, max_request_bytes=100)
    status, headers, body = answer(asyncio.run(call(app, [b"x" * 60, b"x" * 60, b"x" * 60])))
    assert status == 413 and "max_request_bytes (100)" in body["error"]
    assert body["code"] == "RESOURCE_EXHAUSTED"
    # declared too large: refused before reading
    status, _, body = answer(asyncio.run(call(app, [b""], [(b"content-length", b"101")])))
    assert status == 413
    assert app.state.service.in_flight == 0 and requests(app, "413") == 2


def test_a_body_that_does_not_arrive_in_time_gets_408_and_a_closed_connection(tmp_path: Path) -> None:
    app = make_app(tmp_path, body_timeout_ms=100)
    started = time.monotonic()
    status, headers, body = answer(asyncio.run(call(app, [b"{", b"<late>", b"}"])))
    assert time.monotonic() - started < 0.9  # answered at the timeout, not when the body came
    assert status == 408 and "body_timeout_ms (100 ms)" in body["error"]
    assert headers[b"connection"] == b"close"


def test_a_client_gone_before_its_body_ends_gets_no_answer_and_no_error_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(tmp_path)
    with caplog.at_level(logging.INFO, logger="poolserve"):
        sent = asyncio.run(call(app, [b'{"feeds": ', b"<gone>"]))
    assert sent == []
    assert requests(app, "499") == 1 and app.state.service.in_flight == 0
    assert "before its body was in" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_client_gone_while_its_step_runs_cancels_the_step(tmp_path: Path) -> None:
    app = make_app(tmp_path, gate=True)
    gate = GATES["hot_gate"]
    try:
        started = time.monotonic()
        sent = asyncio.run(call(app, [BODY], then=0.2))
        took = time.monotonic() - started
    finally:
        gate.open()
    assert sent == [] and took < 3.0  # the step was cancelled, not waited for (the gate holds 5 s)
    assert gate.started.is_set()
    assert requests(app, "499") == 1 and app.state.service.in_flight == 0


def test_an_unexpected_error_is_a_logged_500_with_the_request_id(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(tmp_path)
    route = next(r for r in app.hot_routes if r.path == "/v1/models/{model}:run")

    async def broken(request: Any, body: bytes) -> Any:
        raise RuntimeError("a bug")

    route.fast = broken
    with caplog.at_level(logging.ERROR, logger="poolserve"):
        status, headers, body = answer(asyncio.run(call(app, [BODY], [(b"x-request-id", b"r-500")])))
    assert status == 500 and body == {"error": "internal error", "code": "INTERNAL", "request_id": "r-500"}
    assert "r-500" in caplog.text and "a bug" in caplog.text


def test_middleware_added_after_the_app_wraps_the_hot_path(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    app.add_middleware(WorkerHeader, pid=1234)
    status, headers, _ = answer(asyncio.run(call(app, [BODY])))
    assert status == 200 and headers[b"x-poolserve-worker"] == b"1234" and b"x-request-id" in headers
    assert isinstance(app._hot, WorkerHeader) and isinstance(app._hot.app, HotPath)


def test_at_max_in_flight_a_request_is_refused_before_its_body(tmp_path: Path) -> None:
    app = make_app(tmp_path, max_in_flight=1)
    app.state.service.in_flight = 1  # one request computing
    try:
        status, headers, body = answer(asyncio.run(call(app, [BODY])))
    finally:
        app.state.service.in_flight = 0
    assert status == 503 and headers[b"retry-after"] == b"1"
    assert "limit of 1 requests in flight" in body["error"]


def test_a_binary_answer_goes_out_in_parts_only_where_the_protocol_takes_them(tmp_path: Path) -> None:
    """A KServe binary answer's tensor is sent as a view of the output array after the JSON header, when
    poolserve's protocol serves the request (it sends a memoryview without copying); under any other
    ASGI server (Ray Serve's proxy pickles messages) the answer is one message of bytes, as ASGI says."""
    app = make_app(tmp_path)
    x = np.arange(30_000, dtype=np.float32).reshape(10_000, 3)
    head = codec.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": [10_000, 3],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                },
            ],
            "parameters": {"binary_data_output": True},
        }
    )
    headers = [(b"inference-header-content-length", str(len(head)).encode())]
    answers = {}
    for views in (False, True):
        extra = {"poolserve.send_views": True} if views else {}
        sent = asyncio.run(call(app, [head + x.tobytes()], headers, path="/v2/models/m/infer", extra=extra))
        bodies = [m["body"] for m in sent[1:]]
        assert sent[0]["status"] == 200 and all(m["type"] == "http.response.body" for m in sent[1:])
        assert [m.get("more_body", False) for m in sent[1:]] == [True] * (len(bodies) - 1) + [False]
        if views:
            assert len(bodies) == 2 and isinstance(bodies[1], memoryview) and len(bodies[1]) == x.nbytes
        else:
            assert len(bodies) == 1 and type(bodies[0]) is bytes
        data = b"".join(bodies)
        assert int(dict(sent[0]["headers"])[b"content-length"]) == len(data)
        length = int(dict(sent[0]["headers"])[b"inference-header-content-length"])
        answers[views] = np.frombuffer(data[length:], np.float32).reshape(x.shape)
    assert np.array_equal(answers[False], 2 * x) and np.array_equal(answers[True], 2 * x)
