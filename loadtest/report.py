"""What a load test shows: run summaries (counts, throughput, latency percentiles), the rich live progress
and final tables, the JSON report, the latency plot and the warnings about the generator itself."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.table import Table

from poolserve.loadtest.generator import LoadtestError, Recorder, Sample

# A run in which more than this share of the requests failed (any answer but 200, or none) exits 1: its
# figures describe the failures (a run once exited 0 with 27,188 of 29,510 requests failed, the server gone
# mid-run). So does a run with any connection error. --overload is exempt: shedding is what it measures.
MAX_ERROR_SHARE = 0.01
# name in the report -> percentile
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p999": 99.9}
LATENCY_KEYS = (*PERCENTILES, "max")
# the generator counts as the bottleneck from this share of one core, or below this share of the rate
CPU_LIMIT = 0.9
RATE_LIMIT = 0.9


# --- summaries ------------------------------------------------------------------------------------------


def latency_ms(latencies_s: Sequence[float]) -> dict[str, float | None]:
    """p50/p90/p99/p99.9 (linear interpolation, so they are ordered), max, min and mean in ms."""
    if not latencies_s:
        return {k: None for k in (*LATENCY_KEYS, "min", "mean")}
    ms = np.asarray(latencies_s, dtype=np.float64) * 1e3
    out: dict[str, float | None] = {
        k: float(v) for k, v in zip(PERCENTILES, np.percentile(ms, list(PERCENTILES.values())), strict=True)
    }
    out.update(max=float(ms.max()), min=float(ms.min()), mean=float(ms.mean()))
    return out


def summarize(samples: Sequence[Sample], mode: str, duration_s: float) -> dict[str, Any]:
    """One run of the report. Latencies are those of the successful requests; errors are counted by
    HTTP status (or client-side failure); throughput is successful responses per second of the run."""
    ok = [s.latency for s in samples if s.ok]
    by_status = Counter(str(s.status) for s in samples if not s.ok)
    run: dict[str, Any] = {
        "mode": mode,
        "requests": len(samples),
        "successes": len(ok),
        "errors": len(samples) - len(ok),
        "errors_by_status": dict(sorted(by_status.items())),
        "timeouts": by_status.get("504", 0),
        "throughput_rps": len(ok) / duration_s if duration_s > 0 else 0.0,
        "latency_ms": latency_ms(ok),
        "duration_s": duration_s,
    }
    models = sorted({s.model for s in samples})
    if len(models) > 1:
        run["by_model"] = {
            m: summarize([s for s in samples if s.model == m], mode, duration_s) for m in models
        }
    return run


def is_connection_error(status: str) -> bool:
    """A request the server never answered: no connection, or one lost mid-request (the senders' exception
    names: ReadError, RemoteProtocolError, ...). A client timeout or a gRPC status is not one."""
    return status == "connect_error" or status.endswith("Error")


def verdict(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Whether the run passed: some request succeeded, at most MAX_ERROR_SHARE of them failed, and no
    connection error occurred; ``problems`` says why not, one line each."""
    requests = sum(r["requests"] for r in runs)
    failed = sum(r["errors"] for r in runs)
    connection = sum(n for r in runs for k, n in r["errors_by_status"].items() if is_connection_error(k))
    share = failed / requests if requests else 0.0
    problems = []
    if not any(r["successes"] for r in runs):
        problems.append("no request succeeded")
    elif share > MAX_ERROR_SHARE:
        problems.append(
            f"{failed:,} of {requests:,} requests failed ({share:.1%}; at most {MAX_ERROR_SHARE:.0%} may)"
        )
    if connection:
        problems.append(f"{connection:,} connection error(s): the server did not answer every request")
    return {
        "passed": not problems,
        "requests": requests,
        "failed": failed,
        "error_share": share,
        "max_error_share": MAX_ERROR_SHARE,
        "connection_errors": connection,
        "problems": problems,
    }


def check_writable(flag: str, path: str) -> None:
    """Fails early (before the load) when ``path`` cannot be written; leaves no file behind."""
    p = Path(path)
    existed = p.exists()
    try:
        with p.open("a"):
            pass
    except OSError as e:
        raise LoadtestError(f"cannot write {flag} {path}: {e.strerror or e}") from None
    if not existed:
        p.unlink(missing_ok=True)


