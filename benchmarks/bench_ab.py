"""Two poolserve checkouts timed against each other on the realistic fixtures: lone ``Session.run`` steps.

    python -m benchmarks.bench_ab OLD_DIR NEW_DIR [--model NAME ...] [--batch N] [--intra-op-threads 1]
        [--rounds 16] [--runs 10] [--json PATH]

``OLD_DIR`` and ``NEW_DIR`` are checkouts (``git archive <commit> | tar -x -C DIR``; ``.`` for this one).
Each runs in a worker subprocess of its own, ``bench_latency``'s worker for ``--baseline`` (so neither gets
the benchmark's own process, whose first calls after another engine's find the caches differently), with one
session per model at inter-op 2 and the given intra-op threads, warmed with 20 steps. A round runs
``--runs`` calls on one worker, then on the other, the order alternating round by round, with 50 ms between
workers (OpenBLAS's threads spin for a while after a call). Per model: both medians, and the median and
range of the per-round ratios new / old: the ratio of two workers that met the same minute of the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_latency import REALISTIC, Worker
from benchmarks.pool_harness import load_io

MODELS = ["bert_tiny", "mlp_gelu", "mobilenet_v2", "parallel_branches", "residual_cnn", "wide_and_deep"]
WARM_CALLS = 20  # calls before the first timed round, the worker's own 5 at load included


def open_checkout(checkout: Path) -> Worker:
    """``bench_latency``'s worker for another checkout, here for either side: the same process for both."""
    return Worker("baseline", sys.executable, str(checkout.resolve()))


def load(worker: Worker, fixtures: Path, model: str, rows: int, intra: int) -> None:
    _, fetches = load_io(fixtures / f"{model}.npz")
    answer = worker.call(
        op="load",
        name=model,
        pb=str(fixtures / f"{model}.pb"),
        npz=str(fixtures / f"{model}.npz"),
        rows=rows,
        fetches=fetches,
        intra=intra,
    )
    if not answer["ok"]:
        raise SystemExit(f"{model}: {answer['error']}")
    worker.call(op="time", name=model, runs=WARM_CALLS - 5)


def compare(
    old: Worker, new: Worker, fixtures: Path, model: str, rows: int, intra: int, rounds: int, runs: int
) -> dict[str, Any]:
    load(old, fixtures, model, rows, intra)
    load(new, fixtures, model, rows, intra)
    medians: tuple[list[float], list[float]] = ([], [])
    for r in range(rounds):
        order = [(0, old), (1, new)] if r % 2 == 0 else [(1, new), (0, old)]
        for i, worker in order:
            time.sleep(0.05)
            medians[i].append(statistics.median(worker.call(op="time", name=model, runs=runs)["times"]))
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
    p.add_argument("--fixtures", type=Path, default=REALISTIC)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.rounds < 1 or args.runs < 1:
        p.error("--rounds and --runs must be at least 1")
    for d in (args.old, args.new):
        if not (d / "poolserve" / "__init__.py").is_file():
            p.error(f"{d} is not a poolserve checkout (no poolserve/__init__.py)")
    old, new = open_checkout(args.old), open_checkout(args.new)
    results = []
    try:
        print(f"{'model':18s} {'rows':>4s} {'old ms':>9s} {'new ms':>9s}  new / old (rounds)")
        for model in args.model or MODELS:
            intra = args.intra_op_threads
            r = compare(old, new, args.fixtures, model, args.batch, intra, args.rounds, args.runs)
            results.append(r)
            lo, hi = r["ratio_range"]
            print(
                f"{model:18s} {args.batch or 'own':>4} {r['old_ms']:9.3f} {r['new_ms']:9.3f}  "
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
