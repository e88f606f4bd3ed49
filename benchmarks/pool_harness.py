"""The load that the RunHandlerPool benchmarks offer, the same for poolserve and for TensorFlow.

Only the standard library and numpy: TensorFlow's side (``benchmarks/tf_pool_worker.py``) runs this module
in TensorFlow's own Python. An engine is a ``Runner``: ``run(graph_index, pool)`` runs one step of a graph
with its run-handler pool on or off. On it:

- closed loop: ``clients`` threads, client i on graph i % graphs, each sending its next request when the
  last one returns;
- open loop: Poisson arrivals per graph, handed to a bounded set of sender threads; a latency counts from
  the request's scheduled send time, so time spent waiting for a free sender or a late dispatcher is in it
  (no coordinated omission);
- pool off and on in rounds of the same length, in ABBA order (off, on, on, off, ...) so that drift of the
  machine hits both modes alike; paired rounds of an open loop replay the same arrival schedule.

Every loop is bounded in count and in time: a request that has not returned ``HANG_SECONDS`` after its
round ended fails the benchmark instead of hanging it.
"""

from __future__ import annotations

import faulthandler
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Runner = Callable[[int, bool], object]
Log = Callable[[str], None]

MODES = ("no_pool", "pool")
MAX_REQUESTS = 1_000_000  # per client (closed loop) or per graph (open loop) and round
HANG_SECONDS = 60.0
OPEN_LOOP_SENDERS = 64
PROBE_CLIENTS = 8


def load_io(npz: Path, rows: int | None = None) -> tuple[dict[str, Any], list[str]]:
    """A fixture's recorded feeds (``in:<tensor>``, rows repeated to ``rows`` when given) and fetches
    (the ``out:<tensor>`` names)."""
    with np.load(npz) as data:
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in:")}
        fetches = [k[4:] for k in data.files if k.startswith("out:")]
    if rows:
        feeds = {k: np.resize(v, (rows, *v.shape[1:])) for k, v in feeds.items()}
    return feeds, fetches


# --- summaries --------------------------------------------------------------------------------------------


def percentile(values: Sequence[float] | npt.NDArray[np.float64], q: float) -> float:
    return float(np.percentile(values, q)) if np.size(values) else float("nan")


def summarize(latencies: Sequence[float], seconds: float, dropped: int = 0) -> dict[str, float]:
    """Requests, throughput (completed requests per second of the rounds) and latency in ms."""
    ms = np.asarray(latencies, dtype=np.float64) * 1e3
    out = {
        "requests": len(ms) - dropped,
        "throughput_rps": (len(ms) - dropped) / seconds if seconds else 0.0,
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "mean_ms": float(ms.mean()) if len(ms) else float("nan"),
    }
    if dropped:
        out["dropped"] = dropped
    return out


@dataclass
class Tally:
    """What the rounds of one mode measured: latencies and dropped requests per graph, and wall time."""

    latencies: list[list[float]]
    dropped: list[int]
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    @classmethod
    def empty(cls, graphs: int) -> Tally:
        return cls([[] for _ in range(graphs)], [0] * graphs)

    def add(self, other: Tally) -> None:
        for mine, theirs in zip(self.latencies, other.latencies, strict=True):
            mine.extend(theirs)
        self.dropped = [a + b for a, b in zip(self.dropped, other.dropped, strict=True)]
        self.seconds += other.seconds
        self.errors.extend(other.errors)

    def summary(self, names: Sequence[str]) -> dict[str, dict[str, float]]:
        """Per graph, and ``all`` of them together."""
        out = {
            name: summarize(lat, self.seconds, drop)
            for name, lat, drop in zip(names, self.latencies, self.dropped, strict=True)
        }
        out["all"] = summarize([x for lat in self.latencies for x in lat], self.seconds, sum(self.dropped))
        return out


def _join(threads: Sequence[threading.Thread], until: float) -> bool:
    """Joins the threads by ``until`` (perf_counter time); whether all of them ended."""
    for t in threads:
        t.join(timeout=max(0.0, until - time.perf_counter()))
    return not any(t.is_alive() for t in threads)


def _hung(loop: str) -> RuntimeError:
    """The error for a request that never returned, after every thread's stack went to stderr."""
    faulthandler.dump_traceback(all_threads=True)
    return RuntimeError(f"{loop}: a request still runs {HANG_SECONDS:g} s after the round ended")


# --- one round --------------------------------------------------------------------------------------------


