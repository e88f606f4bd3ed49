"""Executor benchmark: framework overhead per executed node, tracing cost, and latency against TensorFlow.

    python -m benchmarks.bench_executor [--json out.json] [--tf-python /path/to/python-with-tensorflow]

- chain: a long chain of cheap ops (AddV2 on a scalar): Session.run against the same math as straight
  numpy calls; the difference per node is the executor's overhead.
- models: the TensorFlow-exported fixtures: Session.run against calling every kernel directly in
  topological order (the least any runtime must do), NO_TRACE against FULL_TRACE.
- tensorflow: with --tf-python, the same .pb files timed in TensorFlow's own tf.compat.v1.Session
  (a subprocess, so TensorFlow is never imported here), single-request latency side by side.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import tf_graph_timer
from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.kernels.registry import OpContext
from poolserve.runtime.session import Session

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "models"


def best_of(fn: Callable[[], Any], repeat: int = 7, number: int | None = None) -> float:
    """Median seconds per call over ``repeat`` batches of ``number`` calls (auto-sized to ~50 ms)."""
    fn()
    if number is None:
        number, t = 1, 0.0
        while True:
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            t = time.perf_counter() - t0
            if t > 0.05 or number > 1 << 16:
                break
            number *= 2
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number)
    return statistics.median(samples)


def bench_chain(n: int = 1000) -> dict[str, Any]:
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    one = b.constant(np.float32(1), name="one")
    t = x
    for _ in range(n):
        t = b.add(t, one)
    feed = np.float32(0)
    one_v = np.float32(1)

    def numpy_chain() -> Any:
        v = np.asarray(feed)
        for _ in range(n):
            v = np.add(v, one_v)
        return v

    caller = config_pb2.RunOptions(inter_op_thread_pool=-1)
    traced = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE)
    with Session(b.graph_def) as s:
        assert s.run(t, {x: feed}) == n
        t_numpy = best_of(numpy_chain)
        t_session = best_of(lambda: s.run(t, {x: feed}))
        t_caller = best_of(lambda: s.run(t, {x: feed}, options=caller))
        t_traced = best_of(lambda: s.run(t, {x: feed}, options=traced, run_metadata=config_pb2.RunMetadata()))
    return {
        "nodes": n,
        "numpy_us": t_numpy * 1e6,
        "session_us": t_session * 1e6,
        "overhead_us_per_node": (t_session - t_numpy) * 1e6 / n,
        "caller_thread_overhead_us_per_node": (t_caller - t_numpy) * 1e6 / n,
        "full_trace_us": t_traced * 1e6,
        "full_trace_extra_us_per_node": (t_traced - t_session) * 1e6 / n,
    }


def bench_branches(threads: int, branches: int = 4, depth: int = 3, size: int = 384) -> float:
    """A graph of independent matmul branches, BLAS limited to one thread: ms per run with ``threads``
    inter-op threads."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (size, size))
    outs = []
    for _ in range(branches):
        t = x
        for _ in range(depth):
            t = b.relu(b.matmul(t, b.constant(rng.standard_normal((size, size)).astype(np.float32) / size)))
        outs.append(t)
    y = b.op("AddN", outs, {"N": branches, "T": np.float32})
    cfg = config_pb2.ConfigProto(inter_op_parallelism_threads=threads, use_per_session_threads=True)
    feed = rng.standard_normal((size, size)).astype(np.float32)
    with Session(b.graph_def, cfg) as s, threadpool_limits(limits=1):
        return best_of(lambda: s.submit(y, {x: feed}).result(), repeat=5) * 1e3


def model_feeds(name: str) -> tuple[dict[str, Any], list[str]]:
    data = np.load(FIXTURES / f"{name}.npz")
    feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
    fetches = [k[4:] for k in data.files if k.startswith("out:")]
    return feeds, fetches


