"""TensorFlow's side of the single-request benchmarks (``bench_executor``, ``bench_loops``): frozen graphs
timed in ``tf.compat.v1.Session``, one call at a time.

``run`` starts ``<tf-python> -m benchmarks.tf_graph_timer`` from the repository root in a subprocess, so
TensorFlow is never imported in the project's process nor needed by it. A job is ``[name, graph .pb, .npz,
intra_op_threads]`` (0: TensorFlow's default); the .npz holds the feeds as ``in:<tensor>`` and the fetches as
``out:<tensor>``. Each graph's result is its median latency and its process CPU time per call, in ms.
"""

from __future__ import annotations

import functools
import importlib
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def time_calls(fn: Callable[[], Any], warm_up: int = 3, cpu_seconds: float = 1.0) -> dict[str, float]:
    """``fn``'s median time per call over 7 samples of at least 50 ms each (after ``warm_up`` calls), and
    its process CPU time per call over about ``cpu_seconds`` (at least 3 calls); both in ms."""
    for _ in range(warm_up):
        fn()
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        if time.perf_counter() - t0 > 0.05:
            break
        number *= 2
    samples = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number)
    median = statistics.median(samples)
    runs = max(3, int(cpu_seconds / median))
    c0 = time.process_time()
    for _ in range(runs):
        fn()
    return {"ms": median * 1e3, "cpu_ms": (time.process_time() - c0) / runs * 1e3}


def run(tf_python: str, jobs: list[list[Any]]) -> dict[str, dict[str, float]]:
    """Times the jobs in TensorFlow (see the module docstring): ``{name: {"ms", "cpu_ms"}}``."""
    proc = subprocess.run(
        [tf_python, "-m", "benchmarks.tf_graph_timer", json.dumps(jobs)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": "0", "PATH": "/usr/bin:/bin"},
    )
    result: dict[str, dict[str, float]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:  # in TensorFlow's Python
    import numpy as np

    tf: Any = importlib.import_module("tensorflow")  # TensorFlow's Python only: never the project's

    out = {}
    for name, path, npz, intra in json.loads(sys.argv[1]):
        gd = tf.compat.v1.GraphDef()
        gd.ParseFromString(Path(path).read_bytes())
        g = tf.Graph()
        with g.as_default():
            tf.compat.v1.import_graph_def(gd, name="")
        data = np.load(npz)
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
        fetches = [k[4:] for k in data.files if k.startswith("out:")]
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=intra)
        with tf.compat.v1.Session(graph=g, config=config) as s:
            out[name] = time_calls(functools.partial(s.run, fetches, feeds))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
