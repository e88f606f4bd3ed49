"""The HTTP protocol uvicorn runs: httptools' own, plus the arrival stamp and the limits on hostile clients.

uvicorn starts a request's ASGI task once its headers are parsed, but the task runs only when the event
loop gets to it, which under load is late: a deadline that starts in the app starts late. This protocol
stamps the request's arrival when its first byte is parsed (``scope["poolserve.arrival"]``, read by
``arrival``), and the deadline counts from there. It also answers, as JSON, and closes the connection:

- 408 when a connection's request line and headers take longer than ``header_timeout_ms`` (counted from
  the connection's opening or the request's first byte): a client that opens connections and sends
  nothing, or headers a byte at a time, cannot hold them;
- 431 when the request line and headers are larger than ``max_header_bytes``;
- 400 (JSON, where httptools' default is text) for a request that does not parse.

A response's status line and headers go out in the same send as its body (``_OneSend``).

Reads go into buffers the protocol lends the transport (``asyncio.BufferedProtocol``): one per thread for
request lines, headers and small bodies, fed to the parser from there; an admitted body of declared length
is read straight into one buffer of that length, without the parser, and a refused body into the shared
buffer, to be dropped. A plain protocol got every read as a new bytes object, the parser copied a body's
part of it into another for ``on_body``, which uvicorn appended to the body, and ``receive()`` copied that:
four copies of each byte of a 0.5 MB body on the event loop, now one (its bytes for the app).

A request on a connection past ``max_connections`` is marked (``scope["poolserve.over_connections"]``); the
admission middleware answers it 503 and closes the connection.

With a ``gate`` (``server.admission.EarlyAdmission``), admission decides when a request's headers are in,
before its ASGI task exists: a refused request is answered from the parser's callback, in one send, and
its body, if the client sends one, is dropped as it comes, so the connection stays usable: the part that
came with the headers is parsed, and the rest (announced by its Content-Length) is counted off the reads
without being parsed or copied, then a fresh parser takes the connection's next request. A client that
announced ``Expect: 100-continue`` was told nothing yet and sends no body: its connection is closed after
the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import httptools
import numpy as np
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

from poolserve.runtime.errors import Code
from poolserve.server import codec, errors
from poolserve.server.config import ServerSettings

ARRIVAL_KEY = "poolserve.arrival"
OVER_CONNECTIONS_KEY = "poolserve.over_connections"
# set in a request's scope once its whole body is in (the app's receive() then returns it without waiting)
BODY_IN_KEY = "poolserve.body_in"
# set for an admitted body of declared length that is still to come: a ``WholeBody``, through which the app
# may wait for all of it and take it as a view of the buffer it was read into, with no copy
BODY_VIEW_KEY = "poolserve.whole_body"
# set in every request's scope: the answer's body may be sent as memoryview parts (``server.hot`` joins them
# into bytes for any other ASGI server, or Ray Serve's proxy, which pickles messages)
SEND_VIEWS_KEY = "poolserve.send_views"
# a KServe binary request's JSON header length: its tensors follow the header in the body
_TENSORS_AT = b"inference-header-content-length"
# the alignment a direct-read body's tensors get in its buffer (a cache line: any dtype's alignment)
_ALIGN = 64

_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}
_CODES = {400: Code.INVALID_ARGUMENT, 408: Code.DEADLINE_EXCEEDED, 431: Code.RESOURCE_EXHAUSTED}


def arrival(scope: Any) -> float:
    """When the request's first byte was parsed (time.monotonic()); now when no protocol stamped it."""
    stamped: float | None = scope.get(ARRIVAL_KEY)
    return stamped if stamped is not None else time.monotonic()


@dataclass(frozen=True, slots=True)
class Refusal:
    """A whole answer the protocol gives for a request whose app never runs (its gate's decision)."""

    status: int
    headers: list[tuple[bytes, bytes]]  # besides uvicorn's defaults (server, date) and content-length
    body: bytes


