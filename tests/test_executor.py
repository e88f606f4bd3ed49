import threading
import time
import weakref

import numpy as np
import pytest
from support import RUNS, gate_op, sleep_op

from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.deadline import Deadline, DeadlineTimer
from poolserve.runtime.errors import (
    CancelledError,
    DeadlineExceededError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from poolserve.runtime.executor import (
    DEVICE,
    EXPENSIVE_THRESHOLD_US,
    SAMPLE_EVERY,
    SAMPLE_FIRST,
    ConstantFolder,
    Plan,
    PlanNode,
    Step,
    StepTrace,
    kernel_error,
    run_plan_inline,
)
from poolserve.runtime.graph import Graph
from poolserve.runtime.kernels.registry import KERNELS, ResourceContainer, kernel
from poolserve.runtime.threadpool import CallerThread, ThreadPool

if "TestRaise" not in KERNELS:

    @kernel("TestRaise")
    def _test_raise(node):
        kind = {"value": ValueError, "runtime": RuntimeError, "memory": MemoryError}[node.attr_str("kind")]

        def compute(ctx, inputs):
            raise kind("kernel went wrong")

        return compute


def t(name, port=0):
    return (name, port)


class Done:
    """A step's ``done`` callback that counts its calls and can be waited for."""

    def __init__(self):
        self.steps = []
        self.event = threading.Event()

    def __call__(self, step):
        self.steps.append(step)
        self.event.set()

    def wait(self):
        assert self.event.wait(5), "the step never called done"


def start_step(plan, feeds, scheduler=None, inline=True, **kwargs):
    done = Done()
    step = Step(plan, feeds, ResourceContainer(), scheduler or CallerThread(), done, **kwargs)
    step.start(inline=inline)
    return step, done


def names(plan):
    return [pn.name for pn in plan.nodes]


def by_name(plan, name):
    return plan.nodes[plan.index_of[name]]


@pytest.fixture
def pool():
    p = ThreadPool(2, "exec_test")
    yield p
    p.close()


# --- Plan ------------------------------------------------------------------------------------------------


def test_plan_gives_feeds_the_first_slots_then_each_node_its_outputs():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (2,))
    k = b.placeholder("k", np.float32, (2,))
    c = b.constant(np.array([1, 2], np.float32), name="c")
    y = b.add(x, c, name="y")
    u = b.op("Unique", [y], {"T": np.float32, "out_idx": np.int32}, name="u", num_outputs=2)
    b.mul(u[0], k, name="z")
    plan = Plan(Graph(b.graph_def), [t("x"), t("k")], [t("z"), t("u", 1)])
    slot = plan.slot_of

    assert (slot[t("x")], slot[t("k")]) == (0, 1)  # feeds first, in the order given
    assert plan.template[:2] == [None, None]
    np.testing.assert_array_equal(plan.template[slot[t("c")]], [1, 2])  # a Const is pre-filled
    assert names(plan) == ["y", "u", "z"]  # Const and fed Placeholders are not executed
    assert sorted(slot.values()) == list(range(len(plan.template))) == list(range(7))
    un = by_name(plan, "u")
    assert (un.out_base, un.num_outputs) == (slot[t("u")], 2) and slot[t("u", 1)] == un.out_base + 1
    assert by_name(plan, "z").in_slots == (slot[t("u")], slot[t("k")])
    assert by_name(plan, "y").in_slots == (slot[t("x")], slot[t("c")])
    assert plan.fetch_slots == [slot[t("z")], slot[t("u", 1)]]
    assert all(plan.template[pn.out_base] is None for pn in plan.nodes)  # outputs are the step's to fill
    assert by_name(plan, "y").label == "y = AddV2(x, c)"

    zv, idx = run_plan_inline(plan, [np.array([1, 1], np.float32), np.array([10, 100], np.float32)])
    np.testing.assert_array_equal(zv, [20, 300])  # unique([2, 3]) * k
    np.testing.assert_array_equal(idx, [0, 1])


