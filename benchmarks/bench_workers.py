"""``--workers 2`` against one worker, for a model whose step is Python-bound (many small nodes).

    python -m benchmarks.bench_workers [--rounds 2] [--seconds 8] [--clients 16] [--json out.json]

Builds a chain of ``--nodes`` tiny ops (Add, Mul, Tanh on a [1, 8] tensor: the executor's per-node cost,
not the arithmetic, sets the step time), then alternates rounds of ``poolserve serve --workers 1`` and
``--workers 2`` on 127.0.0.1, each loaded by ``poolserve loadtest`` (closed loop, native protocol) for the
same time. With ``--pin`` (and more than two cores) the load generator runs on the last core and the
server on the others (taskset); on a two-core machine they share the cores in both arms. Reports
throughput, p50/p99 latency, each process's RSS after the load, and the server's CPU during the load
(the cores it got, and its CPU per request).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.servers import cpu_seconds, free_port, wait_ready
from poolserve.runtime.builder import GraphBuilder

ROOT = Path(__file__).resolve().parent.parent


def build_chain(path: Path, nodes: int) -> None:
    b = GraphBuilder()
    h = b.placeholder("x", np.float32, [None, 8])
    one, half = b.constant(1.0), b.constant(0.5)
    for _ in range(nodes // 3):
        h = b.unary("Tanh", b.mul(b.add(h, one), half))
    b.identity(h, name="out")
    path.write_bytes(b.graph_def.SerializeToString())


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def one_round(
    workers: int, config: Path, args: argparse.Namespace, pin: tuple[str, str] | None
) -> dict[str, Any]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve = [sys.executable, "-m", "poolserve.server.cli", "serve", "--config", str(config)]
    serve += ["--port", str(port), "--workers", str(workers), "--log-level", "warning"]
    load = [sys.executable, "-m", "poolserve.server.cli", "loadtest", "--url", url, "--model", "chain"]
    load += ["--concurrency", str(args.clients), "--duration", str(args.seconds), "--warmup", "2"]
    if pin is not None:
        serve, load = ["taskset", "-c", pin[0], *serve], ["taskset", "-c", pin[1], *load]
    env = {k: v for k, v in os.environ.items() if not k.startswith("POOLSERVE_")}
    env["XDG_STATE_HOME"] = str(config.parent / "state")
    server = subprocess.Popen(serve, cwd=ROOT, env=env)
    try:
        wait_ready(url, server)
        time.sleep(1.0 if workers > 1 else 0.2)  # the other workers load too
        pids = [server.pid, *children(server.pid)] if workers > 1 else [server.pid]
        cpu_before = sum(cpu_seconds(p) for p in pids)
        report = config.parent / f"report-{workers}-{port}.json"
        gen = subprocess.Popen([*load, "--report", str(report)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
        gen.wait(timeout=args.seconds + 60)
        result = json.loads(report.read_text())
        rss = [round(rss_mib(p), 1) for p in pids]
        cpu = [round(cpu_seconds(p), 1) for p in pids]
        load_cpu = sum(cpu_seconds(p) for p in pids) - cpu_before  # warm-up and measured load
    finally:
        server.terminate()
        server.wait(timeout=60)
    return {"workers": workers, "result": result, "rss_mib": rss, "cpu_s": cpu, "load_cpu_s": load_cpu}


def summary(run: dict[str, Any]) -> dict[str, Any]:
    r = run["result"]["runs"][0]
    return {
        "workers": run["workers"],
        "req_s": round(r["throughput_rps"], 1),
        "errors": r["errors"],
        "p50_ms": round(r["latency_ms"]["p50"], 2),
        "p99_ms": round(r["latency_ms"]["p99"], 2),
        "rss_mib": run["rss_mib"],
        "server_cpu_s": run["cpu_s"],
        # cores the server got during the load, and what a request cost it
        "server_cores": round(run["load_cpu_s"] / (run["result"]["generator"]["wall_s"] or 1), 2),
        # (the warm-up's requests are not counted: taken at the measured rate)
        "server_cpu_ms_per_request": round(
            1e3 * run["load_cpu_s"] / max(1.0, r["throughput_rps"] * run["result"]["generator"]["wall_s"]), 2
        ),
        "generator_cpu": round(run["result"]["generator"]["cpu_fraction"], 2),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=8)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--nodes", type=int, default=300)
    p.add_argument("--pin", action="store_true")
    p.add_argument("--json")
    args = p.parse_args()
    cores = os.cpu_count() or 1
    pin = None
    if args.pin and cores > 2:
        pin = (f"0-{cores - 2}", str(cores - 1))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_chain(root / "chain.pb", args.nodes)
        config = root / "server.toml"
        config.write_text('[[models]]\nname = "chain"\npath = "chain.pb"\n')
        runs = []
        for i in range(args.rounds):
            for workers in (1, 2) if i % 2 == 0 else (2, 1):
                run = one_round(workers, config, args, pin)
                runs.append(run)
                print(json.dumps(summary(run)), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