def closed_loop(run: Runner, graphs: int, clients: int, seconds: float, pool: bool) -> Tally:
    """``clients`` threads, each sending its next request as soon as the last one returned."""
    tally = Tally.empty(graphs)
    start = threading.Barrier(clients + 1)
    window = [0.0, 0.0]  # start, end of the round

    def client(i: int) -> None:
        g = i % graphs
        mine = tally.latencies[g]
        start.wait()
        try:
            for _ in range(MAX_REQUESTS):
                t0 = time.perf_counter()
                if t0 >= window[1]:
                    return
                run(g, pool)
                mine.append(time.perf_counter() - t0)  # list.append is atomic
        except Exception as e:  # a failing graph ends its client; the round reports it
            tally.errors.append(f"graph {g}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    window[0] = time.perf_counter()
    window[1] = window[0] + seconds
    start.wait()
    if not _join(threads, window[1] + HANG_SECONDS):
        raise _hung("closed loop")
    tally.seconds = time.perf_counter() - window[0]
    return tally


def poisson_schedule(
    rates: Sequence[float], seconds: float, rng: np.random.Generator
) -> list[tuple[float, int]]:
    """Arrival times (seconds from the start) and graph index of independent Poisson streams, in order."""
    arrivals: list[tuple[float, int]] = []
    for g, rate in enumerate(rates):
        if rate <= 0:
            continue
        expected = rate * seconds
        n = min(MAX_REQUESTS, int(expected + 10 * math.sqrt(expected) + 10))
        times = np.cumsum(rng.exponential(1.0 / rate, n))
        arrivals.extend((float(t), g) for t in times[times < seconds])
    arrivals.sort()
    return arrivals


def open_loop(
    run: Runner,
    rates: Sequence[float],
    seconds: float,
    pool: bool,
    rng: np.random.Generator,
    senders: int = OPEN_LOOP_SENDERS,
) -> Tally:
    """Sends at Poisson arrival times whatever the engine does. Requests still queued ``max(seconds, 5)``
    seconds after the last arrival are dropped: counted, their latency so far kept (a lower bound)."""
    tally = Tally.empty(len(rates))
    schedule = poisson_schedule(rates, seconds, rng)
    inbox: queue.SimpleQueue[tuple[float, int] | None] = queue.SimpleQueue()
    abandon = threading.Event()
    last_done = [0.0]
    lock = threading.Lock()

    def sender() -> None:
        while (item := inbox.get()) is not None:
            due, g = item
            if abandon.is_set():
                with lock:
                    tally.latencies[g].append(time.perf_counter() - due)
                    tally.dropped[g] += 1
                continue
            try:
                run(g, pool)
            except Exception as e:
                tally.errors.append(f"graph {g}: {type(e).__name__}: {e}")
                continue
            done = time.perf_counter()
            with lock:
                tally.latencies[g].append(done - due)
                last_done[0] = max(last_done[0], done)

    threads = [threading.Thread(target=sender, daemon=True) for _ in range(senders)]
    for t in threads:
        t.start()
    start = time.perf_counter() + 0.005
    for offset, g in schedule:
        due = start + offset
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        inbox.put((due, g))
    for _ in threads:
        inbox.put(None)
    if not _join(threads, time.perf_counter() + max(seconds, 5.0)):
        abandon.set()
        if not _join(threads, time.perf_counter() + HANG_SECONDS):
            raise _hung("open loop")
    tally.seconds = max(last_done[0], start + seconds) - start
    return tally


# --- rounds and workloads ---------------------------------------------------------------------------------


def mode_of_round(r: int) -> str:
    """ABBA order: no_pool, pool, pool, no_pool, no_pool, pool, ..."""
    return MODES[(r + r // 2) % 2]


def alternate(round_fn: Callable[[int, bool], Tally], graphs: int, rounds: int) -> dict[str, Tally]:
    """``rounds`` rounds in ABBA order; ``round_fn(round, pool)`` runs one. The tallies of each mode."""
    tallies = {mode: Tally.empty(graphs) for mode in MODES}
    for r in range(rounds):
        mode = mode_of_round(r)
        tallies[mode].add(round_fn(r, mode == "pool"))
    return tallies


def warm_up(run: Runner, graphs: int, count: int = 5, seconds: float = 10.0) -> None:
    """Each graph a few times in both modes (plans, caches, cost estimates), within ``seconds``."""
    end = time.perf_counter() + seconds
    for _ in range(count):
        for g in range(graphs):
            for pool in (False, True):
                run(g, pool)
        if time.perf_counter() > end:
            return


@dataclass(frozen=True)
class Load:
    """``closed:N`` (N client threads) or ``open:F`` (Poisson arrivals at F times the measured capacity)."""

    kind: str
    value: float

    @classmethod
    def parse(cls, spec: str) -> Load:
        kind, _, value = spec.partition(":")
        if kind not in ("closed", "open") or not value:
            raise ValueError(f"load {spec!r}: expected closed:<clients> or open:<fraction of capacity>")
        load = cls(kind, float(value))
        if load.value <= 0 or (kind == "closed" and not load.value.is_integer()):
            raise ValueError(f"load {spec!r}: clients must be a positive integer, a fraction positive")
        return load

    @property
    def name(self) -> str:
        return f"closed:{int(self.value)}" if self.kind == "closed" else f"open:{self.value:g}"


def measure(
    run: Runner,
    names: Sequence[str],
    loads: Sequence[Load],
    rounds: int,
    seconds: float,
    probe_seconds: float,
    seed: int = 0,
    log: Log | None = None,
) -> dict[str, Any]:
    """One workload (the graphs ``names``, served by ``run``) under each load, pool off against on.

    Open loops offer each graph ``fraction`` x its capacity with the pool off: the load a user could serve
    before turning the pool on, in the same mix (``probe_capacity``).
    """
    graphs = len(names)
    result: dict[str, Any] = {"graphs": list(names), "loads": {}}
    capacity: list[float] = []
    if any(load.kind == "open" for load in loads):
        capacity, probed = probe_capacity(run, graphs, probe_seconds, seed)
        result["capacity_rps"] = dict(zip(names, capacity, strict=True))
        result["capacity_probe"] = probed
    for i, load in enumerate(loads):
        if log is not None:
            log(f"  {load.name}")
        extra: dict[str, Any] = {}
        if load.kind == "closed":
            one_round = _closed_rounds(run, graphs, int(load.value), seconds)
        else:
            rates = [load.value * c for c in capacity]
            one_round = _open_rounds(run, rates, seconds, [seed, i])
            extra["rates_rps"] = dict(zip(names, rates, strict=True))
        tallies = alternate(one_round, graphs, rounds)
        errors = [e for t in tallies.values() for e in t.errors]
        if errors:
            raise RuntimeError(f"{load.name}: {len(errors)} failed requests, the first: {errors[0]}")
        result["loads"][load.name] = {mode: t.summary(names) for mode, t in tallies.items()} | extra
    return result


def probe_capacity(
    run: Runner, graphs: int, seconds: float, seed: int = 0
) -> tuple[list[float], dict[str, Any]]:
    """Each graph's capacity with the pool off (requests a second), and how it was found.

    First a closed loop of ``PROBE_CLIENTS`` threads for ``seconds``: each graph's throughput there, in the
    mix its clients make. A closed loop overstates what an open loop sustains: there the engine shares the
    cores with the senders that keep the arrivals on time, and requests that queue cost it more than
    requests that wait in their clients (runs 17-19 of the matrix offered "70% of capacity" and got
    0.6-0.9 of it served without the pool, with p50 latencies of seconds). So those rates are then offered
    as an open loop for ``seconds``, and the capacity is the closed loop's rates scaled by the smallest
    share any graph was served of its rate there (the mix kept; 1 if every graph kept up)."""
    closed = closed_loop(run, graphs, PROBE_CLIENTS, seconds, False)
    if closed.errors:
        raise RuntimeError(f"capacity probe failed: {closed.errors[0]}")
    rates = [max(len(lat), 1) / closed.seconds for lat in closed.latencies]
    check = open_loop(run, rates, seconds, False, np.random.default_rng([seed, 7919]))
    if check.errors:
        raise RuntimeError(f"capacity probe failed: {check.errors[0]}")
    # served of what arrived (a few dozen arrivals of a slow graph vary by tens of percent from its rate):
    # completions over the round and its drain, against arrivals over the round
    served = [
        ((len(lat) - dropped) / check.seconds) / (len(lat) / seconds) if lat else 1.0
        for lat, dropped in zip(check.latencies, check.dropped, strict=True)
    ]
    scale = min(1.0, *served)
    probed = {"closed_loop_rps": rates, "open_loop_served": served, "scale": scale}
    return [rate * scale for rate in rates], probed


def _closed_rounds(run: Runner, graphs: int, clients: int, seconds: float) -> Callable[[int, bool], Tally]:
    return lambda r, pool: closed_loop(run, graphs, clients, seconds, pool)


def _open_rounds(
    run: Runner, rates: list[float], seconds: float, seed: list[int]
) -> Callable[[int, bool], Tally]:
    # Both rounds of an AB or BA pair replay one arrival schedule.
    return lambda r, pool: open_loop(run, rates, seconds, pool, np.random.default_rng([*seed, r // 2]))
