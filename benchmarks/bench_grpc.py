"""gRPC benchmark: KServe v2 over gRPC (raw tensors) against KServe v2 over HTTP, on one poolserve process.

    python -m benchmarks.bench_grpc [--clients 8] [--rounds 4] [--seconds 5] [--repeat 20] [--json out.json]

1. The example MLP (one row of 64 floats), ``--clients`` closed-loop clients, rounds alternating between
   the HTTP binary tensor extension (httpx) and gRPC ``raw_input_contents`` (grpc.aio): throughput,
   latency, and the server's CPU time per request (from /proc: the clients share the machine, and
   httpx costs its client more than grpc's C core does, so the CPU per request is the fairer figure).
2. A 1 MiB float32 input, one request at a time (median of ``--repeat``): KServe JSON over HTTP, the
   HTTP binary extension and gRPC raw, on the branches model (1024 x 256, as bench_http), the MLP
   (4096 x 64, lighter compute) and ``normalize`` (1024 x 256 -> 1024 x 256: (x - mean) / std per feature,
   a pre-processing model whose compute is a Sub and a Mul: the protocol's share of the time, 1 MiB in
   and 1 MiB out). The JSON client uses orjson both ways (numpy's float32 values as they are), so the
   JSON figure is the server's JSON, not the stdlib's on the client.
3. The floor under part 2's gRPC figure: normalize's gRPC raw call interleaved with the same request's
   bytes sent to a bare grpc.aio echo server (benchmarks/grpc_echo.py, its own process), with the same
   client: the transport's round trip of ~1 MiB each way, with no protobuf, model or poolserve code on the
   server; and the client's decode of a 1 MiB answer (protobuf and np.frombuffer) in this process. The
   same for HTTP: normalize's HTTP binary call interleaved with a bare uvicorn app (benchmarks/floor_app.py
   ``echo``) sending the request's tensor back behind a KServe binary header, the same httpx client.
4. In this process, the protocol's own work on that MLP request (no compute, no network): parsing and
   decoding the request and encoding the answer, KServe JSON against gRPC raw (median of ``--repeat``).

The server runs the embedded default config's mlp and branches and the generated normalize model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import orjson

from benchmarks import bench_http, grpc_echo
from benchmarks.servers import RawClient, cpu_seconds, free_port
from poolserve.proto import grpc_service_pb2
from poolserve.runtime.builder import GraphBuilder, shape

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "configs" / "models"
HEADER = "Inference-Header-Content-Length"
INFER = "/inference.GRPCInferenceService/ModelInfer"


def normalize_model() -> bytes:
    """input [None, 256] -> (x - mean) * (1 / std), per feature -> output [None, 256]."""
    rng = np.random.default_rng(3)
    b = GraphBuilder()
    x = b.placeholder("input", np.float32, (None, 256))
    centred = b.binary("Sub", x, b.constant(rng.normal(0, 1, 256).astype(np.float32), name="mean"))
    scaled = b.mul(centred, b.constant(rng.uniform(0.5, 2, 256).astype(np.float32), name="inv_std"))
    b.op("Identity", [scaled], {"T": np.float32, "_output_shapes": [shape((None, 256))]}, name="output")
    return b.graph_def.SerializeToString()


def start(http_port: int, grpc_port: int, folder: Path) -> Any:
    """The server on a config of the default mlp and branches and the normalize model (in ``folder``)."""
    (folder / "normalize.pb").write_bytes(normalize_model())
    models = {
        "mlp": MODELS / "mlp.pb",
        "branches": MODELS / "branches.pb",
        "normalize": folder / "normalize.pb",
    }
    config = folder / "bench_grpc.toml"
    config.write_text(
        "\n".join(f'[[models]]\nname = "{name}"\npath = "{path}"' for name, path in models.items()) + "\n"
    )
    args = ["-m", "poolserve.server.cli", "serve", "--log-level", "warning", "--config", str(config)]
    return bench_http.start([*args, "--port", str(http_port), "--grpc-port", str(grpc_port)], http_port)


def http_binary(model: str, x: np.ndarray[Any, Any]) -> tuple[str, bytes, dict[str, str]]:
    head = json.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    headers = {HEADER: str(len(head)), "content-type": "application/octet-stream"}
    return f"/v2/models/{model}/infer", head + x.tobytes(), headers


def http_json(model: str, x: np.ndarray[Any, Any]) -> tuple[str, bytes, dict[str, str]]:
    body = {"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel()}]}
    data = orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
    return f"/v2/models/{model}/infer", data, {"content-type": "application/json"}


def grpc_raw(model: str, x: np.ndarray[Any, Any]) -> bytes:
    request = grpc_service_pb2.ModelInferRequest(model_name=model)
    request.inputs.add(name="input", datatype="FP32", shape=x.shape)
    request.raw_input_contents.append(x.tobytes())
    return request.SerializeToString()


def decode_http(response: httpx.Response) -> np.ndarray[Any, Any]:
    response.raise_for_status()
    if HEADER in response.headers:
        n = int(response.headers[HEADER])
        json.loads(response.content[:n])
        return np.frombuffer(response.content[n:], np.float32)
    return np.asarray(orjson.loads(response.content)["outputs"][0]["data"], np.float32)


def decode_raw(client: RawClient) -> np.ndarray[Any, Any]:
    """A call on the lean client, its answer decoded as ``decode_http`` does (a copy of the tensor's
    bytes: the connection's buffer is reused)."""
    body = client.call()
    if HEADER.lower() in client.headers:
        n = int(client.headers[HEADER.lower()])
        json.loads(bytes(body[:n]))
        return np.frombuffer(body[n:], np.float32).copy()
    return np.asarray(orjson.loads(body)["outputs"][0]["data"], np.float32)


def decode_grpc(data: bytes) -> np.ndarray[Any, Any]:
    response = grpc_service_pb2.ModelInferResponse.FromString(data)
    return np.frombuffer(response.raw_output_contents[0], np.float32)


async def loop_http(
    base: str, target: tuple[str, bytes, dict[str, str]], clients: int, seconds: float
) -> list[float]:
    path, body, headers = target
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30, trust_env=False) as client:
        stop = time.monotonic() + seconds

        async def one() -> None:
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                decode_http(await client.post(path, content=body, headers=headers))
                latencies.append(time.perf_counter() - t0)

        await asyncio.gather(*(one() for _ in range(clients)))
    return latencies


