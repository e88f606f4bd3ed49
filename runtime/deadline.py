"""A request's deadline: fixed once, when the request arrives, and read by every phase that can wait.

``Deadline`` is the one place a remaining time is computed: a server makes it when a request's headers
are read, ``Session`` makes one from ``RunOptions.timeout_in_ms`` (else ``operation_timeout_in_ms``) when a
library caller gives none, and the same object bounds the wait for a run handler and cancels the step. A
step is cancelled by one of two clocks: a timer of the caller's event loop (``Session.arun``), or the
``DeadlineTimer`` thread (``Session.run`` and ``submit``).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
import weakref
from typing import TYPE_CHECKING, Protocol

from poolserve.runtime.errors import DeadlineExceededError, OpError

if TYPE_CHECKING:
    from poolserve.runtime.executor import Step

log = logging.getLogger("poolserve")


TIMEOUT_IN_MS = "RunOptions.timeout_in_ms"
OPERATION_TIMEOUT = "ConfigProto.operation_timeout_in_ms"
SERVER_DEFAULT = "the server's default_timeout_ms"
# the server's other ways to set a request's timeout, each turned into RunOptions.timeout_in_ms
HEADER = "the X-Request-Timeout-Ms header"
KSERVE_TIMEOUT = "KServe's 'timeout' parameter"
GRPC_DEADLINE = "the gRPC call's deadline"


class Deadline:
    """``timeout_ms`` after ``start`` (``time.monotonic()``; default now). ``source`` names the setting
    it came from, for the errors' messages."""

    __slots__ = ("at", "source", "timeout_ms")

    def __init__(self, timeout_ms: int, start: float | None = None, source: str = TIMEOUT_IN_MS) -> None:
        self.timeout_ms = int(timeout_ms)
        self.at = (time.monotonic() if start is None else start) + self.timeout_ms / 1000.0
        self.source = source

    def remaining_ms(self) -> float:
        return (self.at - time.monotonic()) * 1000.0

    def wait_ms(self) -> int:
        """What is left, rounded up to whole milliseconds for an API that waits (at least 1)."""
        return max(1, math.ceil(self.remaining_ms()))

    def check(self, phase: str) -> None:
        """DeadlineExceededError naming ``phase`` if the deadline has passed."""
        if time.monotonic() >= self.at:
            raise DeadlineExceededError(
                f"The deadline of {self.timeout_ms} ms passed while {phase} ({self.source})"
            )

    def step_error(self) -> DeadlineExceededError:
        """The error of a step stopped by its deadline."""
        return DeadlineExceededError(
            f"Timed out waiting for the step to finish: the deadline of {self.timeout_ms} ms ({self.source}) "
            "has passed"
        )

    def __repr__(self) -> str:
        return f"Deadline({self.timeout_ms} ms, {self.remaining_ms():.1f} ms left)"


class Cancellable(Protocol):
    @property
    def finished(self) -> bool: ...

    def cancel(self, error: OpError | None = None) -> None: ...


class DeadlineTimer:
    """One daemon thread that cancels steps whose deadline has passed. It holds them weakly: a step that
    ended is freed at once, not kept alive (with everything it references) until its deadline."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, weakref.ref[Cancellable], Deadline]] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, deadline: Deadline, step: Cancellable) -> None:
        """Cancels ``step`` at its deadline unless it finished before."""
        with self._cond:
            ref = weakref.ref(step)
            heapq.heappush(self._heap, (deadline.at, next(self._seq), ref, deadline))
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="deadline_timer", daemon=True)
                self._thread.start()
            if self._heap[0][2] is ref:
                self._cond.notify()

    def _work(self) -> None:
        while True:
            with self._cond:
                while True:
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    if wait is None:
                        self._cond.wait()
                    elif wait > 0:
                        self._cond.wait(wait)
                    else:
                        _, _, ref, deadline = heapq.heappop(self._heap)
                        step = ref()
                        if step is not None and not step.finished:
                            break
                        step = None
            try:
                step.cancel(deadline.step_error())
            except Exception:  # one step's failure must not end the deadlines of all the others
                log.exception("cancelling a step at its deadline failed")
            step = None  # not kept alive while the thread waits for the next deadline


deadline_timer = DeadlineTimer()


def watch_cancellation(step: Step) -> None:
    """Lets the step's kernels see it cancelled (``OpContext.cancelled``), so a While stops between
    iterations when the deadline passes or the session closes. Weakly: a step must not keep itself alive
    through its own context (the deadline thread and the event loop's timers rely on ended steps being
    freed at once)."""
    ref = weakref.ref(step)

    def cancelled() -> bool:
        s = ref()
        return s is None or s.status is not None

    step.ctx.cancelled = cancelled


__all__ = ["Deadline", "DeadlineTimer", "deadline_timer", "watch_cancellation"]
