"""server/errors.py: the one mapping from canonical error codes to HTTP statuses, and the error body."""

from __future__ import annotations

from pathlib import Path

from poolserve.runtime.errors import Code, DeadlineExceededError
from poolserve.server import errors


def test_error_status_mapping() -> None:
    expected = {
        Code.CANCELLED: 499,
        Code.INVALID_ARGUMENT: 400,
        Code.FAILED_PRECONDITION: 400,
        Code.OUT_OF_RANGE: 400,
        Code.DEADLINE_EXCEEDED: 504,
        Code.NOT_FOUND: 404,
        Code.ALREADY_EXISTS: 409,
        Code.ABORTED: 409,
        Code.PERMISSION_DENIED: 403,
        Code.RESOURCE_EXHAUSTED: 429,
        Code.UNIMPLEMENTED: 501,
        Code.UNAVAILABLE: 503,
        Code.UNAUTHENTICATED: 401,
        Code.INTERNAL: 500,
        Code.UNKNOWN: 500,
        Code.DATA_LOSS: 500,
    }
    assert {code: errors.http_status(code) for code in expected} == expected
    assert errors.http_status(999) == 500
    response = errors.error_response(DeadlineExceededError("too late"))
    assert response.status_code == 504
    assert response.body == b'{"error":"too late","code":"DEADLINE_EXCEEDED"}'


# --- a kernel that raises, through the whole server ------------------------------------------------------

import asyncio  # noqa: E402

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from poolserve.runtime.builder import GraphBuilder  # noqa: E402
from poolserve.runtime.kernels.registry import KERNELS, kernel  # noqa: E402
from poolserve.server.app import create_app  # noqa: E402
from poolserve.server.config import make_config  # noqa: E402

if "TestExplode" not in KERNELS:

    @kernel("TestExplode")
    def _test_explode(node: object) -> object:
        def compute(ctx: object, inputs: list[object]) -> tuple[object, ...]:
            raise RuntimeError("the kernel blew up")

        return compute


def test_a_kernel_that_raises_is_a_json_500_naming_the_node_and_the_server_stays_ready(
    tmp_path: Path,
) -> None:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None])
    b.identity(b.op("TestExplode", [x], name="exploding_node"), name="out")
    (tmp_path / "boom.pb").write_bytes(b.graph_def.SerializeToString())
    b = GraphBuilder()
    b.identity(b.placeholder("x", np.float32, [None]), name="out")
    (tmp_path / "ok.pb").write_bytes(b.graph_def.SerializeToString())
    models = [{"name": n, "path": str(tmp_path / f"{n}.pb")} for n in ("boom", "ok")]
    app = create_app(make_config({"models": models}))

    async def calls() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            for _ in range(3):  # again and again: nothing is left broken
                r = await client.post("/v1/models/boom:run", json={"feeds": {"x": [1.0]}})
                assert r.status_code == 500
                body = r.json()
                assert body["code"] == "INTERNAL"
                assert "exploding_node" in body["error"] and "the kernel blew up" in body["error"]
            assert (await client.get("/v1/health/ready")).status_code == 200
            r = await client.post("/v1/models/ok:run", json={"feeds": {"x": [1.0, 2.0]}})
            assert r.status_code == 200 and r.json()["outputs"]["out"]["data"] == [1.0, 2.0]

    try:
        asyncio.run(calls())
    finally:
        app.state.service.close()
