"""``poolserve loadtest --overload``: how the server behaves past its capacity.

First the capacity: a closed loop (``--concurrency``, default 8) for ``--capacity-duration`` seconds, its
successful answers per second (or ``--capacity R`` to skip the measurement). Then, for each multiple of it
(``--multiples``, default 1 2 3 5), Poisson arrivals at that rate for the step's duration (``--duration``),
and a pause to let the server settle. The generator's connections (one per request it may have open) are
opened before each step starts, as a population of clients with keep-alive pools would hold them. Each
step reports:

- goodput: answers 200 within the deadline (``--timeout-ms``, default 1000) per second, and as a fraction
  of the capacity;
- the accepted (200) answers' p50 and p99 latency, from the scheduled send, against the deadline;
- the shed fraction (503 and 429 answers) and the time to shed: the p99 latency of those answers;
- 504s, other errors, and connection errors (the client saw no HTTP answer);
- the server's RSS: its peak during the step and after the pause (``GET /v1/runtime/process``; the pause
  outlasts the server's idle release of kept memory, ``server.release_memory_idle_s``), against the idle
  RSS measured before the first step;
- the generator's own send lag (p99 of actual minus scheduled send): on a machine shared with the server,
  a generator starved of CPU shows here, and its lag is part of every latency above;
- the server's own view (``GET /v1/runtime/admission``): its accepted answers' p99 and its shed-at-arrival
  answers' p99, counted from its arrival stamp, so without the generator's lag or the socket's wait, and
  its event loop's lag p99 (how long bytes that arrived wait before the server reads them).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
from rich.table import Table

from poolserve.loadtest.generator import Load, Picker, Recorder, Sample, Send, run_phase

MiB = 1 << 20
SHED = frozenset({503, 429})
DEFAULT_MULTIPLES = (1.0, 2.0, 3.0, 5.0)
SETTLE_S = 4.0  # the pause after a step, before its "after" RSS is read (past the server's idle release)
RSS_EVERY_S = 0.5


@dataclass(frozen=True)
class Step:
    multiple: float
    rate: float
    duration: float


async def server_rss(client: httpx.AsyncClient) -> int | None:
    """The server's resident set size in bytes, from its /v1/runtime/process (None if it does not say)."""
    try:
        r = await client.get("/v1/runtime/process", timeout=5)
        value = r.json().get("rss_bytes") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return int(value) if isinstance(value, int) else None


async def server_view(client: httpx.AsyncClient, window_s: float) -> dict[str, Any] | None:
    """The server's own latencies of the step (from its arrival stamp: no generator lag, no socket wait):
    accepted and shed-at-arrival p50/p99, and the event loop's lag, from /v1/runtime/admission (None if it
    does not say)."""
    try:
        r = await client.get("/v1/runtime/admission", params={"window_s": window_s}, timeout=5)
        body = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(body, dict):
        return None
    return {
        "accepted": body.get("accepted"),
        "shed_at_arrival": body.get("shed_at_arrival"),
        "loop_lag": body.get("loop_lag"),
    }


def _p(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values) * 1e3, q)) if values else None


def summarize_step(
    samples: Sequence[Sample], step: Step, capacity: float, deadline_ms: float, wall_s: float
) -> dict[str, Any]:
    ok = [s.latency for s in samples if s.status == 200]
    good = [lat for lat in ok if lat * 1e3 <= deadline_ms]
    shed = [s.latency for s in samples if s.status in SHED]
    connection_errors = sum(1 for s in samples if isinstance(s.status, str))
    timeouts = sum(1 for s in samples if s.status == 504)
    other = len(samples) - len(ok) - len(shed) - connection_errors - timeouts
    goodput = len(good) / step.duration if step.duration > 0 else 0.0
    return {
        "multiple": step.multiple,
        "offered_rps": step.rate,
        "requests": len(samples),
        "accepted": len(ok),
        "goodput_rps": goodput,
        "goodput_of_capacity": goodput / capacity if capacity > 0 else None,
        "accepted_p50_ms": _p(ok, 50),
        "accepted_p99_ms": _p(ok, 99),
        "accepted_max_ms": max(ok) * 1e3 if ok else None,
        "deadline_ms": deadline_ms,
        "shed": len(shed),
        "shed_fraction": len(shed) / len(samples) if samples else 0.0,
        "time_to_shed_p99_ms": _p(shed, 99),
        "timeouts_504": timeouts,
        "other_errors": other,
        "connection_errors": connection_errors,
        "wall_s": wall_s,
    }


