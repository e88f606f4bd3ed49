"""Triton's statistics extension: what each model version's requests and steps cost, since it loaded.

Every served version (``ModelEntry.stats``) keeps plain numbers, added to on the event loop, where all its
requests and batches run: a request adds to a few of them once answered (``succeeded``, ``failed``), a
step once it ends (``executed``); no lock, no object per request (both calls together: 0.4-0.8 us on this
shared 2-core machine, timeit). ``report`` writes them as Triton's ``GET
/v2/models[/{m}[/versions/{v}]]/stats`` answers them:

- ``success``, ``fail``: requests answered, and failed (refused while decoding, failed at the model, past
  their deadline, cancelled), each with its time from arrival to its answer being ready (the body read
  and decoded, the wait, the step, the answer encoded); one shed by admission before it held its model
  version is in neither;
- ``queue``: from decoded to the step's start (the wait for a run handler, or for its batch);
- ``compute_infer``: the step (a batched request's: its batch's, the batch's concatenation and split
  included);
- ``compute_input``, ``compute_output``: never collected (count 0). A step takes the decoded arrays as they
  are and gives back arrays: there is no copy of inputs in or outputs out to time apart from it, and the
  decoding and encoding of a protocol's bytes (Triton's front ends' work, in no model statistic there) are
  in ``success``;
- ``inference_count``: each step's batch size, summed; ``execution_count``: the steps; ``batch_stats``: per
  batch size, its steps and their time. A model without batching runs each request as a step of batch
  size 1, as Triton counts one; a batching model's batch size is the rows of its step;
- ``cache_hit``, ``cache_miss``: 0 (poolserve has no response cache).

Under ``--workers N`` each worker counts its own requests: ``share`` makes it write its numbers to a folder
every worker reads (``SHARE_EVERY_S``), and ``report`` adds the others' to its own, so any worker answers
for all (theirs up to that long old).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

# how often a worker of several writes its numbers for the others' reports (seconds)
SHARE_EVERY_S = 1.0


class Phases(Protocol):
    """A request's times (time.monotonic()), as ``service.Timings`` keeps them."""

    received_at: float
    decoded_at: float
    handler_at: float  # the step's start (0: no step ran)
    compute_end: float


class BatchCounts:
    __slots__ = ("count", "infer_s")

    def __init__(self) -> None:
        self.count = 0
        self.infer_s = 0.0


class ModelStats:
    """One model version's counters in this process (see the module's text). Durations add up as float
    seconds (a float add costs half of turning each into integer nanoseconds; a float64 sum of a billion
    millisecond steps is still exact to a nanosecond) and are reported in nanoseconds."""

    __slots__ = (
        "batches",
        "executions",
        "fail",
        "fail_s",
        "infer_s",
        "inferences",
        "last",
        "queue_s",
        "success",
        "success_s",
    )

    def __init__(self) -> None:
        self.success = self.fail = self.inferences = self.executions = 0
        self.success_s = self.fail_s = self.queue_s = self.infer_s = 0.0
        self.last = 0.0  # time.monotonic() of the last request's answer (0: none yet)
        self.batches: dict[int, BatchCounts] = {}

    def succeeded(self, t: Phases, end: float) -> None:
        """A request answered at ``end``."""
        self.last = end
        self.success += 1
        self.success_s += end - t.received_at
        if t.handler_at:
            self.queue_s += t.handler_at - t.decoded_at
            self.infer_s += t.compute_end - t.handler_at

    def failed(self, received: float, end: float) -> None:
        """A request that arrived at ``received`` failed at ``end``."""
        self.last = end
        self.fail += 1
        self.fail_s += end - received

    def executed(self, batch_size: int, seconds: float) -> None:
        """A step of ``batch_size`` that took ``seconds`` ended well."""
        self.executions += 1
        self.inferences += batch_size
        counts = self.batches.get(batch_size)
        if counts is None:
            counts = self.batches[batch_size] = BatchCounts()
        counts.count += 1
        counts.infer_s += seconds

    def numbers(self) -> dict[str, Any]:
        """The counters as plain numbers, durations in ns and ``last_inference`` in ms since the epoch: to
        add up and report."""
        last = int((time.time() - time.monotonic() + self.last) * 1000) if self.last else 0
        return {
            "success": self.success,
            "success_ns": _ns(self.success_s),
            "fail": self.fail,
            "fail_ns": _ns(self.fail_s),
            "queue_ns": _ns(self.queue_s),
            "infer_ns": _ns(self.infer_s),
            "inferences": self.inferences,
            "executions": self.executions,
            "last_inference": last,
            "batches": {
                str(size): [b.count, _ns(b.infer_s)] for size, b in sorted(dict(self.batches).items())
            },
        }


