"""RunHandlerPool benchmark matrix: what a user who sets nothing gets from the pool, on many workloads.

    python -m benchmarks.bench_pool_matrix [--quick] [--workloads NAME,...] [--rounds 4] [--seconds 3]
        [--loads closed:8,closed:32,open:0.7,open:0.9] [--json out.json] [--tf-python /path/to/python]

A workload is one to three graphs served side by side, one ``Session(graph)`` each, built with no config;
nothing here sets BLAS threads, the GIL switch interval or any pool setting. Graphs are the realistic Keras
exports in ``tests/fixtures/models/realistic`` (``tools/make_realistic_fixtures.py``), fed their recorded
batch, and graphs generated with ``GraphBuilder``: ``branchesK.bN`` (K parallel branches of two 256-wide
Dense layers, concatenated, batch N) and ``chainL.bN`` (L cheap elementwise nodes in a row on [N, 256]).
Each workload runs under each load (``benchmarks/pool_harness.py``): closed loops at 8 and 32 client
threads, and open loops (Poisson arrivals, latency from the scheduled send time) at 70% and 90% of the
capacity a short closed-loop probe measured with the pool off. Pool off and on alternate by round
(RunOptions.experimental.use_run_handler_pool per request). With ``--tf-python``, TensorFlow runs the same
workloads (the generated graphs too: they are plain GraphDefs) with its own pool off and on, in a
subprocess, and its ratios are shown beside poolserve's.

The summary checks the targets of the pool issue: on every workload, load and graph the pool's p99 is at
most 0.9x and its throughput at least 0.95x that without it; the median p99 ratio is at most 0.7x; and
where TensorFlow was measured, poolserve's p99 ratio is below TensorFlow's.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.bench_pool import FIXTURES, pool_options
from benchmarks.pool_harness import Load, Log, Runner, load_io, measure, warm_up
from benchmarks.tf_pool_worker import run_jobs
from poolserve import GraphBuilder, Session, load_graph_def

REALISTIC = FIXTURES / "realistic"
WIDTH = 256  # of the generated graphs' activations and Dense layers

# name -> graphs served side by side
WORKLOADS: dict[str, tuple[str, ...]] = {
    "mobilenet_v2": ("mobilenet_v2",),
    "residual_cnn": ("residual_cnn",),
    "bert_tiny": ("bert_tiny",),
    "mlp_gelu": ("mlp_gelu",),
    "parallel_branches": ("parallel_branches",),
    "wide_and_deep": ("wide_and_deep",),
    "branches1_b64": ("branches1.b64",),
    "branches2_b1": ("branches2.b1",),
    "branches4_b16": ("branches4.b16",),
    "branches8_b64": ("branches8.b64",),
    "chain200_b1": ("chain200.b1",),
    "issue_branches_cnn": ("parallel_branches", "residual_cnn"),  # the pool issue's mixed case
    "vision_mix": ("mobilenet_v2", "residual_cnn"),
    "text_tabular_mix": ("bert_tiny", "mlp_gelu", "wide_and_deep"),
    "short_long": ("branches1.b1", "branches8.b64"),
    "chain_branches_cnn": ("chain200.b64", "branches4.b8", "mobilenet_v2"),
}
LOADS = "closed:8,closed:32,open:0.7,open:0.9"
# (rounds, seconds per round, seconds of the capacity probe)
FULL = (4, 3.0, 2.0)
QUICK = (2, 0.5, 0.5)
WARM_UP_SECONDS = 5.0

TARGET_P99, TARGET_TPUT, TARGET_MEDIAN_P99 = 0.9, 0.95, 0.7


# --- graphs -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphFiles:
    name: str
    pb: Path
    npz: Path

    def job(self) -> dict[str, Any]:
        return {"name": self.name, "pb": str(self.pb), "npz": str(self.npz), "rows": None}


def _dense(b: GraphBuilder, x: str, w: np.ndarray[Any, Any], name: str) -> str:
    with b.scope(name):
        bias = np.full(w.shape[1], 0.01, np.float32)
        return b.relu(b.bias_add(b.matmul(x, b.constant(w, name="kernel")), b.constant(bias, name="bias")))


def branches_graph(k: int, rng: np.random.Generator) -> tuple[GraphBuilder, str, str]:
    """``k`` independent branches of two Dense(256, relu) over one input, concatenated, a Dense(16) head."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, WIDTH))
    outs = []
    for i in range(k):
        h = x
        for layer in range(2):
            w = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
            h = _dense(b, h, w, f"branch{i}/dense{layer}")
        outs.append(h)
    y = outs[0]
    if k > 1:
        axis = b.constant(np.int32(1), name="concat/axis")
        y = b.op("ConcatV2", [*outs, axis], {"N": k, "T": np.float32, "Tidx": np.int32}, name="concat")
    head = (rng.standard_normal((WIDTH * k, 16)) / np.sqrt(WIDTH * k)).astype(np.float32)
    y = b.matmul(y, b.constant(head, name="head/kernel"), name="head/MatMul")
    return b, x, b.identity(y, name="output")