async def loop_grpc(address: str, body: bytes, clients: int, seconds: float) -> list[float]:
    latencies: list[float] = []
    async with grpc.aio.insecure_channel(address) as channel:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(INFER)
        stop = time.monotonic() + seconds

        async def one() -> None:
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                decode_grpc(await call(body, timeout=30))
                latencies.append(time.perf_counter() - t0)

        await asyncio.gather(*(one() for _ in range(clients)))
    return latencies


def summary(latencies: list[float], seconds: float, cpu: float) -> dict[str, float]:
    ms = np.asarray(latencies) * 1e3
    return {
        "requests": len(ms),
        "throughput_rps": len(ms) / seconds,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "server_cpu_ms_per_request": cpu * 1e3 / max(1, len(ms)),
    }


def bench_mlp(pid: int, base: str, address: str, clients: int, rounds: int, seconds: float) -> dict[str, Any]:
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    http_target, grpc_body = http_binary("mlp", x), grpc_raw("mlp", x)
    with httpx.Client(base_url=base, trust_env=False) as c:  # the same answer both ways
        a = decode_http(c.post(http_target[0], content=http_target[1], headers=http_target[2]))
    np.testing.assert_allclose(asyncio.run(_one_grpc(address, grpc_body)), a, rtol=1e-6)
    runs: dict[str, tuple[list[float], float]] = {"http_binary": ([], 0.0), "grpc_raw": ([], 0.0)}
    for r in range(rounds):
        for name in ("http_binary", "grpc_raw") if r % 2 == 0 else ("grpc_raw", "http_binary"):
            cpu0 = cpu_seconds(pid)
            if name == "http_binary":
                lat = asyncio.run(loop_http(base, http_target, clients, seconds))
            else:
                lat = asyncio.run(loop_grpc(address, grpc_body, clients, seconds))
            got, cpu = runs[name]
            runs[name] = (got + lat, cpu + cpu_seconds(pid) - cpu0)
    out: dict[str, Any] = {k: summary(v, seconds * rounds, cpu) for k, (v, cpu) in runs.items()}
    out["throughput_ratio"] = out["grpc_raw"]["throughput_rps"] / out["http_binary"]["throughput_rps"]
    return out


