import itertools
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.threadpool import (
    CallerThread,
    ThreadPool,
    default_num_threads,
    default_pool,
    global_pool,
    worker_init,
)

_names = itertools.count()


def unique(prefix):
    """A pool name no other test uses: the registry is process-wide."""
    return f"{prefix}_{next(_names)}"


def block(pool):
    """Occupies every thread of ``pool``; returns the event that frees them."""
    gate, started = threading.Event(), threading.Semaphore(0)

    def wait():
        started.release()
        gate.wait(5)

    for _ in range(pool.num_threads):
        pool.schedule(wait)
    for _ in range(pool.num_threads):
        assert started.acquire(timeout=5)
    return gate


def run_all(pool, fns):
    """Schedules ``fns`` and waits (5 s at most) until all have run; returns their results in run order."""
    out, done = [], threading.Semaphore(0)
    for fn in fns:
        pool.schedule(lambda fn=fn: (out.append(fn()), done.release()))
    for _ in fns:
        assert done.acquire(timeout=5)
    return out


def pool_threads(name):
    return [t for t in threading.enumerate() if t.name.startswith(f"{name}/")]


@pytest.fixture
def pool():
    p = ThreadPool(2, unique("tp"))
    yield p
    p.close()


def test_closures_run_on_the_pools_own_daemon_threads(pool):
    names = set(run_all(pool, [lambda: threading.current_thread().name] * 20))
    assert names <= {f"{pool.name}/0", f"{pool.name}/1"} and names
    assert threading.current_thread().name not in names
    threads = pool_threads(pool.name)
    assert len(threads) == 2 and all(t.daemon for t in threads)  # never holds up the process's exit
    assert repr(pool) == f"ThreadPool({pool.name!r}, num_threads=2)"


def test_a_pool_of_zero_threads_gets_one_per_core():
    p = ThreadPool(0, unique("tp_default"))
    try:
        assert p.num_threads == default_num_threads() >= 1
        assert len(pool_threads(p.name)) == p.num_threads
    finally:
        p.close()


def test_closures_run_in_fifo_order():
    p = ThreadPool(1, unique("tp_fifo"))
    try:
        gate = block(p)
        order = []
        done = threading.Event()
        for i in range(20):
            p.schedule(lambda i=i: order.append(i))
        p.schedule(done.set)
        gate.set()
        assert done.wait(5)
        assert order == list(range(20))
    finally:
        p.close()


def test_saturated_while_work_waits_for_a_thread():
    p = ThreadPool(1, unique("tp_sat"))
    try:
        assert not p.saturated()
        gate = block(p)
        assert not p.saturated()  # busy, but nothing waits
        ran = threading.Event()
        p.schedule(ran.set)
        assert p.saturated()
        gate.set()
        assert ran.wait(5)
        assert not p.saturated()
    finally:
        p.close()


def test_close_finishes_queued_work_then_stops_the_threads():
    p = ThreadPool(2, unique("tp_close"))
    gate = block(p)
    ran = []
    for i in range(10):
        p.schedule(lambda i=i: ran.append(i))
    p.close()
    p.close()  # a second close is harmless
    assert len(pool_threads(p.name)) == 2  # still busy with what was queued before close
    gate.set()
    deadline = time.monotonic() + 5
    while pool_threads(p.name) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert sorted(ran) == list(range(10))
    assert pool_threads(p.name) == []


def test_caller_thread_runs_each_closure_inline():
    seen = []
    CallerThread().schedule(lambda: seen.append(threading.current_thread()))
    assert seen == [threading.current_thread()]  # before schedule returned, on this thread


def test_global_pools_are_shared_by_name_and_cannot_be_resized():
    name = unique("tp_global")
    p = global_pool(name, 2)
    try:
        assert global_pool(name, 2) is p
        assert (p.name, p.num_threads) == (name, 2)
        with pytest.raises(InvalidArgumentError) as info:
            global_pool(name, 3)
        assert info.value.message == (
            f"Pool {name} configured previously with num_threads=2; cannot re-configure with num_threads=3"
        )
        assert global_pool(unique("tp_global"), 1) is not p  # another name, another pool
    finally:
        p.close()


