"""loadtest/raw_http.py against small HTTP/1.1 servers on 127.0.0.1: answers by length and by chunks,
error bodies, connections the server closed while idle (the keep-alive race), and a broken answer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from poolserve.loadtest.generator import Target
from poolserve.loadtest.raw_http import RawHttpSender

TARGET = Target("m", "default", "/v1/models/m:run", b'{"feeds": {}}', {"Content-Type": "application/json"})

Handler = Callable[[bytes, bytes], Awaitable[bytes | None]]  # (head, body) -> answer, None: close


async def serve(handler: Handler, idle_close_s: float | None = None) -> tuple[asyncio.Server, list[int]]:
    """A keep-alive server; ``idle_close_s``: it closes a connection idle that long (as uvicorn does after
    5 s). The list counts the connections accepted."""
    accepted: list[int] = []

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            while True:
                try:
                    async with asyncio.timeout(idle_close_s):
                        head = await reader.readuntil(b"\r\n\r\n")
                except (TimeoutError, asyncio.IncompleteReadError):
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                answer = await handler(head, await reader.readexactly(length))
                if answer is None:
                    return
                writer.write(answer)
                await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", 0)
    return server, accepted


def url(server: asyncio.Server) -> str:
    return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def ok(head: bytes, body: bytes) -> bytes:
    assert (
        head.startswith(b"POST /v1/models/m:run HTTP/1.1\r\n") and b"Content-Type: application/json" in head
    )
    assert body == TARGET.content
    return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


def test_requests_reuse_keep_alive_connections():
    async def go() -> tuple[list[int | str], list[int]]:
        server, accepted = await serve(ok)
        async with server, RawHttpSender(url(server), 2, 5.0) as send:
            statuses = await asyncio.gather(*(send(TARGET) for _ in range(20)))
        return list(statuses), accepted

    statuses, accepted = asyncio.run(go())
    assert statuses == [200] * 20
    assert len(accepted) == 2  # one per connection, kept alive


def test_chunked_error_bodies_are_read_and_reported():
    async def refuse(head: bytes, body: bytes) -> bytes:
        text = json.dumps({"error": "Input 'x' is missing"}).encode()
        chunks = b"%x\r\n%s\r\n0\r\n\r\n" % (len(text), text)
        return b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks

    async def go() -> tuple[list[int | str], dict[str, str]]:
        server, _ = await serve(refuse)
        async with server, RawHttpSender(url(server), 1, 5.0) as send:
            statuses = [await send(TARGET) for _ in range(3)]  # the same connection: each body read whole
        return statuses, send.first_errors

    statuses, errors = asyncio.run(go())
    assert statuses == [400] * 3
    assert errors == {"400": "Input 'x' is missing"}


def test_a_connection_the_server_closed_while_idle_is_not_reused():
    # the server closes idle connections after 0.1 s; the sender notices (EOF) and opens a new one
    async def go() -> tuple[list[int | str], list[int], dict[str, str]]:
        server, accepted = await serve(ok, idle_close_s=0.1)
        async with server, RawHttpSender(url(server), 1, 5.0) as send:
            statuses = [await send(TARGET)]
            await asyncio.sleep(0.3)
            statuses.append(await send(TARGET))
        return statuses, accepted, send.first_errors

    statuses, accepted, errors = asyncio.run(go())
    assert statuses == [200, 200] and errors == {}
    assert len(accepted) == 2


def test_a_connection_idle_longer_than_idle_s_is_replaced_before_the_server_closes_it():
    async def go() -> tuple[list[int | str], list[int]]:
        server, accepted = await serve(ok, idle_close_s=5.0)
        async with server, RawHttpSender(url(server), 1, 5.0, idle_s=0.05) as send:
            statuses = [await send(TARGET)]
            await asyncio.sleep(0.15)
            statuses.append(await send(TARGET))
            statuses.append(await send(TARGET))  # at once: the same connection
        return statuses, accepted

    statuses, accepted = asyncio.run(go())
    assert statuses == [200, 200, 200]
    assert len(accepted) == 2


def test_a_broken_answer_is_a_read_error_and_the_next_request_reconnects():
    answers = iter([None, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"])

    async def flaky(head: bytes, body: bytes) -> bytes | None:
        return next(answers)  # the first request: the connection closes without an answer

    async def go() -> tuple[list[int | str], dict[str, str]]:
        server, _ = await serve(flaky)
        async with server, RawHttpSender(url(server), 1, 5.0) as send:
            statuses = [await send(TARGET), await send(TARGET)]
        return statuses, send.first_errors

    statuses, errors = asyncio.run(go())
    assert statuses == ["ReadError", 200]
    assert "IncompleteReadError" in errors["ReadError"]


def test_an_unreachable_server_is_a_connect_error():
    async def go() -> tuple[int | str, dict[str, str]]:
        server, _ = await serve(ok)
        address = url(server)
        server.close()
        await server.wait_closed()
        async with RawHttpSender(address, 1, 2.0) as send:
            return await send(TARGET), send.first_errors

    status, errors = asyncio.run(go())
    assert status == "connect_error" and "cannot connect" in errors["connect_error"]


def test_open_connections_opens_every_slot_ahead_and_requests_then_reuse_them():
    async def go() -> tuple[int, int, list[int | str], int, int]:
        server, accepted = await serve(ok)
        async with server, RawHttpSender(url(server), 3, 5.0) as send:
            first = await send.open_connections()
            await asyncio.sleep(0.05)  # the server's accept callbacks run
            before_requests = len(accepted)
            statuses = await asyncio.gather(*(send(TARGET) for _ in range(9)))
            again = await send.open_connections()  # all open and fresh: nothing to do
        return first, before_requests, list(statuses), again, len(accepted)

    first, before_requests, statuses, again, accepted = asyncio.run(go())
    assert first == 3 and before_requests == 3  # connected before any request was sent
    assert statuses == [200] * 9
    assert again == 0 and accepted == 3  # the requests used those 3 connections


def test_open_connections_replaces_stale_ones_and_survives_an_unreachable_server():
    async def go() -> tuple[int, int, list[int | str]]:
        server, accepted = await serve(ok, idle_close_s=0.05)
        async with server, RawHttpSender(url(server), 2, 5.0) as send:
            await send.open_connections()
            await asyncio.sleep(0.2)  # the server closed both while idle
            reopened = await send.open_connections()
            statuses = [await send(TARGET) for _ in range(2)]
            server.close()
            await server.wait_closed()
            await asyncio.sleep(0.2)
            none = await send.open_connections()  # cannot connect: the slots stay closed
        return reopened, none, statuses

    reopened, none, statuses = asyncio.run(go())
    assert reopened == 2 and statuses == [200, 200] and none == 0
