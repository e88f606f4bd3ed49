"""RunHandlerPool benchmark: closed-loop clients over several sessions, pool off against pool on.

    python -m benchmarks.bench_pool [--clients 8] [--rounds 6] [--seconds 3] [--models branches:64,resnet]
                                  [--json out.json] [--tf-python /path/to/python-with-tensorflow]

Models are test fixtures, each fed its recorded inputs; ``name:N`` repeats those rows to a batch of N
(the fixtures hold 3). Each client thread runs one model (client i takes model i % len(models)) in a
closed loop. The modes
alternate round by round (off, on, off, on, ...) so drift of the machine hits both alike; the table adds
up all rounds of a mode. With --tf-python the same harness runs in TensorFlow (tf.compat.v1.Session with
RunOptions.experimental.use_run_handler_pool) in a subprocess, so the two pools are compared on the same
graphs and machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from poolserve.proto import config_pb2
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.session import Session

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "models"


def load_model(spec: str) -> tuple[Graph, dict[str, Any], list[str]]:
    """A fixture by ``name`` or ``name:rows``: its graph, feeds and fetches."""
    name, _, rows = spec.partition(":")
    data = np.load(FIXTURES / f"{name}.npz")
    feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
    if rows:
        feeds = {k: np.resize(v, (int(rows), *v.shape[1:])) for k, v in feeds.items()}
    fetches = [k[4:] for k in data.files if k.startswith("out:")]
    return Graph(load_graph_def(FIXTURES / f"{name}.pb")), feeds, fetches


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def summarize(latencies: list[float], seconds: float) -> dict[str, float]:
    ms = [v * 1e3 for v in latencies]
    return {
        "requests": len(ms),
        "throughput_rps": len(ms) / seconds if seconds else 0.0,
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "mean_ms": float(np.mean(ms)) if ms else float("nan"),
    }


def summarize_modes(lat: dict[str, dict[str, list[float]]], seconds: float) -> dict[str, Any]:
    """Per mode: each model's summary and all models together."""
    result: dict[str, Any] = {}
    for mode, per_model in lat.items():
        result[mode] = {m: summarize(v, seconds) for m, v in per_model.items()}
        result[mode]["all"] = summarize([x for v in per_model.values() for x in v], seconds)
    return result


def run_round(
    sessions: list[tuple[Session, dict[str, Any], list[str]]],
    clients: int,
    seconds: float,
    options: config_pb2.RunOptions,
) -> dict[str, list[float]]:
    """``clients`` threads in a closed loop for ``seconds``; latencies per model index."""
    stop = time.monotonic() + seconds
    out: dict[str, list[float]] = {str(i): [] for i in range(len(sessions))}
    start = threading.Barrier(clients)

    def client(i: int) -> None:
        s, feeds, fetches = sessions[i % len(sessions)]
        mine = out[str(i % len(sessions))]
        start.wait()
        while True:
            t0 = time.perf_counter()
            if time.monotonic() >= stop:
                return
            s.run(fetches, feeds, options=options)
            mine.append(time.perf_counter() - t0)  # list.append is atomic

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def bench_poolserve(models: list[str], clients: int, rounds: int, seconds: float) -> dict[str, Any]:
    loaded = [load_model(m) for m in models]
    sessions = [(Session(g), feeds, fetches) for g, feeds, fetches in loaded]
    off = config_pb2.RunOptions()
    on = config_pb2.RunOptions()
    on.experimental.use_run_handler_pool = True
    for s, feeds, fetches in sessions:  # warm up plans and cost estimates in both modes
        for _ in range(5):
            s.run(fetches, feeds, options=off)
            s.run(fetches, feeds, options=on)
    return alternate(
        lambda opts: run_round(sessions, clients, seconds, opts), off, on, models, rounds, seconds
    )


def alternate(
    round_fn: Any, off: Any, on: Any, models: list[str], rounds: int, seconds: float
) -> dict[str, Any]:
    lat: dict[str, dict[str, list[float]]] = {"no_pool": {}, "pool": {}}
    for r in range(rounds):
        mode, opts = ("no_pool", off) if r % 2 == 0 else ("pool", on)
        for k, v in round_fn(opts).items():
            lat[mode].setdefault(models[int(k)], []).extend(v)
    return summarize_modes(lat, seconds * rounds / 2)


_TF_SCRIPT = r"""
import json, sys, threading, time
import numpy as np
import tensorflow as tf
models, clients, rounds, seconds, fixtures, intra = json.loads(sys.argv[1])
if intra > 0:
    tf.config.threading.set_intra_op_parallelism_threads(intra)
sessions = []
for m in models:
    name, _, rows = m.partition(":")
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(open(f"{fixtures}/{name}.pb", "rb").read())
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(gd, name="")
    data = np.load(f"{fixtures}/{name}.npz")
    feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
    if rows:
        feeds = {k: np.resize(v, (int(rows),) + v.shape[1:]) for k, v in feeds.items()}
    fetches = [k[4:] for k in data.files if k.startswith("out:")]
    sessions.append((tf.compat.v1.Session(graph=g), feeds, fetches))
off = tf.compat.v1.RunOptions()
on = tf.compat.v1.RunOptions()
on.experimental.use_run_handler_pool = True
for s, feeds, fetches in sessions:
    for _ in range(5):
        s.run(fetches, feeds, options=off)
        s.run(fetches, feeds, options=on)
lat = {"no_pool": {}, "pool": {}}
for r in range(rounds):
    mode, opts = ("no_pool", off) if r % 2 == 0 else ("pool", on)
    stop = time.monotonic() + seconds
    barrier = threading.Barrier(clients)
    def client(i):
        s, feeds, fetches = sessions[i % len(sessions)]
        mine = lat[mode].setdefault(models[i % len(sessions)], [])
        barrier.wait()
        while True:
            t0 = time.perf_counter()
            if time.monotonic() >= stop:
                return
            s.run(fetches, feeds, options=opts)
            mine.append(time.perf_counter() - t0)
    for m in models:
        lat[mode].setdefault(m, [])
    ts = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in ts: t.start()
    for t in ts: t.join()
print(json.dumps(lat))
"""


def bench_tensorflow(
    tf_python: str, models: list[str], clients: int, rounds: int, seconds: float, intra: int
) -> dict[str, Any]:
    proc = subprocess.run(
        [tf_python, "-c", _TF_SCRIPT, json.dumps([models, clients, rounds, seconds, str(FIXTURES), intra])],
        capture_output=True,
        text=True,
        check=True,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
    )
    lat = json.loads(proc.stdout.strip().splitlines()[-1])
    return summarize_modes(lat, seconds * rounds / 2)


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
        from poolserve.runtime.session import set_intra_op_threads

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