def test_a_global_pool_of_zero_threads_means_one_per_core():
    name = unique("tp_global_default")
    p = global_pool(name, 0)
    try:
        assert p.num_threads == default_num_threads()
        assert global_pool(name, default_num_threads()) is p  # the same size, spelled out
    finally:
        p.close()


def test_default_pool_is_made_once_from_the_first_request():
    p = default_pool(1)
    assert p.name == "inter_op"
    assert default_pool(p.num_threads + 3) is p  # later sizes do not make or re-size a pool


def float_errors():
    """numpy's error state on this thread, and what 1/0 gives (a warning becomes an error in the tests)."""
    try:
        value = np.divide(np.ones(1, np.float32), np.zeros(1, np.float32))[0]
    except Exception as e:
        value = e
    return np.geterr(), value


def test_worker_init_makes_numpy_ignore_float_errors_on_that_thread():
    ignore = {"divide": "ignore", "over": "ignore", "under": "ignore", "invalid": "ignore"}
    p = ThreadPool(1, unique("tp_errstate"))
    try:
        ((state, value),) = run_all(p, [float_errors])
    finally:
        p.close()
    assert state == ignore and value == np.inf  # pool threads: silent inf, as TensorFlow's kernels

    out = []
    plain = threading.Thread(target=lambda: out.append(float_errors()))
    plain.start()
    plain.join(5)
    ((state, _),) = out
    assert state["divide"] == "warn"  # any other thread keeps numpy's default

    out.clear()
    inited = threading.Thread(target=lambda: (worker_init(), out.append(float_errors())))
    inited.start()
    inited.join(5)
    assert out[0] == (ignore, np.inf)
    assert np.geterr()["divide"] == "warn"  # per thread: the caller's state is untouched


KEEP_CORE = """
import json, os
from threadpoolctl import threadpool_info
from poolserve.runtime import threadpool

def blas():
    return max(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas")

before = blas()
if os.environ.get("PINNED"):
    threadpool.set_intra_op_threads(1)
threadpool.keep_core_for_loop()
print(json.dumps({"before": before, "after": blas(), "kernel_cores": threadpool.kernel_cores(),
                  "budget": threadpool.KernelThreads().budget}))
"""


@pytest.mark.parametrize("pinned", [False, True])
def test_a_server_keeps_a_core_for_its_event_loop_unless_the_user_set_the_threads(pinned):
    """In a fresh process (the setting is process-wide): BLAS kernels get every core but one, at least one;
    a count the user set is left alone."""
    env = dict(os.environ, PINNED="1" if pinned else "")
    out = subprocess.run(
        [sys.executable, "-c", KEEP_CORE], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    got = json.loads(out.stdout)
    cores = os.cpu_count() or 1
    if pinned:
        assert got["after"] == 1  # the user's count
        assert got["kernel_cores"] == cores  # nothing kept
    else:
        assert got["kernel_cores"] == got["budget"] == got["after"] == max(1, cores - 1)


_NICE_SCRIPT = """
import json, os, threading
from poolserve.runtime.threadpool import lower_other_threads
gate = threading.Event()
ready = [threading.Event() for _ in range(2)]
ids = []
def wait(i):
    ids.append(threading.get_native_id()); ready[i].set(); gate.wait()
threads = [threading.Thread(target=wait, args=(i,)) for i in range(2)]
for t in threads: t.start()
for r in ready: r.wait()
base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
none = lower_other_threads(0)
changed = lower_other_threads(5)
late = threading.Thread(target=wait, args=(0,)); ready[0].clear(); late.start(); ready[0].wait()
nice = {tid: os.getpriority(os.PRIO_PROCESS, tid) - base for tid in [threading.get_native_id(), *ids]}
gate.set()
print(json.dumps({"none": none, "changed": sorted(changed), "threads": ids, "nice": list(nice.values())}))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="per-thread priorities are Linux's")
def test_lower_other_threads_leaves_the_calling_one_ahead() -> None:
    """Run in a process of its own: it changes the priorities of every thread but the caller's."""
    out = subprocess.run(
        [sys.executable, "-c", _NICE_SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    got = json.loads(out.stdout)
    assert got["none"] == []  # nice 0: nothing changes
    assert set(got["threads"][:2]) <= set(got["changed"])
    # the caller keeps its priority; the two threads that existed are 5 steps nicer; a thread the caller
    # makes afterwards starts at the caller's
    assert got["nice"] == [0, 5, 5, 0]
