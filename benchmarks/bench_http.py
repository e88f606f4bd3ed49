"""HTTP benchmark: poolserve end to end against the thinnest FastAPI endpoint doing the same work.

    python -m benchmarks.bench_http [--clients 8] [--rounds 4] [--seconds 5] [--json out.json]

Two server processes on 127.0.0.1: ``poolserve serve`` on the embedded default config, and a bare FastAPI
app (``benchmarks.thin_app``) that decodes the same TF Serving JSON and does the example MLP's math
in straight numpy with the same weights. Closed-loop clients post the same body to each, rounds
alternating. Then the KServe endpoint with a 1 MiB input, JSON against the binary tensor extension.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.servers import free_port, wait_ready

ROOT = Path(__file__).resolve().parent.parent
# `poolserve serve` in a child process (the port is added per call), HTTP only: no default gRPC port taken
SERVE = ["-m", "poolserve.server.cli", "serve", "--log-level", "warning", "--grpc-port", "0"]


def start(args: list[str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_ready(f"http://127.0.0.1:{port}", proc)
    return proc


async def closed_loop(
    url: str, body: bytes, headers: dict[str, str], clients: int, seconds: float
) -> list[float]:
    latencies: list[float] = []
    stop = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def one() -> None:
            while time.monotonic() < stop:
                t0 = time.perf_counter()
                r = await client.post(url, content=body, headers=headers)
                if r.status_code != 200:
                    raise SystemExit(f"{url}: {r.status_code} {r.text[:200]}")
                latencies.append(time.perf_counter() - t0)

        await asyncio.gather(*(one() for _ in range(clients)))
    return latencies


def summary(latencies: list[float], seconds: float) -> dict[str, float]:
    ms = np.asarray(latencies) * 1e3
    return {
        "requests": len(ms),
        "throughput_rps": len(ms) / seconds,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
    }


def bench_mlp(clients: int, rounds: int, seconds: float) -> dict[str, Any]:
    p_port, t_port = free_port(), free_port()
    poolserve = start([*SERVE, "--port", str(p_port)], p_port)
    thin = start(["-m", "benchmarks.thin_app", str(t_port)], t_port)
    try:
        rng = np.random.default_rng(0)
        body = json.dumps({"instances": rng.standard_normal((1, 64)).round(4).tolist()}).encode()
        headers = {"content-type": "application/json"}
        targets = {
            "poolserve": f"http://127.0.0.1:{p_port}/v1/models/mlp:predict",
            "thin_fastapi": f"http://127.0.0.1:{t_port}/v1/models/mlp:predict",
        }
        a = httpx.post(targets["poolserve"], content=body, headers=headers).json()["predictions"]
        b = httpx.post(targets["thin_fastapi"], content=body, headers=headers).json()["predictions"]
        np.testing.assert_allclose(a, b, rtol=1e-5)  # the same math
        lat: dict[str, list[float]] = {k: [] for k in targets}
        for r in range(rounds):
            for name in targets if r % 2 == 0 else reversed(list(targets)):
                lat[name] += asyncio.run(closed_loop(targets[name], body, headers, clients, seconds))
        out: dict[str, Any] = {k: summary(v, seconds * rounds) for k, v in lat.items()}
        out["ratio"] = out["poolserve"]["throughput_rps"] / out["thin_fastapi"]["throughput_rps"]
        return out
    finally:
        for proc in (poolserve, thin):
            proc.terminate()
            proc.wait(10)


def bench_binary(repeat: int = 20) -> dict[str, float]:
    """KServe infer on the branches model with a 1 MiB float32 input: JSON against binary."""
    port = free_port()
    server = start([*SERVE, "--port", str(port)], port)
    try:
        x = np.random.default_rng(1).standard_normal((1024, 256)).astype(np.float32)  # 1 MiB
        url = f"http://127.0.0.1:{port}/v2/models/branches/infer"
        header = {"name": "input", "shape": list(x.shape), "datatype": "FP32"}
        json_body = json.dumps({"inputs": [{**header, "data": x.ravel().tolist()}]}).encode()
        head = json.dumps(
            {
                "inputs": [{**header, "parameters": {"binary_data_size": x.nbytes}}],
                "parameters": {"binary_data_output": True},
            }
        ).encode()
        bin_body = head + x.tobytes()
        bin_headers = {
            "Inference-Header-Content-Length": str(len(head)),
            "content-type": "application/octet-stream",
        }
        times: dict[str, list[float]] = {"json": [], "binary": []}
        with httpx.Client(timeout=60) as client:
            for _ in range(repeat):
                t0 = time.perf_counter()
                r = client.post(url, content=json_body, headers={"content-type": "application/json"})
                r.json()
                times["json"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                r = client.post(url, content=bin_body, headers=bin_headers)
                r.raise_for_status()
                n = int(r.headers["Inference-Header-Content-Length"])
                json.loads(r.content[:n])
                np.frombuffer(r.content[n:], np.float32)
                times["binary"].append(time.perf_counter() - t0)
        out = {f"{k}_ms": float(np.median(v) * 1e3) for k, v in times.items()}
        out["speedup"] = out["json_ms"] / out["binary_ms"]
        return out
    finally:
        server.terminate()
        server.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    os.environ.setdefault("POOLSERVE_TRACES__SAMPLE_RATE", "0")

    mlp = bench_mlp(args.clients, args.rounds, args.seconds)
    rounds = f"{args.rounds} x {args.seconds:g} s rounds"
    print(f"example MLP, {args.clients} closed-loop clients, {rounds} (TF Serving JSON)")
    for name in ("poolserve", "thin_fastapi"):
        r = mlp[name]
        tput, p50, p99 = r["throughput_rps"], r["p50_ms"], r["p99_ms"]
        print(f"  {name:13} {tput:8.1f} req/s  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms")
    print(f"  poolserve / thin FastAPI throughput: {mlp['ratio']:.2f}x")
    binary = bench_binary()
    print("KServe infer, 1 MiB float32 input (branches model)")
    js, bn, x = binary["json_ms"], binary["binary_ms"], binary["speedup"]
    print(f"  JSON {js:.1f} ms, binary {bn:.1f} ms: {x:.1f}x faster")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {"mlp": mlp, "binary": binary, "config": vars(args) | {"json": str(args.json)}}, indent=2
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