def test_plan_prunes_what_the_fetches_do_not_need():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (2,))
    a = b.relu(x, name="a")
    b.mul(x, x, name="unused")
    b.add(a, a, name="y")
    graph = Graph(b.graph_def)

    assert names(Plan(graph, [t("x")], [t("y")])) == ["a", "y"]
    # a fed inner tensor cuts off its producers: neither a nor x is needed
    inner = Plan(graph, [t("a")], [t("y")])
    assert names(inner) == ["y"] and inner.roots == [0]
    assert inner.nodes[0].in_slots == (0, 0)
    np.testing.assert_array_equal(run_plan_inline(inner, [np.array([3, 4], np.float32)])[0], [6, 8])
    # a target runs for its effect only
    target = Plan(graph, [t("x")], [], ["unused"])
    assert names(target) == ["unused"] and target.fetch_slots == []
    # without a feed, the Placeholder itself is part of the plan (and fails when run)
    unfed = Plan(graph, [], [t("y")])
    assert names(unfed) == ["x", "a", "y"]
    with pytest.raises(InvalidArgumentError, match="You must feed a value for placeholder tensor 'x'"):
        run_plan_inline(unfed, [])


def folding_graph():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (1, 2))
    w = b.constant(np.array([[0, 1], [2, 3]], np.float32), name="w")
    two = b.constant(np.float32(2), name="two")
    w2 = b.mul(w, two, name="w2")
    w3 = b.add(w2, two, name="w3")  # folds too, once w2 is a constant
    y = b.matmul(x, w3, name="y")
    return Graph(b.graph_def), y


def test_constant_subgraphs_are_folded_into_the_template():
    graph, _ = folding_graph()
    plan = Plan(graph, [t("x")], [t("y")], folder=ConstantFolder(graph))
    assert plan.folded == ["w2", "w3"]
    assert names(plan) == ["y"] and plan.roots == [0]
    folded = plan.template[plan.slot_of[t("w3")]]
    np.testing.assert_array_equal(folded, [[2, 4], [6, 8]])
    assert not folded.flags.writeable  # shared by every step: nobody may write into it
    x = np.array([[1, 1]], np.float32)
    want = x @ np.array([[2, 4], [6, 8]], np.float32)
    np.testing.assert_array_equal(run_plan_inline(plan, [x])[0], want)

    # no folder, a disabled one, or values over its size limit: the nodes run every step
    for folder in (None, ConstantFolder(graph, enabled=False), ConstantFolder(graph, max_bytes=8)):
        unfolded = Plan(graph, [t("x")], [t("y")], folder=folder)
        assert unfolded.folded == [] and names(unfolded) == ["w2", "w3", "y"], folder
        np.testing.assert_array_equal(run_plan_inline(unfolded, [x])[0], want)


def test_a_folder_computes_each_node_once_for_every_plan():
    b = GraphBuilder()
    c = b.constant(np.float32(5), name="c")
    s = sleep_op(b, c, 0, "fold_once")
    x = b.placeholder("x", np.float32, ())
    b.add(s, x, name="y")
    graph = Graph(b.graph_def)
    folder = ConstantFolder(graph)
    plans = [Plan(graph, [t("x")], [t("y")], folder=folder) for _ in range(3)]
    assert RUNS["fold_once"] == 1  # folded when the first plan was made, not per plan or per step
    assert all(p.folded == ["fold_once"] for p in plans)
    assert run_plan_inline(plans[2], [np.float32(1)])[0] == 6
    assert RUNS["fold_once"] == 1


def test_roots_consumers_and_pending_counts():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (2,))
    a = b.relu(x, name="a")
    bb = b.identity(x, name="b")
    c = b.add(a, bb, name="c")
    d = b.add(c, a, name="d")
    e = b.add(a, a, name="e")  # one producer, used twice: one pending count
    b.no_op("n", control_inputs=[d, e])  # control edges count too
    b.relu(b.constant(np.ones(2, np.float32), name="ones"), name="k")  # a Const input is no dependency
    plan = Plan(Graph(b.graph_def), [t("x")], [t("d"), t("e")], ["n", "k"])

    pending = {pn.name: plan.initial_pending[pn.index] for pn in plan.nodes}
    assert pending == {"a": 0, "b": 0, "c": 2, "d": 2, "e": 1, "n": 2, "k": 0}
    assert sorted(plan.nodes[r].name for r in plan.roots) == ["a", "b", "k"]
    consumers = {pn.name: sorted(plan.nodes[c].name for c in pn.consumers) for pn in plan.nodes}
    assert consumers == {
        "a": ["c", "d", "e"],
        "b": ["c"],
        "c": ["d"],
        "d": ["n"],
        "e": ["n"],
        "n": [],
        "k": [],
    }

    feed = np.array([-1, 2], np.float32)
    for _ in range(2):  # a step works on its own copy of the counts: the plan runs again unchanged
        dv, ev = run_plan_inline(plan, [feed])
        np.testing.assert_array_equal(dv, [-1, 6])
        np.testing.assert_array_equal(ev, [0, 4])
    assert [plan.initial_pending[pn.index] for pn in plan.nodes] == list(pending.values())


