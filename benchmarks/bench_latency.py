"""Single-request latency on the realistic fixtures: poolserve against TensorFlow's DirectSession.

    python -m benchmarks.bench_latency [--tf-python /opt/tfenv/bin/python] [--onnx-python PYTHON]
        [--baseline DIR] [--rounds 8] [--runs 8] [--batch N] [--model NAME ...] [--intra-op-threads 2]
        [--fixtures DIR] [--json PATH]

Per model, ``Session.run`` on the fixture's recorded feeds (``tests/fixtures/models/realistic``, or the
``<model>.pb`` and ``<model>.npz`` of ``--fixtures``: ``tools/export_keras_fixtures.py`` writes the
``keras.applications`` models that way, too large to commit), one request
at a time, timed call by call; the table shows the median. Engines: poolserve with its graph optimizer
(the default), poolserve with ``rewrite_options.disable_meta_optimizer`` (what the optimizer gains), with
``--tf-python`` TensorFlow's ``tf.compat.v1.Session`` on the same .pb in a subprocess (TensorFlow is never
imported here), with ``--onnx-python`` ONNX Runtime on the graph tf2onnx converts from the same .pb, in a
subprocess of a Python that has TensorFlow, tf2onnx and onnxruntime (neither is a dependency of poolserve; a
model tf2onnx or ONNX Runtime cannot take is reported with the reason, and the other engines go on), and
with ``--baseline DIR`` an older poolserve checkout in a subprocess (``git archive
<commit> | tar -x -C DIR``), to time a change against what it changed. All use inter-op 2 and intra-op
``--intra-op-threads`` threads.

The engines take turns: each round runs ``--runs`` calls of every engine on a model before the next, so a
machine shared with other work slows all of them alike; the spread of the per-round medians is in the JSON.
Each round starts with the next engine in turn, and 50 ms pass between engines: with more than one intra-op
thread, ONNX Runtime's and TensorFlow's pools spin-wait after their calls, and the engine that always came
next (poolserve) ran beside their spinning threads.
Results go to ``benchmarks/results/latency.json`` unless ``--json`` says otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from benchmarks.pool_harness import load_io
from poolserve.proto import config_pb2
from poolserve.runtime.graph import Graph, load_graph_def
from poolserve.runtime.session import Session

ROOT = Path(__file__).resolve().parent.parent
REALISTIC = ROOT / "tests" / "fixtures" / "models" / "realistic"
RESULTS = ROOT / "benchmarks" / "results"

# Another engine's session per model, timed on request: one JSON command per stdin line, one answer per
# line. ``_OPENERS`` supplies ``open_session(pb, intra) -> session`` for each engine.
_WORKER_LOOP = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    sessions = {}
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "load":
            with np.load(cmd["npz"]) as data:
                feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
            if cmd["rows"]:
                feeds = {k: np.resize(v, (cmd["rows"], *v.shape[1:])) for k, v in feeds.items()}
            try:
                s = open_session(cmd["pb"], cmd["intra"], list(feeds), cmd["fetches"])
                for _ in range(5):
                    s.run(cmd["fetches"], feeds)
            except Exception as e:  # an engine that cannot run a model says why, and the others go on
                print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}), flush=True)
                continue
            sessions[cmd["name"]] = (s, cmd["fetches"], feeds)
            print(json.dumps({"ok": True}), flush=True)
        else:
            s, fetches, feeds = sessions[cmd["name"]]
            times = []
            for _ in range(cmd["runs"]):
                t0 = time.perf_counter()
                s.run(fetches, feeds)
                times.append(time.perf_counter() - t0)
            print(json.dumps({"times": times}), flush=True)
    """
)
_OPENERS = {
    # TensorFlow's DirectSession on the same .pb, as tf.compat.v1 users run frozen graphs
    "tensorflow": textwrap.dedent(
        """
        import tensorflow as tf

        def open_session(pb, intra, inputs, outputs):
            gd = tf.compat.v1.GraphDef()
            gd.ParseFromString(open(pb, "rb").read())
            g = tf.Graph()
            with g.as_default():
                tf.compat.v1.import_graph_def(gd, name="")
            config = tf.compat.v1.ConfigProto(
                inter_op_parallelism_threads=2, intra_op_parallelism_threads=intra
            )
            return tf.compat.v1.Session(graph=g, config=config)
        """
    ),
    # poolserve from another checkout (PYTHONPATH), through its public API only
    "baseline": textwrap.dedent(
        """
        from poolserve import ConfigProto, Session, load_graph_def

        def open_session(pb, intra, inputs, outputs):
            config = ConfigProto(inter_op_parallelism_threads=2, intra_op_parallelism_threads=intra)
            return Session(load_graph_def(pb), config)
        """
    ),
    # ONNX Runtime on the graph tf2onnx converts from the same .pb (both live in that Python only). ORT's
    # session runs nodes one after another (its default); intra-op threads as for the others.
    "onnxruntime": textwrap.dedent(
        """
        import contextlib
        import logging
        import sys
        import tensorflow as tf
        import tf2onnx
        import onnxruntime as ort

        class OnnxSession:
            def __init__(self, sess):
                self.sess = sess

            def run(self, fetches, feeds):
                return self.sess.run(fetches, feeds)

        logging.getLogger("tf2onnx").setLevel(logging.ERROR)

        def open_session(pb, intra, inputs, outputs):
            gd = tf.compat.v1.GraphDef()
            gd.ParseFromString(open(pb, "rb").read())
            with contextlib.redirect_stdout(sys.stderr):  # stdout carries the answers
                model, _ = tf2onnx.convert.from_graph_def(
                    gd, input_names=inputs, output_names=outputs, opset=17
                )
            options = ort.SessionOptions()
            options.intra_op_num_threads = intra
            options.inter_op_num_threads = 2
            return OnnxSession(
                ort.InferenceSession(
                    model.SerializeToString(), options, providers=["CPUExecutionProvider"]
                )
            )
        """
    ),
}


