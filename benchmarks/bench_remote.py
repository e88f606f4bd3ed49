"""A remote session's run against the same run in process: the MLP fixture, one client, loopback.

    python -m benchmarks.bench_remote [--rounds 5] [--number 1000] [--json out.json]

Starts ``poolserve serve`` in its own process on 127.0.0.1 (the fixture served as model ``mlp``), then per
round times ``number`` runs of each variant one after the other (in process; remote with the graph
shipped; remote bound to the served model), so that a busy machine slows them alike. Reported per
variant: the median wall time per run, the client's CPU per run (this process) and the server's (its
process, from /proc; 10 ms ticks, so rounds should be long), and the remote runs' extra time over the
in-process one (the issue's target: at most 1 ms).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.servers import cpu_seconds, free_port, wait_ready
from poolserve.runtime.graph import load_graph_def
from poolserve.runtime.session import Session

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "models" / "mlp.pb"


def start_server(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    config = folder / "bench_remote.toml"
    config.write_text(
        f'[server]\nhost = "127.0.0.1"\nport = {port}\ngrpc_port = 0\n\n'
        f'[[models]]\nname = "mlp"\npath = "{FIXTURE}"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("POOLSERVE_")}
    env["XDG_STATE_HOME"] = str(folder / "state")
    cmd = [sys.executable, "-m", "poolserve.server.cli", "serve", "--config", str(config)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, proc)
    return proc, url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--number", type=int, default=1000)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    graph = load_graph_def(str(FIXTURE))
    with np.load(FIXTURE.with_suffix(".npz")) as data:
        feeds = {k.removeprefix("in:"): data[k] for k in data.files if k.startswith("in:")}
    fetch = "Identity:0"
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp))
        try:
            local = Session(graph)
            shipped = Session(url, graph)
            bound = Session(f"{url}/v1/models/mlp")
            variants: dict[str, Callable[[], Any]] = {
                "in_process": lambda: local.run(fetch, feeds),
                "remote_shipped": lambda: shipped.run(fetch, feeds),
                "remote_bound": lambda: bound.run(fetch, feeds),
            }
            want = local.run(fetch, feeds)
            for fn in variants.values():
                np.testing.assert_allclose(fn(), want, rtol=1e-6)
                for _ in range(args.number // 5):
                    fn()
            samples: dict[str, list[tuple[float, float, float]]] = {k: [] for k in variants}
            for _ in range(args.rounds):
                for name, fn in variants.items():
                    w0, c0, s0 = time.perf_counter(), time.process_time(), cpu_seconds(proc.pid)
                    for _ in range(args.number):
                        fn()
                    n = args.number
                    samples[name].append(
                        (
                            (time.perf_counter() - w0) / n,
                            (time.process_time() - c0) / n,
                            (cpu_seconds(proc.pid) - s0) / n,
                        )
                    )
            report: dict[str, Any] = {"rounds": args.rounds, "number": args.number}
            for name, rows in samples.items():
                report[name] = {
                    "wall_ms": round(statistics.median(r[0] for r in rows) * 1e3, 3),
                    "client_cpu_us": round(statistics.median(r[1] for r in rows) * 1e6, 1),
                    "server_cpu_us": round(statistics.median(r[2] for r in rows) * 1e6, 1),
                }
                if name != "in_process":
                    extra = [r[0] - base[0] for r, base in zip(rows, samples["in_process"], strict=True)]
                    report[name]["extra_ms"] = round(statistics.median(extra) * 1e3, 3)
                print(name, report[name], flush=True)
            for s in (local, shipped, bound):
                s.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