# --- Step --------------------------------------------------------------------------------------------------


def test_nodes_start_after_their_inputs_and_parallel_branches_run_at_once(pool):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    s1 = sleep_op(b, x, 0.002, "flow_s1")
    g2, gate2 = gate_op(b, s1, "flow_g2")
    g3, gate3 = gate_op(b, s1, "flow_g3")
    sleep_op(b, b.add(g2, g3, name="flow_join"), 0, "flow_s4")
    plan = Plan(Graph(b.graph_def), [t("x")], [t("flow_s4")])
    trace = StepTrace(plan.num_nodes)
    step, done = start_step(plan, [np.float32(2)], pool, inline=False, trace=trace)
    # both branches are running at the same time, on the pool's two threads
    assert gate2.started.wait(5) and gate3.started.wait(5)
    assert not done.steps and RUNS.get("flow_s4", 0) == 0
    gate2.open()
    gate3.open()
    done.wait()
    assert step.status is None and step.fetched()[0] == 4

    rec = {plan.nodes[r.index].name: r for r in trace.records}
    assert set(rec) == {"flow_s1", "flow_g2", "flow_g3", "flow_join", "flow_s4"}
    for pn in plan.nodes:
        for c in pn.consumers:
            assert rec[plan.nodes[c].name].start_ns >= rec[pn.name].end_ns, (pn.name, plan.nodes[c].name)
    assert rec["flow_g2"].thread_id != rec["flow_g3"].thread_id
    # of two expensive nodes made ready at once, the thread that readied them keeps one
    assert rec["flow_s1"].thread_id in (rec["flow_g2"].thread_id, rec["flow_g3"].thread_id)
    assert set(trace.thread_names.values()) <= {"exec_test/0", "exec_test/1"}


def two_sleeps():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    a = b.identity(x, name="a")
    sleep_op(b, a, 0, "inline_s1")
    sleep_op(b, a, 0, "inline_s2")
    return Plan(Graph(b.graph_def), [t("x")], [t("inline_s1"), t("inline_s2")])


def test_expensive_nodes_go_to_the_pool_until_they_turn_out_cheap(pool):
    plan = two_sleeps()
    me = threading.current_thread().name

    trace = StepTrace(plan.num_nodes)
    step, done = start_step(plan, [np.float32(1)], pool, trace=trace)
    done.wait()
    # a ran inline on the caller, then one of the two ready expensive nodes went to the pool
    threads = {plan.nodes[r.index].name: trace.thread_names[r.thread_id] for r in trace.records}
    assert threads["a"] == me
    s1, s2 = threads["inline_s1"], threads["inline_s2"]
    assert me in (s1, s2) and (s1 if s2 == me else s2).startswith("exec_test/")

    plan = two_sleeps()  # fresh estimates: what is set below is the first measurement
    for name in ("inline_s1", "inline_s2"):
        by_name(plan, name).learn(1.0)  # measured far under the threshold
    trace = StepTrace(plan.num_nodes)
    step, done = start_step(plan, [np.float32(1)], pool, trace=trace)
    done.wait()
    assert step.status is None and len(trace.records) == 3
    assert set(trace.thread_names.values()) == {me}  # nothing was worth a hand-off


class FlippingNode(PlanNode):
    """A node whose expensive flag changes at every read, as another step of its plan learning its cost
    can change it between two reads."""

    __slots__ = ()
    reads = 0

    @property
    def expensive(self):
        FlippingNode.reads += 1
        return FlippingNode.reads % 2 == 1

    @expensive.setter
    def expensive(self, value):
        pass


