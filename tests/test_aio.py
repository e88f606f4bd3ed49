import asyncio
import threading
import time

import numpy as np
import pytest
from support import RUNS, gate_op, sleep_op

from poolserve.proto import config_pb2
from poolserve.runtime.aio import BACKSTOP_S, Inbox, deadline_passed, inbox
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.deadline import Deadline
from poolserve.runtime.errors import DeadlineExceededError, InvalidArgumentError
from poolserve.runtime.session import Session

# asyncio's timers may fire up to one clock tick early; allow for it when checking a lower bound
CLOCK_SLACK_S = 0.005


class RecordingFuture(asyncio.Future):
    """A future that remembers the thread its outcome was set on."""

    thread = None

    def set_result(self, result):
        self.thread = threading.current_thread()
        super().set_result(result)

    def set_exception(self, exception):
        self.thread = threading.current_thread()
        super().set_exception(exception)


def in_thread(fn):
    """Runs ``fn`` on another thread and waits for it (the calling loop is blocked meanwhile)."""
    th = threading.Thread(target=fn)
    th.start()
    th.join(5)
    assert not th.is_alive()


def test_one_inbox_per_loop():
    async def both():
        loop = asyncio.get_running_loop()
        return inbox(loop), inbox(loop)

    first, again = asyncio.run(both())
    other, _ = asyncio.run(both())
    assert first is again and first is not other


def test_results_and_errors_are_set_on_the_loops_own_thread():
    async def main():
        loop = asyncio.get_running_loop()
        ok, bad = RecordingFuture(loop=loop), RecordingFuture(loop=loop)
        box = inbox(loop)
        err = InvalidArgumentError("bad feed")
        in_thread(lambda: (box.post(ok, 41, None), box.post(bad, None, err)))
        assert await asyncio.wait_for(ok, 5) == 41
        with pytest.raises(InvalidArgumentError) as info:
            await asyncio.wait_for(bad, 5)
        assert info.value is err
        assert ok.thread is bad.thread is threading.current_thread()

    asyncio.run(main())


def test_each_loop_gets_its_own_results():
    """Two loops on two threads; results posted from a third thread each reach their own loop."""
    ready, other = threading.Event(), {}

    def run_other_loop():
        async def main():
            other["loop"] = asyncio.get_running_loop()
            other["future"] = RecordingFuture()
            ready.set()
            other["result"] = await asyncio.wait_for(other["future"], 5)

        asyncio.run(main())

    th = threading.Thread(target=run_other_loop)
    th.start()

    async def main():
        assert ready.wait(5)
        mine = RecordingFuture()
        loop = asyncio.get_running_loop()
        in_thread(
            lambda: (inbox(other["loop"]).post(other["future"], "b", None), inbox(loop).post(mine, "a", None))
        )
        assert await asyncio.wait_for(mine, 5) == "a"
        assert mine.thread is threading.current_thread()

    asyncio.run(main())
    th.join(5)
    assert other["result"] == "b" and other["future"].thread is th


def test_posts_of_one_loop_turn_are_drained_together():
    async def main():
        loop = asyncio.get_running_loop()
        wakeups = []
        real = loop.call_soon_threadsafe

        def counting(*args, **kwargs):
            wakeups.append(args[0])
            return real(*args, **kwargs)

        loop.call_soon_threadsafe = counting
        try:
            box = Inbox(loop)
            futures = [loop.create_future() for _ in range(50)]
            # the loop is blocked while the other thread posts: all 50 arrive within one turn
            in_thread(lambda: [box.post(f, i, None) for i, f in enumerate(futures)])
            assert len(wakeups) == 1  # only the first post woke the loop
            await asyncio.wait_for(futures[0], 5)
            assert all(f.done() for f in futures)  # one drain settled them all
            assert [f.result() for f in futures] == list(range(50))
            later = loop.create_future()
            in_thread(lambda: box.post(later, "again", None))
            assert len(wakeups) == 2  # after a drain, the next post wakes the loop again
            assert await asyncio.wait_for(later, 5) == "again"
        finally:
            del loop.call_soon_threadsafe

    asyncio.run(main())