def chain_graph(length: int, rng: np.random.Generator) -> tuple[GraphBuilder, str, str]:
    """``length`` cheap elementwise nodes in a row (Mul, AddV2, Relu, Abs, ...): executor overhead."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, WIDTH))
    half, quarter = b.constant(np.float32(0.5), name="half"), b.constant(np.float32(0.25), name="quarter")
    y = x
    for i in range(length):
        match i % 4:
            case 0:
                y = b.mul(y, half)
            case 1:
                y = b.add(y, quarter)
            case 2:
                y = b.relu(y)
            case _:
                y = b.unary("Abs", y)
    return b, x, b.identity(y, name="output")


GENERATED: dict[str, Callable[[int, np.random.Generator], tuple[GraphBuilder, str, str]]] = {
    "branches": branches_graph,
    "chain": chain_graph,
}


def realistic_graphs() -> list[str]:
    return sorted(json.loads((REALISTIC / "models.json").read_text()))


def materialize(name: str, tmp: Path) -> GraphFiles:
    """A fixture's files, or a generated graph written as ``<name>.pb`` + ``<name>.npz`` under ``tmp``."""
    if (REALISTIC / f"{name}.pb").exists():
        return GraphFiles(name, REALISTIC / f"{name}.pb", REALISTIC / f"{name}.npz")
    match = re.fullmatch(r"([a-z]+)(\d+)\.b(\d+)", name)
    if match is None or match[1] not in GENERATED:
        known = ", ".join(realistic_graphs())
        raise SystemExit(f"graph {name!r}: not a realistic fixture ({known}), nor branchesK.bN / chainL.bN")
    rng = np.random.default_rng(sum(map(ord, name)))
    b, x, y = GENERATED[match[1]](int(match[2]), rng)
    feed = rng.standard_normal((int(match[3]), WIDTH)).astype(np.float32)
    with Session(b.graph_def) as s:
        out = s.run(y, {x: feed})
    files = GraphFiles(name, tmp / f"{name}.pb", tmp / f"{name}.npz")
    files.pb.write_bytes(b.graph_def.SerializeToString(deterministic=True))
    with open(files.npz, "wb") as f:
        np.savez(f, **{f"in:{x}": feed, f"out:{y}": out})
    return files


# --- poolserve --------------------------------------------------------------------------------------------


def check_outputs(name: str, got: list[Any], npz: Path) -> None:
    """poolserve computes what TensorFlow recorded (tests/test_tf_models.py's tolerance)."""
    with np.load(npz) as data:
        want = [data[k] for k in data.files if k.startswith("out:")]
    for g, w in zip(got, want, strict=True):
        scale = max(1.0, float(np.max(np.abs(w))))
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * scale, err_msg=name)


class Served:
    """One workload's graphs, each in a ``Session(graph)`` with no config: what a user gets by default."""

    def __init__(self, graphs: list[GraphFiles]) -> None:
        self.sessions: list[tuple[Session, dict[str, Any], list[str]]] = []
        for g in graphs:
            feeds, fetches = load_io(g.npz)
            session = Session(load_graph_def(g.pb))
            self.sessions.append((session, feeds, fetches))
            check_outputs(g.name, session.run(fetches, feeds), g.npz)
        self.off, self.on = pool_options()

    def run(self, i: int, pool: bool) -> object:
        session, feeds, fetches = self.sessions[i]
        return session.run(fetches, feeds, options=self.on if pool else self.off)

    def close(self) -> None:
        for session, _, _ in self.sessions:
            session.close()


def bench_poolserve(
    workloads: dict[str, list[GraphFiles]], loads: list[Load], timing: tuple[int, float, float], log: Log
) -> dict[str, Any]:
    """Each workload's ``measure`` result, or ``{"error": ...}`` when one of its requests failed or hung."""
    results: dict[str, Any] = {}
    for index, (name, graphs) in enumerate(workloads.items()):
        log(f"poolserve: {name} ({', '.join(g.name for g in graphs)})")
        served = Served(graphs)
        run: Runner = served.run
        try:
            warm_up(run, len(graphs), seconds=WARM_UP_SECONDS)
            results[name] = measure(run, [g.name for g in graphs], loads, *timing, seed=index, log=log)
        except RuntimeError as e:  # reported; the other workloads still run
            log(f"poolserve: {name} failed: {e}")
            results[name] = {"error": str(e)}
        finally:
            served.close()
    return results