class Preempting:
    """A scheduler that is always saturated and always preempted: a step puts its expensive nodes back."""

    def __init__(self, pool):
        self.schedule = pool.schedule

    def saturated(self):
        return True

    def preempted(self):
        return True


@pytest.mark.parametrize("inline", [True, False])
def test_a_root_whose_cost_flag_flips_still_runs_once(pool, inline):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    sleep_op(b, x, 0, "s1")
    sleep_op(b, x, 0, "s2")
    plan = Plan(Graph(b.graph_def), [t("x")], [t("s1"), t("s2")])
    by_name(plan, "s1").__class__ = FlippingNode
    for _ in range(4):  # every phase of the flip
        trace = StepTrace(plan.num_nodes)
        step, done = start_step(plan, [np.float32(1)], pool, inline=inline, trace=trace)
        done.wait()
        assert step.status is None and sorted(r.index for r in trace.records) == sorted(plan.roots)


def test_ready_nodes_whose_cost_flag_flips_run_once_when_preempted(pool):
    plan = two_sleeps()
    by_name(plan, "inline_s1").__class__ = FlippingNode
    for _ in range(4):
        trace = StepTrace(plan.num_nodes)
        step, done = start_step(plan, [np.float32(1)], Preempting(pool), trace=trace)
        done.wait()
        assert step.status is None and len(trace.records) == 3


def test_cancel_before_start_finishes_once_and_runs_nothing():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    sleep_op(b, x, 0, "never_runs")
    plan = Plan(Graph(b.graph_def), [t("x")], [t("never_runs")])
    done = Done()
    step = Step(plan, [np.float32(1)], ResourceContainer(), CallerThread(), done)
    step.cancel()
    assert done.steps == [step] and step.finished  # nothing runs: done fires at once
    assert isinstance(step.status, CancelledError) and step.status.message == "Run call was cancelled"
    step.start(inline=True)
    step.cancel(DeadlineExceededError("later"))
    assert done.steps == [step] and "never_runs" not in RUNS
    assert isinstance(step.status, CancelledError)  # the first reason stays


def test_cancel_while_a_node_runs_waits_for_it_then_stops(pool):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    g, gate = gate_op(b, x, "cancel_gate")
    sleep_op(b, g, 0, "after_gate")
    plan = Plan(Graph(b.graph_def), [t("x")], [t("after_gate")])
    step, done = start_step(plan, [np.float32(1)], pool, inline=False)
    assert gate.started.wait(5)
    step.cancel()
    assert isinstance(step.status, CancelledError)
    assert not done.steps and not step.finished  # a kernel is still running: done waits for it
    gate.open()
    done.wait()
    assert done.steps == [step] and step.finished
    step.cancel()
    time.sleep(0.01)  # a second done would come from the pool thread
    assert done.steps == [step]
    assert "after_gate" not in RUNS  # nothing started after the cancel


def test_a_kernel_error_fails_the_step_naming_the_node():
    b = GraphBuilder()
    p = b.placeholder("p", np.float32, None)
    m = b.matmul(p, p, name="bad_mm")
    sleep_op(b, m, 0, "after_bad")
    plan = Plan(Graph(b.graph_def), [t("p")], [t("after_bad")])
    step, done = start_step(plan, [np.ones((2, 3), np.float32)])
    done.wait()
    assert done.steps == [step]
    err = step.status
    assert isinstance(err, InvalidArgumentError) and err.node_name == "bad_mm"
    assert err.message == "Matrix size-incompatible: In[0]: [2,3], In[1]: [2,3]\n\t [[{{node bad_mm}}]]"
    assert err.message.endswith("\n\t [[{{node bad_mm}}]]")
    assert "after_bad" not in RUNS
    with pytest.raises(InvalidArgumentError, match=r"\[\[\{\{node bad_mm\}\}\]\]"):
        run_plan_inline(plan, [np.ones((2, 3), np.float32)])


@pytest.mark.parametrize(
    ("kind", "error", "message"),
    [
        ("value", InvalidArgumentError, "TestRaise failed: kernel went wrong"),
        ("runtime", InternalError, "TestRaise failed: RuntimeError: kernel went wrong"),
        ("memory", ResourceExhaustedError, "OOM when allocating an output of TestRaise"),
    ],
)
def test_kernel_exceptions_become_op_errors(kind, error, message):
    b = GraphBuilder()
    b.op("TestRaise", [], {"kind": kind}, name="raiser")
    plan = Plan(Graph(b.graph_def), [], [t("raiser")])
    with pytest.raises(error) as info:
        run_plan_inline(plan, [])
    assert type(info.value) is error
    assert info.value.message == f"{message}\n\t [[{{{{node raiser}}}}]]"
    assert info.value.node_name == "raiser"