def test_a_result_for_a_cancelled_future_is_dropped():
    async def main():
        loop = asyncio.get_running_loop()
        problems = []
        loop.set_exception_handler(lambda _loop, context: problems.append(context))
        gone, gone_too, live = loop.create_future(), loop.create_future(), loop.create_future()
        gone.cancel()
        gone_too.cancel()
        box = inbox(loop)
        in_thread(
            lambda: (
                box.post(gone, 1, None),
                box.post(gone_too, None, InvalidArgumentError("x")),
                box.post(live, 2, None),
            )
        )
        assert await asyncio.wait_for(live, 1) == 2  # the drain went on past the cancelled ones
        assert gone.cancelled() and gone_too.cancelled()
        assert problems == []

    asyncio.run(main())


def test_posting_to_a_closed_loop_is_harmless():
    loop = asyncio.new_event_loop()
    future = loop.create_future()
    box = Inbox(loop)
    loop.close()  # the caller went away before its step stopped
    box.post(future, 1, None)
    assert not future.done()


class FakeStep:
    """A step as ``deadline_passed`` sees it: ``stops`` says whether it answers when cancelled."""

    def __init__(self, future, stops):
        self.future, self.stops, self.cancelled = future, stops, []

    def cancel(self, error=None):
        self.cancelled.append(error)
        if self.stops:
            inbox(self.future.get_loop()).post(self.future, None, error)


def test_deadline_passed_cancels_the_step_whose_own_answer_comes_first():
    async def main():
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        step, timers = FakeStep(future, stops=True), []
        deadline = Deadline(0)
        deadline_passed(future, step, deadline, timers)
        (error,) = step.cancelled
        assert isinstance(error, DeadlineExceededError) and "deadline of 0 ms" in error.message
        with pytest.raises(DeadlineExceededError) as info:
            await asyncio.wait_for(future, 5)
        assert info.value is error  # the step's answer, not the backstop's
        assert len(timers) == 1  # the backstop is armed; arun cancels it once it has an answer
        timers[0].cancel()

        # a call that already has its answer is left alone
        answered = loop.create_future()
        answered.set_result(1)
        idle = FakeStep(answered, stops=True)
        deadline_passed(answered, idle, deadline, timers)
        assert idle.cancelled == [] and len(timers) == 1

    asyncio.run(main())


def test_the_backstop_answers_when_the_step_does_not_stop():
    async def main():
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        step, timers = FakeStep(future, stops=False), []
        t0 = time.monotonic()
        deadline_passed(future, step, Deadline(0), timers)
        assert len(step.cancelled) == 1 and not future.done()
        with pytest.raises(DeadlineExceededError, match="deadline of 0 ms"):
            await asyncio.wait_for(future, 5)
        return time.monotonic() - t0

    assert BACKSTOP_S - CLOCK_SLACK_S <= asyncio.run(main()) < BACKSTOP_S + 1.0


def test_arun_answers_a_backstop_after_the_deadline_and_the_step_stops_later():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    g, gate = gate_op(b, x, "aio_gate")
    y = sleep_op(b, g, 0, "aio_after_gate")
    with Session(b.graph_def) as s:

        async def main():
            t0 = time.monotonic()
            with pytest.raises(DeadlineExceededError, match="deadline of 30 ms"):
                await s.arun(y, {x: 1.0}, config_pb2.RunOptions(timeout_in_ms=30))
            elapsed = time.monotonic() - t0
            assert gate.started.is_set() and s.steps_running == 1  # answered while its kernel runs
            return elapsed

        try:
            elapsed = asyncio.run(main())
        finally:
            gate.open()
        assert 0.03 + BACKSTOP_S - CLOCK_SLACK_S <= elapsed < 1.0
        deadline = time.monotonic() + 5
        while s.steps_running and time.monotonic() < deadline:
            time.sleep(0.001)
        assert s.steps_running == 0
    assert "aio_after_gate" not in RUNS  # the step was cancelled at the deadline: nothing ran after