async def _one_grpc(address: str, body: bytes) -> np.ndarray[Any, Any]:
    async with grpc.aio.insecure_channel(address) as channel:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(INFER)
        return decode_grpc(await call(body, timeout=30))


def bench_big(base: str, address: str, model: str, shape: tuple[int, int], repeat: int) -> dict[str, float]:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    assert x.nbytes == 1 << 20
    targets = {"json": http_json(model, x), "http_binary": http_binary(model, x)}
    body = grpc_raw(model, x)
    times: dict[str, list[float]] = {"json": [], "http_binary": [], "grpc_raw": []}
    channel = grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", -1)])
    call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(INFER)
    answers = {}
    with httpx.Client(base_url=base, timeout=60, trust_env=False) as client:
        for _ in range(repeat):
            for name, (path, content, headers) in targets.items():
                t0 = time.perf_counter()
                answers[name] = decode_http(client.post(path, content=content, headers=headers))
                times[name].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            answers["grpc_raw"] = decode_grpc(call(body, timeout=60))
            times["grpc_raw"].append(time.perf_counter() - t0)
    channel.close()
    np.testing.assert_allclose(answers["grpc_raw"], answers["json"], rtol=1e-4, atol=1e-5)
    port = int(base.rsplit(":", 1)[1])
    raw = {
        f"{name}_raw": RawClient(port, path, content, headers)
        for name, (path, content, headers) in targets.items()
    }
    try:
        for _ in range(repeat):
            for name, lean in raw.items():
                t0 = time.perf_counter()
                decode_raw(lean)
                times.setdefault(name, []).append(time.perf_counter() - t0)
        np.testing.assert_allclose(decode_raw(raw["http_binary_raw"]), answers["json"], rtol=1e-4, atol=1e-5)
    finally:
        for lean in raw.values():
            lean.close()
    out = {f"{k}_ms": float(np.median(v) * 1e3) for k, v in times.items()}
    out["grpc_over_json"] = out["json_ms"] / out["grpc_raw_ms"]
    out["grpc_over_http_binary"] = out["http_binary_ms"] / out["grpc_raw_ms"]
    out["http_binary_over_json_raw"] = out["json_raw_ms"] / out["http_binary_raw_ms"]
    return out


