"""The app over HTTP (httpx against the ASGI app, real runtime): the native :run endpoint, operational
endpoints (health, metrics, traces, run handler pool toggle), errors, deadlines, backpressure, disconnects."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi import FastAPI
from support import asgi_scope

from poolserve.proto import serving_pb2, types_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.dtypes import BFLOAT16
from poolserve.runtime.tensor import from_ndarray, to_ndarray
from poolserve.server.app import create_app
from poolserve.server.config import make_config
from poolserve.server.service import InferenceService

pytestmark = pytest.mark.anyio

SLOW_LAYERS = 300


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- models ---------------------------------------------------------------------------------------------


def build_models(root: Path) -> list[dict[str, Any]]:
    """add: out = 2x + 1 (x float32 [?, 3]); slow: a chain of matmuls on Fill(dims) whose cost the caller
    picks with dims; strings: echo of a string vector."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    y = b.add(b.mul(x, b.constant(2.0)), b.constant(1.0), name="y")
    b.identity(y, name="out")
    (root / "add.pb").write_bytes(b.graph_def.SerializeToString())

    b = GraphBuilder()
    dims = b.placeholder("dims", np.int32, [2])
    h = b.op("Fill", [dims, b.constant(0.001)], {"T": np.float32, "index_type": np.int32}, name="fill")
    for _ in range(SLOW_LAYERS):
        h = b.unary("Tanh", b.op("MatMul", [h, h], {"T": np.float32}, name="MatMul"))
    axes = b.constant(np.asarray([0, 1], np.int32))
    total = b.op("Sum", [h, axes], {"T": np.float32, "Tidx": np.int32, "keep_dims": False}, name="total")
    b.op("Identity", [total], {"T": np.float32}, name="out")
    (root / "slow.pb").write_bytes(b.graph_def.SerializeToString())

    b = GraphBuilder()
    s = b.placeholder("s", np.object_, [None])
    b.op("Identity", [s], {"T": np.object_}, name="echo")
    (root / "strings.pb").write_bytes(b.graph_def.SerializeToString())
    return [
        {"name": "add", "path": str(root / "add.pb")},
        {"name": "slow", "path": str(root / "slow.pb")},
        {"name": "strings", "path": str(root / "strings.pb")},
        {
            "name": "aliased",
            "path": str(root / "add.pb"),
            "inputs": {"in": "x:0"},
            "outputs": {"doubled": "y"},
        },
    ]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return build_models(tmp_path_factory.mktemp("models"))


def make_app(models: list[dict[str, Any]], **sections: dict[str, Any]) -> FastAPI:
    return create_app(make_config({"models": models, **sections}))


@pytest.fixture
def app(models: list[dict[str, Any]]) -> FastAPI:
    return make_app(models, server={"admin_token": "sesame"})


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as c:
        yield c
    app.state.service.close()


def runtime_of(app: FastAPI) -> InferenceService:
    runtime: InferenceService = app.state.service
    return runtime


def slow_feeds(n: int) -> dict[str, Any]:
    return {"dims": {"dtype": "int32", "shape": [2], "data": [n, n]}}


def error_of(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) >= {"error", "code"}
    message: str = body["error"]
    return message


# --- :run -----------------------------------------------------------------------------------------------