def test_concurrent_aruns_on_one_loop_each_get_their_own_result():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None,))
    y = b.mul(x, b.constant(np.float32(3)), name="y")
    with Session(b.graph_def) as s:

        async def main():
            feeds = [np.full(4, i, np.float32) for i in range(20)]
            return feeds, await asyncio.gather(*(s.arun(y, {x: f}) for f in feeds))

        feeds, results = asyncio.run(main())
    for f, r in zip(feeds, results, strict=True):
        np.testing.assert_array_equal(r, f * 3)


def test_arun_runs_a_short_step_on_the_loop_and_a_long_one_on_a_thread():
    from poolserve.runtime.run_handler import RunHandlerPool
    from poolserve.runtime.session import INLINE_STEP_S

    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [2])
    y = b.op("Neg", [x], {"T": np.float32}, name="y")
    pool = RunHandlerPool(num_threads=2)
    feed = {x: np.ones(2, np.float32)}

    async def threads_of(session: Session, use_pool: bool, short: bool = True) -> set[int]:
        options = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE)
        options.experimental.use_run_handler_pool = use_pool
        for _ in range(3):  # the plan learns its cost
            await session.arun(y, feed, options)
        for plan in session._calls.plans.values():  # whatever this machine measured just now
            plan.cpu = INLINE_STEP_S / 4 if short else 10 * INLINE_STEP_S  # as if the step were long
        deadline = time.monotonic() + 5
        while pool.stats().running_closures and time.monotonic() < deadline:
            await asyncio.sleep(0.001)  # the pool's thread gives its slot back just after answering
        metadata = config_pb2.RunMetadata()
        await session.arun(y, feed, options, metadata)
        return {n.thread_id for d in metadata.step_stats.dev_stats for n in d.node_stats}

    loop_thread = threading.get_ident() & 0x7FFFFFFF
    with Session(b.graph_def, run_handler_pool=pool) as s:
        for use_pool in (True, False):
            assert asyncio.run(threads_of(s, use_pool)) == {loop_thread}
        assert pool.stats().running_closures == 0  # the slot the loop took was given back
        for use_pool in (True, False):
            assert loop_thread not in asyncio.run(threads_of(s, use_pool, short=False))


def test_a_step_that_waits_without_computing_never_runs_on_the_loop():
    """A sleeping kernel takes almost no CPU: measured by CPU alone its plan would look short enough for the
    event loop, and hold the loop for as long as it sleeps. Blocking kernels keep their plans unmeasured."""
    from poolserve.runtime.run_handler import RunHandlerPool

    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [2])
    y = sleep_op(b, x, 0.05, "waits_on_the_loop")
    pool = RunHandlerPool(num_threads=2)
    options = config_pb2.RunOptions()
    options.experimental.use_run_handler_pool = True
    feed = {x: np.ones(2, np.float32)}

    async def main(s: Session) -> int:
        from poolserve.runtime.session import INLINE_STEP_S

        await s.arun(y, feed, options)
        for plan in s._calls.plans.values():  # as this machine may measure a sleep: almost no CPU
            for _ in range(20):
                plan.learn_cpu(INLINE_STEP_S / 4)
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        await asyncio.sleep(0)
        await s.arun(y, feed, options)
        ticker.cancel()
        return ticks

    with Session(b.graph_def, run_handler_pool=pool) as s:
        ticks = asyncio.run(main(s))
        assert all(plan.cpu == 0.0 and plan.blocking for plan in s._calls.plans.values())
    assert ticks >= 2  # the loop ran while the step slept (on the loop itself: no tick at all)


