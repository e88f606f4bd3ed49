"""The process-global RunHandlerPool: one scheduler for the inter-op work of every concurrent step.

Each ``Session.run`` that asks for it (``RunOptions.experimental.use_run_handler_pool``) gets a
``RunHandler`` with its own queue; the step's closures go there. The pool owns ``num_threads`` execution
slots and hands each free slot, with the next closure, to one thread: the closure comes from the first
handler in order that has work under its cap. Never more than ``num_threads`` threads run kernels, so
the cores (and the GIL) are not oversubscribed.

The order is priority (higher first), then one of two policies within a priority:

- ``fair`` (the default): requests of one kind (a session's plan: alike in cost) form a flow; flows share
  the machine by start-time fair queueing, each charged its dominant share of the interpreter and the cores
  (``_cost``: the time its closures held the GIL, or their CPU time over the cores if that is more)
  divided by its requests in flight; within a flow, arrival order. Without the pool, threads share the
  GIL and run their kernels beside each other: this keeps roughly that division of the machine between
  models, while requests of one model finish in order rather than all late, and kernels no longer fight
  for the cores (see ``KernelThreads``).
- ``deadline``: each request is due at ``arrival + stretch * expected CPU time`` (what its plan's steps
  took before): a short request goes ahead of a long one not yet due, and a long one once due goes ahead
  of every later arrival. ``stretch = 0`` is strict arrival order. Measured on mixed loads it moves CPU
  from long requests to short ones (or, in arrival order, the other way).

A thread that finishes a closure takes the next one itself, so a busy pool hands work on without
waking anyone, and a closure of a short step (under ``SHORT_STEP_S`` of CPU) waits for a thread that is
up and free soon rather than wake another. A synchronous caller (``RunHandler.help``) runs its own step
when a slot is free on its arrival, else waits for the step to end, woken once. A synchronous caller whose
step has nothing to hand off (short, or with no expensive node) takes no run handler at all: it waits for
a slot in the flows' order and is handed one directly (``enter_wait``); such a step counts in its flow
as a handler's does. A short step with kernels skips the pool altogether while the pool holds no long work
(``holds_long_work``, see ``Session._bypasses_pool``): its order would cost a hand-off per step. Between
expensive nodes a step checks whether a request ahead of it waits for a slot, and if so puts its next nodes
back in its queue (``preempted``): a long step cannot hold a thread while a more urgent request waits for
more than one node's time.

Why not TensorFlow's spread (each thread starts its search at a different request)? On few cores it sends
a thread to a younger request while the oldest still has ready work, which is processor sharing again;
the order above is work-conserving (a slot goes to a later request only when every earlier one has
nothing ready or is at its cap). The per-request cap keeps one wide request from taking every slot.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from poolserve.runtime.errors import DeadlineExceededError, InvalidArgumentError
from poolserve.runtime.threadpool import (
    Closure,
    KernelThreads,
    default_num_threads,
    kernel_clock,
    worker_init,
)

DEFAULT_MAX_HANDLERS = 128
MAX_HANDLERS_ENV = "POOLSERVE_RUN_HANDLER_MAX_CONCURRENT_HANDLERS"
# A thread takes work from a request only while it has fewer closures than this running.
MAX_RUNNING_PER_REQUEST = 10
# A closure of a step expected to take less CPU than this waits for a pool thread that is up and runs only
# such closures, rather than wake another: a wake-up costs a context switch and, on a busy machine, takes a
# core from someone (measured on the HTTP benchmark: 6.0 -> 5.2 context switches a request, +12% req/s).
SHORT_STEP_S = 200e-6
# A step expected to take less CPU than this runs from start to end on its caller's thread, with no run
# handler, when a slot is free and nobody waits for one (``RunHandlerPool.enter``): below this, a hand-off
# to a second thread costs about what a parallel branch would save (branches2.b1: ~290 us of CPU a step).
SLOT_STEP_S = 500e-6
# At most this many idle flows' tags are kept before those no longer ahead of the virtual time are dropped.
MAX_IDLE_FLOWS = 256
# How many steps may run beside the slots (the lane): a short step when every slot holds a long step's work,
# or an interpreter-only step (below) whenever the lane has room.
LANE_STEPS = 1
# A step with no expensive node that spent less than this share of its CPU time in timed kernels needs the
# interpreter, not a core of its own. In a slot it took a core from the kernels of other models, which the
# GIL let run beside it without the pool: chain200.b64 (2.2 ms, all interpreter) beside MobileNetV2 and
# branches4.b8, closed loop of 8, got 0.35-0.42x its no-pool throughput; with the lane open to it whatever
# the slots hold, 0.59-0.87x (quiet, two runs each; the other two models still gained).
INTERP_SHARE = 0.1
# Among requests of one priority, one expected to take T CPU seconds is due at arrival + DEFAULT_STRETCH * T.
DEFAULT_STRETCH = 8.0


class RunHandler:
    """One request's share of the pool: a queue of inter-op closures. Release it when the step ends."""

    __slots__ = (
        "_pool",
        "acquired_at",
        "cpu",
        "group",
        "helper",
        "inline",
        "key",
        "learn",
        "long",
        "parallel",
        "priority",
        "queue",
        "released",
        "running",
        "short",
        "step_id",
        "waited",
    )

    def __init__(self, pool: RunHandlerPool, step_id: int, priority: int, seq: int, waited: float) -> None:
        self._pool = pool
        self.step_id = step_id
        self.priority = priority
        self.acquired_at = time.monotonic()
        # (priority, then deadline, then arrival): the deadline is the arrival until expect() is told more
        self.key: tuple[int, float, int] = (-priority, self.acquired_at, seq)
        self.queue: deque[Closure] = deque()
        self.running = 0
        self.released = False
        self.helper: _Worker | None = None
        self.waited = waited
        self.cpu = 0.0  # thread CPU seconds its closures took
        self.short = False  # its step is known to take under SHORT_STEP_S of CPU
        self.long = True  # its step is not known to take under SLOT_STEP_S
        self.parallel = False  # its step runs kernels on several threads at once
        self.learn: Callable[[float], None] | None = None
        self.group: _Group | None = None  # the requests it shares the CPU with as one class (fair policy)
        # the caller runs the step's first nodes on a slot it took in begin(): its thread CPU time and
        # kernel time then
        self.inline: tuple[float, float] | None = None

    @property
    def id(self) -> int:
        """A number unique to this handler in the process (its arrival order)."""
        return self.key[2]

    def expect(
        self,
        seconds: float,
        learn: Callable[[float], None] | None = None,
        kind: object = None,
        parallel: bool = False,
    ) -> None:
        """Tells the pool about this step before its first closure is scheduled: the CPU time it is
        expected to take (0 = unknown), ``learn`` to call with the CPU time it really took (after its last
        closure), and its ``kind`` (e.g. its plan): requests of one kind have alike costs, so the fair
        policy serves them in arrival order and shares the CPU between kinds. ``parallel``: the step runs
        kernels on several threads at once, so each of its kernels gets a share of the cores (BLAS
        threads) even while it runs alone: a kernel that starts alone with every core, then has a sibling
        start beside it, keeps its BLAS threads busy-waiting for a core (branches4.b16, one caller: its
        first matmul took 1.9 ms instead of 0.1, and the step 2.4 ms against 1.2 without the pool). When
        a closure ends and leaves one running with nothing queued, that one gets every core back
        (``_serve``): a residual CNN, whose shortcut ran beside its main path, kept one BLAS thread to the
        end of its step (one caller, in turns: 16.5 ms with the pool against 14.4 without it; 14.3 now)."""
        self.learn = learn
        self.short = 0.0 < seconds < SHORT_STEP_S
        self.long = not 0.0 < seconds < SLOT_STEP_S
        self.parallel = parallel
        self._pool._expect(self, seconds, kind)

    def schedule_inter_op_closure(self, fn: Closure) -> None:
        self._pool._enqueue(self, fn)

    schedule = schedule_inter_op_closure  # the executor's Scheduler interface

    def saturated(self) -> bool:
        """Every slot is taken or work is waiting: a parallel branch would only queue (read without the
        lock: a hint, not a promise)."""
        pool = self._pool
        return pool._slots == 0 or pool._queued > 0 or pool._entries_n > 0

    def preempted(self) -> bool:
        """A request ahead of this one has closures waiting for a thread: this step should put its next
        expensive node back in its queue rather than run it now (read without the lock: a hint)."""
        pool = self._pool
        if not pool._queued and not pool._entries_n:
            return False
        if pool.fair:
            # under the lock: the flows are a dict of deques that other threads change (a step asks only
            # between expensive nodes, so the lock costs it nothing that shows)
            with pool._lock:
                mine = pool._order(self, True)
                first = pool._first_ready() if pool._queued else None
                if first is not None and first is not self and pool._order(first) < mine:
                    return True
                entry = pool._first_entry() if pool._entries_n else None
                return entry is not None and entry[1] < mine
        if pool._entries_n:
            with pool._lock:
                entry = pool._first_entry() if pool._entries_n else None
                if entry is not None and entry[1] < self.key:
                    return True
        for h in pool._active:
            if h is self:
                return False
            if h.queue and h.running < MAX_RUNNING_PER_REQUEST:
                return True
        return False

    def attach_caller(self) -> None:
        """Makes the calling thread this request's worker: call before scheduling, then ``help()``."""
        with self._pool._lock:
            self.helper = _Worker()
            self.helper.waiting = True

    def begin(
        self,
        seconds: float,
        learn: Callable[[float], None] | None = None,
        kind: object = None,
        wait: bool = True,
        parallel: bool = False,
    ) -> bool:
        """``expect`` and ``attach_caller`` in one: for a synchronous caller, which calls ``help()`` after
        starting its step. True: a slot was free and nobody waits for one, so the caller holds it now and
        runs the step's first nodes itself, with no hand-off (as a pool thread runs a closure); its
        ``help()`` then gives the slot back. False: the caller waits in ``help()`` for the pool; or, with
        ``wait=False`` (an event loop, which must not block), the pool's threads run the step."""
        self.learn = learn
        self.short = 0.0 < seconds < SHORT_STEP_S
        self.long = not 0.0 < seconds < SLOT_STEP_S
        self.parallel = parallel
        return self._pool._begin(self, seconds, kind, wait)

    def help(self) -> None:
        """Runs this handler's closures on the calling thread, as slots are granted, until released."""
        self._pool._help(self)

    def release(self) -> None:
        self._pool._release(self)

    def __repr__(self) -> str:
        return f"RunHandler(step={self.step_id}, priority={self.priority}, queued={len(self.queue)})"


