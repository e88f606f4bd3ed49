"""server/traces.py: the trace store's bounds (count and bytes), finishing a record, merging traces."""

from __future__ import annotations

import time

import pytest

from poolserve.runtime.errors import NotFoundError
from poolserve.server.traces import Span, TraceRecord, TraceStore


def record(rid: str, spans: int = 1) -> TraceRecord:
    t = time.monotonic()
    return TraceRecord(
        rid, "m", 200, [Span("compute", t, t + 0.001 * (i + 1)) for i in range(spans)], None, t
    )


def test_trace_store_bounds_count_and_bytes() -> None:
    store = TraceStore(capacity=3, capacity_bytes=10_000)
    for i in range(5):
        store.add(record(f"r{i}"))
    assert [r.request_id for r in store.recent()] == ["r4", "r3", "r2"]
    with pytest.raises(NotFoundError, match="r0"):
        store.get("r0")
    small = TraceStore(capacity=100, capacity_bytes=record("x").size_bytes() * 2)
    for i in range(4):
        small.add(record(f"r{i}"))
    assert len(small) == 2 and small.bytes <= small.capacity_bytes
    small.add(record("huge", spans=1000))  # larger than the whole store: not kept
    assert len(small) == 2
    assert len(TraceStore(0, 1000)) == 0


def test_trace_finish_and_merge() -> None:
    store = TraceStore(10, 1 << 20)
    a, b = record("a"), record("b")
    store.add(a)
    store.add(b)
    store.finish("a", 504, a.spans[-1].end + 0.002)  # the encode span runs from the last span's end
    store.finish("ghost", 200, 0.0)  # unknown ids are ignored
    assert store.get("a").status == 504
    assert [s.name for s in store.get("a").spans] == ["compute", "encode"]
    store.finish("a", 200, a.spans[-1].end + 1.0)  # a later request with the same id: left as it was
    assert store.get("a").status == 504 and len(store.get("a").spans) == 2
    assert store.get("a").summary()["latency_ms"] == pytest.approx(3.0, abs=0.5)
    merged = store.merge(["a", "b"])
    server = [e for e in merged["traceEvents"] if e.get("cat") == "Server"]
    assert len(server) == 3 and len({e["pid"] for e in server}) == 2
    with pytest.raises(NotFoundError, match="'c'"):
        store.merge(["a", "c"])