def bench_model(name: str) -> dict[str, Any]:
    graph = Graph(load_graph_def(FIXTURES / f"{name}.pb"))
    feeds, fetches = model_feeds(name)
    with Session(graph) as s:
        s.run(fetches, feeds)
        t_session = best_of(lambda: s.run(fetches, feeds))
        traced = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE)
        t_traced = best_of(
            lambda: s.run(fetches, feeds, options=traced, run_metadata=config_pb2.RunMetadata())
        )
        caller = config_pb2.RunOptions(inter_op_thread_pool=-1)
        t_caller = best_of(lambda: s.run(fetches, feeds, options=caller))
        # the same plan's kernels called directly, in order: the floor for any runtime
        feed_ids = sorted(graph.tensor(k) for k in feeds)
        plan = s._calls.plan(feed_ids, sorted(graph.tensor(f) for f in fetches), [], None)
        by_id = {graph.tensor(k): v for k, v in feeds.items()}
        ctx = OpContext()

        def direct() -> None:
            values = plan.template.copy()
            for i, t in enumerate(plan.feeds):
                values[i] = by_id[t]
            for pn in plan.nodes:
                outs = pn.compute(ctx, [values[j] for j in pn.in_slots])
                for k, o in enumerate(outs):
                    values[pn.out_base + k] = o

        with np.errstate(all="ignore"):
            t_direct = best_of(direct)
        n = plan.num_nodes
    return {
        "model": name,
        "executed_nodes": n,
        "direct_kernels_ms": t_direct * 1e3,
        "session_ms": t_session * 1e3,
        "caller_thread_ms": t_caller * 1e3,
        "full_trace_ms": t_traced * 1e3,
        "overhead_us_per_node": (t_session - t_direct) * 1e6 / max(n, 1),
    }


def bench_tensorflow(tf_python: str, models: list[str]) -> dict[str, float]:
    """Each fixture's median single-request latency in TensorFlow, ms (``benchmarks.tf_graph_timer``)."""
    jobs = [[m, str(FIXTURES / f"{m}.pb"), str(FIXTURES / f"{m}.npz"), 0] for m in models]
    return {name: r["ms"] for name, r in tf_graph_timer.run(tf_python, jobs).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--tf-python", help="a Python with TensorFlow, to time the same graphs in TensorFlow")
    parser.add_argument("--chain", type=int, default=1000, help="length of the cheap-op chain")
    args = parser.parse_args(argv)

    chain = bench_chain(args.chain)
    print(f"chain of {chain['nodes']} AddV2 (scalar)")
    print(f"  straight numpy          {chain['numpy_us']:10.1f} us")
    per_node = chain["overhead_us_per_node"]
    print(f"  Session.run             {chain['session_us']:10.1f} us   -> {per_node:.2f} us/node")
    print(
        f"  caller thread (-1)      {'':10}      -> {chain['caller_thread_overhead_us_per_node']:.2f} us/node"
    )
    extra = chain["full_trace_extra_us_per_node"]
    print(f"  FULL_TRACE              {chain['full_trace_us']:10.1f} us   (+{extra:.2f} us/node)")

    one, two = bench_branches(1), bench_branches(2)
    print(f"\n4 independent matmul branches, BLAS at 1 thread: 1 inter-op thread {one:.2f} ms,", end="")
    print(f" 2 threads {two:.2f} ms")
    chain["branches_1_thread_ms"], chain["branches_2_threads_ms"] = one, two

    models = sorted(p.stem for p in FIXTURES.glob("*.pb")) if FIXTURES.exists() else []
    rows = [bench_model(m) for m in models]
    tf_ms: dict[str, float] = bench_tensorflow(args.tf_python, models) if args.tf_python and models else {}
    if rows:
        print()
        header = (
            f"{'model':14} {'nodes':>5} {'kernels ms':>10} {'session ms':>10} {'us/node':>8} {'traced ms':>9}"
        )
        if tf_ms:
            header += f" {'TF ms':>8} {'vs TF':>6}"
        print(header)
        for r in rows:
            line = (
                f"{r['model']:14} {r['executed_nodes']:5d} {r['direct_kernels_ms']:10.3f} "
                f"{r['session_ms']:10.3f} {r['overhead_us_per_node']:8.2f} {r['full_trace_ms']:9.3f}"
            )
            if tf_ms:
                r["tensorflow_ms"] = tf_ms.get(r["model"])
                line += f" {r['tensorflow_ms']:8.3f} {r['session_ms'] / r['tensorflow_ms']:5.2f}x"
            print(line)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"chain": chain, "models": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
