"""The short stack of ``ServingApp``: inference routes skip FastAPI's own layers but keep the app's
middleware and exception handlers; everything else takes FastAPI's whole stack."""

from __future__ import annotations

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

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