def test_kernel_error_names_an_op_error_once():
    b = GraphBuilder()
    b.op("TestRaise", [], {"kind": "value"}, name="n1")
    node = Graph(b.graph_def).node("n1")
    err = NotFoundError("no such thing")
    assert kernel_error(node, err) is err and kernel_error(node, err) is err
    assert err.message == "no such thing\n\t [[{{node n1}}]]" and err.node_name == "n1"  # suffix once
    other = NotFoundError("elsewhere", "n0")
    assert kernel_error(node, other).message == "elsewhere"  # it names its own node already


def test_cost_estimates_start_high_and_learn_from_measurements():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (1, 1))
    m = b.matmul(x, x, name="mm")
    b.add(m, m, name="cheap")
    plan = Plan(Graph(b.graph_def), [t("x")], [t("cheap")])
    mm, cheap = by_name(plan, "mm"), by_name(plan, "cheap")
    assert mm.measure and mm.expensive and not mm.learned
    assert mm.cost_us > EXPENSIVE_THRESHOLD_US  # a guess that sends it to the pool until measured
    assert not cheap.measure and not cheap.expensive and cheap.cost_us == 0.0

    mm.learn(100.0)
    assert mm.learned and mm.cost_us == 100.0 and not mm.expensive  # the first measurement replaces it
    mm.learn(2000.0)
    assert mm.cost_us == pytest.approx(290.0) and mm.expensive  # (9 * 100 + 2000) / 10
    at_threshold = by_name(Plan(plan.graph, [t("x")], [t("mm")]), "mm")
    at_threshold.learn(EXPENSIVE_THRESHOLD_US)
    assert not at_threshold.expensive  # expensive means over the threshold, not at it

    run_plan_inline(plan, [np.ones((1, 1), np.float32)])
    assert not cheap.learned and cheap.cost_us == 0.0  # cheap kernels are never timed


def test_a_step_measures_its_expensive_kernels():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    sleep_op(b, x, 0.003, "measured")
    plan = Plan(Graph(b.graph_def), [t("x")], [t("measured")])
    node = by_name(plan, "measured")
    t0 = time.perf_counter()
    run_plan_inline(plan, [np.float32(1)])
    wall_us = (time.perf_counter() - t0) * 1e6
    first = node.cost_us
    assert node.learned and 3000.0 <= first <= wall_us
    t0 = time.perf_counter()
    run_plan_inline(plan, [np.float32(1)])
    wall_us = (time.perf_counter() - t0) * 1e6
    assert (9 * first + 3000.0) / 10 <= node.cost_us <= (9 * first + wall_us) / 10


def test_timed_kernels_read_the_cpu_clock_on_sampled_runs_only(monkeypatch):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (2, 2))
    b.add(b.matmul(x, x, name="mm"), x, name="y")
    plan = Plan(Graph(b.graph_def), [t("x")], [t("y")])
    mm = by_name(plan, "mm")
    learned: list[float] = []
    real_learn = PlanNode.learn
    monkeypatch.setattr(PlanNode, "learn", lambda self, us: (learned.append(us), real_learn(self, us)))
    feed = [np.ones((2, 2), np.float32)]
    for _ in range(SAMPLE_FIRST):
        run_plan_inline(plan, feed)
    assert len(learned) == SAMPLE_FIRST and mm.samples == SAMPLE_FIRST  # every run while it learns
    for _ in range(3 * SAMPLE_EVERY):
        run_plan_inline(plan, feed)
    assert len(learned) == SAMPLE_FIRST + 3  # then one run in SAMPLE_EVERY
    assert not mm.expensive  # what it learned still decides where it runs


