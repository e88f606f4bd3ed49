"""Giving a burst's memory back once the server is idle.

The runtime keeps the memory its steps free for the next step (``runtime/memory.py``: glibc's malloc tuned
as TensorFlow's allocator behaves), so the resident set stays near the busiest moment's peak: after an
overload burst (hundreds of requests' bodies and arrays at once) 1.11-1.45x the idle server's. When no
inference request has arrived for ``server.release_memory_idle_s`` seconds (1 s), nothing is in flight,
something was served since the last look, and the resident set is more than ``MARGIN`` above what it was
after the last release (or before the first request), ``IdleMemoryRelease`` collects cyclic garbage and
hands malloc's free memory back (``malloc_trim``, in a thread: a few milliseconds); the first step after it
faults its pages in again, once. After the overload benchmark's steps the server is back at 0.97-1.13x
its idle resident set (1.11-1.45x without it). The margin leaves the steady working set of light traffic
alone (a request every few seconds would otherwise fault its pages in every time), and releases are at
least ``MIN_INTERVAL_S`` apart. Under the server's lifespan (``start``/``stop``), on the event loop.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from poolserve.runtime.memory import release_freed_memory

log = logging.getLogger("poolserve")

MARGIN = 0.1  # released when the resident set is above (1 + MARGIN) x its level after the last release
MIN_INTERVAL_S = 10.0
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _collect_and_release() -> bool:
    """Collects cyclic garbage first (a failed request's exception holds its frames and their arrays until
    the collector runs), then hands malloc's free memory back."""
    gc.collect()
    return release_freed_memory()


def resident_bytes() -> int | None:
    """The process's resident set size (Linux's /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class IdleMemoryRelease:
    """Watches ``arrivals`` (requests come to admission so far) and ``busy`` (requests or steps in flight)
    every ``idle_s / 2`` seconds (at most 1 s); ``release`` runs when they have been still ``idle_s``."""

    idle_s: float
    arrivals: Callable[[], int]
    busy: Callable[[], bool]
    release: Callable[[], bool] = _collect_and_release
    resident: Callable[[], int | None] = resident_bytes
    releases: int = 0  # times memory was handed back
    floor: int | None = None  # the resident set after the last release (at start: before any request)
    _last_release: float = float("-inf")
    _seen: int = 0  # arrivals at the last look
    _quiet_since: float = 0.0
    _served: bool = False  # something arrived since the last release
    _timer: asyncio.TimerHandle | None = None
    _running: asyncio.Future[bool] | None = None

    def start(self) -> None:
        if self.idle_s > 0:
            self._seen = self.arrivals()
            self._quiet_since = time.monotonic()
            self.floor = self.resident()
            self._next(asyncio.get_running_loop())

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _next(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_later(min(1.0, self.idle_s / 2), self._look, loop)

    def _look(self, loop: asyncio.AbstractEventLoop) -> None:
        self._next(loop)
        now = time.monotonic()
        arrivals = self.arrivals()
        if arrivals != self._seen or self.busy():
            self._seen = arrivals
            self._quiet_since = now
            self._served = True
            return
        if not self._served or self._running is not None or now - self._quiet_since < self.idle_s:
            return
        if now - self._last_release < MIN_INTERVAL_S:
            return  # looked at again when the interval has passed
        self._served = False
        rss = self.resident()
        if rss is None:
            return
        if self.floor is not None and rss <= self.floor * (1 + MARGIN):
            return
        self._last_release = now
        self._running = loop.run_in_executor(None, self.release)
        self._running.add_done_callback(lambda done: self._released(done, rss))

    def _released(self, done: asyncio.Future[bool], before: int) -> None:
        self._running = None
        if done.cancelled() or done.exception() is not None:
            return
        self.releases += 1
        self.floor = self.resident()
        log.info(
            "idle for %g s: handed freed memory back, resident %.0f -> %.0f MiB",
            self.idle_s,
            before / 2**20,
            (self.floor or 0) / 2**20,
        )