class _Group:
    """Requests of one kind and priority under the fair policy: one flow of start-time fair queueing.

    ``tag`` is the flow's virtual time: the CPU seconds it received divided by how many of its requests
    were active, so each active request is owed the same share of the CPU (processor sharing, as threads
    fighting for the GIL would share it, but without the fight). The flow with the smallest tag is served
    next, its requests in arrival order; a flow that was idle starts at the smallest tag of the active ones,
    so it gets no credit for having been away."""

    __slots__ = ("active", "handlers", "key", "priority", "tag")

    def __init__(self, key: object, priority: int) -> None:
        self.key = key
        self.priority = priority
        self.tag = 0.0
        self.handlers: deque[RunHandler] = deque()  # active, in arrival order
        self.active = 0


@dataclass
class PoolStats:
    """A snapshot of the pool, for metrics."""

    threads: int
    max_handlers: int
    active_handlers: int
    waiting_requests: int
    queued_closures: int
    running_closures: int
    queued_per_handler: list[int]
    handlers_acquired: int
    handler_wait_seconds_total: float
    handler_held_seconds_total: float
    stretch: float
    policy: str
    kernel_threads: int


class _Waiter:
    __slots__ = ("done", "event", "future", "handler", "loop")

    def __init__(self) -> None:
        self.event: threading.Event | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.future: asyncio.Future[RunHandler] | None = None
        self.handler: RunHandler | None = None
        self.done = False


