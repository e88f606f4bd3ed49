"""server/limits.py's body timeout, and the protocol's mark that a body is all in (server/protocol.py):
a body still arriving is read under the timeout (408 past it); one that is all in is read without a timer."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import uvicorn
from starlette.exceptions import HTTPException
from starlette.types import Message, Receive, Scope, Send
from support import free_port, serve_in_thread

from poolserve.server.config import ServerSettings
from poolserve.server.limits import BodyTimeoutMiddleware
from poolserve.server.protocol import ARRIVAL_KEY, BODY_IN_KEY, protocol_factory


def _read_body_with(scope_extra: dict[str, Any], arrives_after_s: float, timeout_ms: int) -> object:
    """What the app gets (the body, or the HTTPException) when the body arrives after ``arrives_after_s``."""

    async def receive() -> Message:
        await asyncio.sleep(arrives_after_s)
        return {"type": "http.request", "body": b"{}", "more_body": False}

    got: list[object] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            got.append((await receive())["body"])
        except HTTPException as e:
            got.append(e)

    async def send(message: Message) -> None:
        pass

    scope = {"type": "http", ARRIVAL_KEY: time.monotonic(), **scope_extra}
    asyncio.run(BodyTimeoutMiddleware(app, timeout_ms)(scope, receive, send))
    return got[0]


def test_a_body_still_arriving_is_read_under_the_timeout() -> None:
    late = _read_body_with({}, 0.3, 50)
    assert isinstance(late, HTTPException) and late.status_code == 408
    assert "body_timeout_ms (50 ms)" in str(late.detail)
    assert _read_body_with({}, 0.0, 50) == b"{}"


def test_a_body_marked_all_in_is_read_without_the_timer() -> None:
    # marked: the middleware does not wrap the read in a timeout (here the fake receive still sleeps, which
    # a real one, with the whole body buffered, never does)
    assert _read_body_with({BODY_IN_KEY: True}, 0.2, 50) == b"{}"


def test_the_protocol_marks_a_body_once_it_is_all_in() -> None:
    seen: list[tuple[object, object]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        before = scope.get(BODY_IN_KEY)
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen.append((before, scope.get(BODY_IN_KEY)))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": body[:2]})

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", http=protocol_factory(ServerSettings())
        )
    )
    thread = serve_in_thread(server)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            # the whole request at once, then one whose body comes 0.2 s after its headers
            s.sendall(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
            s.sendall(b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n")
            time.sleep(0.2)
            s.sendall(b"{}")
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        server.should_exit = True
        thread.join(timeout=15)
    assert seen == [(True, True), (None, True)]
