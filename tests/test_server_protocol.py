"""Slow and hostile clients against a real server: header timeout (408), header size (431), a trickled
body (408), the connection limit (503), malformed HTTP (JSON 400); the server stays ready."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from support import ServerProcess

from poolserve.runtime.builder import GraphBuilder
from poolserve.server.protocol import arrival


def _answer(sock: socket.socket, timeout: float = 5.0) -> tuple[int, dict[str, str], dict[str, object]]:
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, json.loads(body) if body else {}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("protocol")
    b = GraphBuilder()
    x = b.placeholder("x", "float32", [None, 3])
    b.identity(x, name="out")
    (tmp / "id.pb").write_bytes(b.graph_def.SerializeToString())
    config = tmp / "server.toml"
    config.write_text(
        "[server]\nheader_timeout_ms = 400\nbody_timeout_ms = 400\nmax_header_bytes = 2048\n"
        'max_connections = 6\n\n[[models]]\nname = "id"\npath = "id.pb"\n'
    )
    proc = ServerProcess(config, tmp / "server.log")
    yield proc
    proc.stop()


def connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=5)


def test_headers_that_never_finish_get_408(server: ServerProcess) -> None:
    with connect(server) as s:
        s.sendall(b"POST /v1/models/id:run HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        start = time.monotonic()
        status, headers, body = _answer(s)
        assert status == 408 and headers["connection"] == "close"
        assert "header_timeout_ms" in str(body["error"])
        assert 0.3 < time.monotonic() - start < 3
    with connect(server) as s:  # a connection that sends nothing at all
        status, _, body = _answer(s)
        assert status == 408


def test_oversized_headers_get_431(server: ServerProcess) -> None:
    with connect(server) as s:
        s.sendall(b"GET /v1/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4000 + b"\r\n\r\n")
        status, _, body = _answer(s)
        assert status == 431 and "max_header_bytes (2048)" in str(body["error"])


def test_a_trickled_body_gets_408(server: ServerProcess) -> None:
    with connect(server) as s:
        s.sendall(b"POST /v1/models/id:run HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        status, headers, body = _answer(s)
        assert status == 408 and "body_timeout_ms" in str(body["error"])


def test_malformed_http_gets_json_400(server: ServerProcess) -> None:
    with connect(server) as s:
        s.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        status, _, body = _answer(s)
        assert status == 400 and body["code"] == "INVALID_ARGUMENT"


def test_connections_past_the_limit_get_503(server: ServerProcess) -> None:
    held = [connect(server) for _ in range(6)]
    try:
        with connect(server) as s:
            s.sendall(b"GET /v1/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
            status, headers, body = _answer(s)
            assert status == 503 and "max_connections (6)" in str(body["error"])
            assert headers["retry-after"] == "1" and headers["connection"] == "close"
    finally:
        for s in held:
            s.close()
    time.sleep(0.1)
    assert httpx.get(f"{server.url}/v1/health/ready", timeout=5).status_code == 200
    r = httpx.post(f"{server.url}/v1/models/id:run", json={"feeds": {"x": [[1, 2, 3]]}}, timeout=5)
    assert r.status_code == 200, r.text


def test_arrival_defaults_to_now_without_the_protocol() -> None:
    before = time.monotonic()
    assert before <= arrival({}) <= time.monotonic()
    assert arrival({"poolserve.arrival": 5.0}) == 5.0


class _Recorder:
    """A transport that records what is written and whether it was closed."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info {name}"


def test_one_send_joins_a_head_and_its_body_and_flushes_a_lone_write_at_the_end_of_the_turn() -> None:
    import asyncio

    from poolserve.server.protocol import _OneSend

    async def main() -> None:
        raw = _Recorder()
        t = _OneSend(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
        t.write(b"HTTP/1.1 200 OK\r\n\r\n")
        assert raw.writes == []  # held for the body
        t.write(b"body")
        assert raw.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]  # one send, at once
        await asyncio.sleep(0)
        assert raw.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]  # nothing left for the turn's end
        t.write(b"head only")  # a HEAD answer: nothing follows, it goes at the end of the turn
        assert raw.writes[-1] != b"head only"
        await asyncio.sleep(0)
        assert raw.writes[-1] == b"head only"
        big = b"x" * (1 << 17)
        t.write(b"head")
        t.write(big)  # a large body is not copied to join it
        assert raw.writes[-2:] == [b"head", big]
        part = memoryview(big)
        t.write(part)  # a large part after them (a binary answer's tensor) goes at once, not held as a copy
        assert raw.writes[-1] == big and len(raw.writes) == 5
        t.write(b"last words")
        t.close()  # what was held goes before the close
        assert raw.writes[-1] == b"last words" and raw.closed
        assert t.get_extra_info("peername") == "info peername"
        await asyncio.sleep(0)
        assert raw.writes[-1] == b"last words"

    asyncio.run(main())


def test_pipelined_requests_and_a_head_request_are_answered_in_order(server: ServerProcess) -> None:
    with connect(server) as s:
        s.sendall(
            b"GET /v1/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
            b"HEAD /v1/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /v1/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        s.settimeout(5)
        data = b""
        while data.count(b"HTTP/1.1 ") < 3 or not data.endswith(b"}"):
            chunk = s.recv(65536)
            assert chunk, data
            data += chunk
        answers = data.split(b"HTTP/1.1 ")[1:]
        # HEAD answers as GET (RFC 9110): the GET's head, its Content-Length too, with no body after it
        assert [a[:3] for a in answers] == [b"200", b"200", b"200"]
        assert answers[0].endswith(b'{"live":true}') and answers[1].endswith(b"\r\n\r\n")
        assert b"content-length: 13\r\n" in answers[1]
        assert answers[2].endswith(b'{"ready":true}')