def test_memory_limit_fails_the_step_that_goes_over_it():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None,))
    big = b.op("Tile", [x, b.constant(np.array([25], np.int32))], {"T": np.float32}, name="big")
    y = b.add(big, big, name="y")
    sleep_op(b, y, 0, "after_oom")
    plan = Plan(Graph(b.graph_def), [t("x")], [t("after_oom")])
    feed = [np.ones(4, np.float32)]  # 400 bytes per output

    step, done = start_step(plan, feed, memory_limit=10_000)
    done.wait()
    assert step.status is None and step.bytes_allocated == 1200
    assert (
        step.memory is not None and step.memory.peak == 800 and step.memory.live == 400
    )  # the fetched output

    step, done = start_step(plan, feed, memory_limit=600)  # y counts with big, which it reads
    done.wait()
    err = step.status
    assert isinstance(err, ResourceExhaustedError) and err.node_name == "y"
    assert err.message == (
        f"OOM when allocating tensor with shape[100] and type float32 on {DEVICE} by allocator cpu: "
        "the step's live tensors would take 800 bytes, over the session's memory limit of 600 bytes"
        "\n\t [[{{node y}}]]"
    )
    assert done.steps == [step] and RUNS.get("after_oom") == 1  # only the first, unlimited step ran it
    assert step.live_tensors() == [(400, "big")]  # y's output was refused


def test_run_plan_inline_returns_fetches_in_order_and_ignores_float_errors():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (2,))
    zero = b.constant(np.zeros(2, np.float32), name="zero")
    b.binary("RealDiv", x, zero, name="q")
    c = b.constant(np.int32(7), name="seven")
    plan = Plan(Graph(b.graph_def), [t("x")], [t("seven"), t("q")])
    seven, qv = run_plan_inline(plan, [np.array([1, -1], np.float32)])
    assert seven == 7
    np.testing.assert_array_equal(qv, [np.inf, -np.inf])  # as TensorFlow: no warning, no error
    # a plan with nothing to execute finishes at once
    only_const = Plan(Graph(b.graph_def), [], [(c.split(":")[0], 0)])
    assert only_const.num_nodes == 0 and only_const.roots == []
    assert run_plan_inline(only_const, []) == [7]


# --- DeadlineTimer ---------------------------------------------------------------------------------------


def test_deadline_timer_cancels_a_running_step(pool):
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, ())
    g, gate = gate_op(b, x, "deadline_gate")
    sleep_op(b, g, 0, "after_deadline")
    plan = Plan(Graph(b.graph_def), [t("x")], [t("after_deadline")])
    step, done = start_step(plan, [np.float32(1)], pool, inline=False)
    assert gate.started.wait(5)
    timer = DeadlineTimer()
    t0 = time.monotonic()
    timer.add(Deadline(20), step)
    while step.status is None and time.monotonic() - t0 < 5:
        time.sleep(0.001)
    assert time.monotonic() - t0 >= 0.019
    assert isinstance(step.status, DeadlineExceededError)
    assert "deadline of 20 ms" in step.status.message
    assert not done.steps  # cancelled, but its running kernel has not returned yet
    gate.open()
    done.wait()
    assert done.steps == [step] and "after_deadline" not in RUNS


class Probe:
    """A stand-in step for the timer: records when it is cancelled."""

    def __init__(self, name, log, finished=False):
        self.name, self.log, self.finished = name, log, finished

    def cancel(self, error=None):
        self.log.append((self.name, error))


def test_deadline_timer_cancels_in_deadline_order_and_skips_finished_steps():
    timer = DeadlineTimer()
    log = []
    keep = [Probe("late", log), Probe("done", log, finished=True), Probe("early", log)]
    timer.add(Deadline(60), keep[0])
    timer.add(Deadline(10), keep[1])
    timer.add(Deadline(30), keep[2])  # earlier than the one waited for: the timer must wake up for it
    t0 = time.monotonic()
    while len(log) < 2 and time.monotonic() - t0 < 5:
        time.sleep(0.002)
    assert [name for name, _ in log] == ["early", "late"]
    assert all(isinstance(err, DeadlineExceededError) for _, err in log)


def test_deadline_timer_holds_steps_weakly():
    timer = DeadlineTimer()
    log = []
    probe = Probe("gone", log)
    ref = weakref.ref(probe)
    timer.add(Deadline(20), probe)
    del probe
    assert ref() is None  # the timer did not keep it alive until its deadline
    time.sleep(0.04)
    assert log == []  # and a step that is gone is not cancelled
