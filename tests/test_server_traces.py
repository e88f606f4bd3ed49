"""server/traces.py and server/trace_db.py: the trace stores' bounds (count and bytes), finishing a record,
merging traces; the SQLite store shared by two stores (workers) and kept across a restart."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from poolserve.proto import config_pb2
from poolserve.runtime.errors import NotFoundError
from poolserve.server import trace_db
from poolserve.server.config import TraceSettings, load_config
from poolserve.server.trace_db import SqliteTraceStore, TraceStoreError, open_trace_store, resolve_path
from poolserve.server.traces import Span, TraceRecord, TraceStore

Store = TraceStore | SqliteTraceStore


def record(rid: str, spans: int = 1) -> TraceRecord:
    t = time.monotonic()
    meta = config_pb2.RunMetadata()
    meta.step_stats.dev_stats.add(device="/cpu:0").node_stats.add(node_name="matmul", thread_id=7)
    return TraceRecord(
        rid, "m", 200, [Span("compute", t, t + 0.001 * (i + 1), {"n": [i]}) for i in range(spans)], meta, t
    )


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[int, int], Store]]:
    made: list[Store] = []

    def make(capacity: int, capacity_bytes: int) -> Store:
        path = ":memory:" if request.param == "memory" else str(tmp_path / f"t{len(made)}.sqlite3")
        store = open_trace_store(TraceSettings(capacity=capacity, capacity_bytes=capacity_bytes, path=path))
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


def settled(store: Store) -> Store:
    if isinstance(store, SqliteTraceStore):
        store.flush()
    return store


def test_trace_store_bounds_count_and_bytes(make_store: Callable[[int, int], Store]) -> None:
    store = make_store(3, 10_000)
    for i in range(5):
        store.add(record(f"r{i}"))
    assert [r.request_id for r in settled(store).recent()] == ["r4", "r3", "r2"]
    with pytest.raises(NotFoundError, match="r0"):
        store.get("r0")
    small = make_store(100, record("x").size_bytes() * 2)
    for i in range(4):
        small.add(record(f"r{i}"))
    assert len(settled(small)) == 2 and small.bytes <= small.capacity_bytes
    small.add(record("huge", spans=1000))  # larger than the whole store: not kept
    assert len(settled(small)) == 2
    assert len(settled(make_store(0, 1000))) == 0


def test_sqlite_store_keeps_its_bound_when_its_writer_cannot_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer thread cannot open the file (it logs that traces stay in memory): the traces waiting
    for it are still bounded by ``capacity``, the oldest out first (they used to pile up without end)."""
    connect = trace_db._connect
    calls: list[str] = []

    def second_fails(path: str) -> Any:
        calls.append(path)
        if len(calls) > 1:  # the writer's own connection
            raise trace_db.sqlite3.OperationalError("unable to open database file")
        return connect(path)

    monkeypatch.setattr(trace_db, "_connect", second_fails)
    store = SqliteTraceStore(str(tmp_path / "t.sqlite3"), 3, 1 << 20)
    try:
        for i in range(50):
            store.add(record(f"r{i}"))
        assert [r.request_id for r in store.recent()] == ["r49", "r48", "r47"]
        with pytest.raises(NotFoundError, match="'r46'"):
            store.get("r46")
    finally:
        store._db.close()  # not close(): it would wait for a writer that has stopped


def test_trace_finish_and_merge(make_store: Callable[[int, int], Store]) -> None:
    store = make_store(10, 1 << 20)
    a, b = record("a"), record("b")
    store.add(a)
    store.add(b)
    store.finish("a", 504, a.spans[-1].end + 0.002)  # the encode span runs from the last span's end
    store.finish("ghost", 200, 0.0)  # unknown ids are ignored
    settled(store)
    assert store.get("a").status == 504
    assert [s.name for s in store.get("a").spans] == ["compute", "encode"]
    store.finish("a", 200, a.spans[-1].end + 1.0)  # a later request with the same id: left as it was
    settled(store)
    assert store.get("a").status == 504 and len(store.get("a").spans) == 2
    assert store.get("a").summary()["latency_ms"] == pytest.approx(3.0, abs=0.5)
    merged = store.merge(["a", "b"])
    server = [e for e in merged["traceEvents"] if e.get("cat") == "Server"]
    assert len(server) == 3 and len({e["pid"] for e in server}) == 2
    with pytest.raises(NotFoundError, match="'c'"):
        store.merge(["a", "c"])


def _same(a: TraceRecord, b: TraceRecord) -> dict[str, Any]:
    assert a.chrome_trace() == b.chrome_trace() and a.summary() == b.summary()
    return a.summary()


def test_sqlite_store_is_shared_between_workers_and_kept_across_restarts(tmp_path: Path) -> None:
    path = str(tmp_path / "state" / "traces.sqlite3")  # its folder is made
    one, two = SqliteTraceStore(path, 3, 1 << 20), SqliteTraceStore(path, 3, 1 << 20)
    a = record("a")
    one.add(a)
    assert one.get("a") is a  # from memory before it is written
    with pytest.raises(NotFoundError):
        two.get("a")
    one.finish("a", 200, a.spans[-1].end + 0.001)
    one.flush()
    _same(two.get("a"), a)  # the other worker reads it once committed
    assert two.get("a").run_metadata == a.run_metadata
    for i in range(3):
        two.add(record(f"b{i}"))
    two.flush()
    assert [r.request_id for r in one.recent()] == ["b2", "b1", "b0"]  # one bound over both writers
    one.close()
    two.close()
    again = SqliteTraceStore(path, 2, 1 << 20)  # restarted with a smaller capacity
    assert [r.request_id for r in again.recent()] == ["b2", "b1"]
    again.close()


def test_sqlite_store_writes_a_late_finish(tmp_path: Path) -> None:
    store = SqliteTraceStore(str(tmp_path / "t.sqlite3"), 10, 1 << 20)
    other = SqliteTraceStore(str(tmp_path / "t.sqlite3"), 10, 1 << 20)
    try:
        a = record("slow-encode")
        store.add(a)
        store.flush()  # written before its request finished
        assert other.get("slow-encode").finished is False
        store.finish("slow-encode", 503, a.spans[-1].end + 0.004)
        store.flush()
        late = other.get("slow-encode")
        assert late.status == 503 and [s.name for s in late.spans] == ["compute", "encode"]
    finally:
        store.close()
        other.close()


def test_trace_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert resolve_path(TraceSettings(), 8500) == str(tmp_path / "xdg" / "poolserve" / "traces-8500.sqlite3")
    assert resolve_path(TraceSettings(path=":memory:"), 8500) == ":memory:"
    assert isinstance(open_trace_store(TraceSettings()), TraceStore)  # "auto" in-process: memory
    (tmp_path / "server.toml").write_text('[traces]\npath = "state/traces.sqlite3"\n')
    assert load_config(tmp_path / "server.toml").traces.path == str(tmp_path / "state" / "traces.sqlite3")
    (tmp_path / "file").write_text("")
    with pytest.raises(TraceStoreError, match="traces.*file/t.sqlite3"):
        SqliteTraceStore(str(tmp_path / "file" / "t.sqlite3"), 10, 1000)
