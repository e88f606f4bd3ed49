"""What the RunHandlerPool's hand-offs cost in an open loop: one workload at fixed rates, pool off and on.

    python -m benchmarks.bench_handoff [--quick] [--workload short_long] [--rates 4600,57 | --fraction 0.9]
        [--rounds 2] [--seconds 3] [--json out.json]

The workload's graphs (the pool matrix's: ``benchmarks.bench_pool_matrix``) each run in a ``Session(graph)``
with no config, fed by the matrix's open loop (Poisson arrivals, 64 sender threads) at ``--rates`` requests
a second per graph, or at ``--fraction`` of the capacity measured first with the pool off. Rounds alternate
the pool off and on. Per mode: each graph's served rate, p50 and p99, and the process's CPU in cores; with
the pool, the time from each hand-off (a slot or a closure given to a parked thread: ``_Parker.unpark``) to
that thread running Python again (its ``park`` returning: scheduled, the GIL taken back). A core whose slot
was handed to a thread not yet running idles: on two cores, short_long at 4,600 + 57 req/s left the process
at 1.1-1.5 cores with the pool against 1.6-1.7 without, and could fall behind. The parker is wrapped for
the run to time it: a diagnostic, not something the pool records.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks import pool_harness as ph
from benchmarks.bench_pool_matrix import WORKLOADS, Served, materialize
from poolserve.runtime import run_handler

PROBE_SECONDS = 2.0


@contextmanager
def timed_handoffs() -> Iterator[list[float]]:
    """Records, while open, the seconds from each ``_Parker.unpark`` to the parked thread's ``park``
    returning (a permit given to a thread not parked yet counts from the unpark too)."""
    parker = run_handler._Parker
    unpark, park = parker.unpark, parker.park
    woken: dict[int, float] = {}
    delays: list[float] = []
    lock = threading.Lock()

    def timed_unpark(self: Any) -> None:
        with lock:
            woken.setdefault(id(self), time.perf_counter())
        unpark(self)

    def timed_park(self: Any, timeout: float = -1.0) -> bool:
        got = park(self, timeout)
        now = time.perf_counter()
        with lock:
            since = woken.pop(id(self), None)
            if got and since is not None:
                delays.append(now - since)
        return got

    parker.unpark, parker.park = timed_unpark, timed_park  # type: ignore[method-assign]
    try:
        yield delays
    finally:
        parker.unpark, parker.park = unpark, park  # type: ignore[method-assign]


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def percentiles_ms(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000.0  # (the harness's percentile is nan for no samples)
    return {"count": len(samples), **{f"p{q}_ms": ph.percentile(ms, q) for q in (50, 90, 99)}}


def run_round(
    run: Callable[[int, bool], object], rates: list[float], seconds: float, pool: bool, seed: int
) -> dict[str, Any]:
    """One open-loop round: per graph the served rate and latencies, the process's CPU, the hand-offs."""
    with timed_handoffs() as delays:
        c0, w0 = cpu_seconds(), time.perf_counter()
        tally = ph.open_loop(run, rates, seconds, pool, np.random.default_rng(seed))
        cores = (cpu_seconds() - c0) / (time.perf_counter() - w0)
    if tally.errors:
        raise RuntimeError(f"a request failed: {tally.errors[0]}")
    pairs = zip(tally.latencies, tally.dropped, strict=True)
    graphs = [ph.summarize(lat, tally.seconds, dropped) for lat, dropped in pairs]
    return {"graphs": graphs, "cores": cores, "handoffs": list(delays)}