def test_a_step_fed_far_more_than_its_plan_learned_on_is_not_short():
    """A plan's cost is learned per plan, not per shape: fed 64K values where its steps were measured on 8,
    a step is expected to cost 8K times more and runs on a pool thread, not on the event loop."""
    from poolserve.runtime.executor import expected_cpu
    from poolserve.runtime.run_handler import RunHandlerPool
    from poolserve.runtime.session import INLINE_STEP_S

    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None])
    y = b.relu(b.add(x, b.constant(np.float32(1.0))))
    pool = RunHandlerPool(num_threads=2)
    options = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE)
    options.experimental.use_run_handler_pool = True
    small, large = np.ones(8, np.float32), np.ones(1 << 16, np.float32)

    async def threads_of(s: Session, value: np.ndarray) -> set[int]:
        (plan,) = set(s._calls.plans.values())
        plan.cpu = INLINE_STEP_S / 4  # short on 8 values, whatever this machine measured
        metadata = config_pb2.RunMetadata()
        out = await s.arun(y, {x: value}, options, metadata, alone=True)
        np.testing.assert_array_equal(out, value + 1)
        return {n.thread_id for d in metadata.step_stats.dev_stats for n in d.node_stats}

    loop_thread = threading.get_ident() & 0x7FFFFFFF
    with Session(b.graph_def, run_handler_pool=pool) as s:
        untraced = config_pb2.RunOptions()
        untraced.experimental.use_run_handler_pool = True
        for _ in range(32):  # once measured short, its steps run on a pool slot, which notes the feed
            s.run(y, {x: small}, options=untraced)
            (plan,) = set(s._calls.plans.values())
            if plan.feed_size:
                break
        assert plan.feed_size == 8
        assert expected_cpu(plan, [large]) == pytest.approx(plan.cpu * 8192)
        assert asyncio.run(threads_of(s, small)) == {loop_thread}
        assert loop_thread not in asyncio.run(threads_of(s, large))


@pytest.mark.parametrize("way", ["slot", "handler"])
def test_a_step_on_the_loop_that_ends_past_its_deadline_answers_deadline_exceeded(way, monkeypatch):
    """Nothing can stop a step the event loop runs itself (its timer cannot fire meanwhile): one that ends
    after its deadline answers DeadlineExceededError, as TensorFlow answers a step that outlived
    timeout_in_ms, not a late result. Both ways a short step runs there: on a slot taken up front, and
    through a run handler that finds a thread free at once (``RunHandler.begin``)."""
    from poolserve.runtime.run_handler import RunHandlerPool
    from poolserve.runtime.session import INLINE_STEP_S, StepRecord

    b = GraphBuilder()
    m = b.placeholder("m", np.float32, [None, None])
    y = b.matmul(b.matmul(m, m), m)
    pool = RunHandlerPool(num_threads=1)
    options = config_pb2.RunOptions()
    options.experimental.use_run_handler_pool = True
    value = np.ones((800, 800), np.float32)  # two products of 1 GFLOP each: far more than 10 ms

    async def main(s: Session) -> StepRecord:
        (plan,) = set(s._calls.plans.values())
        plan.cpu, plan.feed_size = INLINE_STEP_S / 4, value.size  # as if short, whatever was measured
        if way == "handler":
            monkeypatch.setattr(s, "_enter_pool", lambda *a, **k: None)  # no slot up front
        record = StepRecord()
        deadline = Deadline(10)
        with pytest.raises(DeadlineExceededError, match="Timed out waiting for the step to finish"):
            await s.arun(y, {m: value}, options, deadline=deadline, record=record)
        assert time.monotonic() >= deadline.at
        return record

    with Session(b.graph_def, run_handler_pool=pool) as s:
        s.run(y, {m: value}, options=options)
        record = asyncio.run(main(s))
        assert record.used_pool and record.started_at > 0.0  # it did run, on the loop
        if way == "handler":
            assert record.handler_id is not None  # through a run handler, as forced
    until = time.monotonic() + 5
    while pool.stats().active_handlers and time.monotonic() < until:
        time.sleep(0.001)
    assert pool.stats().running_closures == 0 and pool.stats().active_handlers == 0  # all given back
