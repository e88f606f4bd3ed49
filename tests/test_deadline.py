"""runtime/deadline.py: a Deadline's remaining time and checks, and the DeadlineTimer thread that cancels steps
at their deadline, in deadline order, without keeping them alive."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest

from poolserve.proto import config_pb2
from poolserve.runtime import deadline as deadline_module
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.deadline import SERVER_DEFAULT, Deadline, DeadlineTimer
from poolserve.runtime.errors import Code, DeadlineExceededError, OpError
from poolserve.runtime.session import Session

WAIT_S = 2.0  # the longest any test waits for the timer thread (a failing test, not a slow machine)


class Step:
    """What the timer cancels: ``finished`` and ``cancel(error)``; records when and how it was cancelled."""

    def __init__(self, name: str = "", log: list[str] | None = None, finished: bool = False) -> None:
        self.name = name
        self.finished = finished
        self.error: OpError | None = None
        self.cancelled_at = 0.0
        self.cancelled = threading.Event()
        self._log = log

    def cancel(self, error: OpError | None = None) -> None:
        self.cancelled_at = time.monotonic()
        self.error = error
        if self._log is not None:
            self._log.append(self.name)
        self.cancelled.set()


# --- Deadline -------------------------------------------------------------------------------------------


class Clock:
    """A time.monotonic() the test moves, for the deadline module only. It starts at the real clock and only
    moves forward a little: a DeadlineTimer thread of another test that reads it meanwhile is not misled."""

    def __init__(self, t: float) -> None:
        self.t = t

    def monotonic(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock(time.monotonic())
    monkeypatch.setattr(deadline_module, "time", fake)
    return fake


def test_remaining_ms_counts_down_from_the_start(clock: Clock) -> None:
    d = Deadline(50)
    assert d.remaining_ms() == pytest.approx(50.0)
    clock.t += 0.030
    assert d.remaining_ms() == pytest.approx(20.0)
    clock.t += 0.100
    assert d.remaining_ms() == pytest.approx(-80.0)
    assert d.timeout_ms == 50 and repr(d) == "Deadline(50 ms, -80.0 ms left)"


def test_wait_ms_rounds_up_and_is_at_least_one(clock: Clock) -> None:
    d = Deadline(50)
    clock.t += 0.0207  # 29.3 ms left
    assert d.wait_ms() == 30
    clock.t += 0.0292  # 0.1 ms left
    assert d.wait_ms() == 1
    clock.t += 0.0001
    assert d.wait_ms() == 1  # the deadline itself
    long_past = Deadline(50, start=clock.t - 1.0)
    assert long_past.wait_ms() == 1  # an API that waits is never told 0 or less (0 often means "forever")


def test_a_start_in_the_past_counts(clock: Clock) -> None:
    d = Deadline(1_000, start=clock.t - 0.6)
    assert d.remaining_ms() == pytest.approx(400.0)
    with pytest.raises(DeadlineExceededError, match="deadline of 1000 ms passed while waiting"):
        Deadline(1_000, start=clock.t - 1.5).check("waiting")


def test_check_raises_at_the_deadline_and_not_before(clock: Clock) -> None:
    d = Deadline(50)
    clock.t += 0.0499
    d.check("decoding the request")  # 0.1 ms left: nothing
    clock.t = d.at
    with pytest.raises(DeadlineExceededError) as info:
        d.check("decoding the request")
    assert "The deadline of 50 ms passed while decoding the request" in info.value.message
    assert info.value.code == Code.DEADLINE_EXCEEDED


def test_check_on_the_real_clock() -> None:
    Deadline(60_000).check("running")
    d = Deadline(20)
    time.sleep(max(0.0, d.at - time.monotonic()) + 0.005)
    with pytest.raises(DeadlineExceededError, match="passed while running"):
        d.check("running")


def test_step_error_names_timeout_in_ms() -> None:
    error = Deadline(250).step_error()
    assert isinstance(error, DeadlineExceededError) and error.code == Code.DEADLINE_EXCEEDED
    assert "deadline of 250 ms" in error.message and "RunOptions.timeout_in_ms" in error.message


def test_errors_name_the_setting_the_deadline_came_from() -> None:
    """A deadline from ConfigProto.operation_timeout_in_ms (or the server's default) said it came from
    RunOptions.timeout_in_ms, which the caller had not set."""
    config = config_pb2.ConfigProto(operation_timeout_in_ms=40)
    with Session(GraphBuilder().graph_def, config) as sess:
        deadline = sess.deadline(None)
    assert deadline is not None
    message = deadline.step_error().message
    assert "ConfigProto.operation_timeout_in_ms" in message and "RunOptions" not in message
    late = Deadline(10, start=time.monotonic() - 1, source=SERVER_DEFAULT)
    with pytest.raises(
        DeadlineExceededError, match=r"passed while waiting \(the server's default_timeout_ms\)"
    ):
        late.check("waiting")


# --- DeadlineTimer --------------------------------------------------------------------------------------


def test_timer_cancels_a_step_at_its_deadline_with_the_step_error() -> None:
    timer = DeadlineTimer()
    step = Step()
    deadline = Deadline(30)
    timer.add(deadline, step)
    assert not step.cancelled.is_set()
    assert step.cancelled.wait(WAIT_S), "the step was never cancelled"
    assert step.cancelled_at >= deadline.at  # not before its deadline
    assert isinstance(step.error, DeadlineExceededError)
    assert step.error.message == deadline.step_error().message


def test_timer_leaves_a_finished_step_alone() -> None:
    timer = DeadlineTimer()
    done = Step("done", finished=True)
    sentinel = Step("sentinel")
    timer.add(Deadline(10), done)
    timer.add(Deadline(40), sentinel)  # cancelled after ``done``'s deadline was handled
    assert sentinel.cancelled.wait(WAIT_S)
    assert not done.cancelled.is_set()


def test_timer_cancels_in_deadline_order() -> None:
    timer = DeadlineTimer()
    log: list[str] = []
    start = time.monotonic()
    steps = [Step(name, log) for name in ("c", "a", "b")]
    for step, ms in zip(steps, (90, 30, 60), strict=True):
        timer.add(Deadline(ms, start), step)
    assert all(s.cancelled.wait(WAIT_S) for s in steps)
    assert log == ["a", "b", "c"]


def test_an_earlier_deadline_added_later_wakes_the_timer() -> None:
    """The thread sleeping until a far deadline must wake for a nearer one added afterwards."""
    timer = DeadlineTimer()
    far, near = Step("far"), Step("near")
    timer.add(Deadline(60_000), far)
    time.sleep(0.01)  # the thread is now waiting for ``far``
    timer.add(Deadline(20), near)
    assert near.cancelled.wait(WAIT_S), "the timer slept past the nearer deadline"
    assert not far.cancelled.is_set()
    far.finished = True


def test_timer_holds_steps_weakly() -> None:
    timer = DeadlineTimer()
    step = Step()
    ref = weakref.ref(step)
    timer.add(Deadline(60_000), step)
    del step
    gc.collect()
    assert ref() is None, "the timer keeps a pending step alive"


def test_a_step_freed_before_its_deadline_does_not_stop_the_timer() -> None:
    timer = DeadlineTimer()
    gone = Step()
    ref = weakref.ref(gone)
    timer.add(Deadline(10), gone)
    del gone
    gc.collect()
    assert ref() is None
    sentinel = Step()
    timer.add(Deadline(40), sentinel)
    assert sentinel.cancelled.wait(WAIT_S)


def test_timer_does_not_keep_a_cancelled_step_alive() -> None:
    timer = DeadlineTimer()
    step = Step()
    ref = weakref.ref(step)
    timer.add(Deadline(10), step)
    assert step.cancelled.wait(WAIT_S)
    del step
    gc.collect()
    assert ref() is None


def test_timer_survives_a_step_whose_cancel_fails(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Step):
        def cancel(self, error: OpError | None = None) -> None:
            raise RuntimeError("broken cancel")

    timer = DeadlineTimer()
    broken, later = Broken(), Step()
    timer.add(Deadline(5), broken)
    timer.add(Deadline(30), later)
    assert later.cancelled.wait(WAIT_S)  # the thread went on to the next deadline
    assert "cancelling a step at its deadline failed" in caplog.text
