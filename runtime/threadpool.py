"""Inter-op thread pools: a lean FIFO pool, and the process-wide registry of shared pools.

``schedule(fn)`` is the only interface the executor needs, so a ``RunHandler`` can stand in for a pool.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, Protocol

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError

Closure = Callable[[], None]


class Scheduler(Protocol):
    def schedule(self, fn: Closure) -> None: ...


_core_share = 0  # this process's share of the cores (0: all of them)


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, a container's cpuset) where the
    system has one, as TensorFlow's NumSchedulableCPUs counts them; else every core."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def default_num_threads() -> int:
    return _core_share or usable_cores()


def share_cores(n: int) -> None:
    """Gives this process ``n`` of the cores (a worker of several): pools and BLAS thread counts made
    from here on use ``n`` where they would use every core."""
    global _core_share
    _core_share = max(0, n)


_loop_cores = 0  # cores kept for a server's event loop (see keep_core_for_loop)
_loop_limits: Any = None


def kernel_cores() -> int:
    """The cores BLAS kernels may take: this process's share, less any kept for an event loop."""
    return max(1, default_num_threads() - _loop_cores)


def keep_core_for_loop() -> None:
    """A server keeps one core for its event loop, which decodes, encodes and answers every request:
    BLAS kernels get the others (at least one), unless the user set the intra-op threads.

    With every core to a kernel, the kernel's threads and the loop took turns on the cores, and OpenBLAS's
    threads spin while they wait for work: on 2 cores, the example cnn at 32 clients (batching on,
    quiet, two runs each) answered 344-411 req/s over gRPC at 4.5-5.3 ms of server CPU a request, against
    659-707 at 1.8-1.9 ms with one thread per kernel; MobileNetV2 145-158 against 189-210 req/s, and one
    client alone 71-77 against 110-112 req/s."""
    global _loop_cores, _loop_limits
    if KernelThreads.pinned or _loop_cores:
        return
    from threadpoolctl import threadpool_limits

    _loop_cores = 1
    # the process's own count, which KernelThreads restores when no step runs
    _loop_limits = threadpool_limits(limits=kernel_cores(), user_api="blas")


def lower_other_threads(nice: int, keep: int | None = None) -> list[int]:
    """Makes every thread of this process but ``keep`` (a native thread id; the calling one by default)
    ``nice`` steps nicer, as Linux allows for one thread without privileges, and returns the ids changed.
    Threads these make later inherit their niceness; threads the kept one makes later do not. Nothing
    where /proc/self/task or per-thread priorities are missing.

    A server keeps its event loop (arrivals read, admission, refusals, answers) ahead of the threads that
    compute (pool, inter-op, BLAS, codec): on two cores where they are busy, a request otherwise waited
    for the scheduler to give the loop a core (its lag p99 5-8 ms) before it was even read."""
    if nice <= 0:
        return []
    keep = threading.get_native_id() if keep is None else keep
    try:
        tids = sorted(int(t) for t in os.listdir("/proc/self/task"))
    except (OSError, ValueError):
        return []
    changed = []
    for tid in tids:
        if tid == keep:
            continue
        try:
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
        except OSError:  # a thread that ended meanwhile
            continue
        changed.append(tid)
    return changed


def worker_init() -> None:
    """Per-thread setup for threads that run kernels: numpy reports no floating-point warnings.

    TensorFlow's kernels produce inf/nan silently; numpy's error state is per thread (a context variable).
    """
    np.seterr(all="ignore")


class ThreadPool:
    """A fixed number of daemon threads taking closures from one FIFO queue."""

    def __init__(self, num_threads: int, name: str = "inter_op") -> None:
        if num_threads <= 0:
            num_threads = default_num_threads()
        self.num_threads = num_threads
        self.name = name
        self._queue: SimpleQueue[Closure | None] = SimpleQueue()
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}/{i}", daemon=True) for i in range(num_threads)
        ]
        self._closed = False
        for t in self._threads:
            t.start()

    def schedule(self, fn: Closure) -> None:
        self._queue.put(fn)

    def saturated(self) -> bool:
        """Work is already waiting for a thread: more parallelism would only queue."""
        return not self._queue.empty()

    def _work(self) -> None:
        worker_init()
        get = self._queue.get
        while True:
            fn = get()
            if fn is None:
                return
            fn()

    def close(self) -> None:
        """Stops the threads once the queued work is done (they are daemons, so exit never waits)."""
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)

    def __repr__(self) -> str:
        return f"ThreadPool({self.name!r}, num_threads={self.num_threads})"