class _Parker:
    """A one-permit wake-up, cheaper than threading.Event (no Condition, one C call to wake): the
    dispatcher runs on the event loop for asyncio callers, so waking a thread must cost it little."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def unpark(self) -> None:
        # try/except, not contextlib.suppress: this runs on every hand-off, and the context manager costs
        # an object and two calls each time
        try:  # noqa: SIM105
            self._lock.release()
        except RuntimeError:  # already unparked: the permit is not counted twice
            pass

    def park(self, timeout: float = -1.0) -> bool:
        """Waits for the permit (at most ``timeout`` seconds if not negative); False if it timed out."""
        return self._lock.acquire(timeout=timeout)


class _Worker:
    """A thread that runs closures the dispatcher hands it: a pool thread or a helping caller."""

    __slots__ = ("awake", "busy", "long", "parker", "task", "waiting")

    def __init__(self) -> None:
        self.parker = _Parker()
        self.task: tuple[RunHandler, Closure] | None = None
        self.waiting = False
        self.awake = False  # a pool thread that is running or was woken, and has not parked since
        self.busy = False  # it runs a closure of a step that is not known to be short
        self.long = False  # its slot holds work of a step not known to take under SLOT_STEP_S


class _Entry:
    """A synchronous caller waiting for a slot to run a step on its own thread with no run handler
    (``RunHandlerPool.enter_wait``): a short step, or one with nothing to hand off or preempt."""

    __slots__ = ("interp", "kind", "n", "parker", "priority", "seq", "short", "since", "slot_id")

    def __init__(self, priority: int, short: bool, kind: object, seq: int, interp: bool = False) -> None:
        self.parker = _Parker()
        self.priority = priority
        self.short = short
        self.interp = interp  # no expensive node: the step needs the interpreter only (see _lane_open)
        self.kind = kind
        self.seq = seq
        self.since = time.monotonic()
        self.slot_id: int | None = None  # set when it is granted a slot or a place in the lane
        self.n = 0  # threads running the pool's work once it runs (for the kernel threads)


class RunHandlerPool:
    """A fixed set of threads and at most ``max_handlers`` concurrent requests."""

    def __init__(
        self,
        num_threads: int = 0,
        max_handlers: int = 0,
        stretch: float = DEFAULT_STRETCH,
        fair: bool = True,
    ) -> None:
        self.num_threads = num_threads if num_threads > 0 else default_num_threads()
        if max_handlers <= 0:
            max_handlers = int(os.environ.get(MAX_HANDLERS_ENV, DEFAULT_MAX_HANDLERS))
        self.max_handlers = max_handlers
        self.stretch = stretch
        # fair: kinds of request share the CPU, each kind in arrival order (see _Group); else the deadline
        # order (arrival + stretch x expected CPU time)
        self.fair = fair
        self._groups: dict[tuple[object, int], _Group] = {}
        self._ungrouped = 0  # active handlers in no flow yet
        self._entered = 0  # callers running a short step on a slot they took with enter()
        self._long = 0  # slots that hold work of steps not known to take under SLOT_STEP_S
        self._lane: set[int] = set()  # enter()'s steps that run beside the slots (see enter)
        self._on_loop: set[int] = set()  # enter()'s short steps that an event loop runs itself (see enter)
        self._long_entered: set[int] = set()  # enter()'s steps on a slot that are not short
        # the tags of idle flows that were ahead of the virtual time when they went idle (see _flow)
        self._idle_flows: dict[tuple[object, int], _Group] = {}
        # callers waiting in enter_wait(), per kind and priority in arrival order
        self._entries: dict[tuple[object, int], deque[_Entry]] = {}
        self._entries_n = 0
        self._entries_lane = 0  # of those, the ones that may take the lane (short or interpreter-only)
        self._vtime: dict[int, float] = {}  # per priority: the tag of the flow furthest behind
        self._urgent = 0  # active flows of a priority above 0
        # per worker: the thread CPU time and kernel time when its closure started
        self._local = threading.local()
        self._kernel_threads = KernelThreads()
        # BLAS threads wanted per kernel with n closures running (so that an unchanged count costs one
        # comparison per closure)
        self._wants = [self._kernel_threads.wanted(n) for n in range(self.num_threads + LANE_STEPS + 1)]
        self._lock = threading.Lock()
        self._active: list[RunHandler] = []  # sorted by key
        self._keys: list[tuple[int, float, int]] = []
        self._waiters: deque[tuple[tuple[int, int], _Waiter]] = deque()
        self._seq = itertools.count()
        self._queued = 0
        self._slots = self.num_threads  # free execution slots
        self._idle: list[_Worker] = []  # pool threads waiting for a task
        self._awake = 0  # pool threads up (running, or woken and not yet parked)
        self._busy = 0  # of those, the ones running closures of steps not known to be short
        self._acquired = 0
        self._wait_total = 0.0
        self._held_total = 0.0
        self._threads = [
            threading.Thread(target=self._work, name=f"run_handler_pool/{i}", daemon=True)
            for i in range(self.num_threads)
        ]
        for t in self._threads:
            t.start()

    # --- handlers ----------------------------------------------------------------------------------------

    def _activate(self, step_id: int, priority: int, waited: float) -> RunHandler:
        """With the lock held: a new active handler, in order."""
        h = RunHandler(self, step_id, priority, next(self._seq), waited)
        self._ungrouped += 1
        i = bisect.bisect(self._keys, h.key)
        self._keys.insert(i, h.key)
        self._active.insert(i, h)
        self._acquired += 1
        self._wait_total += waited
        return h

    def get(self, step_id: int = 0, timeout_ms: int = 0, priority: int = 0) -> RunHandler:
        """A handler for a step; waits while all are in use (``timeout_ms`` 0 = forever)."""
        t0 = time.monotonic()
        with self._lock:
            if len(self._active) < self.max_handlers and not self._waiters:
                return self._activate(step_id, priority, 0.0)
            waiter = _Waiter()
            waiter.event = threading.Event()
            self._add_waiter(priority, waiter)
        if not waiter.event.wait(timeout_ms / 1000.0 if timeout_ms > 0 else None):
            with self._lock:
                if not waiter.done:
                    waiter.done = True
                    self._remove_waiter(waiter)
                    raise DeadlineExceededError(
                        f"Could not obtain RunHandler for request after waiting for {timeout_ms} ms."
                    )
        assert waiter.handler is not None
        waiter.handler.waited = time.monotonic() - t0
        return waiter.handler

    async def get_async(self, step_id: int = 0, timeout_ms: int = 0, priority: int = 0) -> RunHandler:
        """``get`` for asyncio code: waits without blocking the event loop."""
        t0 = time.monotonic()
        loop = asyncio.get_running_loop()
        with self._lock:
            if len(self._active) < self.max_handlers and not self._waiters:
                return self._activate(step_id, priority, 0.0)
            waiter = _Waiter()
            waiter.loop = loop
            waiter.future = loop.create_future()
            self._add_waiter(priority, waiter)
        try:
            if timeout_ms > 0:
                # a timeout of the task rather than wait_for, whose own future and callbacks cost more
                async with asyncio.timeout(timeout_ms / 1000.0):
                    handler = await asyncio.shield(waiter.future)
            else:
                handler = await asyncio.shield(waiter.future)
        except (TimeoutError, asyncio.CancelledError) as e:
            with self._lock:
                if not waiter.done:
                    waiter.done = True
                    self._remove_waiter(waiter)
                    if isinstance(e, TimeoutError):
                        raise DeadlineExceededError(
                            f"Could not obtain RunHandler for request after waiting for {timeout_ms} ms."
                        ) from None
                    raise
            # a handler was handed over just as we gave up: give it back
            if waiter.handler is not None:
                waiter.handler.release()
            raise
        handler.waited = time.monotonic() - t0
        return handler

    def _add_waiter(self, priority: int, waiter: _Waiter) -> None:
        key = (-priority, next(self._seq))
        # waiting requests are served by priority, then arrival
        i = len(self._waiters)
        while i > 0 and self._waiters[i - 1][0] > key:
            i -= 1
        self._waiters.insert(i, (key, waiter))

    def _remove_waiter(self, waiter: _Waiter) -> None:
        for i, (_, w) in enumerate(self._waiters):
            if w is waiter:
                del self._waiters[i]
                return

    def _expect(self, h: RunHandler, seconds: float, kind: object = None) -> None:
        with self._lock:
            if not h.released:
                self._place(h, seconds, kind)

    def _place(self, h: RunHandler, seconds: float, kind: object) -> None:
        """With the lock held: puts ``h`` in its flow, or (deadline policy) at its deadline."""
        self._join(h, kind if kind is not None else h)
        if self.fair or seconds <= 0.0 or self.stretch <= 0.0:
            return  # the deadline order is kept only for the deadline policy
        i = bisect.bisect_left(self._keys, h.key)
        del self._keys[i]
        del self._active[i]
        h.key = (h.key[0], h.acquired_at + self.stretch * seconds, h.key[2])
        i = bisect.bisect(self._keys, h.key)
        self._keys.insert(i, h.key)
        self._active.insert(i, h)

    def _begin(self, h: RunHandler, seconds: float, kind: object, wait: bool) -> bool:
        me = _Worker()
        with self._lock:
            h.helper = me
            if h.released:
                return False
            self._place(h, seconds, kind)
            if self._queued or self._entries_n or not self._slots:
                if wait:
                    me.waiting = True
                else:
                    h.helper = None
                return False
            self._slots -= 1
            h.running += 1
            me.long = h.long
            self._long += h.long
            n = self._running()
            if h.parallel and n < 2:
                n = 2
        if self._wants[n] != self._kernel_threads.current:
            self._kernel_threads.running(n)
        local = self._local
        h.inline = (time.thread_time(), kernel_clock.seconds)
        local.k0, local.c0 = h.inline[1], h.inline[0]
        return True

    def enter(
        self,
        priority: int = 0,
        short: bool = True,
        kind: object = None,
        interp: bool = False,
        loop: bool = False,
    ) -> int | None:
        """Takes a slot for a caller that runs a step from start to end on its own thread, with no run
        handler: a ``short`` one (under ``SLOT_STEP_S`` of CPU), or one with nothing to hand off or to
        preempt (see ``Session._enter_pool``). A free slot, when nobody waits for one (so nobody is passed
        over); or a place in the lane beside the slots (``LANE_STEPS`` at a time, see ``_lane_open``): for a
        short step when every slot holds work of long steps, for an interpreter-only step (``interp``)
        whenever it has room, and for neither while a request of a higher priority is active. Returns an id
        unique among handlers (for traces) when the caller may run; it must ``leave()`` with it when the
        step ends. None: wait for the pool.

        A handler's bookkeeping (joining its flow, arrival order, the closure hand-offs, the charge per
        closure) cost 45 us of CPU a step; a step of 160 us (branches1.b1, one caller) took 207 us of CPU
        with the pool against 161 without it. The slot keeps the cores from being oversubscribed all the
        same, and a step this short gives up nothing by not being preempted or split between threads.

        ``loop``: the caller is an event loop and the step ``short``: when neither a slot nor the lane is
        free, it runs the step itself all the same, unless a request of a higher priority is active. The
        loop's thread is there whatever the pool does, and it runs one such step at a time: the cores
        are no more oversubscribed than by the loop itself. Queued for a handler instead, a 0.1 ms step
        waited for a convolution's closures: the example mlp beside cnn at a server, 8 clients, had a p50
        of 6.0-6.1 ms with the pool against 3.3-5.8 without it; 3.0-4.1 ms with this.

        Why the lane: a long step holds a slot for one kernel at a time, a millisecond or more, and cannot
        be preempted within it. Without the lane a short request waited for one of those kernels to end:
        beside branches8.b64, branches1.b1 (0.2 ms) lost a third to a half of the throughput it had with
        no pool, where threads run its Python while the matmuls hold the cores without the GIL. A short
        step in the lane costs the long ones at most its own few hundred microseconds of a core."""
        with self._lock:
            slot_id = self._try_enter(priority, short, kind, interp, loop)
            if slot_id is None:
                return None
            n = self._running()
        if self._wants[n] != self._kernel_threads.current:
            self._kernel_threads.running(n)
        return slot_id

    def enter_wait(
        self,
        priority: int = 0,
        short: bool = True,
        kind: object = None,
        timeout: float | None = None,
        interp: bool = False,
    ) -> int | None:
        """``enter()`` for a synchronous caller that may block: when no slot is free it waits, in the
        pool's order, for a slot (or, for a short step, a place in the lane) handed to it directly, with
        no run handler. None only when the pool has no room for another request (``max_handlers``): then
        wait for a handler. ``timeout`` (seconds) bounds the wait: DeadlineExceededError after it.

        Why: such a step runs on one thread from start to end anyway. Through a run handler it paid the
        handler's bookkeeping and a hand-off to a pool thread: in a closed loop of 8 callers of
        branches2.b1 (~290 us of CPU a step), 453 us of CPU a request against 362 without the pool."""
        with self._lock:
            slot_id = self._try_enter(priority, short, kind, interp)
            if slot_id is not None:
                n = self._running()
            elif self._waiters or self._requests() >= self.max_handlers:
                return None
            else:
                entry = _Entry(priority, short, kind, next(self._seq), interp)
                queue = self._entries.get((kind, priority))
                if queue is None:
                    queue = self._entries[(kind, priority)] = deque()
                queue.append(entry)
                self._enter_flow(kind, priority)
                self._entries_n += 1
                self._entries_lane += short or interp
        if slot_id is None:
            if not entry.parker.park(-1.0 if timeout is None else max(0.0, timeout)):
                with self._lock:
                    if entry.slot_id is None:
                        self._drop_entry(entry)
                        wait_ms = (time.monotonic() - entry.since) * 1000.0
                        raise DeadlineExceededError(
                            f"Could not obtain a RunHandlerPool slot for the step after waiting for "
                            f"{wait_ms:.0f} ms."
                        )
            # granted (perhaps just as the wait timed out: the late permit is never read)
            slot_id, n = entry.slot_id, entry.n
            assert slot_id is not None
        if self._wants[n] != self._kernel_threads.current:
            self._kernel_threads.running(n)
        return slot_id

    def _requests(self) -> int:
        """With the lock held: requests admitted or waiting for a slot (counted against max_handlers)."""
        return len(self._active) + self._entered + self._entries_n

    def _try_enter(
        self, priority: int, short: bool, kind: object, interp: bool, loop: bool = False
    ) -> int | None:
        """With the lock held: a slot, or a place in the lane, for a caller arriving now, if it may have
        one without passing anybody over."""
        if self._waiters or self._requests() >= self.max_handlers:
            return None
        if self._slots and not self._queued and not self._entries_n:
            slot_id = next(self._seq)
            self._take_slot(slot_id, short)
        elif (short or interp) and not self._entries_lane and self._lane_open(kind, priority, interp):
            slot_id = next(self._seq)
            self._lane.add(slot_id)
        elif loop and short and not self._outranked(priority):
            slot_id = next(self._seq)
            self._on_loop.add(slot_id)
        else:
            return None
        self._entered += 1
        self._acquired += 1
        self._enter_flow(kind, priority)
        return slot_id

    def _take_slot(self, slot_id: int, short: bool) -> None:
        self._slots -= 1
        if not short:
            self._long_entered.add(slot_id)
            self._long += 1

    def _outranked(self, priority: int) -> bool:
        """With the lock held: a request of a higher priority than ``priority`` is active."""
        return bool(self._active) and self._active[0].priority > priority

    def _lane_open(self, kind: object, priority: int, interp: bool) -> bool:
        """With the lock held: a step of ``kind`` may run in the lane now (see ``enter``): a short one when
        every slot holds long work and its flow is owed; an interpreter-only one (``interp``, see
        ``INTERP_SHARE``) whenever the lane has room. Neither passes a request of a higher priority."""
        if interp:
            return len(self._lane) < LANE_STEPS and not self._outranked(priority)
        return (
            self._long == self.num_threads
            and len(self._lane) < LANE_STEPS
            and not self._outranked(priority)
            and self._owed(kind, priority)
        )

    def _entry_key(self, e: _Entry) -> tuple[int, float, int]:
        """With the lock held: a waiting caller's place in the order that ``_first_ready`` uses."""
        if not self.fair:
            return (-e.priority, e.since, e.seq)
        return (-e.priority, self._groups[(e.kind, e.priority)].tag, e.seq)

    def _ready_key(self, h: RunHandler) -> tuple[int, float, int]:
        """With the lock held: ``h``'s place in the order of ``_first_ready``."""
        if not self.fair:
            return h.key
        return self._order(h)

    def _first_entry(self, lane: bool = False) -> tuple[_Entry, tuple[int, float, int]] | None:
        """With the lock held: the waiting caller (one that may take the lane, with ``lane``) that comes
        first."""
        best: tuple[_Entry, tuple[int, float, int]] | None = None
        for queue in self._entries.values():
            e = queue[0]
            if lane and not (e.short or e.interp):
                continue
            key = self._entry_key(e)
            if best is None or key < best[1]:
                best = (e, key)
        return best

    def _next_entry(self) -> _Entry:
        """With the lock held and a caller waiting in enter_wait(): the one that comes first (the one
        waiting, when only one kind at one priority waits: the common case needs no key)."""
        entries = self._entries
        if len(entries) == 1:
            for queue in entries.values():
                return queue[0]
        first = self._first_entry()
        assert first is not None
        return first[0]

    def _grant(self, e: _Entry, lane: bool) -> None:
        """With the lock held: gives the waiting caller ``e`` a slot, or a place in the lane (it is then
        woken by whoever called this)."""
        self._unqueue(e)
        slot_id = e.slot_id = next(self._seq)
        if lane:
            self._lane.add(slot_id)
        else:
            self._take_slot(slot_id, e.short)
        self._entered += 1
        self._acquired += 1
        self._wait_total += time.monotonic() - e.since
        e.n = self._running()

    def _drop_entry(self, e: _Entry) -> None:
        """With the lock held: ``e`` gave up waiting (its deadline passed); it leaves its flow."""
        self._unqueue(e)
        self._quit_flow(self._groups[(e.kind, e.priority)])

    def _unqueue(self, e: _Entry) -> None:
        k = (e.kind, e.priority)
        queue = self._entries[k]
        if queue[0] is e:
            queue.popleft()
        else:
            queue.remove(e)
        if not queue:
            del self._entries[k]
        self._entries_n -= 1
        self._entries_lane -= e.short or e.interp

    def _lane_grants(self, wake: list[_Worker | _Entry]) -> None:
        """With the lock held: places in the lane for waiting short steps, while it is open to them."""
        while self._entries_lane and len(self._lane) < LANE_STEPS:
            first = self._first_entry(lane=True)
            if first is None or not self._lane_open(first[0].kind, first[0].priority, first[0].interp):
                return
            self._grant(first[0], True)
            wake.append(first[0])

    def leave(
        self, kind: object, priority: int, cpu: float, kernel: float, slot_id: int | None = None
    ) -> None:
        """Gives back the slot ``enter()`` took (``slot_id``: the id it returned); the step of ``kind``
        took ``cpu`` seconds of thread CPU time, ``kernel`` of them in measured kernels. Its flow, if
        active, is charged for it."""
        with self._lock:
            if slot_id in self._lane:
                self._lane.discard(slot_id)
            elif slot_id in self._on_loop:
                self._on_loop.discard(slot_id)
            else:
                self._slots += 1
                if slot_id in self._long_entered:
                    self._long_entered.discard(slot_id)
                    self._long -= 1
            self._entered -= 1
            g = self._groups.get((kind, priority))
            if g is not None:  # it joined its flow in enter()
                self._charge_group(g, self._cost(cpu, kernel))
                self._quit_flow(g)
            wake = self._dispatch() if self._queued or self._entries_n else []
            idle = self._running() == 0
        for w in wake:
            w.parker.unpark()
        if idle and self._kernel_threads.current != self._wants[0]:
            self._kernel_threads.running(0)

    def _enter_flow(self, kind: object, priority: int) -> None:
        """With the lock held: a step of ``kind`` run with enter() (or waiting in enter_wait) counts as a
        request in flight of its flow, as a handler does: its flow is charged what the step took, and the
        order between it and the handlers waiting for a slot is the flows' order (see _Group)."""
        self._flow(kind, priority).active += 1

    def _flow(self, kind: object, priority: int) -> _Group:
        """With the lock held: the flow of ``kind``, made active again if it was idle. A kind that comes
        back starts where it left off, or at the virtual time if that is later: it is owed nothing for
        the time it was away, and what it received just before still counts (a closed-loop client of a
        short kind is idle between its requests: reset each time to the virtual time, it went ahead of
        every other flow on each return)."""
        key = (kind, priority)
        g = self._groups.get(key)
        if g is None:
            g = self._idle_flows.pop(key, None)
            if g is None:
                g = _Group(kind, priority)
            self._groups[key] = g
        if g.active == 0:
            vtime = self._vtime.get(priority, 0.0)
            if vtime > g.tag:
                g.tag = vtime
            if priority > 0:
                self._urgent += 1
        return g

    def _quit_flow(self, g: _Group) -> None:
        g.active -= 1
        if g.active:
            return
        if g.priority > 0:
            self._urgent -= 1
        key = (g.key, g.priority)
        del self._groups[key]
        idle = self._idle_flows
        # kept even at the virtual time (where it would come back anyway): a closed-loop client's flow goes
        # idle between its steps, and is reused rather than made again on its return
        if g.tag >= self._vtime.get(g.priority, 0.0):
            idle[key] = g
            if len(idle) > MAX_IDLE_FLOWS:  # forget the flows that are no longer ahead
                for k, f in list(idle.items()):
                    if f.tag <= self._vtime.get(k[1], 0.0):
                        del idle[k]
                if len(idle) > MAX_IDLE_FLOWS:
                    idle.clear()

    def _owed(self, kind: object, priority: int) -> bool:
        """With the lock held: whether ``kind``'s flow is not ahead of any other active flow of its
        priority, so a step of it may take the lane. The lane is a third place to run beside the slots;
        taken at every chance, short requests got it back to back and starved the long ones holding the
        slots (short_long, closed loop of 8, quiet: branches8.b64 at 0.22x its no-pool throughput)."""
        g = self._groups.get((kind, priority))
        # a kind with no request in flight comes back where it left off, or at the virtual time (_flow)
        vtime = self._vtime.get(priority, 0.0)
        if g is None:
            g = self._idle_flows.get((kind, priority))
        tag = vtime if g is None else max(g.tag, vtime)
        for other in self._groups.values():
            if other is not g and other.priority == priority and other.tag < tag:
                return False
        return True

    def holds_long_work(self) -> bool:
        """Whether the pool holds work that short steps must queue with: a request that is not a short
        step (a run handler, a slot of a step not known to be short, a step in the lane, a caller waiting
        for a handler), or a request of a priority above 0. Read without the lock: a hint (see
        ``Session._bypasses_pool``)."""
        return bool(self._active or self._long or self._lane or self._waiters or self._urgent)

    def _running(self) -> int:
        """With the lock held: how many threads run the pool's work now (the slots taken and the lane)."""
        return self.num_threads - self._slots + len(self._lane)

    def _join(self, h: RunHandler, kind: object) -> None:
        """With the lock held: puts ``h`` in the flow of its kind (moving it out of its own first)."""
        if h.group is not None:
            if h.group.key == kind:
                return
            self._leave(h)
        else:
            self._ungrouped -= 1
        g = self._flow(kind, h.priority)
        g.handlers.append(h)
        g.active += 1
        h.group = g

    def _leave(self, h: RunHandler) -> None:
        g = h.group
        if g is None:
            return
        h.group = None
        g.handlers.remove(h)
        self._quit_flow(g)

    def _first_ready(self) -> RunHandler | None:
        """The handler the next free slot goes to: with the fair policy, the first request with work in
        the flow with the smallest tag; else the first in deadline order. None if nobody has work."""
        if not self.fair:
            for h in self._active:
                if h.queue and h.running < MAX_RUNNING_PER_REQUEST:
                    return h
            return None
        best: RunHandler | None = None
        best_key: tuple[int, float, int] | None = None
        for g in self._groups.values():
            if not g.active:
                continue
            for h in g.handlers:
                if h.queue and h.running < MAX_RUNNING_PER_REQUEST:
                    key = (-g.priority, g.tag, h.key[2])
                    if best_key is None or key < best_key:
                        best, best_key = h, key
                    break
        if not self._ungrouped:
            return best
        for h in self._active:  # handlers of no kind yet (expect() not called): each its own flow
            if h.group is None and h.queue and h.running < MAX_RUNNING_PER_REQUEST:
                key = (-h.priority, self._vtime.get(h.priority, 0.0), h.key[2])
                if best_key is None or key < best_key:
                    best, best_key = h, key
        return best

    def _order(self, h: RunHandler, running: bool = False) -> tuple[int, float, int]:
        """With the lock held: the fair policy's order of ``h`` (smaller first). ``running``: ``h``'s
        closure runs on this thread now, and the interpreter time it used so far counts."""
        g = h.group
        if g is None:
            return (-h.priority, self._vtime.get(h.priority, 0.0), h.key[2])
        tag = g.tag
        if running:
            c0 = getattr(self._local, "c0", None)
            if c0 is not None:
                cpu = time.thread_time() - c0
                tag += self._cost(cpu, kernel_clock.seconds - self._local.k0) / max(1, g.active)
        return (-g.priority, tag, h.key[2])

    def _cost(self, cpu: float, kernel: float) -> float:
        """What a closure that took ``cpu`` seconds of thread CPU time, ``kernel`` of them in expensive
        kernels (numpy runs them without the GIL), is charged: its dominant share of the two resources it
        used, the interpreter (one) and the cores (``cores``), so that no flow runs almost free.

        Charged only its interpreter time (``cpu - kernel``), flows whose work sits in measured kernels
        took the machine once the optimizer fused bias and activation into them: in a closed loop of 8
        (one run), chain200.b64 beside MobileNetV2 got 0.01x its no-pool throughput, bert_tiny and
        wide_and_deep beside mlp_gelu 0.15-0.18x, a residual CNN beside MobileNetV2 0.36x. Charged this way,
        the same cells gave 0.30x, 1.33-2.26x and 1.19x. Charged plain CPU time, a residual CNN got
        0.57-0.74x beside matmul graphs (interpreter-heavy flows lose the cores)."""
        return max(cpu - kernel, cpu / self._kernel_threads.cores)

    def _charge(self, h: RunHandler, cpu: float) -> None:
        """With the lock held: ``h``'s flow received ``cpu`` seconds; the virtual time of its priority
        follows the flow that is furthest behind."""
        if h.group is not None:
            self._charge_group(h.group, cpu)

    def _charge_group(self, g: _Group, cpu: float) -> None:
        g.tag += cpu / (g.active or 1)
        groups = self._groups
        if len(groups) == 1:  # the common case: one kind in flight
            behind = g.tag
        else:
            behind = min(x.tag for x in groups.values() if x.priority == g.priority)
        if behind > self._vtime.get(g.priority, 0.0):
            self._vtime[g.priority] = behind

    def _release(self, h: RunHandler) -> None:
        handoff: _Waiter | None = None
        with self._lock:
            if h.released:
                return
            h.released = True
            if h.group is None:
                self._ungrouped -= 1
            elif h.running == 0:  # else its flow is charged for the closure still running, then left
                self._leave(h)
            self._held_total += time.monotonic() - h.acquired_at
            i = bisect.bisect_left(self._keys, h.key)
            del self._keys[i]
            del self._active[i]
            if h.queue:  # a cancelled step may leave closures behind: they must not run
                self._queued -= len(h.queue)
                h.queue.clear()
            helper = h.helper
            if helper is not None and helper.waiting:
                helper.waiting = False
                helper.parker.unpark()  # the caller returns from help()
            while self._waiters and len(self._active) < self.max_handlers:
                key, w = self._waiters.popleft()
                if w.done:
                    continue
                w.done = True
                w.handler = self._activate(0, -key[0], 0.0)
                handoff = w
                break
        if handoff is not None:
            if handoff.event is not None:
                handoff.event.set()
            elif handoff.loop is not None and handoff.future is not None:
                handoff.loop.call_soon_threadsafe(_resolve, handoff.future, handoff.handler)

    # --- scheduling --------------------------------------------------------------------------------------

    def _enqueue(self, h: RunHandler, fn: Closure) -> None:
        with self._lock:
            if h.released:
                raise InvalidArgumentError("closure scheduled on a released RunHandler")
            h.queue.append(fn)
            self._queued += 1
            wake = self._dispatch()
        for w in wake:
            w.parker.unpark()

    def _dispatch(self, hot: _Worker | None = None) -> list[_Worker | _Entry]:
        """With the lock held: hands free slots and the next closures to chosen workers (to be woken).
        ``hot`` is an idle pool thread that is running now: it goes first, as it needs no wake-up (the
        request's caller, parked, is woken once, when its step ends)."""
        wake: list[_Worker | _Entry] = []
        while self._slots and (self._queued or self._entries_n):
            h = self._first_ready() if self._queued else None
            if self._entries_n:  # a caller waiting in enter_wait() may come first
                if h is None:  # no handler to compare with: no sort key needed
                    e = self._next_entry()
                    self._grant(e, False)
                    wake.append(e)
                    continue
                first = self._first_entry()
                assert first is not None
                if first[1] < self._ready_key(h):
                    self._grant(first[0], False)
                    wake.append(first[0])
                    continue
            if h is None:
                break
            helper = h.helper
            if hot is not None and hot.waiting:
                w = hot
                self._idle.remove(hot)
                hot = None
            elif helper is not None and helper.waiting:
                w = helper
            elif self._idle:
                if self._awake > self._busy and h.short:
                    # a thread that is up takes it when it is done: a wake-up would cost more than the wait
                    break
                w = self._idle.pop()
                w.awake = True
                self._awake += 1
            else:
                break
            w.waiting = False
            if w.awake:
                self._busy += (not h.short) - w.busy
                w.busy = not h.short
            w.task = (h, h.queue.popleft())
            w.long = h.long
            self._long += h.long
            h.running += 1
            self._queued -= 1
            self._slots -= 1
            wake.append(w)
        if self._entries_lane:
            self._lane_grants(wake)
        return wake

    def _work(self) -> None:
        """A pool thread: waits to be handed a closure, runs it, gives the slot back, repeats."""
        worker_init()
        self._serve(_Worker(), None)

    def _help(self, h: RunHandler) -> None:
        w = h.helper
        if w is None:
            raise InvalidArgumentError("RunHandler.help() needs attach_caller() or begin() first")
        start = h.inline
        if start is None:
            self._serve(w, h)
            return
        # the caller ran its step's first nodes on the slot it took in begin(): give it back
        h.inline = self._local.c0 = None
        cpu = time.thread_time() - start[0]
        self._serve(w, h, h, cpu, self._cost(cpu, kernel_clock.seconds - start[1]))

    def _serve(
        self,
        me: _Worker,
        own: RunHandler | None,
        done: RunHandler | None = None,
        cpu: float = 0.0,
        charge: float = 0.0,
    ) -> None:
        """The worker loop. ``own`` is set for a helping caller: it returns once its handler is released.
        ``done`` is whose closure just returned its slot; ``cpu``, the thread CPU time it took; ``charge``,
        what its flow is charged for it (``_cost``)."""
        lock = self._lock
        clock = time.thread_time
        local = self._local
        kernels = kernel_clock
        kernel_threads = self._kernel_threads
        wants = self._wants
        while True:
            learn: Callable[[float], None] | None = None
            spent = 0.0
            with lock:
                if done is not None:
                    done.running -= 1
                    done.cpu += cpu
                    self._charge(done, charge)
                    if done.released and done.running == 0:
                        self._leave(done)
                    self._slots += 1
                    if me.long:
                        me.long = False
                        self._long -= 1
                    if me.busy:
                        me.busy = False
                        self._busy -= 1
                    if done.released and done.running == 0 and done.learn is not None:
                        learn, done.learn = done.learn, None
                        spent = done.cpu
                    done = None
                task, me.task = me.task, None
                wake: list[_Worker | _Entry] = []
                if task is None:
                    if own is not None and own.released:
                        own.helper = None
                        me.waiting = False
                        wake = self._dispatch()  # our slot may serve someone else now
                    else:
                        me.waiting = True
                        if own is None:
                            self._idle.append(me)
                        wake = self._dispatch(me if own is None else None)
                        task, me.task = me.task, None
                        if task is None and me.awake:
                            me.awake = False  # about to park
                            self._awake -= 1
            for w in wake:
                if w is not me:
                    w.parker.unpark()
            if task is None:
                n = self._running()  # read without the lock: a stale count costs speed, not results
                if n == 0 and kernel_threads.current != wants[0]:
                    kernel_threads.running(0)  # idle: kernels get the process's own threads back
                elif n == 1 and not (self._queued or self._entries_n) and kernel_threads.current != wants[1]:
                    # the closure left running (a step's main path once its side branch ended) has the
                    # cores to itself: OpenBLAS's count is the process's, so its next kernels get them all
                    kernel_threads.running(1)
            if learn is not None:
                learn(spent)
            if task is None:
                if own is not None and own.helper is None:
                    return
                me.parker.park()
                continue
            h, fn = task
            n = self._running()
            if h.parallel and n < 2:
                n = 2
            if wants[n] != kernel_threads.current:
                kernel_threads.running(n)
            k0 = local.k0 = kernels.seconds
            c0 = local.c0 = clock()
            try:
                fn()
            finally:
                local.c0 = None
                done = h
                cpu = clock() - c0
                charge = self._cost(cpu, kernels.seconds - k0)

    # --- observability -----------------------------------------------------------------------------------

    def stats(self) -> PoolStats:
        with self._lock:
            return PoolStats(
                threads=self.num_threads,
                max_handlers=self.max_handlers,
                active_handlers=len(self._active) + self._entered,
                waiting_requests=sum(1 for _, w in self._waiters if not w.done) + self._entries_n,
                queued_closures=self._queued,
                running_closures=self._running(),
                queued_per_handler=[len(h.queue) for h in self._active],
                handlers_acquired=self._acquired,
                handler_wait_seconds_total=self._wait_total,
                handler_held_seconds_total=self._held_total,
                stretch=self.stretch,
                policy="fair" if self.fair else "deadline",
                kernel_threads=self._kernel_threads.threads,
            )


