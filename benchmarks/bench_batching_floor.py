"""What batching the example MLP could gain at best: poolserve with and without batching beside bare apps.

    python -m benchmarks.bench_batching_floor [--clients 32] [--seconds 4] [--rounds 3] [--json out.json]

The example ``mlp`` (64 inputs, one row a request, native JSON), ``--clients`` keep-alive connections in a
closed loop (the load generator's lean HTTP sender, in this process), rounds in
turns over five servers: ``poolserve serve`` without and with ``[models.batching] max_batch_size = 64``, and
``benchmarks.floor_app`` as ``const`` (the transport: a fixed answer), ``decode`` (the body decoded to its
array by poolserve's codec, a fixed answer) and ``codec`` (decoded, ``Session.run`` inline, encoded).
Each server's CPU per request comes from /proc.

Batching shares a step among the requests of a batch; it cannot share what each request costs besides.
Of the bare apps' CPU a request, ``codec - decode`` is the step and its answer, ``decode`` the rest. A
server whose every other cost were the bare ``decode`` app's, batching rows without limit, would gain at most
``codec / decode`` in throughput: the bound printed last, against poolserve's own on / off ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_http import start
from benchmarks.servers import cpu_seconds, free_port
from poolserve.loadtest.generator import Target
from poolserve.loadtest.raw_http import RawHttpSender

ROOT = Path(__file__).resolve().parent.parent
MLP = ROOT / "configs" / "models" / "mlp.pb"
SERVERS = ("poolserve_off", "poolserve_on", "floor_const", "floor_decode", "floor_codec")


def target() -> Target:
    """One row of the example mlp as a native JSON ``:run``."""
    x = np.random.default_rng(0).random((1, 64)).astype(np.float32)
    body = json.dumps({"feeds": {"input": x.astype(float).tolist()}}).encode()
    return Target("mlp", "default", "/v1/models/mlp:run", body, {"Content-Type": "application/json"})


def closed_loop(port: int, pid: int, clients: int, seconds: float, request: Target) -> dict[str, float]:
    """``clients`` connections for ``seconds`` through the load generator's lean sender: req/s, p99 ms
    and the server's CPU us a request."""
    latencies: list[float] = []

    async def go() -> None:
        stop = time.monotonic() + seconds
        async with RawHttpSender(f"http://127.0.0.1:{port}", clients, timeout_s=30) as send:

            async def client() -> None:
                while time.monotonic() < stop:
                    t0 = time.perf_counter()
                    status = await send(request)
                    if status != 200:
                        raise SystemExit(f"port {port} answered {status}: {send.first_errors}")
                    latencies.append(time.perf_counter() - t0)

            await asyncio.gather(*(client() for _ in range(clients)))

    cpu0 = cpu_seconds(pid)
    asyncio.run(go())
    cpu = cpu_seconds(pid) - cpu0
    return {
        "throughput_rps": len(latencies) / seconds,
        "p99_ms": float(np.percentile(latencies, 99) * 1e3),
        "server_cpu_us_per_request": cpu / len(latencies) * 1e6,
    }


def bench(clients: int, seconds: float, rounds: int, folder: Path) -> dict[str, Any]:
    configs = {
        "poolserve_off": f'[[models]]\nname = "mlp"\npath = "{MLP}"\n',
        "poolserve_on": f'[[models]]\nname = "mlp"\npath = "{MLP}"\n[models.batching]\nmax_batch_size = 64\n',
    }
    procs = {}
    ports = {name: free_port() for name in SERVERS}
    try:
        for name in SERVERS:
            port = str(ports[name])
            if name in configs:
                config = folder / f"{name}.toml"
                config.write_text(configs[name])
                args = ["-m", "poolserve.server.cli", "serve", "--config", str(config), "--port", port]
                args += ["--grpc-port", "0", "--log-level", "warning"]
            else:
                args = ["-m", "benchmarks.floor_app", port, name.removeprefix("floor_"), str(MLP)]
            procs[name] = start(args, ports[name])
        request = target()
        results: dict[str, list[dict[str, float]]] = {name: [] for name in SERVERS}
        for r in range(rounds + 1):  # round 0 warms every server and is not kept
            for name in SERVERS if r % 2 else reversed(SERVERS):
                got = closed_loop(ports[name], procs[name].pid, clients, seconds if r else 1.0, request)
                if r:
                    results[name].append(got)
        return results
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    os.environ.setdefault("POOLSERVE_TRACES__SAMPLE_RATE", "0")
    with tempfile.TemporaryDirectory() as tmp:
        results = bench(args.clients, args.seconds, args.rounds, Path(tmp))
    print(f"example mlp, one row a request, native JSON, {args.clients} clients, {args.rounds} rounds")
    for name, runs in results.items():
        cells = "  ".join(
            f"{r['throughput_rps']:6.0f} req/s p99 {r['p99_ms']:5.1f} ms "
            f"cpu {r['server_cpu_us_per_request']:4.0f} us"
            for r in runs
        )
        print(f"  {name:14} {cells}")

    def cpu(name: str) -> list[float]:
        return [r["server_cpu_us_per_request"] for r in results[name]]

    def rps(name: str) -> list[float]:
        return [r["throughput_rps"] for r in results[name]]

    bound = [c / d for c, d in zip(cpu("floor_codec"), cpu("floor_decode"), strict=True)]
    ratio = [a / b for a, b in zip(rps("poolserve_on"), rps("poolserve_off"), strict=True)]
    print(f"  poolserve batching on / off, per round: {' '.join(f'{v:.2f}x' for v in ratio)}")
    bounds = " ".join(f"{v:.2f}x" for v in bound)
    print(f"  at best (bare codec / bare decode CPU a request), per round: {bounds}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        summary = {"on_over_off": ratio, "bound": bound}
        args.json.write_text(
            json.dumps(
                {"results": results, "summary": summary, "config": vars(args) | {"json": str(args.json)}},
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
