"""The short stack of ``ServingApp``: inference routes skip FastAPI's own layers but keep the app's
middleware and exception handlers; everything else takes FastAPI's whole stack."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from poolserve.server import errors
from poolserve.server.routes import Route, ServingApp

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Teapot(Exception):
    pass


SEEN: list[str] = []


class Counting:
    """A middleware that notes the path of every request it sees."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            SEEN.append(scope["path"])
        await self.app(scope, receive, send)


def make_app() -> ServingApp:
    async def run(request: Request) -> Response:
        if request.path_params["model"] == "teapot":
            raise Teapot()
        body = await request.body()
        return PlainTextResponse(f"{request.path_params['model']}:{len(body)}:{request.scope['route'].path}")

    async def teapot(request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": "short and stout"}, status_code=418)

    app = ServingApp(docs_url=None, redoc_url=None, openapi_url=None)
    app.add_exception_handler(Teapot, teapot)
    app.serve_hot([Route("/v1/models/{model}:run", run, methods=["POST"])])

    @app.get("/v1/health/live")
    async def live() -> dict[str, bool]:
        return {"live": True}

    app.add_middleware(Counting)
    return app


async def test_inference_routes_take_the_short_stack_with_the_apps_middleware_and_handlers() -> None:
    SEEN.clear()
    app = make_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        r = await c.post("/v1/models/m:run", content=b"abc")
        assert (r.status_code, r.text) == (200, "m:3:/v1/models/{model}:run")
        assert app.middleware_stack is None  # FastAPI's stack was never built: nothing went through it
        r = await c.post("/v1/models/teapot:run")
        assert r.status_code == 418 and r.json() == {"error": "short and stout"}
        assert SEEN == ["/v1/models/m:run", "/v1/models/teapot:run"]  # once each
        r = await c.get("/v1/health/live")
        assert r.json() == {"live": True} and app.middleware_stack is not None
        r = await c.get("/v1/models/m:run")  # not the short stack's: FastAPI's router says 405
        assert r.status_code == 405
        assert SEEN[-2:] == ["/v1/health/live", "/v1/models/m:run"]


def test_the_routes_stay_in_the_router() -> None:
    app = make_app()
    assert any(getattr(r, "path", "") == "/v1/models/{model}:run" for r in app.router.routes)


# --- HEAD and 405 ----------------------------------------------------------------------------------------


async def test_head_is_a_get_without_its_body_and_405_names_every_method_of_the_path() -> None:
    app = make_app()
    errors.install(app)  # the app's handlers: its JSON errors, a 405's Allow

    @app.put("/v1/health/live")
    async def put_live() -> dict[str, bool]:
        return {"live": False}

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        get = await c.get("/v1/health/live")
        head = await c.head("/v1/health/live")
        assert (head.status_code, head.content) == (200, b"")
        assert head.headers["content-length"] == str(len(get.content)) == get.headers["content-length"]
        r = await c.delete("/v1/health/live")  # a GET route and a PUT one: both named, HEAD with GET
        assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD, PUT"
        assert (
            r.json()["error"] == "Method DELETE is not allowed on /v1/health/live; it serves GET, HEAD, PUT"
        )
        r = await c.get("/v1/models/m:run")  # an inference route: POST only
        assert r.status_code == 405 and r.headers["allow"] == "POST"
        r = await c.head("/v1/models/m:run")
        assert (r.status_code, r.headers["allow"], r.content) == (405, "POST", b"")


@pytest.fixture(scope="module")
def served() -> Any:
    from poolserve.server.app import create_app
    from poolserve.server.config import load_config

    return create_app(load_config(None))


PARAMS = {
    "model": "mlp",
    "version": "1",
    "label": "stable",
    "request_id": "nope",
    "handle": "nope",
    "region": "r",
}


async def test_every_get_endpoint_of_the_server_answers_head_as_get(served: Any) -> None:
    """RFC 9110: a general-purpose server supports HEAD. Every GET route of the real app: the same status
    and headers as GET, and no body."""
    paths = sorted({r.path for r in served.router.routes if "GET" in (getattr(r, "methods", None) or ())})
    assert "/v2/models/{model}" in paths and "/v1/runtime/run_handler_pool" in paths
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url="http://t") as c:
        for template in paths:
            path = template.format(**PARAMS)
            get, head = await c.get(path), await c.head(path)
            assert head.status_code == get.status_code, (path, get.text[:200])
            assert head.content == b"", path
            assert head.headers.get("content-type") == get.headers.get("content-type"), path
        get, head = await c.get("/v2/models/mlp"), await c.head("/v2/models/mlp")
        assert head.headers["content-length"] == str(len(get.content))


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/v1/runtime/run_handler_pool", "GET, HEAD, PUT"),
        ("POST", "/v2/health/live", "GET, HEAD"),
        ("PUT", "/v2/models/mlp", "GET, HEAD"),
        ("GET", "/v2/models/mlp/infer", "POST"),
        ("GET", "/v2/repository/index", "POST"),
    ],
)
async def test_a_405_of_the_server_allows_what_its_path_serves(
    served: Any, method: str, path: str, allow: str
) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url="http://t") as c:
        r = await c.request(method, path)
    assert r.status_code == 405 and r.headers["allow"] == allow
    assert r.json() == {
        "error": f"Method {method} is not allowed on {path}; it serves {allow}",
        "code": "UNIMPLEMENTED",
    }
