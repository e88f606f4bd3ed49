"""Native ``:run`` against the thin FastAPI app, on a 784-input MLP (a ~65 KB JSON body, batch 4).

    python -m benchmarks.bench_native [--clients 1 8] [--rounds 4] [--seconds 5] [--added-rounds 8]
        [--json out.json]

The MLP (784 -> Dense 256 relu -> Dense 10 softmax, Keras' node names) is built with ``GraphBuilder``
into a temporary folder and served by ``poolserve serve`` with a config naming only that model (no other
settings), and by ``benchmarks.thin_app`` (stdlib JSON, the same math inline in numpy). Each client count
runs its rounds alternating between the two servers, so drift of the machine hits both alike.

Then what the server adds to one request (the serving-path issue's 0.5 ms target): one client on a raw
keep-alive socket (no HTTP library on the client side: httpx costs more than the server at one client)
sends the same body, and the same ``Session.run`` runs in this process on the same arrays, in turns,
``--added-rounds`` rounds of 300 calls each; the added latency is the server's p50 less the in-process p50,
per round. In the same turns the same client times three bare uvicorn apps (``benchmarks.floor_app``):
``const`` (the transport alone), ``run`` (orjson, ``np.asarray``, ``Session.run`` inline, orjson: what a
hand-written app does) and ``codec`` (the same with poolserve's decoder): the floor under the figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.bench_http import closed_loop, start, summary
from benchmarks.servers import RawClient, free_port
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.session import Session

INPUTS, HIDDEN, CLASSES, BATCH = 784, 256, 10, 4
# benchmarks.floor_app's modes, measured beside poolserve in the added-latency rounds
FLOORS = ("floor_const", "floor_run", "floor_codec")


def build_mlp(path: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)

    def glorot(n_in: int, n_out: int) -> np.ndarray:
        limit = math.sqrt(6.0 / (n_in + n_out))
        return rng.uniform(-limit, limit, size=(n_in, n_out)).astype(np.float32)

    b = GraphBuilder()
    x = b.placeholder("input", np.float32, (None, INPUTS))
    with b.scope("dense"):
        h = b.matmul(x, b.constant(glorot(INPUTS, HIDDEN), name="MatMul/ReadVariableOp"))
        h = b.bias_add(h, b.constant(np.zeros(HIDDEN, np.float32), name="BiasAdd/ReadVariableOp"))
        h = b.relu(h)
    with b.scope("dense_1"):
        y = b.matmul(h, b.constant(glorot(HIDDEN, CLASSES), name="MatMul/ReadVariableOp"))
        y = b.bias_add(y, b.constant(np.zeros(CLASSES, np.float32), name="BiasAdd/ReadVariableOp"))
        y = b.softmax(y)
    b.identity(y, name="probabilities")
    path.write_bytes(b.graph_def.SerializeToString())


def bench(clients: list[int], rounds: int, seconds: float, folder: Path) -> dict[str, Any]:
    model = folder / "mlp784.pb"
    build_mlp(model)
    config = folder / "mlp784.toml"
    config.write_text(f'[[models]]\nname = "mlp"\npath = "{model}"\n')
    p_port, t_port = free_port(), free_port()
    serve = ["-m", "poolserve.server.cli", "serve", "--config", str(config), "--log-level", "warning"]
    serve += ["--grpc-port", "0"]  # HTTP only: no second server on the default gRPC port
    poolserve = start([*serve, "--port", str(p_port)], p_port)
    thin = start(["-m", "benchmarks.thin_app", str(t_port), str(model)], t_port)
    try:
        # float32 values written as Python floats (~20 characters each), as a Keras client's are
        x = np.random.default_rng(1).standard_normal((BATCH, INPUTS)).astype(np.float32).astype(float)
        bodies = {
            "poolserve": json.dumps({"feeds": {"input": x.tolist()}}).encode(),
            "thin_fastapi": json.dumps({"instances": x.tolist()}).encode(),
        }
        urls = {
            "poolserve": f"http://127.0.0.1:{p_port}/v1/models/mlp:run",
            "thin_fastapi": f"http://127.0.0.1:{t_port}/v1/models/mlp:predict",
        }
        headers = {"content-type": "application/json"}
        a = httpx.post(urls["poolserve"], content=bodies["poolserve"], headers=headers).json()
        b = httpx.post(urls["thin_fastapi"], content=bodies["thin_fastapi"], headers=headers).json()
        got = np.asarray(a["outputs"]["probabilities"]["data"]).reshape(BATCH, CLASSES)
        np.testing.assert_allclose(got, b["predictions"], rtol=1e-4, atol=1e-6)  # the same math
        out: dict[str, Any] = {"body_bytes": len(bodies["poolserve"])}
        for n in clients:
            lat: dict[str, list[float]] = {k: [] for k in urls}
            for r in range(rounds):
                for name in urls if r % 2 == 0 else reversed(list(urls)):
                    lat[name] += asyncio.run(closed_loop(urls[name], bodies[name], headers, n, seconds))
            res: dict[str, Any] = {k: summary(v, seconds * rounds) for k, v in lat.items()}
            res["ratio"] = res["poolserve"]["throughput_rps"] / res["thin_fastapi"]["throughput_rps"]
            out[f"clients_{n}"] = res
        return out
    finally:
        for proc in (poolserve, thin):
            proc.terminate()
            proc.wait(10)


def added_latency(rounds: int, folder: Path, calls: int = 300) -> dict[str, Any]:
    """The server's p50 for one client on a raw socket, the in-process ``Session.run`` p50, and their
    difference, per round (all in turns). The same client against ``benchmarks.floor_app`` in its
    ``const``, ``run`` and ``codec`` modes (bare uvicorn apps: the transport alone, and the least a
    Python app on the same stack does for the same request) gives the floor under poolserve's figure."""
    model = folder / "mlp784.pb"
    if not model.exists():
        build_mlp(model)
    config = folder / "mlp784.toml"
    config.write_text(f'[[models]]\nname = "mlp"\npath = "{model}"\n')
    x = np.random.default_rng(1).standard_normal((BATCH, INPUTS)).astype(np.float32)
    body = json.dumps({"feeds": {"input": x.astype(float).tolist()}}).encode()
    ports = {name: free_port() for name in ("poolserve", *FLOORS)}
    serve = ["-m", "poolserve.server.cli", "serve", "--config", str(config), "--log-level", "warning"]
    servers = [start([*serve, "--grpc-port", "0", "--port", str(ports["poolserve"])], ports["poolserve"])]
    for name in FLOORS:
        mode = name.removeprefix("floor_")
        servers.append(start(["-m", "benchmarks.floor_app", str(ports[name]), mode, str(model)], ports[name]))
    clients = {name: RawClient(port, "/v1/models/mlp:run", body) for name, port in ports.items()}
    session = Session(Graph(load_graph_def(model)))
    feeds = {"input:0": x}
    try:
        for _ in range(200):  # warm all: plans, pools, caches
            for client in clients.values():
                client.call()
            session.run("probabilities:0", feeds)

        def p50_ms(fn: Callable[[], object]) -> float:
            times = []
            for _ in range(calls):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return float(np.median(times) * 1e3)

        served: dict[str, list[float]] = {name: [] for name in clients}
        in_process: list[float] = []
        for _ in range(rounds):
            for name, client in clients.items():
                served[name].append(p50_ms(client.call))
            in_process.append(p50_ms(lambda: session.run("probabilities:0", feeds)))
        out: dict[str, Any] = {"in_process_p50_ms": in_process, "body_bytes": len(body)}
        for name, times in served.items():
            added = [a - b for a, b in zip(times, in_process, strict=True)]
            prefix = "" if name == "poolserve" else f"{name}_"
            out[f"{prefix}server_p50_ms"] = times
            out[f"{prefix}added_ms"] = added
            out[f"{prefix}added_median_ms"] = float(np.median(added))
        return out
    finally:
        for client in clients.values():
            client.close()
        session.close()
        for server in servers:
            server.terminate()
            server.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--added-rounds", type=int, default=8, help="0 skips the added-latency rounds")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    os.environ.setdefault("POOLSERVE_TRACES__SAMPLE_RATE", "0")
    with tempfile.TemporaryDirectory() as tmp:
        result = bench(args.clients, args.rounds, args.seconds, Path(tmp))
        if args.added_rounds:
            result["added_latency"] = added_latency(args.added_rounds, Path(tmp))
    print(f"native :run, 784-input MLP, batch {BATCH}, {result['body_bytes']} byte body")
    for n in args.clients:
        res = result[f"clients_{n}"]
        print(f" {n} client(s), {args.rounds} x {args.seconds:g} s rounds")
        for name in ("poolserve", "thin_fastapi"):
            r = res[name]
            tput, p50, p99 = r["throughput_rps"], r["p50_ms"], r["p99_ms"]
            print(f"  {name:13} {tput:8.1f} req/s  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms")
        print(f"  poolserve / thin FastAPI throughput: {res['ratio']:.2f}x")
    if args.added_rounds:
        added = result["added_latency"]
        print(" one client on a raw socket, against Session.run in process (p50 per round, ms)")
        print("  server     " + " ".join(f"{v:.3f}" for v in added["server_p50_ms"]))
        print("  in process " + " ".join(f"{v:.3f}" for v in added["in_process_p50_ms"]))
        print(f"  added      {added['added_median_ms']:.3f} ms (median of the rounds; target 0.5 ms)")
        print(" the floor: bare uvicorn apps (benchmarks.floor_app), the same client, in the same turns")
        for name in FLOORS:
            p50s = " ".join(f"{v:.3f}" for v in added[f"{name}_server_p50_ms"])
            print(f"  {name:12} {p50s}  added {added[f'{name}_added_median_ms']:.3f} ms")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"native_mlp784": result, "config": vars(args) | {"json": str(args.json)}}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
