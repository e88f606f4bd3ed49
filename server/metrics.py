"""Prometheus metrics of one app, in its own registry (tests build many apps in one process).

Under ``poolserve serve --workers N`` the supervisor sets ``PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's
multiprocess mode, chosen by that variable when the library is first imported): every worker writes its
values to files there and ``/metrics`` adds up all workers' (MultiProcessCollector). Gauges computed on
demand cannot be read across processes, so there each worker stores them every second and at a scrape.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

from poolserve.runtime.run_handler import PoolStats

# how often a worker of several stores its gauges for the other workers' scrapes (seconds)
_GAUGE_REFRESH_S = 1.0
_GaugeMode = Literal["livesum", "livemax"]


def multiprocess_dir() -> str | None:
    """The folder of prometheus-client's multiprocess mode, if this process is one worker of several."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(
        self,
        pool_stats: Callable[[], PoolStats | None],
        traces_stored: Callable[[], int],
        steps_running: Callable[[], int],
        in_flight: Callable[[], int],
    ) -> None:
        self.registry = CollectorRegistry()
        self._pool_stats = pool_stats
        # labelled children by label values: ``labels()`` validates and locks on every call
        self._children: dict[tuple[object, ...], Any] = {}
        self._multiprocess = multiprocess_dir()
        self._stored: list[tuple[Gauge, Callable[[], float]]] = []
        r = self.registry
        self.requests = Counter(
            "poolserve_requests", "Requests answered", ["model", "endpoint", "status"], registry=r
        )
        self.latency = Histogram(
            "poolserve_request_latency_seconds",
            "Time from receiving a request to sending its answer",
            ["model", "endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.handler_wait = Histogram(
            "poolserve_handler_wait_seconds",
            "Time a request waited for a RunHandler (0 with the pool off)",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "poolserve_batch_size",
            "Rows of the batch each batched request ran in",
            ["model"],
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            registry=r,
        )
        self.batch_queue_delay = Histogram(
            "poolserve_batch_queue_delay_seconds",
            "Time a batched request waited for its batch to start",
            ["model"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self._gauge(
            "poolserve_in_flight_requests", "Requests being served", "livesum", lambda: float(in_flight())
        )
        self.timeouts = Counter("poolserve_timeouts", "Requests past their deadline", ["model"], registry=r)
        self.rejected = Counter(
            "poolserve_rejected", "Requests refused by backpressure (max_in_flight)", registry=r
        )
        self._gauge(
            "poolserve_run_handler_pool_active_handlers",
            "RunHandlers in use",
            "livesum",
            lambda: self._pool_value("active_handlers"),
        )
        self._gauge(
            "poolserve_run_handler_pool_queued_closures",
            "Closures waiting in RunHandler queues",
            "livesum",
            lambda: self._pool_value("queued_closures"),
        )
        self._gauge(
            "poolserve_run_handler_pool_waiting_requests",
            "Requests waiting for a RunHandler",
            "livesum",
            lambda: self._pool_value("waiting_requests"),
        )
        self._gauge(
            "poolserve_steps_running",
            "Steps submitted and not yet ended",
            "livesum",
            lambda: float(steps_running()),
        )
        # the workers share one trace store: each reports the same count
        self._gauge(
            "poolserve_traces_stored",
            "Traces held by the trace store",
            "livemax",
            lambda: float(traces_stored()),
        )
        if self._multiprocess is not None:
            threading.Thread(target=self._keep_gauges, name="metrics-gauges", daemon=True).start()

    def _gauge(self, name: str, help: str, mode: _GaugeMode, value: Callable[[], float]) -> None:
        if self._multiprocess is None:
            Gauge(name, help, registry=self.registry).set_function(value)
        else:
            self._stored.append((Gauge(name, help, registry=self.registry, multiprocess_mode=mode), value))

    def _store_gauges(self) -> None:
        for gauge, value in self._stored:
            gauge.set(value())

    def _keep_gauges(self) -> None:
        while True:
            time.sleep(_GAUGE_REFRESH_S)
            with contextlib.suppress(Exception):  # a read racing shutdown: the next round tries again
                self._store_gauges()

    def child(self, metric: Counter | Histogram, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once per label values."""
        key = (id(metric), *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def count_request(self, model: str, endpoint: str, status: int, seconds: float | None) -> None:
        self.child(self.requests, model, endpoint, str(status)).inc()
        if seconds is not None:
            self.child(self.latency, model, endpoint).observe(seconds)

    def _pool_value(self, name: str) -> float:
        stats = self._pool_stats()
        return float(getattr(stats, name)) if stats is not None else 0.0

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition format and its content type (all workers' values, under --workers)."""
        if self._multiprocess is None:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        self._store_gauges()
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self._multiprocess)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