async def _watch_rss(client: httpx.AsyncClient, peak: list[int]) -> None:
    while True:
        rss = await server_rss(client)
        if rss is not None:
            peak[0] = max(peak[0], rss)
        await asyncio.sleep(RSS_EVERY_S)


async def run_steps(
    send: Send,
    pick: Picker,
    client: httpx.AsyncClient,
    capacity: float,
    multiples: Sequence[float],
    duration: float,
    deadline_ms: float,
    rng: random.Random,
    progress: Any = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Runs one open-loop step per multiple; returns the steps' summaries and the RSS figures."""
    await asyncio.sleep(SETTLE_S)
    idle = await server_rss(client)
    steps: list[dict[str, Any]] = []
    for multiple in multiples:
        step = Step(multiple, capacity * multiple, duration)
        if progress is not None:
            progress(f"{multiple:g}x capacity: {step.rate:.1f} req/s for {duration:g} s")
        # the generator's connections open before the step's clock starts (``RawHttpSender``): accepting
        # hundreds of them at once on a server computing at capacity took 0.7-1.4 s at the median (2x,
        # 2-core machine), which the step's first requests would otherwise report as the server's answer time
        opener = getattr(send, "open_connections", None)
        if opener is not None:
            await opener()
        recorder = Recorder()
        peak = [idle or 0]
        watcher = asyncio.create_task(_watch_rss(client, peak))
        start = time.perf_counter()
        try:
            await run_phase(send, pick, recorder, Load(rate=step.rate, duration=duration), rng)
        finally:
            watcher.cancel()
        wall = time.perf_counter() - start
        await asyncio.sleep(SETTLE_S)
        summary = summarize_step(recorder.samples, step, capacity, deadline_ms, wall)
        # how late the generator sent (its own CPU share): in every latency above, not the server's doing
        summary["send_lag_p99_ms"] = _p(recorder.send_lags, 99)
        summary["rss_peak_mib"] = peak[0] / MiB if peak[0] else None
        after = await server_rss(client)
        summary["rss_after_mib"] = after / MiB if after else None
        summary["server"] = await server_view(client, time.perf_counter() - start)
        steps.append(summary)
    memory = {"rss_idle_mib": idle / MiB if idle else None}
    return steps, memory


def _f(value: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


COLUMNS = (
    "load",
    "offered req/s",
    "goodput req/s (x capacity)",
    "accepted p50 / p99 ms (deadline)",
    "shed",
    "time to shed p99 ms",
    "504",
    "conn. errors",
    "RSS peak / after MiB (idle)",
    "send lag p99 ms",
    "server: accepted p99 / shed p99 / loop lag p99 ms",
)


def _server_cell(view: dict[str, Any] | None) -> str:
    if not view:
        return "-"
    accepted = (view.get("accepted") or {}).get("p99_ms")
    shed = (view.get("shed_at_arrival") or {}).get("p99_ms")
    lag = (view.get("loop_lag") or {}).get("p99_ms")
    return f"{_f(accepted, '{:.0f}')} / {_f(shed)} / {_f(lag)}"


def rows(steps: list[dict[str, Any]], memory: dict[str, Any]) -> list[list[str]]:
    idle = memory.get("rss_idle_mib")
    return [
        [
            f"{s['multiple']:g}x",
            _f(s["offered_rps"]),
            f"{s['goodput_rps']:.1f} ({_f(s['goodput_of_capacity'], '{:.2f}')})",
            f"{_f(s['accepted_p50_ms'], '{:.0f}')} / {_f(s['accepted_p99_ms'], '{:.0f}')} "
            f"({s['deadline_ms']:.0f})",
            f"{s['shed_fraction']:.0%}",
            _f(s["time_to_shed_p99_ms"]),
            str(s["timeouts_504"]),
            str(s["connection_errors"]),
            f"{_f(s['rss_peak_mib'], '{:.0f}')} / {_f(s['rss_after_mib'], '{:.0f}')} ({_f(idle, '{:.0f}')})",
            _f(s.get("send_lag_p99_ms")),
            _server_cell(s.get("server")),
        ]
        for s in steps
    ]


def table(steps: list[dict[str, Any]], memory: dict[str, Any]) -> Table:
    t = Table()
    for i, name in enumerate(COLUMNS):
        t.add_column(name, justify="left" if i == 0 else "right")
    for row in rows(steps, memory):
        t.add_row(*row)
    return t


def markdown(steps: list[dict[str, Any]], memory: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in rows(steps, memory)]
    return "\n".join(lines)
