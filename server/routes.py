"""Plain Starlette routes for the inference endpoints, ahead of FastAPI's routers, and the app that serves
them through a shorter stack (see ``server.app``). The app answers HEAD for every GET route (RFC 9110: a
general-purpose server supports HEAD), and a 405 names every method its path serves (``allowed_methods``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from fastapi import FastAPI
from starlette import routing
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class Route(routing.Route):
    """A Starlette route that, like FastAPI's, puts itself in the scope as ``route`` when it matches: the
    metrics label requests by its path template. ``fast``, if set, is the endpoint ``server.hot`` calls
    with the request and its body read, for the answer's parts."""

    fast: Any = None

    def matches(self, scope: Any) -> tuple[routing.Match, Any]:
        match, child = super().matches(scope)
        if match is not routing.Match.NONE:
            child["route"] = self
        return match, child


def allowed_methods(routes: Iterable[routing.BaseRoute], scope: Scope) -> list[str]:
    """The methods ``routes`` serve at the request's path (HEAD wherever GET is), for a 405's Allow.
    Starlette's router names only the first route of the path, so a path served by a GET route and a PUT
    one answered a DELETE ``Allow: GET``."""
    methods: set[str] = set()
    for route in routes:
        found = getattr(route, "methods", None)
        if found and route.matches(scope)[0] is not routing.Match.NONE:
            methods.update(found)
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


def _without_body(send: Send) -> Send:
    """``send`` with every body part emptied: a GET's answer as HEAD's (its headers, Content-Length
    included, as they are)."""

    async def send_head(message: Message) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            message = {**message, "body": b""}
        await send(message)

    return send_head


async def _handle(scope: Scope, receive: Receive, send: Send) -> None:
    """The end of the short stack: the route that matched (``ServingApp``) serves the request."""
    await scope["route"].handle(scope, receive, send)


class ServingApp(FastAPI):
    """FastAPI, with the inference routes (``hot_routes``) served by a shorter stack: the app's own
    middleware (ids, limits, admission, metrics, disconnects: ``add_middleware``) and its exception
    handlers, around the matched route, without the layers FastAPI puts around every request (its error
    and telemetry middleware, its body limit, the exit stack for dependencies, the router's walk over
    every route). Everything else takes FastAPI's whole stack.

    The routes stay in the app's router as well, for the OpenAPI document and for a request the short
    stack does not match (a wrong method, say). A native ``:run`` of the example MLP cost the app (in
    process, no HTTP) 650-690 us of CPU through FastAPI's stack and 537-565 us through this one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hot_routes: list[Route] = []
        self._prefixes: tuple[str, ...] = ()
        # per hot route, the literal start and end of its path: a path without them cannot match, and
        # testing them first spares the route's pattern (the last route was matched after seven misses)
        self._hot_ends: list[tuple[str, str, Route]] = []
        self._hot: ASGIApp | None = None
        # ``hot_core(app)`` serves a hot route's request in place of the innermost middlewares
        # ``hot_layers`` (in their order, outermost first) and what they wrap, when the app has them
        self.hot_core: Callable[[ServingApp], ASGIApp] | None = None
        self.hot_layers: tuple[Any, ...] = ()

    def serve_hot(self, routes: list[Route]) -> None:
        """Serves these routes (POST only) by the short stack; they are added to the router too."""
        self.hot_routes = routes
        self.router.routes.extend(routes)
        # a cheap first test before any route's pattern: the literal start of each path
        self._prefixes = tuple(sorted({r.path.split("{", 1)[0] for r in routes}))
        self._hot_ends = [(r.path.split("{", 1)[0], r.path.rsplit("}", 1)[-1], r) for r in routes]

    def _short_stack(self) -> ASGIApp:
        layers = self.user_middleware
        inner = len(layers) - len(self.hot_layers)
        if (
            self.hot_core is not None
            and inner >= 0
            and tuple(m.cls for m in layers[inner:]) == self.hot_layers
        ):
            app = self.hot_core(self)
            layers = layers[:inner]
        else:
            handlers = {k: v for k, v in self.exception_handlers.items() if k not in (500, Exception)}
            app = ExceptionMiddleware(_handle, handlers=handlers, debug=self.debug)
        for cls, args, kwargs in reversed(layers):
            app = cls(app, *args, **kwargs)
        return app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "HEAD":
            # a GET without its body: the routes, the middleware and the metrics see a GET (the server's
            # own scope stays HEAD, so it sends no body either)
            await super().__call__({**scope, "method": "GET"}, receive, _without_body(send))
            return
        path = scope["path"] if scope["type"] == "http" and scope["method"] == "POST" else ""
        if path and path.startswith(self._prefixes):
            for start, end, route in self._hot_ends:
                if not (path.startswith(start) and path.endswith(end)):
                    continue
                match, child = route.matches(scope)
                if match is routing.Match.FULL:
                    scope.update(child)
                    scope["app"] = self
                    if self._hot is None:
                        self._hot = self._short_stack()
                    await self._hot(scope, receive, send)
                    return
        await super().__call__(scope, receive, send)