# The gate: given uvicorn's scope when a request's headers are in, a Refusal to answer it at once, a
# callback to call when its ASGI task ends (it was admitted), or None (the app decides).
Gate = Callable[[Any], "Refusal | Callable[[], None] | None"]  # given uvicorn's HTTPScope


async def _then(app: ASGIApp, done: Callable[[], None], scope: Scope, receive: Receive, send: Send) -> None:
    try:
        await app(scope, receive, send)
    finally:
        done()


class _Refused(Exception):
    """Raised from a parser callback to stop parsing; the answer is in the protocol's ``_refusal``."""


class _OneSend:
    """The connection's transport as the protocol and its requests' cycles see it. uvicorn writes a
    response's status line and headers, then its body, in two writes: two sends, two TCP segments, and a
    client that wakes for the first waits again for the second. Here a write is held, and the next write
    (Starlette sends the body in the same turn as the head) leaves with it at once, in one send; a write
    that nothing follows leaves at the end of the event loop's turn. Nothing waits past the turn it was
    written in.

    At once, not at the end of the turn: after the body's write the request's task still unwinds its
    middlewares (metrics, admission, the access record) in that turn, and the answer waited for them: the
    784-input MLP's native :run spent 131-148 us from its encoded answer to its send, now 74-87 us."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write_now(self, data: bytes) -> None:
        """Writes at once, after what is held: an answer that is complete as it is."""
        held, self._held = self._held, None
        self._transport.write(held + data if held is not None else data)

    def write(self, data: bytes | memoryview) -> None:
        held = self._held
        if held is None:
            if len(data) >= _JOIN_BELOW:  # nothing to join it to: held, it would be copied for nothing
                self._transport.write(data)
                return
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
        else:
            self._held = None
            if len(data) < _JOIN_BELOW:
                self._transport.write(held + data)
            else:  # a large body: the copy that joining would make costs more than a second send
                self._transport.write(held)
                self._transport.write(data)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


# bodies below this size are joined to the held head (a copy); larger ones are sent after it
_JOIN_BELOW = 64 * 1024
# the size of the buffer reads go into when they are not an admitted body's (uvloop's own read size)
_READ_BYTES = 256 * 1024
# an admitted body is read straight into its own buffer when at least this much of it is still to come
# (below, the parser's copies cost less than making that buffer: a 65 KB body in 64 KiB reads, in process,
# 116 us a request against 111)
_DIRECT_BYTES = 64 * 1024


class _ReadBuffer(threading.local):
    """The buffer a thread's connections read into. One per thread, not per connection (a thousand idle
    connections would hold a quarter of a GiB): each read is parsed (the parser copies what it keeps) or
    dropped before the next one, all on the thread's event loop."""

    def __init__(self) -> None:
        self.view = memoryview(bytearray(_READ_BYTES))


_READS = _ReadBuffer()