def bench_floor(base: str, address: str, repeat: int) -> dict[str, float]:
    """normalize's gRPC raw call and a bare echo of its request (grpc_echo), and its HTTP binary call and
    a bare uvicorn echo of its tensor (``benchmarks.floor_app`` echo, the same httpx client), interleaved,
    one at a time (median ms of ``repeat``), and the client's decode of a 1 MiB answer alone."""
    x = np.random.default_rng(1).standard_normal(ONE_MIB["normalize"]).astype(np.float32)
    body = grpc_raw("normalize", x)
    port, http_port = free_port(), free_port()
    echo = subprocess.Popen([sys.executable, "-m", "benchmarks.grpc_echo", str(port)], cwd=ROOT)
    http_echo = bench_http.start(["-m", "benchmarks.floor_app", str(http_port), "echo"], http_port)
    path, content, headers = http_binary("normalize", x)
    client = httpx.Client(timeout=60, trust_env=False)
    options = [("grpc.max_receive_message_length", -1)]
    server, bare = (
        grpc.insecure_channel(address, options=options),
        grpc.insecure_channel(f"127.0.0.1:{port}", options=options),
    )
    try:
        grpc.channel_ready_future(bare).result(timeout=60)
        infer: grpc.UnaryUnaryMultiCallable[bytes, bytes] = server.unary_unary(INFER)
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = bare.unary_unary(grpc_echo.PATH)
        if call(body, timeout=60) != body:
            raise SystemExit("the echo server answered other bytes than it was sent")
        answer = infer(body, timeout=60)
        http = {"http_binary": f"{base}{path}", "http_echo": f"http://127.0.0.1:{http_port}{path}"}
        if not np.array_equal(
            decode_http(client.post(http["http_echo"], content=content, headers=headers)), x.ravel()
        ):
            raise SystemExit("the HTTP echo answered other bytes than it was sent")
        times: dict[str, list[float]] = {"grpc_raw": [], "echo": [], "decode": [], **{k: [] for k in http}}
        ports = {"http_binary": int(base.rsplit(":", 1)[1]), "http_echo": http_port}
        raw = {f"{name}_raw": RawClient(port, path, content, headers) for name, port in ports.items()}
        for _ in range(repeat):
            for name, lean in raw.items():
                t0 = time.perf_counter()
                decode_raw(lean)
                times.setdefault(name, []).append(time.perf_counter() - t0)
            for name, url in http.items():
                t0 = time.perf_counter()
                decode_http(client.post(url, content=content, headers=headers))
                times[name].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            decode_grpc(infer(body, timeout=60))
            times["grpc_raw"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            call(body, timeout=60)
            times["echo"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            decode_grpc(answer)
            times["decode"].append(time.perf_counter() - t0)
    finally:
        client.close()
        for each in raw.values():
            each.close()
        server.close()
        bare.close()
        for proc in (echo, http_echo):
            proc.terminate()
            proc.wait(15)
    return {f"{k}_ms": float(np.median(v) * 1e3) for k, v in times.items()}


# model -> its 1 MiB float32 input's shape
ONE_MIB = {"branches": (1024, 256), "mlp": (4096, 64), "normalize": (1024, 256)}


def step_times(config: Path, repeat: int) -> dict[str, float]:
    """Each model's step on its 1 MiB input in this process (``Session.run``, the server's config):
    the part of a request's time no protocol can save (median ms of ``repeat``)."""
    from poolserve.server.config import load_config
    from poolserve.server.models import load_model

    settings = load_config(config)
    out = {}
    for mc in settings.models:
        entry = load_model(mc, settings)
        x = np.random.default_rng(1).standard_normal(ONE_MIB[mc.name]).astype(np.float32)
        feeds = entry.feeds({"input": x})
        fetches = entry.fetches([s.name for s in entry.outputs])
        entry.session.run(fetches, feeds)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            entry.session.run(fetches, feeds)
            times.append(time.perf_counter() - t0)
        out[mc.name] = float(np.median(times) * 1e3)
    return out


def bench_codec(repeat: int) -> dict[str, float]:
    """The server's decode + encode of a 1 MiB MLP request (4096 x 64) and its 4096 x 10 answer."""
    from poolserve.server import grpc_raw as grpc_raw_mod
    from poolserve.server import kserve, kserve_grpc
    from poolserve.server.service import InferResult

    x = np.random.default_rng(1).standard_normal((4096, 64)).astype(np.float32)
    y = np.random.default_rng(2).random((4096, 10)).astype(np.float32)
    _, json_body, _ = http_json("mlp", x)
    grpc_body = grpc_raw("mlp", x)
    result = InferResult({"probabilities": y}, "id", "mlp", 1)

    def json_path() -> None:
        kserve.decode_request(json_body)
        kserve.encode_response("mlp", "1", [("probabilities", y, False)])

    def grpc_path() -> None:  # what the server's (de)serializers and adapter do
        decoded = kserve_grpc.decode_infer(grpc_raw_mod.parse_request(grpc_body))
        decoded.outputs = [kserve.RequestedOutput("probabilities", True)]
        grpc_raw_mod.serialize_response(kserve_grpc.encode_infer(result, decoded))

    out: dict[str, float] = {}
    for name, fn in (("json", json_path), ("grpc_raw", grpc_path)):
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        out[f"{name}_ms"] = float(np.median(times) * 1e3)
    out["grpc_over_json"] = out["json_ms"] / out["grpc_raw_ms"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--no-load", action="store_true", help="skip part 1 (the 8-client MLP load)")
    args = parser.parse_args(argv)
    os.environ.setdefault("POOLSERVE_TRACES__SAMPLE_RATE", "0")
    http_port, grpc_port = free_port(), free_port()
    folder = Path(tempfile.mkdtemp(prefix="bench_grpc."))
    server = start(http_port, grpc_port, folder)
    base, address = f"http://127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}"
    try:
        load = os.getloadavg()[0]
        mlp: dict[str, Any] = {}
        if not args.no_load:
            mlp = bench_mlp(server.pid, base, address, args.clients, args.rounds, args.seconds)
            print(
                f"example MLP, {args.clients} closed-loop clients, {args.rounds} x {args.seconds:g} s rounds"
            )
            for name in ("http_binary", "grpc_raw"):
                r = mlp[name]
                print(
                    f"  {name:12} {r['throughput_rps']:8.1f} req/s  p50 {r['p50_ms']:6.2f} ms  "
                    f"p99 {r['p99_ms']:6.2f} ms  server CPU {r['server_cpu_ms_per_request']:.2f} ms/request"
                )
            print(f"  gRPC raw / HTTP binary throughput: {mlp['throughput_ratio']:.2f}x")
        steps = step_times(folder / "bench_grpc.toml", args.repeat)
        big = {
            model: bench_big(base, address, model, ONE_MIB[model], args.repeat) | {"step_ms": steps[model]}
            for model in ONE_MIB
        }
        for model, r in big.items():
            print(
                f"1 MiB float32 input ({model}): JSON {r['json_ms']:.1f} ms, "
                f"HTTP binary {r['http_binary_ms']:.1f} ms, gRPC raw {r['grpc_raw_ms']:.1f} ms: "
                f"{r['grpc_over_json']:.1f}x JSON (the step alone, in process: {r['step_ms']:.1f} ms; "
                f"JSON / 20 = {r['json_ms'] / 20:.1f} ms); with a lean client (RawClient): JSON "
                f"{r['json_raw_ms']:.1f} ms, HTTP binary {r['http_binary_raw_ms']:.2f} ms: "
                f"{r['http_binary_over_json_raw']:.1f}x"
            )
        floor = bench_floor(base, address, args.repeat)
        print(
            f"the floor under it (normalize, interleaved, same client): gRPC raw {floor['grpc_raw_ms']:.1f} "
            f"ms, a bare grpc.aio echo of the same request {floor['echo_ms']:.1f} ms, "
            f"the client's decode of the answer {floor['decode_ms']:.2f} ms; HTTP binary "
            f"{floor['http_binary_ms']:.1f} ms, a bare uvicorn echo of its tensor "
            f"{floor['http_echo_ms']:.1f} ms; with a lean client: HTTP binary "
            f"{floor['http_binary_raw_ms']:.2f} ms, the bare echo {floor['http_echo_raw_ms']:.2f} ms"
        )
        codec = bench_codec(args.repeat)
        print(
            f"protocol work on that MLP request, in process: JSON {codec['json_ms']:.1f} ms, "
            f"gRPC raw {codec['grpc_raw_ms']:.2f} ms: {codec['grpc_over_json']:.0f}x"
        )
        print(
            f"(load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
            f"on {os.cpu_count()} cores)"
        )
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            config = vars(args) | {"json": str(args.json), "load_average": [load, os.getloadavg()[0]]}
            args.json.write_text(
                json.dumps(
                    {"mlp": mlp, "one_mib": big, "floor": floor, "codec": codec, "config": config}, indent=2
                )
            )
    finally:
        server.terminate()
        server.wait(15)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
