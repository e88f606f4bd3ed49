"""``poolserve serve`` as a real process (uvicorn on 127.0.0.1): graceful SIGTERM, client disconnects."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from support import ServerProcess

from poolserve.runtime.builder import GraphBuilder

ROOT = Path(__file__).resolve().parent.parent
SLOW_LAYERS = 300


def write_models(root: Path) -> None:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None, 3])
    b.identity(b.add(b.mul(x, b.constant(2.0)), b.constant(1.0)), name="out")
    (root / "add.pb").write_bytes(b.graph_def.SerializeToString())
    b = GraphBuilder()
    dims = b.placeholder("dims", np.int32, [2])
    h = b.op("Fill", [dims, b.constant(0.001)], {"T": np.float32, "index_type": np.int32}, name="fill")
    for _ in range(SLOW_LAYERS):
        h = b.unary("Tanh", b.op("MatMul", [h, h], {"T": np.float32}, name="MatMul"))
    axes = b.constant(np.asarray([0, 1], np.int32))
    total = b.op("Sum", [h, axes], {"T": np.float32, "Tidx": np.int32, "keep_dims": False}, name="total")
    b.op("Identity", [total], {"T": np.float32}, name="out")
    (root / "slow.pb").write_bytes(b.graph_def.SerializeToString())


class Server(ServerProcess):
    def __init__(self, tmp: Path) -> None:
        write_models(tmp)
        config = tmp / "server.toml"
        config.write_text(
            '[server]\ndrain_seconds = 20\n\n[[models]]\nname = "add"\npath = "add.pb"\n\n'
            '[[models]]\nname = "slow"\npath = "slow.pb"\n'
        )
        super().__init__(config, tmp / "server.log")

    def metric(self, text: str, name: str) -> float:
        m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    def steps_running(self) -> float:
        return self.metric(httpx.get(f"{self.url}/metrics", timeout=5).text, "poolserve_steps_running")

    def wait_steps(self, want: float, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.steps_running() == want:
                return True
            time.sleep(0.01)
        return False


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path)
    yield s
    s.stop()


def slow_body(n: int) -> bytes:
    return json.dumps({"feeds": {"dims": [n, n]}}).encode()


def _niceness(pid: int) -> dict[int, int]:
    """Each thread's niceness (field 19 of /proc/<pid>/task/<tid>/stat)."""
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                found[int(tid)] = int(f.read().rsplit(")", 1)[1].split()[16])
        except OSError:  # a thread that ended meanwhile
            continue
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="per-thread priorities are Linux's")
def test_the_event_loop_runs_ahead_of_the_threads_that_compute(server: Server) -> None:
    r = httpx.post(f"{server.url}/v1/models/add:run", json={"feeds": {"x": [[1, 2, 3]]}}, timeout=10)
    assert r.status_code == 200
    nice = _niceness(server.proc.pid)
    loop = nice.pop(server.proc.pid)  # the main thread runs the event loop
    # the run handler pool's and inter-op threads (one per core each), the codec's, BLAS's: compute_nice
    # (5) nicer; gRPC's threads, started by the loop, keep its priority
    assert sum(v == min(19, loop + 5) for v in nice.values()) >= 4, (loop, nice)
    assert set(nice.values()) <= {loop, min(19, loop + 5)}


def test_sigterm_drains_in_flight_requests_and_exits_0(server: Server) -> None:
    r = httpx.post(f"{server.url}/v1/models/add:run", json={"feeds": {"x": [[1, 2, 3]]}}, timeout=10)
    assert r.status_code == 200 and r.json()["outputs"]["out"]["data"] == [3, 5, 7]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        slow = pool.submit(
            httpx.post,
            f"{server.url}/v1/models/slow:run",
            content=slow_body(350),
            headers={"content-type": "application/json"},
            timeout=30,
        )
        assert server.wait_steps(1.0, 10), "the slow request did not start"
        server.proc.send_signal(signal.SIGTERM)
        # no new connections while draining
        refused = False
        for _ in range(100):
            try:
                httpx.get(f"{server.url}/v1/health/live", timeout=0.5)
            except httpx.TransportError:
                refused = True
                break
            time.sleep(0.02)
        assert refused
        r = slow.result(timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["outputs"]["out"]["shape"] == []
    assert server.proc.wait(timeout=20) == 0, server.output()


def test_client_disconnect_cancels_the_step(server: Server) -> None:
    body = slow_body(600)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/models/slow:run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        assert server.wait_steps(1.0, 10), "the slow request did not start"
        t0 = time.monotonic()
    # the socket is closed: the server notices, cancels the task and with it the step
    assert server.wait_steps(0.0, 1.5), "the step kept running after the client left"
    assert time.monotonic() - t0 < 1.5
    text = httpx.get(f"{server.url}/metrics", timeout=5).text
    assert 'model="slow",status="499"} 1.0' in text
    r = httpx.post(f"{server.url}/v1/models/add:run", json={"feeds": {"x": [[0, 0, 0]]}}, timeout=10)
    assert r.status_code == 200


def test_sigterm_drains_in_flight_grpc_calls_and_refuses_new_ones(server: Server) -> None:
    """gRPC on the same loop: a call in flight at SIGTERM finishes; a new one is refused; exit 0."""
    import grpc

    from poolserve.proto import predict_pb2, prediction_service_pb2_grpc
    from poolserve.runtime.tensor import from_ndarray, to_ndarray

    def predict(dims: int, timeout: float) -> np.ndarray:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "slow"
        request.inputs["dims"].CopyFrom(from_ndarray(np.asarray([dims, dims], np.int32)))
        with grpc.insecure_channel(server.grpc_address) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            return to_ndarray(stub.Predict(request, timeout=timeout).outputs["out"])

    assert predict(2, 10).shape == ()  # served over gRPC before the signal
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        slow = pool.submit(predict, 350, 30)
        assert server.wait_steps(1.0, 10), "the slow call did not start"
        server.proc.send_signal(signal.SIGTERM)
        refused = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                predict(2, 5)
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:  # a loaded machine: ask again
                    continue
                refused = e.code()
                break
            time.sleep(0.02)
        # UNAVAILABLE once the server stopped listening; CANCELLED for a call that raced the stop (gRPC
        # cancels the calls that no handler took yet)
        assert refused in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        assert slow.result(timeout=30).shape == ()
    assert server.proc.wait(timeout=20) == 0, server.output()
