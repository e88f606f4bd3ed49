"""A lean HTTP/1.1 sender for the load loops (the default; ``--http-client httpx`` keeps httpx).

httpx costs the generator several milliseconds of CPU per request at 32 connections (httpcore checks every
pooled connection's socket on each request: measured ~50 ``extra_attributes`` calls per request), more than
the server spends on an example model, so a generator on the same cores measured itself. This one keeps
``connections`` keep-alive connections, writes each target's request bytes (built once per target), and
reads the answer by its ``Content-Length`` (or chunks): about a tenth of the CPU. It speaks only what the
load needs; metadata and ``/metrics`` still go through ``clients`` (httpx).

A connection is never reused once the server closed it, nor after ``idle_s`` unused (uvicorn closes an
idle keep-alive connection after 5 s): a request written as the server's close crosses it is read back as
a broken connection. That race gave the httpx sender its occasional ``ReadError`` at 32 clients, when its
pool left a connection idle for seconds while the others queued.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from poolserve.loadtest.generator import Target

# below uvicorn's default timeout_keep_alive (5 s), so that the server never closes a connection under us
IDLE_S = 4.0


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    used_at: float


class _Closed(Exception):
    """The server closed the connection before answering in full."""


# a broken or garbled exchange (ValueError: a status line or length that does not parse)
_BROKEN = (_Closed, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)


class RawHttpSender:
    """Sends targets over ``connections`` HTTP/1.1 keep-alive connections, one request on each at a time;
    a request waits for a free connection at most ``timeout_s`` ("client_timeout"), and ``timeout_s``
    bounds its exchange too. Failures are counted as ``connect_error``, ``client_timeout`` or
    ``ReadError`` (the connection broke), like httpx's names, with the first message kept."""

    def __init__(self, base_url: str, connections: int, timeout_s: float, idle_s: float = IDLE_S) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http":
            raise ValueError(f"--http-client raw speaks plain http only, not {parts.scheme!r}")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.authority = parts.netloc.encode("latin-1")
        http = httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(timeout_s), trust_env=False)
        self.clients = [http]
        self.timeout_s = timeout_s
        self.idle_s = idle_s
        self.first_errors: dict[str, str] = {}
        self.free: asyncio.Queue[_Conn | None] = asyncio.Queue()
        for _ in range(connections):
            self.free.put_nowait(None)  # opened on first use
        self.open: set[asyncio.StreamWriter] = set()
        self._requests: dict[int, tuple[Target, bytes]] = {}

    async def __aenter__(self) -> RawHttpSender:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for writer in list(self.open):
            writer.close()
        for client in self.clients:
            await client.aclose()

    def _request(self, target: Target) -> bytes:
        cached = self._requests.get(id(target))
        if cached is not None and cached[0] is target:
            return cached[1]
        lines = [
            f"POST {self.prefix}{target.path} HTTP/1.1".encode("latin-1"),
            b"Host: " + self.authority,
            f"Content-Length: {len(target.content)}".encode("latin-1"),
            *(f"{k}: {v}".encode("latin-1") for k, v in target.headers.items()),
        ]
        data = b"\r\n".join(lines) + b"\r\n\r\n" + target.content
        self._requests[id(target)] = (target, data)
        return data

    async def __call__(self, target: Target) -> int | str:
        try:
            async with asyncio.timeout(self.timeout_s):
                conn = await self.free.get()
        except TimeoutError:
            return self._failed("client_timeout", f"no free connection within {self.timeout_s:g} s")
        try:
            if conn is not None and self._stale(conn):
                self._close(conn)
                conn = None
            if conn is None:
                try:
                    async with asyncio.timeout(self.timeout_s):
                        reader, writer = await asyncio.open_connection(self.host, self.port)
                except (OSError, TimeoutError) as e:
                    return self._failed("connect_error", f"cannot connect to {self.host}:{self.port}: {e}")
                conn = _Conn(reader, writer, 0.0)
                self.open.add(writer)
            status: int | str
            try:
                async with asyncio.timeout(self.timeout_s):
                    status, keep = await self._exchange(conn, self._request(target))
            except TimeoutError:
                status, keep = self._failed("client_timeout", f"no answer after {self.timeout_s:g} s"), False
            except _BROKEN as e:
                status, keep = self._failed("ReadError", f"{type(e).__name__}: {e}"), False
            if keep:
                conn.used_at = time.monotonic()
            else:
                self._close(conn)
                conn = None
            return status
        finally:
            self.free.put_nowait(conn)

    async def open_connections(self) -> int:
        """Opens every connection that is not open (or has gone stale) now, all at once: before an overload
        step, so that its requests find a client population already connected, as keep-alive pools are,
        and time the server's answers rather than its accepting hundreds of connections at the step's
        start. Returns how many it opened; one that cannot open stays closed (its request will say why)."""
        conns = [self.free.get_nowait() for _ in range(self.free.qsize())]

        async def ready(conn: _Conn | None) -> tuple[_Conn | None, bool]:
            if conn is not None and not self._stale(conn):
                return conn, False
            if conn is not None:
                self._close(conn)
            try:
                async with asyncio.timeout(self.timeout_s):
                    reader, writer = await asyncio.open_connection(self.host, self.port)
            except (OSError, TimeoutError):
                return None, False
            self.open.add(writer)
            return _Conn(reader, writer, time.monotonic()), True

        # cancelled: the slots come back empty (what was open is closed with the sender)
        results: list[tuple[_Conn | None, bool]] = [(None, False)] * len(conns)
        try:
            results = await asyncio.gather(*(ready(c) for c in conns))
        finally:
            for conn, _ in results:
                self.free.put_nowait(conn)
        return sum(opened for _, opened in results)

    def _stale(self, conn: _Conn) -> bool:
        """Closed by the server, or idle long enough that it may be closing it."""
        return conn.reader.at_eof() or time.monotonic() - conn.used_at > self.idle_s

    def _close(self, conn: _Conn) -> None:
        self.open.discard(conn.writer)
        conn.writer.close()

    async def _exchange(self, conn: _Conn, data: bytes) -> tuple[int, bool]:
        """Sends one request and reads its answer: the status and whether the connection stays open."""
        reader, writer = conn.reader, conn.writer
        writer.write(data)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        if not head:
            raise _Closed("the server closed the connection")
        status_line, _, rest = head.partition(b"\r\n")
        status = int(status_line.split(b" ", 2)[1])
        length = -1
        chunked = False
        keep = not status_line.startswith(b"HTTP/1.0")
        for line in rest.split(b"\r\n"):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                keep = value.strip().lower() != b"close"
        if chunked:
            chunks = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                chunks.append((await reader.readexactly(size + 2))[:size])
                if size == 0:
                    break
            body = b"".join(chunks)
        elif length >= 0:
            body = await reader.readexactly(length)
        else:  # no length: the body runs to the end of the connection
            body = await reader.read()
            keep = False
        if status != 200 and str(status) not in self.first_errors:
            self.first_errors[str(status)] = _error_text(body)
        return status, keep

    def _failed(self, status: str, message: str) -> str:
        self.first_errors.setdefault(status, message)
        return status


def _error_text(body: bytes) -> str:
    """The ``error`` of a JSON error body, else the body's start (as the httpx sender reports it)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and "error" in parsed:
        return str(parsed["error"])
    return body[:200].decode("utf-8", "replace") or "(empty body)"
