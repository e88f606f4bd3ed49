"""Keep-alive HTTP/1.1 connections to one poolserve server, for remote sessions (``runtime.remote``).

A call writes its request in one ``sendall`` and reads the answer through httptools' response parser (the
C parser uvicorn serves with). Against ``http.client`` this took the client's CPU time for a remote run of
the example MLP from ~590 to ~135 us on loopback: http.client parses headers with the ``email`` package
and writes a request in two sends.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import urllib.parse

import httptools


class ProtocolError(Exception):
    """The server's answer was not HTTP we can read, or the call was aborted."""


class _Answer:
    """httptools' callbacks for one response."""

    __slots__ = ("body", "complete", "keep", "parser")

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.complete = False
        self.keep = False
        self.parser = httptools.HttpResponseParser(self)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep = self.parser.should_keep_alive()  # the parser forgets it once the message is over


class Connection:
    """One keep-alive connection, used by one thread at a time."""

    def __init__(self, host: str, port: int, tls: ssl.SSLContext | None, timeout: float) -> None:
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = tls.wrap_socket(sock, server_hostname=host) if tls is not None else sock
        self.thread = threading.get_ident()

    def request(
        self, head: bytes, body: bytes, connect_timeout: float, timeout: float | None
    ) -> tuple[int, bytes, bool]:
        """Sends one request; returns the status, the body, and whether the connection may be kept."""
        sock = self.sock
        sock.settimeout(connect_timeout)
        sock.sendall(head + body if len(body) < 65536 else head)
        if len(body) >= 65536:
            sock.sendall(body)
        sock.settimeout(timeout)
        answer = _Answer()
        parser = answer.parser
        while not answer.complete:
            data = sock.recv(262144)
            if not data:
                raise ConnectionResetError("the server closed the connection before answering")
            try:
                parser.feed_data(data)
            except httptools.HttpParserError as e:
                raise ProtocolError(f"malformed HTTP answer: {e}") from None
        return parser.get_status_code(), b"".join(answer.body), answer.keep

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def shutdown(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)


class Connections:
    """Keep-alive connections to one server, one per calling thread. A call on a kept connection that the
    server closed meanwhile is retried once on a new one: it failed before the server read it."""

    def __init__(self, url: urllib.parse.SplitResult, token: str | None, timeout: float) -> None:
        https = url.scheme == "https"
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if https else 80)
        self._tls = ssl.create_default_context() if https else None
        self._timeout = timeout
        host = self._host if url.port is None else f"{self._host}:{url.port}"
        headers = f"Host: {host}\r\nContent-Type: application/x-protobuf\r\n"
        if token:
            headers += f"Authorization: Bearer {token}\r\n"
        self._headers = headers
        self._local = threading.local()
        self._all: list[Connection] = []
        self._lock = threading.Lock()
        self._aborted: set[int] = set()  # threads whose call was aborted: their next failure is not retried

    def _connection(self) -> tuple[Connection, bool]:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn, True
        conn = Connection(self._host, self._port, self._tls, self._timeout)
        self._local.conn = conn
        with self._lock:
            self._all.append(conn)
        return conn, False

    def request(self, method: str, path: str, body: bytes, timeout: float | None) -> tuple[int, bytes]:
        """The answer's status and body; ``timeout`` bounds the wait for the answer (None: no bound)."""
        head = f"{method} {path} HTTP/1.1\r\n{self._headers}Content-Length: {len(body)}\r\n\r\n".encode(
            "latin-1"
        )
        for _ in range(2):
            if self._aborted and threading.get_ident() in self._aborted:
                raise ProtocolError("the call was aborted")
            conn, reused = self._connection()
            try:
                status, data, keep = conn.request(head, body, self._timeout, timeout)
            except (BrokenPipeError, ConnectionResetError):
                self._drop(conn)
                if not reused or threading.get_ident() in self._aborted:
                    raise
                continue
            except BaseException:
                self._drop(conn)
                raise
            if not keep:
                self._drop(conn)
            return status, data
        raise ProtocolError("the connection failed twice")

    def abort(self, thread: int) -> None:
        """Shuts the connection of thread ``thread`` down under its call in flight (which then fails)."""
        with self._lock:
            self._aborted.add(thread)
            conns = [c for c in self._all if c.thread == thread]
        for conn in conns:
            conn.shutdown()

    def finish_call(self, thread: int) -> None:
        """The calling thread (``thread``) ended a call that ``abort`` may have cut: its connection, if it
        was shut down, is dropped, and its next call is its own again."""
        with self._lock:
            aborted = thread in self._aborted
            self._aborted.discard(thread)
        conn: Connection | None = getattr(self._local, "conn", None)
        if aborted and conn is not None:
            self._drop(conn)

    def _drop(self, conn: Connection) -> None:
        conn.close()
        self._local.conn = None
        with self._lock:
            if conn in self._all:
                self._all.remove(conn)

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
