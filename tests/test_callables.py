"""``Session.make_callable`` in process (runtime/callables.py): the same results, errors, deadlines and
cancellation as ``Session.run`` on every path a call can take."""

import collections
import threading
import time

import numpy as np
import pytest
from support import RUNS, gate_op, sleep_op

from poolserve.proto import config_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.callables import SerialProgram
from poolserve.runtime.errors import CancelledError, DeadlineExceededError, InvalidArgumentError
from poolserve.runtime.run_handler import RunHandlerPool
from poolserve.runtime.session import Session


def small_graph():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None, 3))
    w = b.constant(np.arange(9, dtype=np.float32).reshape(3, 3), name="w")
    h = b.relu(b.matmul(x, w, name="mm"), name="h")
    left = b.add(h, b.constant(np.float32(1), name="one"), name="left")
    right = b.mul(h, h, name="right")
    y = b.add(left, right, name="y")
    return b, x, y, h


def expected(x):
    h = np.maximum(np.asarray(x, np.float32) @ np.arange(9, dtype=np.float32).reshape(3, 3), 0)
    return (h + 1) + h * h


def options(**kw):
    opts = config_pb2.RunOptions(**kw)
    return opts


def test_serial_program_runs_nodes_after_their_inputs_and_control_inputs():
    b, x, y, _ = small_graph()
    b.no_op("after", control_inputs=[y])
    with Session(b.graph_def) as s:
        sig, _ = s._calls.resolve([y, "after"], {x: np.ones((1, 3), np.float32)}, None)
    program = SerialProgram(sig.plan)
    names = [instr[4].name for instr in program.code]
    assert sorted(names) == sorted(pn.name for pn in sig.plan.nodes)
    for i, pn in enumerate(instr[4] for instr in program.code):
        for src in [s for s, _ in pn.node.inputs] + list(pn.node.control_inputs):
            if src in names:
                assert names.index(src) < i, (src, pn.name)


def test_a_callable_with_a_feed_list_takes_options_as_tensorflows_does():
    """TensorFlow 2.21's make_callable with a feed_list (even an empty one) passes its keywords on to
    Session.run, so ``options=`` and ``run_metadata=`` work without ``accept_options``; without a
    feed_list its callable takes none (a TypeError)."""
    b, x, y, _ = small_graph()
    feed = np.array([[1, -2, 3]], np.float32)
    traced = options(trace_level=config_pb2.RunOptions.FULL_TRACE)
    with Session(b.graph_def) as s:
        metadata = config_pb2.RunMetadata()
        s.make_callable(y, [x])(feed, options=traced, run_metadata=metadata)
        assert "y" in {n.node_name for d in metadata.step_stats.dev_stats for n in d.node_stats}
        constant = s.make_callable("w:0", [])  # an empty feed_list: options too
        assert constant(options=traced, run_metadata=metadata).shape == (3, 3)
        with pytest.raises(TypeError):
            s.make_callable("w:0")(options=traced)


def test_a_callable_answers_as_run_does_on_every_path():
    b, x, y, h = small_graph()
    feed = np.array([[1, -2, 3], [0.5, 0, -1]], np.float32)
    pool = RunHandlerPool(num_threads=2)
    pooled = options()
    pooled.experimental.use_run_handler_pool = True
    traced = options(trace_level=config_pb2.RunOptions.FULL_TRACE)
    with Session(b.graph_def, run_handler_pool=pool) as s:
        call = s.make_callable(y, [x], accept_options=True)
        for _ in range(3):  # the first calls learn the kernels' costs; later ones take the serial path
            for opts in (None, pooled, options(inter_op_thread_pool=-1), options(timeout_in_ms=5000)):
                np.testing.assert_allclose(call(feed, options=opts), expected(feed), rtol=1e-6)
                np.testing.assert_allclose(call(feed.tolist(), options=opts), expected(feed), rtol=1e-6)
        assert pool.stats().handlers_acquired > 0  # the pool was asked for a slot
        metadata = config_pb2.RunMetadata()
        call(feed, options=traced, run_metadata=metadata)
        assert {"y", "right"} <= {n.node_name for d in metadata.step_stats.dev_stats for n in d.node_stats}
        # structures, op names and one tensor fetched twice, as run returns them
        Pair = collections.namedtuple("Pair", "a b")
        fetches = {"pair": Pair(y, h), "op": "right", "again": [y, y]}
        shaped = s.make_callable(fetches, [x])
        for _ in range(2):
            got, want = shaped(feed), s.run(fetches, {x: feed})
            assert isinstance(got["pair"], Pair) and got["op"] is None
            for a, b_ in ((got["pair"].a, want["pair"].a), (got["pair"].b, want["pair"].b)):
                np.testing.assert_array_equal(a, b_)
            assert got["again"][0] is not got["again"][1] or got["again"][0].flags.writeable


