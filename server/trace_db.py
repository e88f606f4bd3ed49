"""Traces in a SQLite file: one store for every worker of a server, kept across restarts.

``SqliteTraceStore`` has ``TraceStore``'s interface (server/traces.py) and bounds (``capacity`` traces,
``capacity_bytes``, the oldest out first). The request path never waits for the disk: ``add`` and
``finish`` only touch a dict under a lock; a writer thread commits the traces in batches, once their
request has finished (its encode span is in) or ``_UNFINISHED_S`` after they were added. Until then
``get`` and ``recent`` answer from memory in the worker that served the request; the other workers see a
trace once it is committed, a few milliseconds after its answer was sent. WAL mode lets the workers read
while one of them writes.

``open_trace_store`` picks the store from ``[traces] path``; ``resolve_path`` turns "auto" into the
per-user state file ``poolserve serve`` uses.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from poolserve.proto import config_pb2
from poolserve.runtime.timeline import merge_chrome_traces
from poolserve.server.config import TraceSettings
from poolserve.server.traces import Span, TraceRecord, TraceStore, finish_record, not_found

log = logging.getLogger("poolserve")

MEMORY = ":memory:"
AUTO = "auto"
_SCHEMA_VERSION = 2
# a trace whose request has not finished this long after it was added is written as it is (seconds)
_UNFINISHED_S = 0.2
# ids written before their request finished, remembered to write the finish after them
_LATE_FINISHES = 1024
_BUSY_TIMEOUT_S = 5.0
# the writer gathers traces this long before a commit: one commit per trace costs its system calls per
# trace (measured about 0.2 ms a trace one at a time, under half that in batches)
_LINGER_S = 0.01
_COLUMNS = "id, model, status, start, wall_offset, end_, finished, spans, run_metadata, size"


def state_dir() -> Path:
    """Where poolserve keeps state for this user: $XDG_STATE_HOME/poolserve (~/.local/state/poolserve)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "poolserve"


def resolve_path(settings: TraceSettings, port: int) -> str:
    """The store ``poolserve serve`` opens: "auto" is a file per port in the state dir (memory, with a
    warning, when that dir cannot be made)."""
    if settings.path != AUTO:
        return settings.path
    folder = state_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        log.warning("traces kept in memory: cannot make %s (%s); set [traces] path", folder, e.strerror)
        return MEMORY
    return str(folder / f"traces-{port}.sqlite3")


def open_trace_store(settings: TraceSettings) -> TraceStore | SqliteTraceStore:
    """The store ``[traces] path`` names: in memory for ":memory:" and "auto" (an app made in-process),
    else the SQLite file."""
    if settings.path in (AUTO, MEMORY, ""):
        return TraceStore(settings.capacity, settings.capacity_bytes)
    return SqliteTraceStore(settings.path, settings.capacity, settings.capacity_bytes)


class TraceStoreError(RuntimeError):
    """The trace store's file cannot be used; the message names it."""


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=_BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None)
    # Switching to WAL can fail with "database is locked" at once, without the busy timeout, while another
    # process opens the same new file (two workers starting together): try again until the timeout.
    give_up = time.monotonic() + _BUSY_TIMEOUT_S
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > give_up:
                conn.close()
                raise
            time.sleep(0.02)
    # WAL with synchronous=NORMAL: no fsync per commit; a power cut may lose the last traces, never the file
    conn.execute("PRAGMA synchronous=NORMAL")
    # INSERT OR REPLACE's delete of the old row fires the delete trigger (the totals stay right) only so
    conn.execute("PRAGMA recursive_triggers=ON")
    return conn


def _row(record: TraceRecord) -> tuple[Any, ...]:
    spans = json.dumps([[s.name, s.start, s.end, s.args] for s in record.spans], default=str)
    meta = record.run_metadata.SerializeToString() if record.run_metadata is not None else None
    return (
        record.request_id,
        record.model,
        record.status,
        record.start_monotonic,
        record.wall_offset,
        record.end_monotonic,
        int(record.finished),
        spans,
        meta,
        record.size_bytes(),
    )


def _record(row: tuple[Any, ...]) -> TraceRecord:
    rid, model, status, start, wall_offset, end, finished, spans, meta, _size = row
    run_metadata = None
    if meta is not None:
        run_metadata = config_pb2.RunMetadata()
        run_metadata.ParseFromString(meta)
    return TraceRecord(
        rid,
        model,
        status,
        [Span(name, s, e, args) for name, s, e, args in json.loads(spans)],
        run_metadata,
        start_monotonic=start,
        wall_offset=wall_offset,
        end_monotonic=end,
        finished=bool(finished),
    )


