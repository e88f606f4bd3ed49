"""benchmarks/bench_grpc.py's pieces that decide what it compares (nothing is timed): the normalize model
computes what it says, the JSON client's orjson body is the KServe request the other protocols send, and
the floor's echo server (benchmarks/grpc_echo.py) answers with exactly what it was sent."""

from __future__ import annotations

import subprocess
import sys

import grpc
import numpy as np

from benchmarks import bench_grpc, grpc_echo
from benchmarks.servers import free_port
from poolserve.proto import graph_pb2
from poolserve.runtime.session import Session
from poolserve.server import grpc_raw, kserve, kserve_grpc


def test_normalize_is_a_per_feature_sub_and_mul() -> None:
    graph = graph_pb2.GraphDef.FromString(bench_grpc.normalize_model())
    nodes = {n.name: n for n in graph.node}
    mean, inv_std = (
        np.frombuffer(nodes[k].attr["value"].tensor.tensor_content, np.float32) for k in ("mean", "inv_std")
    )
    assert mean.shape == inv_std.shape == (256,)
    x = np.random.default_rng(0).standard_normal(bench_grpc.ONE_MIB["normalize"]).astype(np.float32)
    assert x.nbytes == 1 << 20
    with Session(graph) as s:
        (y,) = s.run(["output:0"], {"input:0": x})
    np.testing.assert_allclose(y, (x - mean) * inv_std, rtol=1e-6)


def test_the_json_and_raw_bodies_carry_the_same_input() -> None:
    x = np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32)
    _, body, _ = bench_grpc.http_json("normalize", x)
    from_json = kserve.decode_request(body).inputs["input"]
    from_raw = kserve_grpc.decode_infer(grpc_raw.parse_request(bench_grpc.grpc_raw("normalize", x)))
    np.testing.assert_array_equal(from_json, x)  # orjson writes float32 values exactly
    np.testing.assert_array_equal(from_raw.inputs["input"], x)


def test_the_echo_server_answers_a_1_mib_call_with_its_own_bytes() -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.grpc_echo", str(port)], cwd=bench_grpc.ROOT)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=60)
            call = channel.unary_unary(grpc_echo.PATH)
            body = np.random.default_rng(5).bytes((1 << 20) + 3)
            assert call(body, timeout=60) == body
            assert call(b"", timeout=60) == b""
    finally:
        proc.terminate()
        proc.wait(15)
