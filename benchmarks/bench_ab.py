"""Two poolserve checkouts timed against each other on the realistic fixtures: lone ``Session.run`` steps.

    python -m benchmarks.bench_ab OLD_DIR NEW_DIR [--model NAME ...] [--batch N] [--intra-op-threads 1]
        [--rounds 16] [--runs 10] [--json PATH]

``OLD_DIR`` and ``NEW_DIR`` are checkouts (``git archive <commit> | tar -x -C DIR``; ``.`` for this one).
Each runs in a worker subprocess of its own, the same way (so neither gets the benchmark's own process,
whose first calls after another engine's find the caches differently), with one session per model at
inter-op 2 and the given intra-op threads, warmed with 20 steps. A round runs ``--runs`` calls on one
worker, then on the other, the order alternating round by round, with 50 ms between workers (OpenBLAS's
threads spin for a while after a call). Per model: both medians, and the median and range of the per-round
ratios new / old: the ratio of two workers that met the same minute of the machine.
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

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["bert_tiny", "mlp_gelu", "mobilenet_v2", "parallel_branches", "residual_cnn", "wide_and_deep"]

# A checkout's worker: one JSON command a line (model, rows, intra, calls), the calls' seconds a line back
_WORKER = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import poolserve
    from poolserve.proto import config_pb2
    from poolserve.runtime.graph import load_graph_def
    from poolserve.runtime.session import Session
    assert poolserve.__file__.startswith(sys.argv[1]), poolserve.__file__
    fixtures = sys.argv[2]
    sessions = {}
    for line in sys.stdin:
        c = json.loads(line)
        key = (c["model"], c["rows"], c["intra"])
        if key not in sessions:
            with np.load(f"{fixtures}/{c['model']}.npz") as data:
                feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
                fetches = [k[4:] for k in data.files if k.startswith("out:")]
            if c["rows"]:
                feeds = {k: np.resize(v, (c["rows"], *v.shape[1:])) for k, v in feeds.items()}
            config = config_pb2.ConfigProto(
                inter_op_parallelism_threads=2, intra_op_parallelism_threads=c["intra"]
            )
            s = Session(load_graph_def(f"{fixtures}/{c['model']}.pb"), config=config)
            for _ in range(20):
                s.run(fetches, feeds)
            sessions[key] = (s, feeds, fetches)
        s, feeds, fetches = sessions[key]
        times = []
        for _ in range(c["calls"]):
            t0 = time.perf_counter()
            s.run(fetches, feeds)
            times.append(time.perf_counter() - t0)
        print(json.dumps(times), flush=True)
    """
)


class Worker:
    def __init__(self, checkout: Path, fixtures: Path) -> None:
        self.checkout = str(checkout.resolve())
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER, self.checkout, str(fixtures)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",  # nothing of the current directory on the worker's path
        )

    def calls(self, model: str, rows: int, intra: int, calls: int) -> list[float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        cmd = {"model": model, "rows": rows, "intra": intra, "calls": calls}
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker of {self.checkout} ended (exit {self.proc.wait()})")
        times: list[float] = json.loads(line)
        return times

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def compare(
    old: Worker, new: Worker, model: str, rows: int, intra: int, rounds: int, runs: int
) -> dict[str, Any]:
    medians: tuple[list[float], list[float]] = ([], [])
    for r in range(rounds):
        order = [(0, old), (1, new)] if r % 2 == 0 else [(1, new), (0, old)]
        for i, worker in order:
            time.sleep(0.05)
            medians[i].append(statistics.median(worker.calls(model, rows, intra, runs)))
    ratios = sorted(b / a for a, b in zip(*medians, strict=True))
    return {
        "model": model,
        "rows": rows,
        "intra_op_threads": intra,
        "old_ms": statistics.median(medians[0]) * 1e3,
        "new_ms": statistics.median(medians[1]) * 1e3,
        "ratio": statistics.median(ratios),
        "ratio_range": [ratios[0], ratios[-1]],
        "round_medians_ms": [[t * 1e3 for t in m] for m in medians],
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old", type=Path, help="the checkout to compare against")
    p.add_argument("new", type=Path, help="the checkout compared")
    p.add_argument("--model", action="append", choices=MODELS, help="a fixture (default: all)")
    p.add_argument("--batch", type=int, default=0, help="rows fed (default: each fixture's own)")
    p.add_argument("--intra-op-threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=16)
    p.add_argument("--runs", type=int, default=10, help="calls a worker makes in a round")
    p.add_argument("--fixtures", type=Path, default=ROOT / "tests" / "fixtures" / "models" / "realistic")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.rounds < 1 or args.runs < 1:
        p.error("--rounds and --runs must be at least 1")
    for d in (args.old, args.new):
        if not (d / "poolserve" / "__init__.py").is_file():
            p.error(f"{d} is not a poolserve checkout (no poolserve/__init__.py)")
    old, new = Worker(args.old, args.fixtures), Worker(args.new, args.fixtures)
    results = []
    try:
        print(f"{'model':18s} {'rows':>4s} {'old ms':>9s} {'new ms':>9s}  new / old (rounds)")
        for model in args.model or MODELS:
            r = compare(old, new, model, args.batch, args.intra_op_threads, args.rounds, args.runs)
            results.append(r)
            lo, hi = r["ratio_range"]
            rows = args.batch or "own"
            print(
                f"{model:18s} {rows:>4} {r['old_ms']:9.3f} {r['new_ms']:9.3f}  "
                f"{r['ratio']:.3f} ({lo:.2f}-{hi:.2f})",
                flush=True,
            )
    finally:
        old.close()
        new.close()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        record = {"old": str(args.old), "new": str(args.new), "results": results}
        args.json.write_text(json.dumps(record, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
