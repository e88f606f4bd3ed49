"""Per-request traces: a bounded store (by count and bytes, oldest out first).

A trace is the step's RunMetadata (ops, from ``runtime.timeline``) plus the server's spans of the request
(receive+decode, wait for run handler, compute, encode) in a process of their own, all on the wall clock
the step stats use, so one Chrome trace shows both.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from poolserve.proto import config_pb2
from poolserve.runtime.errors import NotFoundError
from poolserve.runtime.timeline import Timeline, merge_chrome_traces

SERVER_PROCESS = "poolserve server"


@dataclass
class Span:
    """A phase of a request, in time.monotonic() seconds."""

    name: str
    start: float
    end: float
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class TraceRecord:
    request_id: str
    model: str
    status: int
    spans: list[Span]
    run_metadata: config_pb2.RunMetadata | None
    start_monotonic: float
    # wall clock (time.time()) minus monotonic, to put spans on the step stats' clock
    wall_offset: float = field(default_factory=lambda: time.time() - time.monotonic())
    end_monotonic: float = 0.0
    finished: bool = False  # the HTTP layer has added its last span

    def __post_init__(self) -> None:
        if not self.end_monotonic:
            self.end_monotonic = max((s.end for s in self.spans), default=self.start_monotonic)

    @property
    def latency_ms(self) -> float:
        return (self.end_monotonic - self.start_monotonic) * 1000.0

    @property
    def time(self) -> float:
        """When the request arrived (seconds since the epoch)."""
        return self.start_monotonic + self.wall_offset

    def size_bytes(self) -> int:
        meta = self.run_metadata.ByteSize() if self.run_metadata is not None else 0
        return 256 + meta + 128 * len(self.spans)

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.request_id,
            "model": self.model,
            "status": self.status,
            "latency_ms": round(self.latency_ms, 3),
            "time": self.time,
        }

    def _us(self, t: float) -> int:
        return int((t + self.wall_offset) * 1e6)

    def chrome_trace(self) -> dict[str, Any]:
        """Chrome trace JSON: the step's ops, then the server spans in a process of their own."""
        events: list[dict[str, Any]] = []
        if self.run_metadata is not None and self.run_metadata.HasField("step_stats"):
            # each output's life and the allocators' counters too: a server's trace is read for memory
            events = Timeline(self.run_metadata.step_stats).chrome_trace(show_memory=True)["traceEvents"]
        pid = max((e.get("pid", 0) for e in events), default=-1) + 1
        events.append(
            {
                "name": "process_name",
                "ph": "M",
                "pid": pid,
                "args": {"name": f"{SERVER_PROCESS} {self.model}"},
            }
        )
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "request"}})
        for span in self.spans:
            events.append(
                {
                    "ph": "X",
                    "cat": "Server",
                    "name": span.name,
                    "pid": pid,
                    "tid": 0,
                    "ts": self._us(span.start),
                    "dur": max(0, self._us(span.end) - self._us(span.start)),
                    "args": {"request_id": self.request_id, "model": self.model, **span.args},
                }
            )
        return {"traceEvents": events}


class TraceStore:
    """Thread-safe, bounded by ``capacity`` traces and ``capacity_bytes``; the oldest go first."""

    def __init__(self, capacity: int, capacity_bytes: int) -> None:
        self.capacity = capacity
        self.capacity_bytes = capacity_bytes
        self._records: OrderedDict[str, TraceRecord] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._records)

    @property
    def bytes(self) -> int:
        return self._bytes

    def add(self, record: TraceRecord) -> None:
        size = record.size_bytes()
        with self._lock:
            old = self._records.pop(record.request_id, None)
            if old is not None:
                self._bytes -= self._sizes.pop(record.request_id)
            if self.capacity <= 0 or size > self.capacity_bytes:
                return
            self._records[record.request_id] = record
            self._sizes[record.request_id] = size
            self._bytes += size
            while len(self._records) > self.capacity or self._bytes > self.capacity_bytes:
                rid, _ = self._records.popitem(last=False)
                self._bytes -= self._sizes.pop(rid)

    def finish(self, request_id: str, status: int, end: float) -> None:
        """The HTTP layer's last word on the trace its request stored, if any: the encode span (from the
        end of the last span) and the final status. A record finished before (an earlier request that
        used the same id) is left as it is."""
        with self._lock:
            record = self._records.get(request_id)
            if record is not None:
                finish_record(record, status, end)

    def get(self, request_id: str) -> TraceRecord:
        with self._lock:
            record = self._records.get(request_id)
        if record is None:
            raise not_found(request_id)
        return record

    def recent(self, limit: int = 100) -> list[TraceRecord]:
        """The newest traces first."""
        with self._lock:
            records = list(self._records.values())
        return records[::-1][:limit]

    def merge(self, request_ids: list[str]) -> dict[str, Any]:
        """One timeline from several requests' traces; NotFoundError names a missing id."""
        records = [self.get(rid) for rid in request_ids]
        return merge_chrome_traces(r.chrome_trace() for r in records)

    def close(self) -> None:
        """Nothing to write out: the traces go with the process."""


def finish_record(record: TraceRecord, status: int, end: float) -> None:
    """``TraceStore.finish`` on one record (unless it was finished before)."""
    if record.finished:
        return
    record.finished = True
    encode_start = record.spans[-1].end if record.spans else record.start_monotonic
    if end >= encode_start:
        record.spans.append(Span("encode", encode_start, end, {}))
    record.status = status
    record.end_monotonic = end


def not_found(request_id: str) -> NotFoundError:
    return NotFoundError(f"No trace for request '{request_id}' (not traced, or evicted from the store)")