# --- report -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One graph of one workload under one load: the pool's ratios, poolserve's and TensorFlow's."""

    workload: str
    load: str
    graph: str
    no_pool: dict[str, float]
    pool: dict[str, float]
    tf: tuple[float, float] | None  # TensorFlow's p99 and throughput ratios

    @property
    def p99(self) -> float:
        return _ratio(self.pool["p99_ms"], self.no_pool["p99_ms"])

    @property
    def tput(self) -> float:
        return _ratio(self.pool["throughput_rps"], self.no_pool["throughput_rps"])

    @property
    def where(self) -> str:
        return f"{self.workload} {self.load} {self.graph}"


def _ratio(a: float, b: float) -> float:
    return a / b if b and b == b and a == a else float("nan")


def cells(ours: dict[str, Any], theirs: dict[str, Any] | None) -> Iterator[Cell]:
    for workload, result in ours.items():
        tf = (theirs or {}).get(workload, {})
        for load, modes in result.get("loads", {}).items():
            for graph in result["graphs"]:
                tf_cell = None
                if "loads" in tf:
                    t = tf["loads"][load]
                    p99 = _ratio(t["pool"][graph]["p99_ms"], t["no_pool"][graph]["p99_ms"])
                    tput = _ratio(t["pool"][graph]["throughput_rps"], t["no_pool"][graph]["throughput_rps"])
                    tf_cell = (p99, tput)
                yield Cell(workload, load, graph, modes["no_pool"][graph], modes["pool"][graph], tf_cell)


def _x(value: float, good: bool | None = None) -> str:
    text = f"{value:.2f}x"
    if good is None or value != value:
        return text
    return f"[green]{text}[/]" if good else f"[red]{text}[/]"


def table(all_cells: list[Cell], with_tf: bool, title: str) -> Table:
    t = Table(title=title, title_justify="left")
    for column in ("workload", "load", "graph"):
        t.add_column(column)
    for column in ("no pool\nreq/s", "p50 ms", "p99 ms", "pool\nreq/s", "p50 ms", "p99 ms", "p99\nratio"):
        t.add_column(column, justify="right")
    t.add_column("tput\nratio", justify="right")
    if with_tf:
        t.add_column("TF p99\nratio", justify="right")
        t.add_column("TF tput\nratio", justify="right")
    last = ("", "")
    for i, c in enumerate(all_cells):
        key = (c.workload, c.load)
        row = [c.workload if key[0] != last[0] else "", c.load if key != last else "", c.graph]
        last = key
        for r in (c.no_pool, c.pool):
            row += [f"{r['throughput_rps']:.1f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}"]
        row += [_x(c.p99, c.p99 <= TARGET_P99), _x(c.tput, c.tput >= TARGET_TPUT)]
        if with_tf:
            row += [_x(c.tf[0], c.p99 < c.tf[0]), _x(c.tf[1])] if c.tf else ["", ""]
        t.add_row(*row, end_section=i + 1 < len(all_cells) and all_cells[i + 1].workload != c.workload)
    return t


def verdicts(all_cells: list[Cell]) -> dict[str, Any]:
    """The targets: each with whether it was met, the counts and the worst cells. A cell where a mode
    completed no request (an open loop offered a starved graph less than one request) does not count."""
    measured = [c for c in all_cells if not (math.isnan(c.p99) or math.isnan(c.tput))]
    skipped = (
        f"; {len(all_cells) - len(measured)} cells without requests" if len(measured) < len(all_cells) else ""
    )
    if not measured:
        return {}
    every = [c for c in measured if c.p99 <= TARGET_P99 and c.tput >= TARGET_TPUT]
    worst_p99 = max(measured, key=lambda c: c.p99)
    worst_tput = min(measured, key=lambda c: c.tput)
    median = statistics.median(c.p99 for c in measured)
    out: dict[str, Any] = {
        "every_cell": {
            "met": len(every) == len(measured),
            "text": f"every workload/load/graph: pool p99 <= {TARGET_P99}x and throughput >= {TARGET_TPUT}x",
            "detail": f"{len(every)} of {len(measured)} cells; worst p99 {worst_p99.p99:.2f}x "
            f"({worst_p99.where}), worst throughput {worst_tput.tput:.2f}x ({worst_tput.where}){skipped}",
        },
        "median_p99": {
            "met": median <= TARGET_MEDIAN_P99,
            "text": f"median p99 ratio over the matrix <= {TARGET_MEDIAN_P99}x",
            "detail": f"{median:.2f}x over {len(measured)} cells",
            "value": median,
        },
    }
    with_tf = [(c, c.tf[0]) for c in measured if c.tf is not None and not math.isnan(c.tf[0])]
    if with_tf:
        better = [c for c, tf_p99 in with_tf if c.p99 < tf_p99]
        out["better_than_tf"] = {
            "met": len(better) == len(with_tf),
            "text": "where TensorFlow was measured: poolserve's p99 ratio below TensorFlow's",
            "detail": f"{len(better)} of {len(with_tf)} cells; median p99 ratio poolserve "
            f"{statistics.median(c.p99 for c, _ in with_tf):.2f}x, TensorFlow "
            f"{statistics.median(t for _, t in with_tf):.2f}x",
        }
    return out