def measure(
    served: Served, names: list[str], rates: list[float], rounds: int, seconds: float
) -> dict[str, Any]:
    rows: dict[str, list[dict[str, Any]]] = {"no_pool": [], "pool": []}
    handoffs: dict[str, list[float]] = {"no_pool": [], "pool": []}
    for r in range(rounds):
        for pool in (False, True) if r % 2 == 0 else (True, False):
            mode = "pool" if pool else "no_pool"
            got = run_round(served.run, rates, seconds, pool, r)
            handoffs[mode].extend(got.pop("handoffs"))
            rows[mode].append(got)
    out: dict[str, Any] = {"rates_rps": dict(zip(names, rates, strict=True))}
    for mode, measured in rows.items():
        out[mode] = {
            "cores": [g["cores"] for g in measured],
            "graphs": {n: [g["graphs"][i] for g in measured] for i, n in enumerate(names)},
            "handoffs": percentiles_ms(handoffs[mode]),
        }
    return out


def _span(values: list[float], fmt: str) -> str:
    lo, hi = min(values), max(values)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{lo:{fmt}}-{hi:{fmt}}"


def table(name: str, result: dict[str, Any]) -> Table:
    t = Table(title=f"{name}: open loop at fixed rates, per round (ranges over rounds)")
    for col in (
        "mode",
        "graph",
        "offered req/s",
        "served req/s",
        "p50 ms",
        "p99 ms",
        "cores",
        "hand-off p50/p90/p99 ms",
    ):
        t.add_column(col, justify="left" if col in ("mode", "graph") else "right")
    for mode in ("no_pool", "pool"):
        m = result[mode]
        h = m["handoffs"]
        hand = (
            "-"
            if not h["count"]
            else f"{h['p50_ms']:.2f} / {h['p90_ms']:.2f} / {h['p99_ms']:.2f} ({h['count']})"
        )
        for i, (graph, rounds) in enumerate(m["graphs"].items()):
            t.add_row(
                mode if i == 0 else "",
                graph,
                f"{result['rates_rps'][graph]:.0f}",
                _span([g["throughput_rps"] for g in rounds], ".0f"),
                _span([g["p50_ms"] for g in rounds], ".1f"),
                _span([g["p99_ms"] for g in rounds], ".1f"),
                _span(m["cores"], ".2f") if i == 0 else "",
                hand if i == 0 else "",
            )
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_handoff", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds of 0.5 s")
    p.add_argument("--workload", default="short_long", help=f"one of: {', '.join(WORKLOADS)}")
    p.add_argument("--rates", help="requests a second per graph, comma-separated (default: --fraction)")
    p.add_argument("--fraction", type=float, default=0.9, help="of the no-pool capacity measured first")
    p.add_argument("--rounds", type=int, default=2, help="pool off/on pairs")
    p.add_argument("--seconds", type=float, default=3.0, help="per round")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    args = p.parse_args(argv)
    if args.workload not in WORKLOADS:
        p.error(f"unknown workload {args.workload!r}; known: {', '.join(WORKLOADS)}")
    names = list(WORKLOADS[args.workload])
    rates: list[float] | None = None
    if args.rates:
        try:
            rates = [float(r) for r in args.rates.split(",")]
        except ValueError:
            p.error(f"--rates must be numbers, got {args.rates!r}")
        if len(rates) != len(names) or min(rates) <= 0:
            p.error(f"--rates needs {len(names)} positive rates ({', '.join(names)}), got {args.rates!r}")
    elif not 0 < args.fraction <= 2:
        p.error(f"--fraction must be in (0, 2], got {args.fraction}")
    rounds, seconds = (1, 0.5) if args.quick else (args.rounds, args.seconds)
    console = Console(width=None if Console().is_terminal else 160, highlight=False)
    with tempfile.TemporaryDirectory() as tmp:
        served = Served([materialize(g, Path(tmp)) for g in names])
        try:
            ph.warm_up(served.run, len(names))
            if rates is None:
                capacity, _ = ph.probe_capacity(served.run, len(names), 0.5 if args.quick else PROBE_SECONDS)
                rates = [args.fraction * c for c in capacity]
            result = measure(served, names, rates, rounds, seconds)
        finally:
            served.close()
    console.print(table(args.workload, result))
    if args.json:
        Path(args.json).write_text(json.dumps({"workload": args.workload, **result}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
