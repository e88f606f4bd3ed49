"""v1 loop benchmark: what frames cost per iteration, and what running a frame's nodes in parallel gains.

    python -m benchmarks.bench_loops [--json out.json] [--tf-python /path/to/python-with-tensorflow]

Graphs by ``tools/make_loop_bench_fixtures.py`` (TensorFlow-made, lowered to v1 frames):

- lstm: a Keras LSTM(32) over 100 steps (batch 4): one node ready at a time, nothing to run in parallel.
- two_matmuls: 20 iterations of two independent 512x512 MatMuls, BLAS at one thread: about twice as fast
  on two threads as on one.

Each is timed as ms per ``Session.run`` (median of batches) and process CPU ms per run, on the default
scheduler and on the caller's thread (``inter_op_thread_pool = -1``); with ``--tf-python``, the same graphs
in TensorFlow's ``tf.compat.v1.Session`` (a subprocess; intra-op threads 1 for two_matmuls).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import tf_graph_timer
from benchmarks.bench_executor import best_of
from poolserve.proto import config_pb2
from poolserve.runtime.graph import load_graph_def
from poolserve.runtime.session import Session

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "loops"
SIZE = 512


def cases() -> dict[str, tuple[dict[str, Any], dict[str, Any], int]]:
    """name -> (feeds, expected fetches, BLAS threads to allow: 0 for no limit)."""
    with np.load(FIXTURES / "lstm.npz") as data:
        lstm_feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
        lstm_out = {k[4:]: data[k] for k in data.files if k.startswith("out:")}
    rng = np.random.default_rng(18)
    x, w1, w2 = (rng.standard_normal((SIZE, SIZE)).astype(np.float32) for _ in range(3))
    w1 /= np.float32(SIZE**0.5)
    w2 /= np.float32(SIZE**0.5)
    h = x
    for _ in range(20):
        h = np.tanh(h @ w1) + np.tanh(h @ w2)
    return {
        "lstm": (lstm_feeds, lstm_out, 0),
        "two_matmuls": ({"x:0": x, "w1:0": w1, "w2:0": w2}, {"y:0": h}, 1),
    }


def cpu_ms_per_run(fn: Any, runs: int) -> float:
    c0 = time.process_time()
    for _ in range(runs):
        fn()
    return (time.process_time() - c0) / runs * 1e3


def bench(name: str, feeds: dict[str, Any], want: dict[str, Any], blas: int) -> dict[str, Any]:
    from threadpoolctl import threadpool_limits

    fetches = list(want)
    caller = config_pb2.RunOptions(inter_op_thread_pool=-1)
    with Session(load_graph_def(FIXTURES / f"{name}.pb")) as s, threadpool_limits(limits=blas or None):
        got = s.run(fetches, feeds)
        for g, (t, w) in zip(got, want.items(), strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{name} {t}")
        ms = best_of(lambda: s.run(fetches, feeds), repeat=7) * 1e3
        caller_ms = best_of(lambda: s.run(fetches, feeds, options=caller), repeat=7) * 1e3
        runs = max(3, int(1000 / ms))
        cpu = cpu_ms_per_run(lambda: s.run(fetches, feeds), runs)
        caller_cpu = cpu_ms_per_run(lambda: s.run(fetches, feeds, options=caller), runs)
    return {"graph": name, "ms": ms, "cpu_ms": cpu, "caller_ms": caller_ms, "caller_cpu_ms": caller_cpu}


def bench_tensorflow(
    tf_python: str, all_cases: dict[str, tuple[dict[str, Any], dict[str, Any], int]]
) -> dict[str, dict[str, float]]:
    """Each graph's latency and CPU time per run in TensorFlow, ms (``benchmarks.tf_graph_timer``)."""
    with tempfile.TemporaryDirectory() as tmp:
        jobs = []
        for name, (feeds, want, blas) in all_cases.items():
            npz = Path(tmp) / f"{name}.npz"
            arrays = {f"in:{k}": v for k, v in feeds.items()} | {f"out:{k}": v for k, v in want.items()}
            np.savez(npz, **arrays)
            jobs.append([name, str(FIXTURES / f"{name}.pb"), str(npz), blas])
        return tf_graph_timer.run(tf_python, jobs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--tf-python", help="a Python with TensorFlow, to time the same graphs in TensorFlow")
    parser.add_argument("--only", choices=["lstm", "two_matmuls"], help="time one graph")
    args = parser.parse_args(argv)

    all_cases = cases()
    if args.only:
        all_cases = {args.only: all_cases[args.only]}
    rows = [bench(name, *case) for name, case in all_cases.items()]
    tf = bench_tensorflow(args.tf_python, all_cases) if args.tf_python else {}
    header = f"{'graph':12} {'ms':>8} {'CPU ms':>8} {'caller ms':>9} {'caller CPU':>10}"
    print(header + (f" {'TF ms':>8} {'TF CPU':>8}" if tf else ""))
    for r in rows:
        line = f"{r['graph']:12} {r['ms']:8.2f} {r['cpu_ms']:8.2f} {r['caller_ms']:9.2f}"
        line += f" {r['caller_cpu_ms']:10.2f}"
        if tf:
            r["tensorflow_ms"] = tf[r["graph"]]["ms"]
            r["tensorflow_cpu_ms"] = tf[r["graph"]]["cpu_ms"]
            line += f" {r['tensorflow_ms']:8.2f} {r['tensorflow_cpu_ms']:8.2f}"
        print(line)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