class ServingProtocol(HttpToolsProtocol):
    settings = ServerSettings()
    gate: Gate | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._refusal: tuple[int, str] | None = None
        # body bytes of a request refused at its headers still to come: dropped as they arrive, unparsed
        self._drop = 0
        # the declared body length of the request admitted at its headers: its body comes to the app whole
        self._whole = 0
        # that body as it is read, straight into this buffer past the parser (from the read after the
        # one its headers came in, if that one did not hold all of it), and how much of it is in
        self._into: memoryview | None = None
        self._into_at = 0
        self._reads = _READS.view  # made on the thread of the loop that reads

    # --- the header timer ---------------------------------------------------------------------------------

    def _start_header_timer(self) -> None:
        if self._header_timer is None:
            delay = self.settings.header_timeout_ms / 1000.0
            self._header_timer = self.loop.call_later(delay, self._headers_too_slow)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            # an earlier (pipelined) request is still being answered: give the next one its full time
            self._start_header_timer()
            return
        self._refuse(
            408,
            f"The request line and headers did not arrive within header_timeout_ms "
            f"({self.settings.header_timeout_ms} ms)",
        )

    def _refuse(self, status: int, message: str) -> None:
        self._stop_header_timer()
        if self.transport.is_closing():
            return
        body = codec.dumps(errors.error_body(message, _CODES[status]))
        head = (
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n" % (status, _REASONS[status], len(body))
        )
        self.transport.write(head + body)
        self.transport.close()

    # --- uvicorn's hooks ----------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # every write of the connection goes through it, so that they stay in order
        self.transport = _OneSend(transport, self.loop)  # type: ignore[assignment]
        self._start_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)

    def get_buffer(self, sizehint: int) -> memoryview:
        into = self._into
        if into is not None:  # the rest of an admitted body, and nothing of the next request
            return into[self._into_at :]
        view = self._reads
        drop = self._drop
        if drop and drop < _READ_BYTES:  # a refused body's end, and nothing of the next request
            return view[:drop]
        return view

    def buffer_updated(self, nbytes: int) -> None:
        if self._into is not None:
            self._unset_keepalive_if_required()  # an answer given before the body was in set the timer
            self._into_at += nbytes
            if self._into_at == len(self._into):
                self._body_done()
            return
        self.data_received(self._reads[:nbytes])
        if self._whole and self._into is None and self._whole - len(self.cycle.body) >= _DIRECT_BYTES:
            self._read_whole()  # the admitted body's rest is large: read straight into its buffer

    def data_received(self, data: bytes | memoryview) -> None:
        if self._drop:
            # the body of a refused request: count it off without the parser, which would copy it (256
            # KiB reads) into bytes objects for on_body to drop
            self._unset_keepalive_if_required()
            if len(data) < self._drop:
                self._drop -= len(data)
                return
            data = data[self._drop :]
            self._drop = 0
            self._body_done()
            if not data:
                return
        if self._refusal is None:
            super().data_received(data)  # type: ignore[arg-type]  # the parser reads any buffer

    def _body_done(self) -> None:
        """A body read or dropped past the parser is all in: the parser, left in the middle of it, is
        replaced, and the request's message is complete."""
        self.parser = httptools.HttpRequestParser(self)
        with contextlib.suppress(AttributeError):  # as uvicorn makes its parser (httptools 0.6.3 and later)
            self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.on_message_complete()

    def _read_whole(self) -> None:
        """Reads the rest of the admitted request's body straight into a buffer of its declared length
        (what came of it already first). uvicorn stops reading every 64 KiB until the app takes what came,
        a round trip through the app's receive() (and the loop) each time; the app takes all of it anyway,
        and admission bounded its size (max_request_bytes). See ``_aligned_buffer`` for the buffer."""
        cycle = self.cycle
        if cycle.response_complete:  # answered without it (as uvicorn does, dropped as it comes)
            self._whole = 0
            return
        into = _aligned_buffer(self._whole, _tensors_at(cycle.scope))
        came = len(cycle.body)
        into[:came] = cycle.body
        cycle.body = cycle.body[:0]  # bytes or bytearray, as the uvicorn version makes it
        self._into, self._into_at = into, came

    def on_body(self, body: bytes) -> None:
        if self._drop:  # the refused request's body that came with its headers
            self._drop -= len(body)
            return
        if self._whole and not self.cycle.response_complete:
            # the admitted body's part that came with its headers (or, pipelined, before its turn)
            self.cycle.body += body
            return
        super().on_body(body)

    def send_400_response(self, msg: str) -> None:
        # httptools wraps what a callback raised (_Refused) into a parse error: answer the refusal instead
        status, message = self._refusal or (400, f"{msg} The request line or headers are not HTTP/1.1")
        self._refuse(status, message)

    def on_message_begin(self) -> None:
        self._unset_keepalive_if_required()  # a request has begun: the connection is not idle
        super().on_message_begin()
        self.scope[ARRIVAL_KEY] = time.monotonic()  # type: ignore[literal-required]
        self.scope[SEND_VIEWS_KEY] = True  # type: ignore[literal-required]
        self._header_bytes = 0
        self._start_header_timer()

    def _count(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > self.settings.max_header_bytes:
            self._refusal = (
                431,
                f"The request line and headers are larger than max_header_bytes "
                f"({self.settings.max_header_bytes})",
            )
            raise _Refused

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_message_complete(self) -> None:
        self._drop = self._whole = 0
        into = self._into
        if into is not None:
            self._into = None
            if not self.cycle.response_complete:  # else the app answered without it: dropped
                # receive() copies the view into bytes for an app that reads the body that way; the
                # inference routes take the view itself (WholeBody)
                self.cycle.body = into[: self._into_at].toreadonly()  # type: ignore[assignment]
        super().on_message_complete()
        if self.cycle is not None:
            self.cycle.scope[BODY_IN_KEY] = True  # type: ignore[literal-required]
        answered = self.cycle is not None and self.cycle.response_complete
        if answered and not self.pipeline and not self.transport.is_closing():
            # the body of a request answered before it was read (refused at its headers) ended after the
            # answer, whose keep-alive timer the body's bytes cancelled: the connection is idle from here
            self._unset_keepalive_if_required()
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    def on_headers_complete(self) -> None:
        self._stop_header_timer()
        if len(self.connections) > self.settings.max_connections:
            self.scope[OVER_CONNECTIONS_KEY] = True  # type: ignore[literal-required]
        super().on_headers_complete()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        # uvicorn starts a request here once its headers are in (or, pipelined, once the previous answer is
        # complete): the gate decides before the task exists
        outcome = self.gate(cycle.scope) if self.gate is not None else None
        if isinstance(outcome, Refusal):
            self._answer(cycle, outcome)
            return
        if outcome is not None:
            app = partial(_then, app, outcome)
            # a body of declared length (the gate refused none past max_request_bytes); a chunked one is
            # read as uvicorn reads it, so that the app's limit applies as it comes
            if cycle is self.cycle and cycle.more_body:
                self._whole = declared_length(cycle.scope) or 0
                if self._whole:
                    cycle.scope[BODY_VIEW_KEY] = WholeBody(cycle)  # type: ignore[literal-required]
        super()._start_asgi_task(cycle, app)

    def _answer(self, cycle: RequestResponseCycle, refusal: Refusal) -> None:
        """Answers ``cycle``'s request with ``refusal``, as its cycle would have sent the app's answer."""
        close = not cycle.keep_alive or cycle.waiting_for_100_continue
        parts = [STATUS_LINE[refusal.status]]
        for name, value in (*cycle.default_headers, *refusal.headers):
            parts += [name, b": ", value, b"\r\n"]
        parts.append(b"content-length: %d\r\n" % len(refusal.body))
        if close:
            parts.append(b"connection: close\r\n")
        parts += [b"\r\n", refusal.body]
        cycle.response_started = cycle.response_complete = True  # on_body drops the body from here on
        cycle.keep_alive = not close
        self.transport.write_now(b"".join(parts))  # type: ignore[attr-defined]
        if close:
            self.transport.close()
        elif cycle is self.cycle and cycle.more_body:  # its body is to come: dropped unparsed
            self._drop = max(0, (declared_length(cycle.scope) or 0) - len(cycle.body))
        self.on_response_complete()


def _tensors_at(scope: Any) -> int:
    """Where a body's binary tensors start: past the KServe JSON header, if the request declares one."""
    for key, value in scope.get("headers", ()):
        if key == _TENSORS_AT:
            value = value.strip()
            return int(value) if value.isdigit() and len(value) < 19 else 0
    return 0


def _aligned_buffer(size: int, at: int) -> memoryview:
    """A buffer of ``size`` bytes whose byte ``at`` is ``_ALIGN``-aligned: a binary tensor read there is
    aligned, and its array is a view of the body (``codec.from_binary`` copies an unaligned one). numpy's
    ``empty``: its pages are touched only as the body comes, so a client that declares a large body and
    sends nothing holds no memory for it."""
    whole = np.empty(size + _ALIGN, np.uint8)
    start = -(whole.ctypes.data + at) % _ALIGN
    return whole.data[start : start + size]


class WholeBody:
    """An admitted body of declared length, as the protocol reads it: ``wait`` until it is all in (or the
    client is gone), then ``take`` it. A body read straight into its own buffer (``_read_whole``: one
    whose rest was large) is taken as a read-only view of that buffer: a 1 MiB binary tensor reaches the
    model with no copy, where receive() makes bytes of it. Otherwise ``take`` answers None, and the app
    reads the body with receive() as any other."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self._cycle = cycle

    async def wait(self) -> None:
        """Until the body is all in or the client has gone: what receive() waits for with such a body,
        after what it does first (a client that sent ``Expect: 100-continue`` is told to send the body)."""
        cycle = self._cycle
        if cycle.waiting_for_100_continue and not cycle.transport.is_closing():
            cycle.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            cycle.waiting_for_100_continue = False
        if not cycle.disconnected and not cycle.response_complete:
            cycle.flow.resume_reading()
            await cycle.message_event.wait()

    def take(self) -> memoryview | None:
        """The body as a view of its buffer, if it is all in and was read into one, else None. Once it is
        taken the request's channel is as receive() leaves it after the body: the next receive() waits
        for the client to disconnect."""
        cycle = self._cycle
        body = cycle.body
        if not isinstance(body, memoryview) or cycle.disconnected or cycle.response_complete:
            return None
        cycle.body = bytearray()
        cycle.message_event.clear()
        return body


def header(scope: Any, name: bytes) -> str | None:
    """The first value of the header ``name`` (lower case, as ASGI gives names), read from the scope's list:
    what ``Request.headers.get`` answers, without building Starlette's ``Headers`` on the hot path."""
    for key, value in scope.get("headers", ()):
        if key == name:
            text: str = value.decode("latin-1")
            return text
    return None


def declared_length(scope: Any) -> int | None:
    """A request's body length from its one Content-Length header; None when it has none, several, one
    that is not a number, or a Transfer-Encoding (the parser must read such a body to find its end)."""
    lengths = []
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding":
            return None
        if name == b"content-length":
            lengths.append(value)
    if len(lengths) != 1 or not lengths[0].strip().isdigit():
        return None
    return int(lengths[0])


class _Reads(asyncio.BufferedProtocol):
    """What the transport sees of a ``ServingProtocol``: a buffered protocol forwarding to it. uvloop lends
    a protocol its buffers only when it is not an ``asyncio.Protocol``, and uvicorn's protocol is one."""

    __slots__ = ("buffer_updated", "get_buffer", "http")

    def __init__(self, http: ServingProtocol) -> None:
        self.http = http
        # the protocol's own bound methods: the transport calls them on every read
        self.get_buffer = http.get_buffer  # type: ignore[method-assign]
        self.buffer_updated = http.buffer_updated  # type: ignore[method-assign]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.http.connection_made(transport)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        self.http.connection_lost(exc)

    def eof_received(self) -> bool | None:
        return self.http.eof_received()  # type: ignore[func-returns-value]

    def pause_writing(self) -> None:
        self.http.pause_writing()

    def resume_writing(self) -> None:
        self.http.resume_writing()


def protocol_factory(settings: ServerSettings, gate: Gate | None = None) -> Callable[..., _Reads]:
    """What to give uvicorn as its protocol (``uvicorn.Config(http=...)``): for each connection, a
    ``ServingProtocol`` bound to the server's settings and admission's ``gate``, made with uvicorn's
    arguments, behind the ``_Reads`` the transport reads into."""
    held = staticmethod(gate) if gate is not None else None  # a function in a class would become a method
    cls = type("ServingProtocol", (ServingProtocol,), {"settings": settings, "gate": held})

    def make(*args: Any, **kwargs: Any) -> _Reads:
        return _Reads(cls(*args, **kwargs))

    return make