class KernelClock(threading.local):
    """Seconds the current thread spent in expensive kernels (matmuls, convolutions: numpy runs them with the
    GIL released), added up by the executor. The RunHandlerPool reads it around a closure to tell the time
    a request held the interpreter from the time its kernels ran beside it."""

    seconds = 0.0


kernel_clock = KernelClock()


class KernelThreads:
    """How many threads each BLAS kernel may use, set from how many kernels run at once.

    A pool that runs ``n`` closures at once gives each kernel ``budget // n`` BLAS threads (at least one),
    so ``n`` concurrent matmuls never put more than ``budget`` busy threads on the cores; alone, a kernel
    gets them all. The budget is every core of the process, less one in a server (``keep_core_for_loop``).
    When the pool is idle the process's own setting is back. Nothing changes once the user has chosen a
    number (``intra_op_parallelism_threads``; see ``pin``). Setting OpenBLAS's count is a C call of about
    2 us, made only when the number changes.
    """

    pinned = False  # the user set the BLAS threads: leave them alone
    pinned_threads = 0  # to this many

    def __init__(self, cores: int = 0) -> None:
        self.cores = cores if cores > 0 else default_num_threads()
        self.budget = cores if cores > 0 else kernel_cores()  # BLAS threads for all running kernels
        self._libs: list[Any] | None = None
        self._lock = threading.Lock()
        self.default = self._load()  # the process's own setting
        self.current = self.default  # what is set now

    def _load(self) -> int:
        from threadpoolctl import ThreadpoolController

        blas = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
        # threadpoolctl lets only the first thread that sets OpenBLAS's count set it again (so that
        # threads do not fight over it); here every pool thread applies the pool's one rule
        self._libs = [getattr(c, "_real_set_num_threads", c.set_num_threads) for c in blas]
        return max((c.num_threads for c in blas), default=self.cores)

    def wanted(self, n: int) -> int:
        """BLAS threads per kernel while ``n`` kernels run at once (0: the process's own setting)."""
        return max(1, self.budget // n) if n > 0 else self.default

    def running(self, n: int) -> None:
        """``n`` kernels run at once now (0: none; the default comes back). Costs one comparison when the
        count stays (one request at a time on a machine whose default is every core: always)."""
        if KernelThreads.pinned:
            return
        want = self.wanted(n)
        if want == self.current:
            return
        with self._lock:  # the C call drops the GIL: the value set last must be the one recorded
            if want == self.current:
                return
            for set_threads in self._libs or ():
                set_threads(want)
            self.current = want

    @property
    def threads(self) -> int:
        """BLAS threads per kernel now: the user's number once pinned (``current`` is then stale), else
        what the pool set."""
        return KernelThreads.pinned_threads if KernelThreads.pinned else self.current

    @classmethod
    def pin(cls, n: int) -> None:
        cls.pinned = True
        cls.pinned_threads = n


class CallerThread:
    """``inter_op_thread_pool = -1``: run everything on the thread that called ``run``."""

    def schedule(self, fn: Closure) -> None:
        fn()


_registry_lock = threading.Lock()
_global_pools: dict[str, ThreadPool] = {}
_default_pool: ThreadPool | None = None


def global_pool(name: str, num_threads: int) -> ThreadPool:
    """The process-wide pool called ``name``, made on first use; re-sizing it is an error, as in TF."""
    num_threads = num_threads if num_threads > 0 else default_num_threads()
    with _registry_lock:
        pool = _global_pools.get(name)
        if pool is None:
            pool = _global_pools[name] = ThreadPool(num_threads, name)
        elif pool.num_threads != num_threads:
            raise InvalidArgumentError(
                f"Pool {name} configured previously with num_threads={pool.num_threads}; cannot re-configure "
                f"with num_threads={num_threads}"
            )
        return pool


def default_pool(num_threads: int) -> ThreadPool:
    """The pool all sessions share unless configured otherwise: made from the first session's options."""
    global _default_pool
    with _registry_lock:
        if _default_pool is None:
            _default_pool = ThreadPool(num_threads, "inter_op")
        return _default_pool


_intra_op_limiter: Any = None


def set_intra_op_threads(n: int) -> None:
    """Limits BLAS/OpenMP threads for the whole process (numpy's intra-op parallelism)."""
    global _intra_op_limiter
    from threadpoolctl import threadpool_limits

    KernelThreads.pin(n)  # the RunHandlerPool no longer sets them per load
    _intra_op_limiter = threadpool_limits(limits=n)
    os.environ.setdefault("OMP_NUM_THREADS", str(n))