def ratios(numerator: dict[str, Any], denominator: dict[str, Any]) -> dict[str, float | None]:
    """numerator / denominator for throughput and each latency figure (None where undefined)."""

    def div(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    out = {"throughput_rps": div(numerator["throughput_rps"], denominator["throughput_rps"])}
    for key in LATENCY_KEYS:
        out[f"latency_{key}"] = div(numerator["latency_ms"][key], denominator["latency_ms"][key])
    return out


def generator_warnings(
    cpu_s: float,
    wall_s: float,
    requested_rate: float | None,
    sent: int,
    send_span_s: float,
    schedule_span_s: float,
) -> list[str]:
    """Warnings when the generator may be what limits the load: its CPU time near one core over the
    run, or (open loop) sending below 90% of the requested rate. The rate is judged against the Poisson
    schedule actually drawn (``sent`` arrivals over ``schedule_span_s``), so that a short run's random
    arrival count is not mistaken for a slow generator."""
    warnings: list[str] = []
    if wall_s > 0 and cpu_s / wall_s >= CPU_LIMIT:
        warnings.append(
            f"the load generator used {cpu_s / wall_s:.0%} of a CPU core over the run: it may be the "
            "bottleneck (its own queueing is in the latencies); use fewer clients or a lower rate, or run "
            "it on another machine"
        )
    if requested_rate and send_span_s > 0 and schedule_span_s > 0 and sent > 1:
        achieved = sent / send_span_s
        if achieved < RATE_LIMIT * sent / schedule_span_s:
            warnings.append(
                f"the load generator sent {achieved:.1f} req/s of the requested {requested_rate:g} req/s "
                f"({achieved / requested_rate:.0%}): it could not keep up with the schedule"
            )
    return warnings


def write_report(
    path: str, runs: list[dict[str, Any]], config: dict[str, Any], extra: dict[str, Any]
) -> None:
    body = {"runs": runs, "config": config, **extra}
    try:
        Path(path).write_text(json.dumps(body, indent=2) + "\n")
    except OSError as e:
        raise LoadtestError(f"cannot write --report {path}: {e.strerror or e}") from None


# --- tables ---------------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _errors_text(run: dict[str, Any]) -> str:
    if not run["errors"]:
        return "0"
    detail = ", ".join(f"{status}: {n}" for status, n in run["errors_by_status"].items())
    return f"{run['errors']} ({detail})"


def results_table(runs: list[dict[str, Any]]) -> Table:
    """Metrics as rows, one column per run; a pool / no_pool column when both modes ran."""
    table = Table()
    table.add_column("metric")
    for run in runs:
        table.add_column(run["mode"], justify="right")
    by_mode = {r["mode"]: r for r in runs}
    compare = "pool" in by_mode and "no_pool" in by_mode
    ratio = ratios(by_mode["pool"], by_mode["no_pool"]) if compare else {}
    if compare:
        table.add_column("pool / no_pool", justify="right")

    def row(name: str, cells: list[str], ratio_key: str | None = None) -> None:
        extra = []
        if compare:
            extra = [_x(ratio.get(ratio_key) if ratio_key else None)]
        table.add_row(name, *cells, *extra)

    row("requests", [str(r["requests"]) for r in runs])
    row("errors", [_errors_text(r) for r in runs])
    row("timeouts (504)", [str(r["timeouts"]) for r in runs])
    row("throughput (req/s)", [f"{r['throughput_rps']:.1f}" for r in runs], "throughput_rps")
    labels = {"p50": "p50", "p90": "p90", "p99": "p99", "p999": "p99.9", "max": "max"}
    for key, label in labels.items():
        row(f"latency {label} (ms)", [_ms(r["latency_ms"][key]) for r in runs], f"latency_{key}")
    row("duration (s)", [f"{r['duration_s']:.2f}" for r in runs])
    return table


def model_ratios(runs: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per model, pool / no_pool for throughput and each latency figure, when both modes ran and several
    models were loaded (empty otherwise): a mix's totals can gain while a cheap model's tail loses."""
    by_mode = {r["mode"]: r for r in runs}
    pool, no_pool = by_mode.get("pool"), by_mode.get("no_pool")
    if pool is None or no_pool is None:
        return {}
    theirs = no_pool.get("by_model", {})
    return {m: ratios(run, theirs[m]) for m, run in pool.get("by_model", {}).items() if m in theirs}


def models_table(runs: list[dict[str, Any]]) -> Table | None:
    """One row per model (several models loaded): each run's throughput, p50 and p99, and the pool / no_pool
    ratios of throughput and p99 when both modes ran. None with one model."""
    models = sorted({m for r in runs for m in r.get("by_model", {})})
    if not models:
        return None
    table = Table()
    table.add_column("model")
    for run in runs:
        for label in ("req/s", "p50 ms", "p99 ms"):
            table.add_column(f"{run['mode']} {label}", justify="right")
    compare = model_ratios(runs)
    if compare:
        table.add_column("req/s pool / no_pool", justify="right")
        table.add_column("p99 pool / no_pool", justify="right")
    for m in models:
        cells = []
        for run in runs:
            one = run.get("by_model", {}).get(m)
            if one is None:
                cells += ["-", "-", "-"]
                continue
            lat = one["latency_ms"]
            cells += [f"{one['throughput_rps']:.1f}", _ms(lat["p50"]), _ms(lat["p99"])]
        if compare:
            r = compare.get(m, {})
            cells += [_x(r.get("throughput_rps")), _x(r.get("latency_p99"))]
        table.add_row(m, *cells)
    return table


def markdown_table(runs: list[dict[str, Any]]) -> str:
    """The same table as Markdown (for a README)."""
    table = results_table(runs)
    headers = [str(c.header) for c in table.columns]
    cells = [list(c.cells) for c in table.columns]
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    for i in range(table.row_count):
        lines.append("| " + " | ".join(str(col[i]) for col in cells) + " |")
    return "\n".join(lines)


# --- live progress --------------------------------------------------------------------------------------


class LiveProgress:
    """A progress bar with the current rate, p99 over the last seconds, errors and requests in flight.
    Silent when the console is not a terminal."""

    def __init__(self, console: Console, total: float, unit: str) -> None:
        self.unit = unit
        amount = (
            "{task.completed:.1f}/{task.total:.0f} s"
            if unit == "s"
            else "{task.completed:.0f}/{task.total:.0f}"
        )
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=20),
            TextColumn(amount),
            TextColumn("{task.fields[rate]:.0f} req/s"),
            TextColumn("p99 {task.fields[p99]} ms"),
            TextColumn("errors {task.fields[errors]}"),
            TextColumn("in flight {task.fields[in_flight]}"),
            console=console,
            disable=not console.is_terminal,
        )
        self.task: TaskID = self.progress.add_task("", total=total, rate=0.0, p99="-", errors=0, in_flight=0)

    def __enter__(self) -> LiveProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, recorder: Recorder, completed: float, description: str) -> None:
        rate, latencies = recorder.window()
        p99 = f"{np.percentile(latencies, 99) * 1e3:.1f}" if latencies else "-"
        self.progress.update(
            self.task,
            completed=completed,
            description=description,
            rate=rate,
            p99=p99,
            errors=recorder.errors,
            in_flight=recorder.in_flight,
        )


# --- the plot -------------------------------------------------------------------------------------------


def check_plotting() -> None:
    """Fails early (before the load) when --plot cannot work."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise LoadtestError(
            "--plot needs matplotlib, which is not installed: pip install 'poolserve[plot]'"
        ) from None


def write_plot(path: str, samples: Sequence[Sample], title: str, bins: int = 40) -> None:
    """Left: the latency CDF of each mode (log x). Right: latency over the run (scatter of the successful
    requests, and the p99 of each time bin as a line)."""
    check_plotting()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_mode: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        if s.ok:
            by_mode[s.mode].append(s)
    fig, (cdf, timeline) = plt.subplots(1, 2, figsize=(13, 5))
    end = max((s.start + s.latency for s in samples), default=1.0)
    edges = np.linspace(0.0, end, bins + 1)
    for mode, items in sorted(by_mode.items()):
        lat = np.sort(np.array([s.latency for s in items]) * 1e3)
        cdf.plot(lat, np.arange(1, len(lat) + 1) / len(lat), label=f"{mode} (n={len(lat)})")
        start = np.array([s.start for s in items])
        lat_t = np.array([s.latency for s in items]) * 1e3
        shown = np.linspace(0, len(items) - 1, min(len(items), 20000)).astype(int)
        points = timeline.scatter(start[shown], lat_t[shown], s=3, alpha=0.3, label=f"{mode}")
        # p99 per time bin, NaN (a gap in the line) where the mode did not run (the other mode's rounds)
        which = np.digitize(start, edges) - 1
        p99 = [np.percentile(lat_t[which == b], 99) if (which == b).any() else np.nan for b in range(bins)]
        centers = (edges[:-1] + edges[1:]) / 2
        timeline.plot(centers, p99, color=points.get_facecolor()[0][:3], linewidth=1.5, label=f"{mode} p99")
    cdf.set_xscale("log")
    cdf.set_xlabel("latency (ms, log scale)")
    cdf.set_ylabel("fraction of requests")
    cdf.set_title("latency CDF")
    cdf.grid(True, which="both", alpha=0.3)
    cdf.legend()
    timeline.set_yscale("log")
    timeline.set_xlabel("time since start (s)")
    timeline.set_ylabel("latency (ms, log scale)")
    timeline.set_title("latency over the run (dots: requests; lines: p99 per bin)")
    timeline.grid(True, which="both", alpha=0.3)
    if by_mode:
        timeline.legend(markerscale=4)
    fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=100, format="png")
    except OSError as e:
        raise LoadtestError(f"cannot write --plot {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