# served versions: (model name, version, counters)
Versions = Iterable[tuple[str, int, ModelStats]]


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _add(total: dict[str, Any], more: dict[str, Any]) -> None:
    for key, value in more.items():
        if key == "batches":
            for size, (count, ns) in value.items():
                have = total["batches"].setdefault(size, [0, 0])
                have[0] += count
                have[1] += ns
        elif key == "last_inference":
            total[key] = max(total[key], value)
        else:
            total[key] += value


def _duration(count: int, ns: int) -> dict[str, int]:
    return {"count": count, "ns": ns}


def model_stat(name: str, version: int, n: dict[str, Any]) -> dict[str, Any]:
    """One version's numbers in Triton's JSON (``$model_stat``)."""
    none = _duration(0, 0)
    return {
        "name": name,
        "version": str(version),
        "last_inference": n["last_inference"],
        "inference_count": n["inferences"],
        "execution_count": n["executions"],
        "inference_stats": {
            "success": _duration(n["success"], n["success_ns"]),
            "fail": _duration(n["fail"], n["fail_ns"]),
            "queue": _duration(n["success"], n["queue_ns"]),
            "compute_input": none,
            "compute_infer": _duration(n["success"], n["infer_ns"]),
            "compute_output": none,
            "cache_hit": none,
            "cache_miss": none,
        },
        "batch_stats": [
            {
                "batch_size": int(size),
                "compute_input": none,
                "compute_infer": _duration(count, ns),
                "compute_output": none,
            }
            for size, (count, ns) in sorted(n["batches"].items(), key=lambda item: int(item[0]))
        ],
    }


class Statistics:
    """The server's statistics answer, over the versions it serves (and, under ``--workers``, the other
    workers' numbers)."""

    def __init__(self) -> None:
        self._folder: Path | None = None
        self._stop = threading.Event()

    def report(self, versions: Versions) -> dict[str, Any]:
        """``{"model_stats": [...]}`` for ``versions`` (name, version, counters), in their order."""
        others = self._others()
        stats = []
        for name, version, counters in versions:
            numbers = counters.numbers()
            for theirs in others.get((name, version), ()):
                _add(numbers, theirs)
            stats.append(model_stat(name, version, numbers))
        return {"model_stats": stats}

    # --- several workers -----------------------------------------------------------------------------------

    def share(self, folder: Path, versions: Callable[[], Versions]) -> None:
        """Makes this process one worker of several: every ``SHARE_EVERY_S`` (and at ``close``) it writes
        its numbers (``versions()``: its (name, version, counters)) to ``folder``, where the others read
        them."""
        folder.mkdir(exist_ok=True)
        self._folder = folder
        mine = folder / f"{os.getpid()}.json"
        writer = threading.Thread(
            target=self._keep_writing, args=(mine, versions), name="statistics", daemon=True
        )
        writer.start()

    def close(self) -> None:
        self._stop.set()

    def _keep_writing(self, path: Path, versions: Callable[[], Versions]) -> None:
        while True:
            stopping = self._stop.wait(SHARE_EVERY_S)
            with contextlib.suppress(Exception):  # a write racing a reload: the next round writes again
                write_numbers(path, versions())
            if stopping:
                return

    def _others(self) -> dict[tuple[str, int], list[dict[str, Any]]]:
        """The other workers' numbers by (model, version): every worker's file but this process's (a
        worker that died keeps its count; its replacement counts anew under its own pid)."""
        found: dict[tuple[str, int], list[dict[str, Any]]] = {}
        if self._folder is None:
            return found
        mine = f"{os.getpid()}.json"
        for path in self._folder.glob("*.json"):
            if path.name == mine:
                continue
            try:
                rows = json.loads(path.read_bytes())
            except (OSError, ValueError):  # gone, or being replaced: skipped this once
                continue
            for row in rows:
                found.setdefault((row["name"], row["version"]), []).append(row["numbers"])
        return found


def write_numbers(path: Path, versions: Versions) -> None:
    """This process's numbers, written whole (a reader sees the old file or the new one)."""
    rows = [{"name": n, "version": v, "numbers": c.numbers()} for n, v, c in versions]
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(rows))
    os.replace(partial, path)