class Worker:
    """An engine in another process, driven line by line so that its timings interleave with ours."""

    def __init__(self, engine: str, python: str, pythonpath: str | None = None) -> None:
        env = {"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"}
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        self.proc = subprocess.Popen(
            [python, "-c", _OPENERS[engine] + _WORKER_LOOP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=pythonpath or ROOT,
        )
        self.engine = engine

    def call(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.engine} worker stopped (exit code {self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


# seconds between one engine's calls and the next one's (see bench_model)
_SETTLE_S = 0.05


def _session(graph: Graph, intra: int, optimized: bool) -> Session:
    cfg = config_pb2.ConfigProto(inter_op_parallelism_threads=2, intra_op_parallelism_threads=intra)
    cfg.graph_options.rewrite_options.disable_meta_optimizer = not optimized
    return Session(graph, cfg)


def _timed(sess: Session, fetches: list[str], feeds: dict[str, Any], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(fetches, feeds)
        times.append(time.perf_counter() - t0)
    return times


def bench_model(name: str, args: argparse.Namespace, workers: list[Worker]) -> dict[str, Any]:
    folder: Path = args.fixtures
    feeds, fetches = load_io(folder / f"{name}.npz", args.batch)
    graph = Graph(load_graph_def(folder / f"{name}.pb"))
    engines: dict[str, Session | Worker] = {
        "poolserve": _session(graph, args.intra_op_threads, True),
        "poolserve_unoptimized": _session(graph, args.intra_op_threads, False),
    }
    for sess in engines.values():
        assert isinstance(sess, Session)
        for _ in range(5):
            sess.run(fetches, feeds)
    failed: dict[str, str] = {}
    for worker in workers:
        answer = worker.call(
            op="load",
            name=name,
            pb=str(folder / f"{name}.pb"),
            npz=str(folder / f"{name}.npz"),
            rows=args.batch,
            fetches=fetches,
            intra=args.intra_op_threads,
        )
        if answer["ok"]:
            engines[worker.engine] = worker
        else:
            failed[worker.engine] = answer["error"]
    samples: dict[str, list[float]] = {e: [] for e in engines}
    rounds: dict[str, list[float]] = {e: [] for e in engines}
    order = list(engines.items())
    for r in range(args.rounds):
        # each round starts with the next engine, so that each follows every other as often, and a pause
        # lets the last one's spinning threads (ONNX Runtime's and TensorFlow's pools spin-wait after a
        # step) go idle before the next engine's calls
        for engine, sess in order[r % len(order) :] + order[: r % len(order)]:
            time.sleep(_SETTLE_S)
            if isinstance(sess, Worker):
                times = sess.call(op="time", name=name, runs=args.runs)["times"]
            else:
                times = _timed(sess, fetches, feeds, args.runs)
            samples[engine].extend(times)
            rounds[engine].append(statistics.median(times) * 1e3)
    for sess in engines.values():
        if isinstance(sess, Session):
            sess.close()
    batch = next(iter(feeds.values())).shape[0]
    result: dict[str, Any] = {"model": name, "batch": batch}
    for engine, error in failed.items():
        result[f"{engine}_error"] = error
    for engine in engines:
        result[f"{engine}_ms"] = statistics.median(samples[engine]) * 1e3
        result[f"{engine}_round_medians_ms"] = rounds[engine]
    result["optimizer_speedup"] = result["poolserve_unoptimized_ms"] / result["poolserve_ms"]
    for other in ("tensorflow", "baseline", "onnxruntime"):
        if other in engines:
            result[f"ratio_to_{other}"] = result["poolserve_ms"] / result[f"{other}_ms"]
    return result


_COLUMNS = [  # (engine, heading)
    ("poolserve", "poolserve"),
    ("poolserve_unoptimized", "no optimizer"),
    ("baseline", "baseline"),
    ("tensorflow", "TensorFlow"),
    ("onnxruntime", "ONNX Runtime"),
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tf-python", help="a Python with TensorFlow, to time the same graphs in TensorFlow")
    parser.add_argument(
        "--baseline", type=Path, help="another poolserve checkout (e.g. from git archive) to time alongside"
    )
    parser.add_argument(
        "--onnx-python",
        help="a Python with TensorFlow, tf2onnx and onnxruntime, to time the graphs converted to ONNX",
    )
    parser.add_argument("--model", action="append", help="a realistic fixture (default: all)")
    parser.add_argument(
        "--fixtures",
        type=Path,
        default=REALISTIC,
        help="a folder of <model>.pb and <model>.npz (the realistic fixtures by default; "
        "tools/export_keras_fixtures.py writes keras.applications models so)",
    )
    parser.add_argument("--batch", type=int, help="rows per request (default: the fixture's own batch)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--runs", type=int, default=8, help="calls per engine per round")
    parser.add_argument("--intra-op-threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=RESULTS / "latency.json")
    args = parser.parse_args(argv)
    listed = args.fixtures / "models.json"
    models = args.model or (
        sorted(json.loads(listed.read_text()))
        if listed.exists()
        else sorted(p.stem for p in args.fixtures.glob("*.pb"))
    )
    workers: list[Worker] = []
    if args.baseline:
        workers.append(Worker("baseline", sys.executable, str(args.baseline.resolve())))
    if args.tf_python:
        workers.append(Worker("tensorflow", args.tf_python))
    if args.onnx_python:
        workers.append(Worker("onnxruntime", args.onnx_python))
    shown = [(e, h) for e, h in _COLUMNS if e.startswith("poolserve") or any(w.engine == e for w in workers)]
    results = []
    try:
        print(
            f"{'model':18s} {'batch':>5s}"
            + "".join(f" {h:>12s}" for _, h in shown)
            + "  poolserve / each other"
        )
        for name in models:
            r = bench_model(name, args, workers)
            results.append(r)
            line = f"{name:18s} {r['batch']:5d}" + "".join(
                f" {r[f'{e}_ms']:10.3f}ms" if f"{e}_ms" in r else f" {'fails':>12s}" for e, _ in shown
            )
            ratios = [f"{r['poolserve_ms'] / r[e + '_ms']:.2f}x" for e, _ in shown[1:] if f"{e}_ms" in r]
            print(line + "  " + " ".join(ratios), flush=True)
            for engine in (e for e, _ in shown if f"{e}_error" in r):
                print(f"  {engine} cannot run {name}: {r[f'{engine}_error'][:300]}", flush=True)
    finally:
        for worker in workers:
            worker.close()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    meta = {"rounds": args.rounds, "runs": args.runs, "intra_op_threads": args.intra_op_threads}
    args.json.write_text(json.dumps({"settings": meta, "models": results}, indent=1) + "\n")
    print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
