"""Priority under load: what ``run_handler_pool_options.priority`` buys a request, with no other setting.

    python -m benchmarks.bench_priority [--quick] [--workloads NAME,...] [--clients 8] [--rounds 2]
        [--seconds 4] [--json out.json]

Each workload (the pool matrix's graphs: ``benchmarks.bench_pool_matrix``) runs in closed loops of
``clients`` threads, one ``Session(graph)`` per graph with no config; client i runs graph i % graphs, and
every other client of a graph sends priority 1, the rest priority 0. Rounds alternate the pool off (where
priority means nothing: the reference) and on. Per priority: p50, p99, requests/s. The pool issue's target:
under load, priority-1 requests' p99 at most 0.5x that of priority-0 ones.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.bench_pool_matrix import WORKLOADS, Served, materialize
from poolserve.proto import config_pb2

DEFAULT_WORKLOADS = "residual_cnn,bert_tiny,branches4_b16,chain200_b1,text_tabular_mix,vision_mix"
TARGET = 0.5
MAX_REQUESTS = 200_000  # per client and round: the loops are bounded in count as well as in time
HANG_SECONDS = 60.0


def options(pool: bool, priority: int) -> config_pb2.RunOptions:
    o = config_pb2.RunOptions()
    o.experimental.use_run_handler_pool = pool
    o.experimental.run_handler_pool_options.priority = priority
    return o


def closed_round(served: Served, clients: int, pool: bool, seconds: float) -> dict[int, list[float]]:
    """Latencies (seconds) by priority of ``clients`` closed loops for ``seconds``."""
    graphs = len(served.sessions)
    latencies: dict[int, list[float]] = {0: [], 1: []}
    lock = threading.Lock()
    stop = time.monotonic() + seconds
    errors: list[BaseException] = []

    def client(i: int) -> None:
        session, feeds, fetches = served.sessions[i % graphs]
        priority = (i // graphs) % 2
        opts = options(pool, priority)
        mine: list[float] = []
        try:
            for _ in range(MAX_REQUESTS):
                if time.monotonic() >= stop:
                    break
                t0 = time.perf_counter()
                session.run(fetches, feeds, options=opts)
                mine.append(time.perf_counter() - t0)
        except BaseException as e:  # reported below: a failed request fails the benchmark
            errors.append(e)
        with lock:
            latencies[priority].extend(mine)

    threads = [threading.Thread(target=client, args=(i,), name=f"client{i}") for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + HANG_SECONDS)
        if t.is_alive():
            raise RuntimeError(f"{t.name} still running {HANG_SECONDS} s after its round ended")
    if errors:
        raise RuntimeError(f"a request failed: {errors[0]!r}")
    return latencies


def summary(samples: list[float], seconds: float) -> dict[str, float]:
    if not samples:
        return {"requests": 0, "throughput_rps": 0.0, "p50_ms": float("nan"), "p99_ms": float("nan")}
    ms = np.asarray(samples) * 1000.0
    return {
        "requests": len(samples),
        "throughput_rps": len(samples) / seconds,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
    }


def measure(served: Served, clients: int, rounds: int, seconds: float) -> dict[str, Any]:
    by_mode: dict[str, dict[int, list[float]]] = {"no_pool": {0: [], 1: []}, "pool": {0: [], 1: []}}
    for r in range(rounds):
        for pool in (False, True) if r % 2 == 0 else (True, False):
            got = closed_round(served, clients, pool, seconds)
            for priority, samples in got.items():
                by_mode["pool" if pool else "no_pool"][priority].extend(samples)
    total = rounds * seconds
    out: dict[str, Any] = {
        mode: {str(p): summary(samples, total) for p, samples in prios.items()}
        for mode, prios in by_mode.items()
    }
    p0, p1 = out["pool"]["0"]["p99_ms"], out["pool"]["1"]["p99_ms"]
    out["ratio"] = p1 / p0 if p0 and p0 == p0 and p1 == p1 else float("nan")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_priority", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 0.5 s")
    p.add_argument(
        "--workloads", default=DEFAULT_WORKLOADS, help=f"comma-separated, of: {', '.join(WORKLOADS)}"
    )
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--rounds", type=int, default=2, help="pool off/on pairs")
    p.add_argument("--seconds", type=float, default=4.0, help="per round")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = p.parse_args(argv)
    names = [n for n in args.workloads.split(",") if n]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        p.error(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}")
    rounds, seconds = (1, 0.5) if args.quick else (args.rounds, args.seconds)
    console = Console(stderr=True)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            console.log(f"{name}: {', '.join(WORKLOADS[name])}")
            served = Served([materialize(g, Path(tmp)) for g in WORKLOADS[name]])
            try:
                closed_round(served, args.clients, True, min(seconds, 1.0))  # warm-up: plans learn costs
                results[name] = measure(served, args.clients, rounds, seconds)
            finally:
                served.close()
    t = Table(
        title=f"Priority under load: {args.clients} closed loops, half of them priority 1",
        title_justify="left",
    )
    for column in ("workload", "no pool p99 ms", "pool p99 ms: prio 0", "prio 1", "prio 1 / prio 0"):
        t.add_column(column, justify="left" if column == "workload" else "right")
    for name, r in results.items():
        no_pool = statistics.fmean([r["no_pool"]["0"]["p99_ms"], r["no_pool"]["1"]["p99_ms"]])
        ok = r["ratio"] <= TARGET
        t.add_row(
            name,
            f"{no_pool:.2f}",
            f"{r['pool']['0']['p99_ms']:.2f}",
            f"{r['pool']['1']['p99_ms']:.2f}",
            f"[{'green' if ok else 'red'}]{r['ratio']:.2f}x[/]",
        )
    Console().print(t)
    met = all(r["ratio"] <= TARGET for r in results.values())
    print(f"{'MET' if met else 'NOT MET'}  priority-1 p99 <= {TARGET}x priority-0 p99 on every workload")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "met": met}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
