"""TensorFlow's side of the pool benchmarks: the same load (``benchmarks/pool_harness.py``) on
``tf.compat.v1.Session``, its RunHandlerPool switched per request by
``RunOptions.experimental.use_run_handler_pool``.

The benchmarks call ``run_jobs`` with ``--tf-python``; it starts ``<tf-python> -m
benchmarks.tf_pool_worker`` from the repository root in a subprocess, so TensorFlow is never imported in the
project's process nor needed by it. The jobs go in as JSON on stdin; the results come back as the last line
of stdout; progress goes to stderr. Sessions are made with no config, as a user who sets nothing makes them,
unless ``intra_op_threads`` is given.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.pool_harness import Load, load_io, measure, warm_up

ROOT = Path(__file__).resolve().parent.parent


def run_jobs(tf_python: str, jobs: list[dict[str, Any]], intra_op_threads: int = 0) -> dict[str, Any]:
    """Runs the jobs in TensorFlow; each is ``{"name", "graphs": [{"name", "pb", "npz", "rows"}], "loads",
    "rounds", "seconds", "probe_seconds", "seed"}``. Returns each job's ``measure`` result (or
    ``{"error": ...}`` where TensorFlow could not load or run a graph), by job name."""
    budget = sum(len(j["loads"]) * j["rounds"] * (j["seconds"] + 10) + j["probe_seconds"] + 60 for j in jobs)
    proc = subprocess.run(
        [tf_python, "-m", "benchmarks.tf_pool_worker"],
        input=json.dumps({"jobs": jobs, "intra_op_threads": intra_op_threads}),
        stdout=subprocess.PIPE,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=budget,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
    )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def run_job(tf: Any, job: dict[str, Any]) -> dict[str, Any]:
    off = tf.compat.v1.RunOptions()
    on = tf.compat.v1.RunOptions()
    on.experimental.use_run_handler_pool = True
    sessions = []
    try:
        for g in job["graphs"]:
            graph_def = tf.compat.v1.GraphDef()
            graph_def.ParseFromString(Path(g["pb"]).read_bytes())
            graph = tf.Graph()
            with graph.as_default():
                tf.compat.v1.import_graph_def(graph_def, name="")
            feeds, fetches = load_io(Path(g["npz"]), g.get("rows"))
            sessions.append((tf.compat.v1.Session(graph=graph), feeds, fetches))

        def run(i: int, pool: bool) -> object:
            session, feeds, fetches = sessions[i]
            return session.run(fetches, feeds, options=on if pool else off)

        names = [g["name"] for g in job["graphs"]]
        warm_up(run, len(names))
        return measure(
            run,
            names,
            [Load.parse(x) for x in job["loads"]],
            job["rounds"],
            job["seconds"],
            job["probe_seconds"],
            job.get("seed", 0),
            log=lambda line: print(line, file=sys.stderr, flush=True),
        )
    finally:
        for session, _, _ in sessions:
            session.close()


def main() -> int:
    spec = json.load(sys.stdin)
    tf = importlib.import_module("tensorflow")
    if spec.get("intra_op_threads", 0) > 0:
        tf.config.threading.set_intra_op_parallelism_threads(spec["intra_op_threads"])
    out: dict[str, Any] = {}
    for job in spec["jobs"]:
        print(f"tensorflow: {job['name']}", file=sys.stderr, flush=True)
        try:
            out[job["name"]] = run_job(tf, job)
        except Exception as e:  # a graph TensorFlow cannot import or run: reported, the others go on
            first_line = str(e).strip().splitlines()[0] if str(e).strip() else ""
            out[job["name"]] = {"error": f"{type(e).__name__}: {first_line}"}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
