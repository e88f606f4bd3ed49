"""Per-op times of one realistic fixture in poolserve and in TensorFlow.

    python -m benchmarks.op_profile [--tf-python /opt/tfenv/bin/python] [--model bert_tiny] [--batch 1]
        [--steps 30] [--intra-op-threads 1] [--json PATH]

TensorFlow runs ``--steps`` steps with ``RunOptions(trace_level=FULL_TRACE)``, poolserve as many untraced
steps with each kernel in a clock (a traced step keeps every output, so it reuses no buffer and allocates
more than a served one); each node's time is its minimum over the steps (the least disturbed on a shared
machine), and the table sums those minimums per op type, so an op that the two engines fuse differently
shows on both sides under its own name (TensorFlow runs its oneDNN rewrites unless
``TF_ENABLE_ONEDNN_OPTS=0`` is set). The step line gives the minimum wall time of an untraced step and the
sum of the per-node minimums: their difference is what the engine spends between kernels. TensorFlow runs
in a subprocess of ``--tf-python`` and is never imported here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.pool_harness import load_io
from poolserve.proto import config_pb2
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.session import Session

ROOT = Path(__file__).resolve().parent.parent
REALISTIC = ROOT / "tests" / "fixtures" / "models" / "realistic"

# TensorFlow's side: the same traced steps, printed as one JSON line {"step_ms", "nodes": {name: [op, us]}}
_TF_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import tensorflow as tf
    pb, npz = sys.argv[1], sys.argv[2]
    rows, intra, steps = (int(a) for a in sys.argv[3:6])
    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(open(pb, "rb").read())
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(gd, name="")
    with np.load(npz) as data:
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
        fetches = [k[4:] for k in data.files if k.startswith("out:")]
    if rows:
        feeds = {k: np.resize(v, (rows, *v.shape[1:])) for k, v in feeds.items()}
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=2, intra_op_parallelism_threads=intra)
    s = tf.compat.v1.Session(graph=g, config=config)
    for _ in range(5):
        s.run(fetches, feeds)
    best = float("inf")
    for _ in range(steps):
        t0 = time.perf_counter()
        s.run(fetches, feeds)
        best = min(best, time.perf_counter() - t0)
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    nodes = {}
    for _ in range(steps):
        md = tf.compat.v1.RunMetadata()
        s.run(fetches, feeds, options=options, run_metadata=md)
        for dev in md.step_stats.dev_stats:
            for n in dev.node_stats:
                if n.node_name == "_SOURCE":
                    continue
                label = n.timeline_label
                op = label.split(" = ", 1)[-1].split("(", 1)[0] if " = " in label else "?"
                us = n.op_end_rel_nanos / 1e3
                key = dev.device + "|" + n.node_name
                nodes[key] = [op, min(us, nodes.get(key, [op, us])[1])]
    print(json.dumps({"step_ms": best * 1e3, "nodes": nodes}))
    """
)


def poolserve_profile(name: str, rows: int | None, intra: int, steps: int) -> dict[str, Any]:
    """Per-node minimum kernel times of untraced steps (each plan node's kernel wrapped in a clock, so the
    step runs as it does when served: a traced step keeps every output and reuses no buffer)."""
    feeds, fetches = load_io(REALISTIC / f"{name}.npz", rows)
    cfg = config_pb2.ConfigProto(inter_op_parallelism_threads=2, intra_op_parallelism_threads=intra)
    with Session(Graph(load_graph_def(REALISTIC / f"{name}.pb")), cfg) as s:
        for _ in range(5):
            s.run(fetches, feeds)
        best = float("inf")
        for _ in range(steps):
            t0 = time.perf_counter()
            s.run(fetches, feeds)
            best = min(best, time.perf_counter() - t0)
        nodes: dict[str, list[Any]] = {}
        for plan in list(s._calls.plans.values()):
            for pn in plan.nodes:
                nodes[pn.name] = [pn.op, float("inf")]
                pn.compute = _clocked(pn.compute, nodes[pn.name])
            plan.serial = None  # the straight loop's program holds the kernels it was made with: remade
        for _ in range(steps):
            s.run(fetches, feeds)
    return {"step_ms": best * 1e3, "nodes": nodes}


def _clocked(compute: Any, record: list[Any]) -> Any:
    def run(ctx: Any, args: list[Any]) -> Any:
        t0 = time.perf_counter_ns()
        outs = compute(ctx, args)
        record[1] = min(record[1], (time.perf_counter_ns() - t0) / 1e3)
        return outs

    return run


def tensorflow_profile(tf_python: str, name: str, rows: int | None, intra: int, steps: int) -> dict[str, Any]:
    proc = subprocess.run(
        [tf_python, "-c", _TF_SCRIPT, str(REALISTIC / f"{name}.pb"), str(REALISTIC / f"{name}.npz")]
        + [str(rows or 0), str(intra), str(steps)],
        capture_output=True,
        text=True,
        check=True,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
    )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def by_op(profile: dict[str, Any]) -> dict[str, tuple[int, float]]:
    """``{op: (nodes, summed per-node minimum in us)}``."""
    out: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for op, us in profile["nodes"].values():
        out[op][0] += 1
        out[op][1] += us
    return {op: (int(n), us) for op, (n, us) in out.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tf-python", help="a Python with TensorFlow, to profile the same graph there")
    parser.add_argument("--model", default="bert_tiny")
    parser.add_argument("--batch", type=int, help="rows per request (default: the fixture's own batch)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--intra-op-threads", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    profiles = {"poolserve": poolserve_profile(args.model, args.batch, args.intra_op_threads, args.steps)}
    if args.tf_python:
        profiles["tensorflow"] = tensorflow_profile(
            args.tf_python, args.model, args.batch, args.intra_op_threads, args.steps
        )
    for engine, profile in profiles.items():
        ops = sorted(by_op(profile).items(), key=lambda kv: -kv[1][1])
        total = sum(us for _, (_, us) in ops)
        step = profile["step_ms"] * 1e3
        print(
            f"{engine}: {len(profile['nodes'])} nodes, step {step:.0f} us (min), kernels {total:.0f} us"
            f" (sum of per-node min), between kernels {step - total:.0f} us"
        )
        for op, (n, us) in ops:
            print(f"  {op:32s} {n:4d} {us:9.1f} us")
    if args.json:
        args.json.write_text(json.dumps(profiles, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
