"""The body read timeout: a client that trickles its body cannot hold a request slot.

From the request's arrival, the whole body must be in within ``server.body_timeout_ms``; past it the
request is answered 408 (JSON) and the connection closed. A body that is all in when the app reads it (the
protocol marks the scope, ``BODY_IN_KEY``: nearly every request) is read without a timer, which cost ~10 us
of the event loop a read. The size limit (413) is enforced as the body is read, by the serving middleware
(server/app.py); header timeouts and sizes belong to the protocol (server/protocol.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from poolserve.server.protocol import BODY_IN_KEY, arrival

T = TypeVar("T")


class BodyTimeoutMiddleware:
    def __init__(self, app: ASGIApp, timeout_ms: int) -> None:
        self.app = app
        self.timeout = timeout_ms / 1000.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        until = arrival(scope) + self.timeout
        body_done = False

        async def receive_in_time() -> Message:
            nonlocal body_done
            if body_done:  # after the body, receive() waits for a disconnect: no limit
                return await receive()
            if scope.get(BODY_IN_KEY):  # all of it is in: receive() answers at once
                body_done = True
                return await receive()
            message = await receive_until(receive, until, self.timeout)
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        await self.app(scope, receive_in_time, send)


async def receive_until(receive: Receive, until: float, timeout_s: float) -> Message:
    """``receive()`` by ``until`` (time.monotonic()); past it the 408 HTTPException, which closes the
    connection (``timeout_s``, body_timeout_ms in seconds, names the limit)."""
    return await in_time(receive(), until, timeout_s)


async def in_time(step: Awaitable[T], until: float, timeout_s: float) -> T:
    """``step`` of reading a body, awaited by ``until``: as ``receive_until``."""
    try:
        async with asyncio.timeout(max(0.0, until - time.monotonic())):
            return await step
    except TimeoutError:
        raise HTTPException(
            408,
            f"The request body did not arrive within body_timeout_ms ({timeout_s * 1000:.0f} ms)",
            headers={"Connection": "close"},
        ) from None