class SqliteTraceStore:
    """Thread-safe and shared between processes; bounded by ``capacity`` and ``capacity_bytes``."""

    def __init__(self, path: str, capacity: int, capacity_bytes: int) -> None:
        self.path = path
        self.capacity = capacity
        self.capacity_bytes = capacity_bytes
        self._lock = threading.Lock()
        self._queued: OrderedDict[str, tuple[TraceRecord, float]] = OrderedDict()
        self._writing: dict[str, TraceRecord] = {}
        self._late: OrderedDict[str, None] = OrderedDict()  # written before their request finished
        self._finishes: list[tuple[str, int, float]] = []
        self._committing = False  # the writer holds taken traces or finishes not yet committed
        self._wake = threading.Event()
        self._closed = False
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._db = _connect(path)
            self._read_lock = threading.Lock()
            self._create()
        except (sqlite3.Error, OSError) as e:
            raise TraceStoreError(f"[traces] path {path!r}: cannot open the trace store: {e}") from None
        self._writer = threading.Thread(target=self._write_loop, name="trace-writer", daemon=True)
        self._writer.start()

    def _create(self) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version != _SCHEMA_VERSION:  # traces are a cache: another layout is dropped, not migrated
                db.execute("DROP TABLE IF EXISTS traces")
                db.execute("DROP TABLE IF EXISTS totals")
            db.execute(
                "CREATE TABLE IF NOT EXISTS traces (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE "
                "NOT NULL, model TEXT, status INTEGER, start REAL, wall_offset REAL, end_ REAL, finished "
                "INTEGER, spans TEXT, run_metadata BLOB, size INTEGER NOT NULL)"
            )
            # the count and bytes held, kept by triggers: a commit checks the bounds without a scan
            db.execute(
                "CREATE TABLE IF NOT EXISTS totals (k INTEGER PRIMARY KEY CHECK (k = 0), n INTEGER NOT NULL, "
                "bytes INTEGER NOT NULL)"
            )
            db.execute("INSERT OR IGNORE INTO totals VALUES (0, 0, 0)")
            for name, event, change in (
                ("added", "INSERT", "n = n + 1, bytes = bytes + NEW.size"),
                ("removed", "DELETE", "n = n - 1, bytes = bytes - OLD.size"),
                ("resized", "UPDATE OF size", "bytes = bytes - OLD.size + NEW.size"),
            ):
                db.execute(
                    f"CREATE TRIGGER IF NOT EXISTS traces_{name} AFTER {event} ON traces "
                    f"BEGIN UPDATE totals SET {change} WHERE k = 0; END"
                )
            db.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
            self._evict(db)  # the bounds may be smaller than the last run's
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    # --- the request path: memory only --------------------------------------------------------------------

    def add(self, record: TraceRecord) -> None:
        if self.capacity <= 0 or record.size_bytes() > self.capacity_bytes:
            return
        with self._lock:
            self._queued[record.request_id] = (record, time.monotonic())
            self._queued.move_to_end(record.request_id)
            # the file keeps the bounds; what waits for it keeps the count bound too, so that a writer that
            # cannot keep up or has stopped (the file cannot be opened) does not hold every trace since
            while len(self._queued) > self.capacity:
                self._queued.popitem(last=False)
        self._wake.set()

    def finish(self, request_id: str, status: int, end: float) -> None:
        """As ``TraceStore.finish``. Called for every request, traced or not: costs a lookup when not."""
        with self._lock:
            queued = self._queued.get(request_id)
            if queued is not None:
                finish_record(queued[0], status, end)
            else:
                writing = self._writing.get(request_id)
                if writing is None and request_id not in self._late:
                    return
                if writing is not None:
                    finish_record(writing, status, end)  # for reads until it is committed
                self._late.pop(request_id, None)
                self._finishes.append((request_id, status, end))
        self._wake.set()

    # --- reads --------------------------------------------------------------------------------------------

    def _in_memory(self) -> list[TraceRecord]:
        """Traces not committed yet, oldest first."""
        with self._lock:
            return [*self._writing.values(), *(r for r, _ in self._queued.values())]

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._read_lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as e:
                log.warning("trace store %s: %s", self.path, e)
                return []

    def get(self, request_id: str) -> TraceRecord:
        with self._lock:
            queued = self._queued.get(request_id)
            record = queued[0] if queued is not None else self._writing.get(request_id)
        if record is not None:
            return record
        rows = self._query(f"SELECT {_COLUMNS} FROM traces WHERE id = ?", (request_id,))
        if not rows:
            raise not_found(request_id)
        return _record(rows[0])

    def recent(self, limit: int = 100) -> list[TraceRecord]:
        """The newest traces first."""
        fresh = self._in_memory()[::-1][: min(limit, self.capacity)]
        seen = {r.request_id for r in fresh}
        rows = self._query(f"SELECT {_COLUMNS} FROM traces ORDER BY seq DESC LIMIT ?", (limit,))
        stored = [_record(row) for row in rows if row[0] not in seen]
        return (fresh + stored)[:limit]

    def merge(self, request_ids: list[str]) -> dict[str, Any]:
        records = [self.get(rid) for rid in request_ids]
        return merge_chrome_traces(r.chrome_trace() for r in records)

    def __len__(self) -> int:
        rows = self._query("SELECT n FROM totals")
        with self._lock:
            pending = len(self._queued) + len(self._writing)
        return min(self.capacity, (rows[0][0] if rows else 0) + pending)

    @property
    def bytes(self) -> int:
        rows = self._query("SELECT bytes FROM totals")
        return int(rows[0][0]) if rows else 0

    def flush(self, timeout: float = 5.0) -> None:
        """Waits until everything added so far is committed (tests; close)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not (self._queued or self._writing or self._finishes or self._committing):
                    return
                for rid, (record, _) in self._queued.items():  # written now, finished or not
                    self._queued[rid] = (record, 0.0)
            self._wake.set()
            time.sleep(0.002)

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        self._closed = True
        self._wake.set()
        self._writer.join(timeout=5.0)
        with self._read_lock:
            self._db.close()

    # --- the writer thread --------------------------------------------------------------------------------

    def _take(self) -> tuple[list[tuple[Any, ...]], list[tuple[str, int, float]]]:
        """The traces ready to commit (finished, or waiting too long) as rows, and the late finishes."""
        rows: list[tuple[Any, ...]] = []
        now = time.monotonic()
        with self._lock:
            ready = [
                rid
                for rid, (record, added) in self._queued.items()
                if record.finished or now - added >= _UNFINISHED_S
            ]
            for rid in ready:
                record, _ = self._queued.pop(rid)
                self._writing[rid] = record
                rows.append(_row(record))
                if not record.finished:
                    self._late[rid] = None
                    if len(self._late) > _LATE_FINISHES:
                        self._late.popitem(last=False)
            finishes, self._finishes = self._finishes, []
            self._committing = bool(rows or finishes)
        return rows, finishes

    def _write_loop(self) -> None:
        try:
            db = _connect(self.path)
        except sqlite3.Error as e:
            log.error("trace store %s: the writer cannot open it: %s; traces stay in memory", self.path, e)
            return
        while True:
            with self._lock:
                idle = not (self._queued or self._finishes)
            self._wake.wait(None if idle and not self._closed else _UNFINISHED_S / 4)
            self._wake.clear()
            if not self._closed:
                time.sleep(_LINGER_S)
            rows, finishes = self._take()
            if rows or finishes:
                self._commit(db, rows, finishes)
                with self._lock:
                    for row in rows:
                        self._writing.pop(row[0], None)
                    self._committing = False
            elif self._closed:
                db.close()
                return

    def _commit(
        self, db: sqlite3.Connection, rows: list[tuple[Any, ...]], finishes: list[tuple[str, int, float]]
    ) -> None:
        try:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                f"INSERT OR REPLACE INTO traces ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows
            )
            for rid, status, end in finishes:
                found = db.execute(f"SELECT {_COLUMNS} FROM traces WHERE id = ?", (rid,)).fetchall()
                if found:
                    record = _record(found[0])
                    finish_record(record, status, end)
                    row = _row(record)
                    db.execute(
                        "UPDATE traces SET status = ?, end_ = ?, finished = 1, spans = ?, size = ? "
                        "WHERE id = ?",
                        (row[2], row[5], row[7], row[9], rid),
                    )
            self._evict(db)
            db.execute("COMMIT")
        except sqlite3.Error as e:  # traces are best effort: a full disk loses them, not the requests
            log.warning("trace store %s: %d trace(s) not written: %s", self.path, len(rows), e)
            if db.in_transaction:
                db.execute("ROLLBACK")

    def _evict(self, db: sqlite3.Connection) -> None:
        """The oldest out until both bounds hold."""
        n, size = db.execute("SELECT n, bytes FROM totals").fetchone()
        if n > self.capacity:
            db.execute(
                "DELETE FROM traces WHERE seq <= (SELECT seq FROM traces ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                (max(0, self.capacity),),
            )
            size = db.execute("SELECT bytes FROM totals").fetchone()[0]
        if size <= self.capacity_bytes:
            return
        db.execute(
            "DELETE FROM traces WHERE seq <= (SELECT MAX(seq) FROM (SELECT seq, SUM(size) OVER "
            "(ORDER BY seq DESC) AS kept FROM traces) WHERE kept > ?)",
            (self.capacity_bytes,),
        )