def _resolve(future: asyncio.Future[RunHandler], handler: RunHandler | None) -> None:
    if not future.done() and handler is not None:
        future.set_result(handler)
    elif handler is not None and future.cancelled():
        handler.release()


_pool_lock = threading.Lock()
_pool: RunHandlerPool | None = None


def get_pool(num_threads: int = 0, max_handlers: int = 0) -> RunHandlerPool:
    """The process-global pool, made on first use with these sizes (later sizes are ignored, as in TF)."""
    global _pool
    pool = _pool
    if pool is not None:  # every pooled run asks: no lock once it exists
        return pool
    with _pool_lock:
        if _pool is None:
            _pool = RunHandlerPool(num_threads, max_handlers)
        return _pool


def configure_pool(num_threads: int = 0, max_handlers: int = 0) -> RunHandlerPool:
    """Makes the global pool explicitly (the server does this at start-up). Fails if it exists already
    with other sizes."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = RunHandlerPool(num_threads, max_handlers)
        else:
            want_threads = num_threads if num_threads > 0 else _pool.num_threads
            want_max = max_handlers if max_handlers > 0 else _pool.max_handlers
            if (want_threads, want_max) != (_pool.num_threads, _pool.max_handlers):
                raise InvalidArgumentError(
                    f"The RunHandlerPool exists with {_pool.num_threads} threads and {_pool.max_handlers} "
                    f"handlers; cannot re-configure it with {want_threads} and {want_max}"
                )
        return _pool


def current_pool() -> RunHandlerPool | None:
    return _pool