async def test_run_json_nested_lists_and_default_outputs(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/models/add:run", json={"feeds": {"x": [[1, 2, 3], [4, 5, 6]]}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["outputs"] == {"out": {"dtype": "float32", "shape": [2, 3], "data": [3, 5, 7, 9, 11, 13]}}
    assert body["request_id"] == r.headers["x-request-id"]
    assert len(body["request_id"]) == 32
    assert "run_metadata" not in body and "trace" not in body


async def test_run_typed_feed_fetches_and_tensor_names(client: httpx.AsyncClient) -> None:
    feeds = {"x:0": {"dtype": "float32", "shape": [1, 3], "data": [[0.5, 1, 2]]}}
    r = await client.post("/v1/models/add:run", json={"feeds": feeds, "fetches": ["y", "out:0", "mul"]})
    assert r.status_code == 200, r.text
    out = r.json()["outputs"]
    assert list(out) == ["y", "out:0", "mul"]
    assert out["y"]["data"] == [2.0, 3.0, 5.0]
    assert out["mul"]["data"] == [1.0, 2.0, 4.0]


async def test_run_versions_path_and_aliases(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/models/aliased/versions/1:run", json={"feeds": {"in": [[1, 1, 1]]}})
    assert r.status_code == 200, r.text
    assert r.json()["outputs"]["doubled"]["data"] == [3.0, 3.0, 3.0]
    r = await client.post("/v1/models/aliased/versions/2:run", json={"feeds": {"in": [[1, 1, 1]]}})
    assert "has no version 2" in error_of(r, 404)
    r = await client.post("/v1/models/aliased/versions/x:run", json={"feeds": {}})
    assert "The model version must be an integer, got 'x'" in error_of(r, 400)


async def test_run_targets_only(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/models/add:run", json={"feeds": {"x": [[1, 2, 3]]}, "fetches": [], "targets": ["out"]}
    )
    # empty fetches means the model's outputs; the target runs as well
    assert r.status_code == 200, r.text
    assert list(r.json()["outputs"]) == ["out"]
    r = await client.post("/v1/models/add:run", json={"feeds": {"x": [[1, 2, 3]]}, "targets": ["nope"]})
    assert "no node 'nope'" in error_of(r, 400)
    # a fed placeholder run as a target runs the Placeholder op itself, as in TensorFlow: a 400, not a 500
    for pool in (False, True):
        body = {"feeds": {"x": [[1, 2, 3]]}, "targets": ["x"], "use_run_handler_pool": pool}
        r = await client.post("/v1/models/add:run", json=body)
        assert "You must feed a value for placeholder tensor 'x'" in error_of(r, 400)


async def test_run_strings_utf8_and_b64(client: httpx.AsyncClient) -> None:
    raw = b"\xff\x00bin"
    feeds = {"s": ["héllo", {"b64": base64.b64encode(raw).decode()}]}
    r = await client.post("/v1/models/strings:run", json={"feeds": feeds})
    assert r.status_code == 200, r.text
    echo = r.json()["outputs"]["echo"]
    assert echo["dtype"] == "string" and echo["shape"] == [2]
    assert echo["data"] == ["héllo", {"b64": base64.b64encode(raw).decode()}]
    r = await client.post("/v1/models/strings:run", json={"feeds": {"s": [{"b64": "!!"}]}})
    assert "invalid base64" in error_of(r, 400)


async def test_list_models(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/models")
    assert r.status_code == 200
    models = {m["name"]: m for m in r.json()["models"]}
    assert set(models) == {"add", "slow", "strings", "aliased"}
    assert models["add"]["inputs"] == [{"name": "x", "tensor": "x:0", "dtype": "float32", "shape": [-1, 3]}]
    assert models["aliased"]["outputs"][0]["name"] == "doubled"


# --- errors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        (b"{not json", 400, "malformed JSON"),
        (b"[1, 2]", 400, "must be a JSON object"),
        (b'{"feeds": {"x": [[1,2,3]]}, "fetchez": []}', 400, "Unknown field(s) in the request: fetchez"),
        (
            b'{"feeds": {"x": {"dtype": "float33", "shape": [1, 3], "data": [1,2,3]}}}',
            400,
            "unknown dtype 'float33'",
        ),
        (
            b'{"feeds": {"x": {"dtype": "float32", "shape": [2, 3], "data": [1,2,3]}}}',
            400,
            "input 'x': shape [2, 3] needs 6 values but the data holds 3",
        ),
        (b'{"feeds": {"x": [[1, 2], [3]]}}', 400, "ragged"),
        (b'{"feeds": {"x": [["a", "b", "c"]]}}', 400, "expected numbers for dtype float32"),
        (
            b'{"feeds": {"x": [[1,2,3]]}, "run_options": {"timeout_in_ms": 5, "bogus_field": 1}}',
            400,
            "bogus_field",
        ),
        (b'{"feeds": {"x": [[1,2,3]]}, "trace": "full"}', 400, "trace must be one of"),
        (b'{"feeds": {"x": [[1,2,3]]}, "fetches": "out"}', 400, "fetches must be a list"),
        (b'{"feeds": {"nope": [[1,2,3]]}}', 400, "has no input 'nope'; its inputs are: x"),
        (
            b'{"feeds": {"x": [[1,2,3]]}, "fetches": ["ghost"]}',
            400,
            "has no output 'ghost'; its outputs are: out",
        ),
        (b'{"feeds": {"x": [[1,2,3,4]]}}', 400, "Cannot feed value of shape (1, 4)"),
        (b'{"feeds": {}}', 400, "You must feed a value for placeholder tensor 'x'"),
    ],
)
async def test_run_bad_requests(client: httpx.AsyncClient, body: bytes, status: int, fragment: str) -> None:
    r = await client.post("/v1/models/add:run", content=body, headers={"content-type": "application/json"})
    assert fragment in error_of(r, status)


def deep(depth: int) -> bytes:
    return b"[" * depth + b"1" + b"]" * depth


@pytest.mark.parametrize(
    "body",
    [
        # past orjson's 1024 levels: Python's json, its fallback, raised RecursionError
        b'{"feeds":{"x":' + deep(1100) + b"}}",
        b'{"feeds":{"x":' + deep(100_000) + b"}}",
        # within them: an error's repr of the value, protobuf's JSON reader, recursed past Python's limit
        b'{"feeds":{"x":{"dtype":"float32","shape":' + deep(1000) + b',"data":[]}}}',
        b'{"feeds":{"x":[[1,2,3]]},"trace":' + deep(1000) + b"}",
        b'{"feeds":{"x":[[1,2,3]]},"run_options":{"debugOptions":' + deep(1000) + b"}}",
    ],
)
async def test_run_json_nested_too_deeply_is_a_400(client: httpx.AsyncClient, body: bytes) -> None:
    r = await client.post("/v1/models/add:run", content=body, headers={"content-type": "application/json"})
    assert error_of(r, 400) == "malformed JSON: nested too deeply"


async def test_pool_toggle_refuses_json_nested_too_deeply(client: httpx.AsyncClient) -> None:
    auth = {"Authorization": "Bearer sesame", "content-type": "application/json"}
    for body in (deep(1100), deep(100_000), b'{"enabled":' + deep(1000) + b"}"):
        r = await client.put("/v1/runtime/run_handler_pool", content=body, headers=auth)
        assert error_of(r, 400).startswith("malformed JSON: nested too deeply")


async def test_run_integer_feeds_refuse_lossy_values(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/models/slow:run", json={"feeds": {"dims": [1.5, 2]}})
    assert "expected integers for dtype int32" in error_of(r, 400)
    r = await client.post("/v1/models/slow:run", json={"feeds": {"dims": [2**40, 2]}})
    assert "out of range for dtype int32" in error_of(r, 400)


async def test_unknown_model_and_content_type(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/models/nope:run", json={"feeds": {}})
    message = error_of(r, 404)
    assert "Model 'nope' not found" in message and "add" in message
    assert r.json()["code"] == "NOT_FOUND"
    r = await client.post("/v1/models/add:run", content=b"x", headers={"content-type": "image/png"})
    assert "Unsupported Content-Type" in error_of(r, 400)
    # a bare `curl -d` body (form-urlencoded) is read as JSON
    r = await client.post(
        "/v1/models/add:run", content=b"{bad", headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert "JSON" in error_of(r, 400)


async def test_request_body_limits(models: list[dict[str, Any]]) -> None:
    app = make_app(models, server={"max_request_bytes": 100})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        big = json.dumps({"feeds": {"x": [[1.0, 2.0, 3.0]] * 20}}).encode()
        r = await c.post("/v1/models/add:run", content=big, headers={"content-type": "application/json"})
        assert "max_request_bytes (100)" in error_of(r, 413)

        async def chunks() -> AsyncIterator[bytes]:  # no content-length: counted while reading
            for _ in range(10):
                yield b" " * 20

        r = await c.post("/v1/models/add:run", content=chunks(), headers={"content-type": "application/json"})
        assert "max_request_bytes" in error_of(r, 413)
        r = await c.post("/v1/models/add:run", json={"feeds": {"x": [[1, 2, 3]]}})
        assert r.status_code == 200
    runtime_of(app).close()


async def test_unexpected_errors_are_a_logged_500_with_the_request_id(
    app: FastAPI, client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    async def boom() -> None:
        raise RuntimeError("secret detail")

    app.add_api_route("/boom", boom)
    r = await client.get("/boom", headers={"X-Request-Id": "req-42"})
    assert r.status_code == 500
    assert r.json() == {"error": "internal error", "code": "INTERNAL", "request_id": "req-42"}
    assert "secret" not in r.text
    assert any("req-42" in rec.getMessage() and rec.exc_info for rec in caplog.records)


# --- protobuf -------------------------------------------------------------------------------------------


async def test_run_protobuf_round_trip(client: httpx.AsyncClient) -> None:
    req = serving_pb2.RunRequest(fetches=["out", "y"], trace="response")
    req.feeds["x"].CopyFrom(from_ndarray(np.asarray([[1, 2, 3]], np.float32)))
    r = await client.post(
        "/v1/models/add:run",
        content=req.SerializeToString(),
        headers={"content-type": "application/x-protobuf"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/x-protobuf"
    resp = serving_pb2.RunResponse.FromString(r.content)
    np.testing.assert_array_equal(to_ndarray(resp.outputs["out"]), [[3, 5, 7]])
    np.testing.assert_array_equal(to_ndarray(resp.outputs["y"]), [[3, 5, 7]])
    assert resp.request_id == r.headers["x-request-id"]
    assert resp.run_metadata.step_stats.dev_stats[0].node_stats
    names = {e["name"] for e in json.loads(resp.trace_json)["traceEvents"]}
    assert {"receive+decode", "compute"} <= names
    bad = await client.post(
        "/v1/models/add:run", content=b"\xff\xff\xff", headers={"content-type": "application/x-protobuf"}
    )
    assert "not a valid RunRequest" in error_of(bad, 400)


def run_request(dims: tuple[int, ...], **values: Any) -> bytes:
    """A RunRequest feeding x a float TensorProto of ``dims`` (and ``values`` as its fields, if any)."""
    request = serving_pb2.RunRequest()
    tensor = request.feeds["x"]
    tensor.dtype = types_pb2.DT_FLOAT
    for size in dims:
        tensor.tensor_shape.dim.add(size=size)
    for field, given in values.items():
        getattr(tensor, field).extend(given)
    return request.SerializeToString()


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        (
            (2**40, 2**40),
            "input 'x': shape [1099511627776, 1099511627776] is impossible: no array of float32",
        ),
        ((2**40, 2**40, 0), "input 'x': shape [1099511627776, 1099511627776, 0] is impossible"),
        ((1,) * 65, "input 'x': shape [1, 1, 1, 1, ...] has 65 dimensions; an array has at most"),
    ],
)
async def test_run_refuses_a_shape_no_array_can_have(
    client: httpx.AsyncClient, dims: tuple[int, ...], message: str
) -> None:
    """In a protobuf body (numpy's "array is too big" from to_ndarray was a 500) and in JSON."""
    r = await client.post(
        "/v1/models/add:run", content=run_request(dims), headers={"content-type": "application/x-protobuf"}
    )
    assert error_of(r, 400).startswith(message)
    feed = {"dtype": "float32", "shape": list(dims), "data": []}
    r = await client.post("/v1/models/add:run", json={"feeds": {"x": feed}})
    assert error_of(r, 400).startswith(message)


async def test_run_bounds_what_a_protobuf_feed_filled_from_fewer_values_expands_to(
    models: list[dict[str, Any]],
) -> None:
    """TensorFlow fills a TensorProto given fewer values than its shape holds (zeros, or the last value
    repeated), and so does the server, up to max_request_bytes: a 25-byte body declaring [524288, 64]
    floats was a 128 MiB input with no bound."""
    app = make_app(models, server={"max_request_bytes": 1 << 20})
    protobuf = {"content-type": "application/x-protobuf"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.post("/v1/models/add:run", content=run_request((2, 3), float_val=[1.5]), headers=protobuf)
        assert r.status_code == 200, r.text
        out = to_ndarray(serving_pb2.RunResponse.FromString(r.content).outputs["out"])
        np.testing.assert_array_equal(out, np.full((2, 3), 4.0, np.float32))
        body = run_request((100000, 3))
        assert len(body) < 30
        r = await c.post("/v1/models/add:run", content=body, headers=protobuf)
        assert error_of(r, 400) == (
            "input 'x': shape [100000, 3] filled from 0 of its 300000 values would take 1200000 bytes of "
            "float32, past max_request_bytes (1048576), what a request's tensors filled from fewer values "
            "than their shape holds may take in all; send every value (tensor_content)"
        )
    runtime_of(app).close()


async def test_json_request_with_protobuf_accept(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/models/add:run", json={"feeds": {"x": [[0, 0, 0]]}}, headers={"accept": "application/x-protobuf"}
    )
    resp = serving_pb2.RunResponse.FromString(r.content)
    np.testing.assert_array_equal(to_ndarray(resp.outputs["out"]), [[1, 1, 1]])


# --- deadlines, cancellation, backpressure --------------------------------------------------------------


async def test_timeout_answers_504_promptly_and_the_server_keeps_serving(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    t0 = time.monotonic()
    body = {"feeds": slow_feeds(600), "run_options": {"timeout_in_ms": 100}}
    r = await client.post("/v1/models/slow:run", json=body)
    elapsed = time.monotonic() - t0
    assert "deadline of 100 ms" in error_of(r, 504)
    assert r.json()["code"] == "DEADLINE_EXCEEDED"
    assert elapsed < 1.0
    r = await client.post("/v1/models/add:run", json={"feeds": {"x": [[1, 2, 3]]}})
    assert r.status_code == 200
    runtime = runtime_of(app)
    for _ in range(200):  # the cancelled step ends at its next node
        if runtime.steps_running == 0:
            break
        await asyncio.sleep(0.01)
    assert runtime.steps_running == 0
    metrics = (await client.get("/metrics")).text
    assert 'poolserve_timeouts_total{model="slow"} 1.0' in metrics


async def test_default_timeout_from_config(models: list[dict[str, Any]]) -> None:
    app = make_app(models, server={"default_timeout_ms": 50}, run_handler_pool={"enabled": False})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.post("/v1/models/slow:run", json={"feeds": slow_feeds(600)})
        assert "deadline of 50 ms" in error_of(r, 504)
    runtime_of(app).close()


async def test_client_disconnect_cancels_the_step(app: FastAPI) -> None:
    """Raw ASGI: the client goes away while the step computes; the step is cancelled, not abandoned."""
    runtime = runtime_of(app)
    body = json.dumps({"feeds": slow_feeds(600)}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = asgi_scope("/v1/models/slow:run", headers)
    sent: list[dict[str, Any]] = []
    calls = 0

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.sleep(0.2)
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    t0 = time.monotonic()
    await asyncio.wait_for(app(scope, receive, send), 5.0)
    assert time.monotonic() - t0 < 1.5
    assert sent == []  # nobody to answer
    for _ in range(100):
        if runtime.steps_running == 0:
            break
        await asyncio.sleep(0.01)
    assert runtime.steps_running == 0
    text = runtime.metrics.exposition()[0].decode()
    assert 'endpoint="/v1/models/{model}:run",model="slow",status="499"} 1.0' in text
    assert "poolserve_in_flight_requests 0.0" in text


async def test_backpressure_answers_503_with_retry_after(models: list[dict[str, Any]]) -> None:
    app = make_app(models, server={"max_in_flight": 1})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        slow = asyncio.create_task(c.post("/v1/models/slow:run", json={"feeds": slow_feeds(250)}))
        runtime = runtime_of(app)
        for _ in range(500):
            if runtime.steps_running:
                break
            await asyncio.sleep(0.005)
        r = await c.post("/v1/models/add:run", json={"feeds": {"x": [[1, 2, 3]]}})
        assert "limit of 1 requests in flight" in error_of(r, 503)
        assert r.headers["retry-after"] == "1"
        assert (await c.get("/v1/health/live")).status_code == 200  # only work is limited
        assert (await slow).status_code == 200
        r = await c.post("/v1/models/add:run", json={"feeds": {"x": [[1, 2, 3]]}})
        assert r.status_code == 200
    runtime.close()


async def test_concurrent_requests_across_two_models(client: httpx.AsyncClient) -> None:
    async def one(i: int) -> None:
        if i % 2:
            r = await client.post("/v1/models/add:run", json={"feeds": {"x": [[i, i, i]]}})
            assert r.status_code == 200, r.text
            assert r.json()["outputs"]["out"]["data"] == [2.0 * i + 1] * 3
        else:
            r = await client.post("/v1/models/slow:run", json={"feeds": slow_feeds(8)})
            assert r.status_code == 200, r.text
            assert r.json()["outputs"]["out"]["shape"] == []

    deadline = time.monotonic() + 20
    for _ in range(3):  # bounded: 3 waves of 16 requests
        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(16))), deadline - time.monotonic())


# --- run handler pool toggle ----------------------------------------------------------------------------


async def test_pool_toggle_with_admin_token(app: FastAPI, client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/runtime/run_handler_pool")
    assert r.status_code == 200
    state = r.json()
    assert state["enabled"] is True
    assert set(state) >= {"active_handlers", "waiting_requests", "queued_closures", "threads", "max_handlers"}
    assert state["deadline_stretch"] == runtime_of(app).pool.stretch
    assert state["policy"] == "deadline" and state["kernel_threads"] >= 0  # the server's default
    r = await client.put("/v1/runtime/run_handler_pool", json={"enabled": False})
    assert "Bearer" in error_of(r, 401)
    r = await client.put(
        "/v1/runtime/run_handler_pool", json={"enabled": False}, headers={"Authorization": "Bearer wrong"}
    )
    assert "not valid" in error_of(r, 401)
    auth = {"Authorization": "Bearer sesame"}
    r = await client.put("/v1/runtime/run_handler_pool", json={"enabled": "maybe"}, headers=auth)
    assert "enabled" in error_of(r, 400)
    r = await client.put("/v1/runtime/run_handler_pool", json={"enabled": False, "x": 1}, headers=auth)
    assert "x" in error_of(r, 400)
    r = await client.put(
        "/v1/runtime/run_handler_pool",
        content=b"{oops",
        headers={**auth, "content-type": "application/json"},
    )
    assert "malformed JSON" in error_of(r, 400)
    # a bare `curl -X PUT -d '{"enabled": false}'` sends form-encoded JSON: accepted
    r = await client.put(
        "/v1/runtime/run_handler_pool",
        content=b'{"enabled": false}',
        headers={**auth, "content-type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 200 and r.json()["enabled"] is False
    assert runtime_of(app).pool_enabled is False
    assert (await client.get("/v1/runtime/run_handler_pool")).json()["enabled"] is False

    # with the default off, a request still asks for the pool itself; its trace says which it used
    async def used_pool(body: dict[str, Any]) -> bool:
        r = await client.post(
            "/v1/models/add:run", json={"feeds": {"x": [[1, 2, 3]]}, "trace": "response", **body}
        )
        assert r.status_code == 200, r.text
        spans = [e for e in r.json()["trace"]["traceEvents"] if e.get("name") == "wait for run handler"]
        result: bool = spans[0]["args"]["run_handler_pool"]
        return result

    assert await used_pool({}) is False
    assert await used_pool({"run_options": {"experimental": {"use_run_handler_pool": True}}}) is True
    await client.put("/v1/runtime/run_handler_pool", json={"enabled": True}, headers=auth)
    assert await used_pool({}) is True
    assert await used_pool({"run_options": {"experimental": {"use_run_handler_pool": False}}}) is False
    assert await used_pool({"use_run_handler_pool": False}) is False


async def test_pool_toggle_without_admin_token(models: list[dict[str, Any]]) -> None:
    app = make_app(models)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.put("/v1/runtime/run_handler_pool", json={"enabled": False})
        assert r.status_code == 200 and r.json()["enabled"] is False
    runtime_of(app).close()


# --- traces ---------------------------------------------------------------------------------------------


async def test_traces_fetch_list_merge_and_formats(client: httpx.AsyncClient) -> None:
    ids = []
    bodies: list[dict[str, Any]] = [{"trace": "response"}, {"run_options": {"trace_level": "FULL_TRACE"}}, {}]
    for i, body in enumerate(bodies):
        r = await client.post(
            "/v1/models/add:run",
            json={"feeds": {"x": [[1, 2, 3]]}, **body},
            headers={"X-Request-Id": f"trace-{i}"},
        )
        assert r.status_code == 200 and r.headers["x-request-id"] == f"trace-{i}"
        assert r.json()["request_id"] == f"trace-{i}"
        ids.append(f"trace-{i}")
        assert ("trace" in r.json()) == (i < 2)
        assert ("run_metadata" in r.json()) == (i < 2)

    r = await client.get("/v1/traces/trace-0")
    assert r.status_code == 200
    events = r.json()["traceEvents"]
    spans = {e["name"]: e for e in events if e.get("cat") == "Server"}
    assert list(spans) == ["receive+decode", "wait for run handler", "compute", "encode"]
    assert spans["compute"]["args"]["threads"] and "handler" in spans["compute"]["args"]
    assert "thread" in spans["receive+decode"]["args"]
    ops = [e for e in events if e.get("cat") == "Op"]
    assert {e["args"]["name"] for e in ops} >= {"mul", "y", "out"}
    first_op = min(e["ts"] for e in ops)
    assert spans["compute"]["ts"] <= first_op <= spans["compute"]["ts"] + spans["compute"]["dur"]

    r = await client.get("/v1/traces/trace-1", params={"format": "run_metadata"})
    assert r.status_code == 200 and r.json()["stepStats"]["devStats"][0]["nodeStats"]
    r = await client.get("/v1/traces/trace-1", params={"format": "svg"})
    assert "Unknown trace format" in error_of(r, 400)
    r = await client.get("/v1/traces/trace-2")
    assert "No trace for request 'trace-2'" in error_of(r, 404)
    # what can never be a request id is refused, not looked up and echoed back whole
    r = await client.get("/v1/traces/" + "x" * 129)
    message = error_of(r, 400)
    assert "is not a request id" in message and len(message) < 200
    assert "is not a request id" in error_of(await client.get("/v1/traces/a%00b"), 400)
    assert "is not a request id" in error_of(
        await client.get("/v1/traces:merge", params={"ids": "a,\x01"}), 400
    )

    listing = (await client.get("/v1/traces")).json()["traces"]
    assert [t["id"] for t in listing] == ["trace-1", "trace-0"]
    assert listing[0]["model"] == "add" and listing[0]["status"] == 200 and listing[0]["latency_ms"] > 0
    assert abs(listing[0]["time"] - time.time()) < 60

    r = await client.get("/v1/traces:merge", params={"ids": "trace-0,trace-1"})
    assert r.status_code == 200
    merged = r.json()["traceEvents"]
    assert sum(e.get("name") == "compute" for e in merged) == 2
    r = await client.get("/v1/traces:merge", params={"ids": "trace-0,ghost"})
    assert "'ghost'" in error_of(r, 404)
    r = await client.get("/v1/traces:merge")
    assert "ids" in error_of(r, 400)


async def test_failed_traced_request_is_stored_with_its_status(client: httpx.AsyncClient) -> None:
    body = {"feeds": slow_feeds(600), "run_options": {"timeout_in_ms": 50}, "trace": "response"}
    r = await client.post("/v1/models/slow:run", json=body, headers={"X-Request-Id": "late"})
    assert r.status_code == 504
    listing = (await client.get("/v1/traces")).json()["traces"]
    assert listing[0]["id"] == "late" and listing[0]["status"] == 504


async def test_sampled_traces_are_stored_not_returned(models: list[dict[str, Any]]) -> None:
    app = make_app(models, traces={"sample_rate": 1.0, "capacity": 2})
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        for i in range(3):
            r = await c.post(
                "/v1/models/add:run", json={"feeds": {"x": [[1, 2, 3]]}}, headers={"X-Request-Id": f"s{i}"}
            )
            assert "trace" not in r.json()
        assert [t["id"] for t in (await c.get("/v1/traces")).json()["traces"]] == ["s2", "s1"]
        assert "poolserve_traces_stored 2.0" in (await c.get("/metrics")).text
    runtime_of(app).close()


# --- health and metrics ---------------------------------------------------------------------------------


async def test_health(app: FastAPI, client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/health/live")).json() == {"live": True}
    r = await client.get("/v1/health/ready")
    assert r.status_code == 200 and r.json() == {"ready": True}
    runtime_of(app).draining = True
    r = await client.get("/v1/health/ready")
    assert r.status_code == 503 and r.json()["ready"] is False


async def test_lifespan_end_drains_and_closes(models: list[dict[str, Any]]) -> None:
    app = make_app(models)
    runtime = runtime_of(app)
    async with app.router.lifespan_context(app):
        assert runtime.ready
    assert not runtime.ready and runtime.draining
    with pytest.raises(RuntimeError, match="closed Session"):
        runtime.model("add").session.run("out:0", {"x:0": [[1.0, 2.0, 3.0]]})


async def test_metrics_exposition(client: httpx.AsyncClient) -> None:
    await client.post("/v1/models/add:run", json={"feeds": {"x": [[1, 2, 3]]}})
    await client.post("/v1/models/add:run", json={"feeds": {"x": "bad"}})
    r = await client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'poolserve_requests_total{endpoint="/v1/models/{model}:run",model="add",status="200"} 1.0' in text
    assert 'poolserve_requests_total{endpoint="/v1/models/{model}:run",model="add",status="400"} 1.0' in text
    assert (
        'poolserve_request_latency_seconds_count{endpoint="/v1/models/{model}:run",model="add"} 2.0' in text
    )
    assert 'poolserve_handler_wait_seconds_count{model="add"} 1.0' in text
    for name in (
        "poolserve_in_flight_requests",
        "poolserve_run_handler_pool_active_handlers",
        "poolserve_run_handler_pool_queued_closures",
        "poolserve_traces_stored",
        "poolserve_steps_running",
    ):
        assert f"\n{name} " in text, name


async def test_run_a_bfloat16_feed_and_fetches() -> None:
    # dtype "bfloat16" in and out, numbers in JSON; the fixture's y -> MatMul -> z, as TensorFlow computed it
    fixture = Path(__file__).parent / "fixtures" / "models" / "bfloat16"
    with np.load(fixture.with_suffix(".npz")) as data:
        y, z = data["in:y:0"].view(BFLOAT16), data["out:Identity_2:0"].view(BFLOAT16)
    app = create_app(make_config({"models": [{"name": "bf16", "path": str(fixture.with_suffix(".pb"))}]}))
    feeds = {"y": {"dtype": "bfloat16", "shape": list(y.shape), "data": y.astype(np.float32).tolist()}}
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://t") as c,
    ):
        r = await c.post("/v1/models/bf16:run", json={"feeds": feeds, "fetches": ["Identity_2:0"]})
    assert r.status_code == 200, r.text
    out = r.json()["outputs"]["Identity_2:0"]
    assert out["dtype"] == "bfloat16" and out["shape"] == list(z.shape)
    got = np.asarray(out["data"], np.float32).astype(BFLOAT16).reshape(out["shape"])  # exact: float32 text
    np.testing.assert_array_equal(got.view(np.uint16), z.view(np.uint16))
