"""Lone steps of a plan with expensive nodes: executor or straight loop, chosen from their measured times
(runtime/step_way.py)."""

import threading

import numpy as np
import pytest
from support import RUNS, gate_op, sleep_op

from poolserve.proto import config_pb2
from poolserve.runtime import step_way
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.session import Session
from poolserve.runtime.step_way import StepWay


def drive(way: StepWay, steps: int, seconds: dict[bool, float]) -> list[bool]:
    """``steps`` lone steps taking ``seconds[loop]`` each; the way each took."""
    taken = []
    for _ in range(steps):
        loop = way.loop()
        way.learn(loop, seconds[loop])
        taken.append(loop)
    return taken


def test_both_ways_are_tried_in_turns_then_the_faster_is_kept():
    way = StepWay()
    way.learn(way.loop(), 100.0)  # the first step each way warms up: not counted
    way.learn(way.loop(), 100.0)
    taken = drive(way, 2 * step_way.FIRST, {False: 2.0, True: 1.0})
    assert taken == [False, True] * step_way.FIRST  # the executor first, as before any measurement
    assert way.fastest() == (2.0, 1.0)
    taken = drive(way, 200, {False: 2.0, True: 1.0})
    assert taken.count(True) == 200 - taken.count(False) and taken.count(False) <= 1


def test_the_way_not_taken_runs_again_more_often_when_the_two_are_close():
    far, close = StepWay(), StepWay()
    steps = 4 * step_way.FAR_EVERY
    far_taken = drive(far, steps, {False: 1.0, True: 2.0})[2 * step_way.FIRST + 2 :]
    close_taken = drive(close, steps, {False: 1.0, True: 1.05})[2 * step_way.FIRST + 2 :]
    assert 3 <= far_taken.count(True) <= 5  # about one in FAR_EVERY
    assert close_taken.count(True) >= steps // step_way.CLOSE_EVERY - 2  # about one in CLOSE_EVERY
    assert far_taken.count(False) > close_taken.count(False) > steps // 2


def test_a_change_in_which_way_is_faster_is_followed():
    way = StepWay()
    drive(way, 50, {False: 1.0, True: 1.05})
    taken = drive(way, 40 * step_way.CLOSE_EVERY, {False: 1.0, True: 0.5})
    assert taken[-step_way.CLOSE_EVERY :].count(True) >= step_way.CLOSE_EVERY - 1


def two_sleeps(seconds: float) -> tuple[GraphBuilder, str]:
    """Two expensive kernels that sleep side by side (as two BLAS calls would, the GIL released)."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [2])
    left = sleep_op(b, x, seconds, "left")
    right = sleep_op(b, x, seconds, "right")
    return b, str(b.op("AddV2", [left, right], {"T": np.float32}, name="sum"))


def test_lone_steps_whose_branches_run_side_by_side_keep_the_executor():
    b, out = two_sleeps(0.02)
    feed = np.ones(2, np.float32)
    config = config_pb2.ConfigProto(inter_op_parallelism_threads=2)
    with Session(b.graph_def, config=config) as s:
        s.run(out, {"x:0": feed})  # the executor's first step
        (plan,) = set(s._calls.plans.values())

        np.testing.assert_array_equal(s.run(out, {"x:0": feed}), 2 * feed)  # then a straight loop
        assert not plan.cheap and not plan.parallel  # it ran on one thread; its nodes are not cheap
        assert RUNS["left"] == RUNS["right"] == 2
        for _ in range(4 * step_way.FIRST + 2):
            np.testing.assert_array_equal(s.run(out, {"x:0": feed}), 2 * feed)
        fastest = plan.way.fastest()
        assert fastest is not None
        executor, loop = fastest
        # side by side ~20 ms, one after the other ~40 ms
        assert executor < 0.8 * loop, fastest
        assert plan.way.loop() is False


def test_steps_run_while_another_step_runs_are_not_measured():
    b, out = two_sleeps(0.005)
    held, gate = gate_op(b, None, "held")
    feed = np.ones(2, np.float32)
    with Session(b.graph_def, config=config_pb2.ConfigProto(inter_op_parallelism_threads=4)) as s:
        s.run(out, {"x:0": feed})
        plan = s._calls.plans[next(iter(s._calls.plans))]
        seen = list(plan.way._seen)
        assert sum(seen) == 1  # a lone step
        other = threading.Thread(target=s.run, args=(held,))
        other.start()
        try:
            assert gate.started.wait(10)
            for _ in range(3):  # another step of the session is running: these are not lone
                np.testing.assert_array_equal(s.run(out, {"x:0": feed}), 2 * feed)
        finally:
            gate.open()
            other.join(10)
        assert plan.way._seen == seen
        assert RUNS["left"] == 4


def test_a_lone_step_on_the_loop_fails_as_through_the_executor():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, [None])
    slept = sleep_op(b, x, 0.002, "slept")  # an expensive node: lone steps consult the plan's way
    out = b.op("Reshape", [slept, b.constant(np.array([2, 2], np.int32))], {"T": np.float32}, name="square")
    errors = []
    with Session(b.graph_def) as s:
        for _ in range(2):  # the executor's step, then the loop's (see test_both_ways_are_tried_in_turns)
            np.testing.assert_array_equal(s.run(out, {x: np.arange(4, dtype=np.float32)}).shape, (2, 2))
        (plan,) = set(s._calls.plans.values())
        assert plan.way._seen == [1, 1]
        for _ in range(2):  # the next lone step takes the executor again, the one after the loop
            way = plan.way._next
            with pytest.raises(InvalidArgumentError) as caught:
                s.run(out, {x: np.arange(3, dtype=np.float32)})
            errors.append((way, caught.value.node_name, str(caught.value)))
            np.testing.assert_array_equal(s.run(out, {x: np.arange(4, dtype=np.float32)}).shape, (2, 2))
    assert {way for way, _, _ in errors} == {0, 1}  # one through each way
    assert errors[0][1:] == errors[1][1:] and errors[0][1] == "square"
    assert "Input to reshape is a tensor with 3 values, but the requested shape has 4" in errors[0][2]
