"""``make_callable`` against ``Session.run`` per call, on a small graph (the per-call overhead is the point).

    python -m benchmarks.bench_callable [--rounds 15] [--number 2000] [--nodes 15] [--json out.json]

The graph has ``--nodes`` GraphDef nodes: a placeholder, three constants and a chain of cheap ops on a
1x16 float32 row (MatMul, BiasAdd, Relu, then AddV2/Mul/Relu/... alternating, Softmax last). Each round
times ``number`` calls of every variant, interleaved (run, callable, run, callable...), so that a busy
machine slows both alike; the report gives the median per-call time (wall and process CPU time) and the
median of per-round ratios.
Variants: the pool off (default options) and on (``experimental.use_run_handler_pool``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.session import Session


def small_graph(nodes: int = 15) -> tuple[Any, str, str]:
    """A GraphDef of ``nodes`` nodes (at least 8), its feed and its fetch."""
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 16))
    w = b.constant(rng.standard_normal((16, 16)).astype(np.float32), name="w")
    bias = b.constant(rng.standard_normal(16).astype(np.float32), name="b")
    half = b.constant(np.float32(0.5), name="half")
    y = b.relu(b.bias_add(b.matmul(x, w), bias))
    for i in range(nodes - 8):
        y = b.add(y, half) if i % 3 == 0 else b.mul(y, half) if i % 3 == 1 else b.relu(y)
    y = b.softmax(y, name="probs")
    assert len(b.graph_def.node) == nodes, len(b.graph_def.node)
    return b.graph_def, x, y


def timed(fn: Callable[[], Any], number: int) -> tuple[float, float]:
    """Seconds per call: wall time, and the process's CPU time (steadier on a shared machine)."""
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(number):
        fn()
    return (time.perf_counter() - t0) / number, (time.process_time() - c0) / number


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--number", type=int, default=2000)
    ap.add_argument("--nodes", type=int, default=15)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    graph_def, x, y = small_graph(args.nodes)
    feed = np.ones((1, 16), np.float32)
    pool = config_pb2.RunOptions()
    pool.experimental.use_run_handler_pool = True
    report: dict[str, Any] = {"nodes": args.nodes, "rounds": args.rounds, "number": args.number}
    with Session(graph_def) as sess:
        call = sess.make_callable(y, [x])
        call_opts = sess.make_callable(y, [x], accept_options=True)
        variants: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
            "pool_off": (lambda: sess.run(y, {x: feed}), lambda: call(feed)),
            "pool_on": (
                lambda: sess.run(y, {x: feed}, options=pool),
                lambda: call_opts(feed, options=pool),
            ),
        }
        for run_fn, call_fn in variants.values():
            np.testing.assert_allclose(run_fn(), call_fn())
            timed(run_fn, args.number // 4)
            timed(call_fn, args.number // 4)
        for name, (run_fn, call_fn) in variants.items():
            runs: list[tuple[float, float]] = []
            calls: list[tuple[float, float]] = []
            for _ in range(args.rounds):
                runs.append(timed(run_fn, args.number))
                calls.append(timed(call_fn, args.number))
            report[name] = {}
            for k, clock in enumerate(("wall", "cpu")):
                ratios = [c[k] / r[k] for r, c in zip(runs, calls, strict=True)]
                report[name][clock] = {
                    "run_us": round(statistics.median(r[k] for r in runs) * 1e6, 2),
                    "callable_us": round(statistics.median(c[k] for c in calls) * 1e6, 2),
                    "callable_over_run": round(statistics.median(ratios), 3),
                    "faster_pct": round((1 - statistics.median(ratios)) * 100, 1),
                }
            print(name, report[name], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
