"""benchmarks/floor_app.py, the bare apps under the serving-path figures: each mode does the work it stands
for (nothing is timed), in process through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest

from benchmarks import bench_batching_floor, bench_grpc, bench_native, floor_app
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.session import Session


def post(app: object, path: str, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://floor") as client:
            return await client.post(path, content=body, headers=headers)

    return asyncio.run(go())


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("floor") / "mlp784.pb"
    bench_native.build_mlp(path)
    return path


@pytest.mark.parametrize("mode", ["run", "codec"])
def test_run_modes_answer_what_the_session_computes(mlp: Path, mode: str) -> None:
    x = np.random.default_rng(1).standard_normal((bench_native.BATCH, bench_native.INPUTS)).astype(np.float32)
    body = json.dumps({"feeds": {"input": x.astype(float).tolist()}}).encode()
    r = post(floor_app.make_app(mode, str(mlp)), "/v1/models/mlp:run", body)
    assert r.status_code == 200
    got = orjson.loads(r.content)["outputs"]["probabilities"]
    with Session(Graph(load_graph_def(mlp))) as s:
        want = s.run("probabilities:0", {"input:0": x})
    assert got["shape"] == list(want.shape)
    np.testing.assert_array_equal(np.asarray(got["data"], np.float32), want.ravel())


def test_const_answers_without_reading_the_body_as_json() -> None:
    r = post(floor_app.make_app("const"), "/anything", b"not json")
    assert r.status_code == 200 and r.content == floor_app.CONST


def test_echo_sends_the_binary_tensor_back_behind_a_kserve_header() -> None:
    x = np.random.default_rng(2).standard_normal((1024, 256)).astype(np.float32)
    path, body, headers = bench_grpc.http_binary("echo", x)
    r = post(floor_app.make_app("echo"), path, body, headers)
    assert r.status_code == 200
    np.testing.assert_array_equal(bench_grpc.decode_http(r), x.ravel())


def test_a_mode_that_needs_a_model_says_so() -> None:
    with pytest.raises(SystemExit, match="needs a model"):
        floor_app.make_app("run")
    with pytest.raises(SystemExit, match="mode must be one of"):
        floor_app.make_app("fast")


def test_decode_reads_the_body_and_refuses_what_is_not_a_run_request(mlp: Path) -> None:
    app = floor_app.make_app("decode", str(mlp))
    body = json.dumps({"feeds": {"input": [[0.5] * bench_native.INPUTS]}}).encode()
    r = post(app, "/v1/models/mlp:run", body)
    assert r.status_code == 200 and r.content == floor_app.CONST
    with pytest.raises(KeyError):  # the body is decoded, not skipped: a body without feeds fails
        post(app, "/v1/models/mlp:run", b'{"inputs": []}')


def test_the_batching_floor_sends_one_row_of_the_example_mlp() -> None:
    request = bench_batching_floor.target()
    assert request.path == "/v1/models/mlp:run"
    x = np.asarray(orjson.loads(request.content)["feeds"]["input"], np.float32)
    assert x.shape == (1, 64)
    with Session(Graph(load_graph_def(bench_batching_floor.MLP))) as s:
        assert s.run("probabilities:0", {"input:0": x}).shape == (1, 10)


def test_the_lean_client_reads_answers_of_any_size_on_one_connection() -> None:
    """benchmarks.servers.RawClient against a loopback server that answers in pieces: each answer's body
    whole (its buffer grows past 64 KiB), its headers, then a non-200 refused by name."""
    import socket
    import threading

    from benchmarks.servers import RawClient

    sizes = [10, 200_000, 3, 1 << 20]
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            for size in [*sizes, None]:
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, data = data.partition(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                while len(data) < length:
                    data += conn.recv(65536)
                seen.append(data[:length])
                data = data[length:]
                if size is None:
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    return
                body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
                answer = b"HTTP/1.1 200 OK\r\nX-Size: %d\r\ncontent-length: %d\r\n\r\n" % (size, size) + body
                for at in range(0, len(answer), 100_000):  # in pieces, as a loaded server's reads come
                    conn.sendall(answer[at : at + 100_000])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = RawClient(port, "/p", b'{"a": 1}', {"x-extra": "1"})
    try:
        for size in sizes:
            body = client.call()
            assert len(body) == size and client.headers["x-size"] == str(size)
            assert bytes(body[:3]) == (b"\x00\x01\x02" if size >= 256 else b"xxx"[:size])
        with pytest.raises(SystemExit, match="404"):
            client.call()
    finally:
        client.close()
        listener.close()
        thread.join(5)
    assert seen == [b'{"a": 1}'] * (len(sizes) + 1)
