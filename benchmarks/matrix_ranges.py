"""Ranges over several runs of the pool matrix, as a Markdown table.

    python -m benchmarks.matrix_ranges [--by-workload] run1.json run2.json [...]

Each input is what ``python -m benchmarks.bench_pool_matrix --json`` wrote. Per workload, load and graph:
the range over the runs of poolserve's pool-on / pool-off ratios (p99 and throughput) and, where it was
measured, TensorFlow's; then each run's verdicts on the pool issue's targets. ``--by-workload`` folds the
graphs and the closed and the open loads of each workload into one row (the README's summary).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _ratios(load: dict[str, Any], graph: str) -> tuple[float, float] | None:
    off, on = load["no_pool"].get(graph), load["pool"].get(graph)
    if not off or not on or not off["requests"] or not on["requests"]:
        return None
    return on["p99_ms"] / off["p99_ms"], on["throughput_rps"] / off["throughput_rps"]


def _span(values: list[float]) -> str:
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"


def table(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| workload | load | graph | p99 ratio | throughput ratio | TF p99 ratio | TF throughput ratio |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    first = runs[0]["poolserve"]
    for workload, result in first.items():
        if "loads" not in result:
            continue
        for load in result["loads"]:
            for graph in result["graphs"]:
                cells: dict[str, list[float]] = {"p99": [], "tput": [], "tf_p99": [], "tf_tput": []}
                for run in runs:
                    for engine, prefix in (("poolserve", ""), ("tensorflow", "tf_")):
                        loads = (run.get(engine) or {}).get(workload, {}).get("loads", {})
                        r = _ratios(loads[load], graph) if load in loads else None
                        if r is not None:
                            cells[prefix + "p99"].append(r[0])
                            cells[prefix + "tput"].append(r[1])
                row = [_span(cells[k]) for k in ("p99", "tput", "tf_p99", "tf_tput")]
                lines.append(f"| {workload} | {load} | {graph} | {' | '.join(row)} |")
    lines.append("")
    for i, run in enumerate(runs, 1):
        for target in run["targets"].values():
            verdict = "met" if target["met"] else "NOT met"
            lines.append(f"- run {i}: {target['text']}: {verdict} ({target['detail']})")
    return "\n".join(lines) + "\n"


def by_workload(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| workload | closed loops: p99 ratio | throughput ratio | open loops: p99 ratio | throughput |",
        "| --- | --- | --- | --- | --- |",
    ]
    for workload, result in runs[0]["poolserve"].items():
        if "loads" not in result:
            continue
        spans: dict[str, list[float]] = {"closed_p99": [], "closed_tput": [], "open_p99": [], "open_tput": []}
        for run in runs:
            loads = run["poolserve"].get(workload, {}).get("loads", {})
            for load, measured in loads.items():
                kind = load.split(":")[0]
                for graph in result["graphs"]:
                    r = _ratios(measured, graph)
                    if r is not None:
                        spans[f"{kind}_p99"].append(r[0])
                        spans[f"{kind}_tput"].append(r[1])
        graphs = " + ".join(result["graphs"])
        cells = " | ".join(_span(v) for v in spans.values())
        lines.append(f"| {workload} ({graphs}) | {cells} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    fold = "--by-workload" in args
    paths = [a for a in args if a != "--by-workload"]
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    runs = [json.loads(Path(p).read_text()) for p in paths]
    sys.stdout.write(by_workload(runs) if fold else table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