def test_a_callable_checks_each_fed_value_and_names_the_tensor():
    b, x, y, _ = small_graph()
    with Session(b.graph_def) as s:
        call = s.make_callable(y, [x])
        call(np.ones((1, 3), np.float32))
        with pytest.raises(InvalidArgumentError, match=r"shape \(1, 4\) for Tensor 'x:0'"):
            call(np.ones((1, 4), np.float32))
        with pytest.raises(InvalidArgumentError, match="dtype complex128 for Tensor 'x:0'"):
            call(np.ones((1, 3), np.complex128))
        with pytest.raises(InvalidArgumentError, match=r"shape \(3,\) for Tensor 'x:0'"):
            call(np.ones(3, np.float32))
        # a lossless cast is taken, as run takes it
        np.testing.assert_allclose(call(np.ones((1, 3), np.int32)), expected(np.ones((1, 3))))


def test_a_failing_kernel_names_its_node_on_the_serial_path():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None,))
    y = b.reshape(b.relu(x), [2, 2], name="square")
    with Session(b.graph_def) as s:
        call = s.make_callable(y, [x])
        call(np.ones(4, np.float32))
        with pytest.raises(InvalidArgumentError, match=r"node square\}\}") as got:
            call(np.ones(3, np.float32))
        with pytest.raises(InvalidArgumentError) as want:
            s.run(y, {x: np.ones(3, np.float32)})
        assert got.value.message == want.value.message and got.value.node_name == "square"


def chain(n: int, seconds: float, prefix: str):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    t = x
    for i in range(n):
        t = sleep_op(b, t, seconds, f"{prefix}{i}")
    return b, x, t


def test_the_deadline_stops_a_callable_between_nodes_on_the_callers_thread():
    b, x, t = chain(3, 0.08, "cd")
    with Session(b.graph_def) as s:
        call = s.make_callable(t, [x], accept_options=True)
        t0 = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            call(np.float32(1), options=options(timeout_in_ms=100, inter_op_thread_pool=-1))
        assert time.monotonic() - t0 < 0.5
        assert RUNS.get("cd2", 0) == 0  # the node after the deadline never started
        assert call(np.float32(2), options=options(inter_op_thread_pool=-1)) == 2.0
        assert s.steps_running == 0


def test_closing_the_session_cancels_a_callable_in_flight():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    g, gate = gate_op(b, x, "callable_gate")
    y = sleep_op(b, g, 0.0, "after_gate")
    s = Session(b.graph_def)
    call = s.make_callable(y, [x], accept_options=True)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call(np.float32(1), options=options(inter_op_thread_pool=-1))
        except BaseException as e:
            errors.append(e)

    runner = threading.Thread(target=run)
    runner.start()
    assert gate.started.wait(5)
    assert s.steps_running == 1
    closer = threading.Thread(target=s.close)
    closer.start()
    time.sleep(0.05)
    gate.open()
    runner.join(5)
    closer.join(5)
    assert len(errors) == 1 and isinstance(errors[0], CancelledError)
    assert RUNS.get("after_gate", 0) == 0
    with pytest.raises(RuntimeError, match="closed Session"):
        call(np.float32(1))
