"""RunHandlerPool benchmark: closed-loop clients over several sessions, pool off against pool on.

    python -m benchmarks.bench_pool [--clients 8] [--rounds 6] [--seconds 3] [--models branches:64,resnet]
                                  [--json out.json] [--tf-python /path/to/python-with-tensorflow]

Models are test fixtures, each fed its recorded inputs; ``name:N`` repeats those rows to a batch of N
(the fixtures hold 3). Each client thread runs one model (client i takes model i % len(models)) in a
closed loop. The modes alternate round by round in ABBA order (off, on, on, off, ...) so drift of the
machine hits both alike; the table adds up all rounds of a mode. With --tf-python the same harness
(``benchmarks/pool_harness.py``) runs in TensorFlow (tf.compat.v1.Session with
RunOptions.experimental.use_run_handler_pool) in a subprocess, so the two pools are compared on the same
graphs and machine. ``benchmarks/bench_pool_matrix.py`` runs the same harness over many workloads with no
configuration set.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.pool_harness import Load, load_io, measure, warm_up
from benchmarks.tf_pool_worker import run_jobs
from poolserve.proto import config_pb2
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.session import Session

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "models"


def load_model(spec: str) -> tuple[Graph, dict[str, Any], list[str]]:
    """A fixture by ``name`` or ``name:rows``: its graph, feeds and fetches."""
    name, _, rows = spec.partition(":")
    feeds, fetches = load_io(FIXTURES / f"{name}.npz", int(rows) if rows else None)
    return Graph(load_graph_def(FIXTURES / f"{name}.pb")), feeds, fetches


def pool_options() -> tuple[config_pb2.RunOptions, config_pb2.RunOptions]:
    """RunOptions without and with ``experimental.use_run_handler_pool``."""
    on = config_pb2.RunOptions()
    on.experimental.use_run_handler_pool = True
    return config_pb2.RunOptions(), on


def bench_poolserve(models: list[str], clients: int, rounds: int, seconds: float) -> dict[str, Any]:
    """Per mode: each model's summary and all models together."""
    sessions = [(Session(g), feeds, fetches) for g, feeds, fetches in map(load_model, models)]
    off, on = pool_options()

    def run(i: int, pool: bool) -> object:
        s, feeds, fetches = sessions[i]
        return s.run(fetches, feeds, options=on if pool else off)

    warm_up(run, len(models))  # plans and cost estimates in both modes
    load = Load("closed", clients)
    try:
        result: dict[str, Any] = measure(run, models, [load], rounds, seconds, 0.0)["loads"][load.name]
    finally:
        for s, _, _ in sessions:
            s.close()
    return result


def bench_tensorflow(
    tf_python: str, models: list[str], clients: int, rounds: int, seconds: float, intra: int
) -> dict[str, Any]:
    graphs = []
    for m in models:
        name, _, rows = m.partition(":")
        pb, npz = FIXTURES / f"{name}.pb", FIXTURES / f"{name}.npz"
        graphs.append({"name": m, "pb": str(pb), "npz": str(npz), "rows": int(rows) if rows else None})
    load = Load("closed", clients)
    job = {"name": "pool", "graphs": graphs, "loads": [load.name], "rounds": rounds, "seconds": seconds}
    result = run_jobs(tf_python, [job | {"probe_seconds": 0.0}], intra)["pool"]
    if "error" in result:
        raise RuntimeError(f"TensorFlow: {result['error']}")
    return dict(result["loads"][load.name])


def print_table(title: str, result: dict[str, Any]) -> None:
    print(title)
    head = f"  {'model':12} {'mode':8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}"
    print(f"{head}   {'p99 ratio':>9} {'tput ratio':>10}")
    for model in result["no_pool"]:
        base, pool = result["no_pool"][model], result["pool"][model]
        for mode, r in (("no_pool", base), ("pool", pool)):
            line = f"  {model:12} {mode:8} {r['throughput_rps']:8.1f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f}"
            if mode == "pool":
                p99 = r["p99_ms"] / base["p99_ms"]
                tput = r["throughput_rps"] / base["throughput_rps"]
                line += f"   {p99:8.2f}x {tput:9.2f}x"
            print(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--models", default="branches:64,resnet", help="fixtures, each as name or name:rows (batch size)"
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6, help="rounds in all, alternating no-pool and pool")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one round")
    parser.add_argument(
        "--intra-op-threads",
        type=int,
        default=1,
        help="BLAS threads per kernel, for both modes (0 = numpy's default: every core per kernel)",
    )
    parser.add_argument(
        "--switch-interval-ms",
        type=float,
        default=1.0,
        help="Python's GIL switch interval for both modes (CPython's default is 5 ms)",
    )
    parser.add_argument(
        "--pool-threads", type=int, default=0, help="RunHandlerPool threads (execution slots); 0 = cores"
    )
    parser.add_argument(
        "--stretch",
        type=float,
        default=None,
        help="the pool's deadline stretch (0 = strict arrival order; default: the pool's own)",
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--tf-python", help="a Python with TensorFlow, to run the same load in TensorFlow")
    args = parser.parse_args(argv)
    models = args.models.split(",")
    sys.setswitchinterval(args.switch_interval_ms / 1000.0)
    from poolserve.runtime.run_handler import configure_pool

    pool = configure_pool(args.pool_threads)
    if args.stretch is not None:
        pool.stretch = args.stretch
    if args.intra_op_threads > 0:
        from poolserve.runtime.threadpool import set_intra_op_threads

        set_intra_op_threads(args.intra_op_threads)

    ours = bench_poolserve(models, args.clients, args.rounds, args.seconds)
    print_table(
        f"poolserve: {args.clients} closed-loop clients, {args.rounds} x {args.seconds:g} s rounds", ours
    )
    report: dict[str, Any] = {"poolserve": ours, "config": vars(args) | {"json": str(args.json)}}
    if args.tf_python:
        theirs = bench_tensorflow(
            args.tf_python, models, args.clients, args.rounds, args.seconds, args.intra_op_threads
        )
        print_table("TensorFlow (same load, same graphs)", theirs)
        report["tensorflow"] = theirs
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