# --- command line -----------------------------------------------------------------------------------------


def _select(spec: str | None) -> dict[str, tuple[str, ...]]:
    if not spec:
        return dict(WORKLOADS)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}")
    return {n: WORKLOADS[n] for n in names}


def estimate_seconds(workloads: int, loads: list[Load], timing: tuple[int, float, float]) -> float:
    """Rounds, probe and warm-up of one engine, for the whole matrix (the open loops' drain not counted)."""
    rounds, seconds, probe = timing
    per_workload = len(loads) * rounds * (seconds + 0.1) + probe + 1.0
    return workloads * per_workload


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_pool_matrix",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds of 0.5 s per load")
    parser.add_argument("--workloads", help=f"comma-separated, of: {', '.join(WORKLOADS)}")
    parser.add_argument("--loads", default=LOADS, help=f"comma-separated closed:N / open:F (default {LOADS})")
    parser.add_argument("--rounds", type=int, help=f"rounds per load, in ABBA order (default {FULL[0]})")
    parser.add_argument("--seconds", type=float, help=f"length of one round (default {FULL[1]:g})")
    parser.add_argument(
        "--probe-seconds", type=float, help=f"closed-loop capacity probe (default {FULL[2]:g})"
    )
    parser.add_argument("--json", type=Path, help="write the results and the verdicts here")
    parser.add_argument("--tf-python", help="a Python with TensorFlow: runs the same workloads in TensorFlow")
    args = parser.parse_args(argv)
    base = QUICK if args.quick else FULL
    timing = (
        args.rounds if args.rounds is not None else base[0],
        args.seconds if args.seconds is not None else base[1],
        args.probe_seconds if args.probe_seconds is not None else base[2],
    )
    if timing[0] < 2 or timing[1] <= 0 or timing[2] <= 0:
        parser.error("--rounds must be at least 2 (one per mode); --seconds and --probe-seconds positive")
    try:
        loads = [Load.parse(x) for x in args.loads.split(",")]
    except ValueError as e:
        parser.error(str(e))
    selected = _select(args.workloads)
    console = Console(width=None if Console().is_terminal else 200, highlight=False)
    estimate = estimate_seconds(len(selected), loads, timing) * (2 if args.tf_python else 1)
    console.print(
        f"{len(selected)} workloads x {len(loads)} loads x {timing[0]} rounds of {timing[1]:g} s, "
        f"pool off and on; about {estimate / 60:.1f} min"
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pool_matrix_") as tmp:
        files = {g: materialize(g, Path(tmp)) for g in sorted({g for gs in selected.values() for g in gs})}
        workloads = {name: [files[g] for g in graphs] for name, graphs in selected.items()}
        ours = bench_poolserve(workloads, loads, timing, lambda line: console.print(line))
        theirs: dict[str, Any] | None = None
        if args.tf_python:
            jobs = [
                {
                    "name": name,
                    "graphs": [g.job() for g in graphs],
                    "loads": [load.name for load in loads],
                    "rounds": timing[0],
                    "seconds": timing[1],
                    "probe_seconds": timing[2],
                    "seed": index,
                }
                for index, (name, graphs) in enumerate(workloads.items())
            ]
            theirs = run_jobs(args.tf_python, jobs)
            for name, result in theirs.items():
                if "error" in result:
                    console.print(f"TensorFlow could not run {name}: {result['error']}")
    elapsed = time.perf_counter() - started

    all_cells = list(cells(ours, theirs))
    console.print(
        table(
            all_cells,
            theirs is not None,
            f"RunHandlerPool, no configuration: pool on / off, {timing[0]} x {timing[1]:g} s rounds per load",
        )
    )
    results = verdicts(all_cells)
    for v in results.values():
        mark = "[green]MET[/]" if v["met"] else "[red]NOT MET[/]"
        console.print(f"{mark}  {v['text']}: {v['detail']}")
    console.print(f"{elapsed / 60:.1f} min in all")
    if args.json:
        report = {
            "config": {
                "workloads": selected,
                "loads": [load.name for load in loads],
                "rounds": timing[0],
                "seconds": timing[1],
                "probe_seconds": timing[2],
                "quick": args.quick,
                "tf_python": args.tf_python,
            },
            "poolserve": ours,
            "tensorflow": theirs,
            "targets": results,
            "elapsed_s": elapsed,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
