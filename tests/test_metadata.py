import threading

import numpy as np
import pytest
from support import sleep_op

from poolserve.proto import config_pb2, cost_graph_pb2, step_stats_pb2, types_pb2
from poolserve.runtime.builder import GraphBuilder
from poolserve.runtime.executor import DEVICE, Plan, Step, StepTrace
from poolserve.runtime.graph import Graph
from poolserve.runtime.kernels.registry import ResourceContainer
from poolserve.runtime.metadata import OOM_HINT, fill_cost_graph, fill_step_stats, oom_report
from poolserve.runtime.session import Session
from poolserve.runtime.threadpool import CallerThread

X = np.array([3, 1, 3, 2], np.float32)
NAP_S = 0.002


def run_step(plan, feeds, trace=None):
    """Runs ``plan`` to completion on this thread; the step keeps its values (as when it runs out of memory)."""
    finished = []
    step = Step(plan, feeds, ResourceContainer(), CallerThread(), finished.append, trace=trace)
    step.start(inline=True)
    assert finished == [step] and step.status is None
    return step


@pytest.fixture(scope="module")
def traced():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None,))
    u = b.op("Unique", [x], {"T": np.float32, "out_idx": np.int32}, name="u", num_outputs=2)
    b.identity(u[1], name="idx")
    y = b.add(u[0], u[0], name="y")
    b.op("Tile", [x, b.constant(np.array([25_000], np.int32), name="mult")], {"T": np.float32}, name="big")
    nap = sleep_op(b, y, NAP_S, "nap")  # a node known to take at least NAP_S
    b.no_op("done", control_inputs=[nap])
    plan = Plan(Graph(b.graph_def), [("x", 0)], [("y", 0), ("idx", 0), ("big", 0)], ["done"])
    trace = StepTrace(plan.num_nodes)
    run_step(plan, [X], trace)
    stats = step_stats_pb2.StepStats()
    fill_step_stats(stats, plan, trace)
    cost = cost_graph_pb2.CostGraphDef()
    fill_cost_graph(cost, plan, trace)
    return plan, stats, cost


def test_step_stats_has_one_cpu_device_and_this_threads_name(traced):
    _, stats, _ = traced
    (dev,) = stats.dev_stats
    assert dev.device == DEVICE == "/job:localhost/replica:0/task:0/device:CPU:0"
    me = threading.get_ident() & 0x7FFFFFFF
    assert dict(dev.thread_names) == {me: threading.current_thread().name}
    assert {ns.thread_id for ns in dev.node_stats} == {me}


def test_step_stats_lists_executed_nodes_in_start_order_with_their_times(traced):
    _, stats, _ = traced
    nodes = stats.dev_stats[0].node_stats
    by = {ns.node_name: ns for ns in nodes}
    assert sorted(by) == ["big", "done", "idx", "nap", "u", "y"]  # executed nodes only: no Const, no fed x
    starts = [ns.all_start_nanos for ns in nodes]
    assert starts == sorted(starts)
    for ns in nodes:
        assert ns.all_start_micros == ns.all_start_nanos // 1000
        assert ns.op_start_rel_nanos == 0 and ns.op_end_rel_nanos == ns.all_end_rel_nanos
        assert ns.op_end_rel_micros == ns.all_end_rel_micros == ns.all_end_rel_nanos // 1000
        assert ns.scheduled_micros == ns.scheduled_nanos // 1000
        assert ns.scheduled_nanos <= ns.all_start_nanos

    def end(name):
        return by[name].all_start_nanos + by[name].all_end_rel_nanos

    # a consumer is ready when its producer ends, and starts after that
    assert by["nap"].all_end_rel_micros >= NAP_S * 1e6  # durations are the nodes' own
    for producer, consumer in (("u", "idx"), ("u", "y"), ("y", "nap"), ("nap", "done")):
        assert by[consumer].scheduled_nanos >= end(producer), (producer, consumer)
        assert by[consumer].all_start_nanos >= end(producer), (producer, consumer)


def test_step_stats_labels_name_the_op_and_its_inputs(traced):
    _, stats, _ = traced
    labels = {ns.node_name: ns.timeline_label for ns in stats.dev_stats[0].node_stats}
    assert labels == {
        "u": "u = Unique(x)",
        "idx": "idx = Identity(u:1)",  # a port other than 0 is spelled out
        "y": "y = AddV2(u, u)",
        "big": "[cpu 0.4MB 0.4MB] big = Tile(x, mult)",  # 400 kB: big enough to show its memory
        "nap": "nap = TestSleep(y)",
        "done": "done = NoOp()",  # control inputs are not listed
    }


def test_step_stats_describe_each_output(traced):
    _, stats, _ = traced
    by = {ns.node_name: ns for ns in stats.dev_stats[0].node_stats}
    values, indices = by["u"].output
    assert (values.slot, indices.slot) == (0, 1)
    assert values.tensor_description.dtype == types_pb2.DT_FLOAT
    assert indices.tensor_description.dtype == types_pb2.DT_INT32
    assert [d.size for d in values.tensor_description.shape.dim] == [3]  # unique(3, 1, 3, 2)
    assert [d.size for d in indices.tensor_description.shape.dim] == [4]
    for out, nbytes in ((values, 12), (indices, 16)):
        alloc = out.tensor_description.allocation_description
        assert (alloc.requested_bytes, alloc.allocated_bytes, alloc.allocator_name) == (nbytes, nbytes, "cpu")
    (mem,) = by["u"].memory
    assert (mem.allocator_name, mem.total_bytes, mem.peak_bytes, mem.live_bytes) == ("cpu", 28, 28, 28)
    assert by["big"].memory[0].total_bytes == 400_000
    assert not by["done"].output and not by["done"].memory  # no outputs, no memory


def test_a_0_d_output_counts_its_bytes():
    """A reduction to a scalar (a numpy scalar, not an array, from its kernel) is 4 bytes, as TensorFlow 2.21
    reports it ('s = Sum(big, Const)': output requested_bytes 4, memory total/peak/live 4), not 0."""
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (None,))
    axis = b.constant(np.int32(0), name="axis")
    b.op("Sum", [x, axis], {"T": np.float32, "Tidx": np.int32, "keep_dims": False}, name="s")
    md = config_pb2.RunMetadata()
    with Session(b.graph_def) as sess:
        options = config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE)
        sess.run("s:0", {"x:0": X}, options, md)
    (ns,) = [ns for ns in md.step_stats.dev_stats[0].node_stats if ns.node_name == "s"]
    alloc = ns.output[0].tensor_description.allocation_description
    assert (alloc.requested_bytes, alloc.allocated_bytes) == (4, 4)
    (mem,) = ns.memory
    assert (mem.total_bytes, mem.peak_bytes, mem.live_bytes) == (4, 4, 4)
    (cost,) = [n for n in md.cost_graph.node if n.name == "s"]
    assert cost.output_info[0].size == 4


def test_cost_graph_has_every_plan_node_with_its_edges_and_costs(traced):
    plan, stats, cost = traced
    nodes = {n.name: n for n in cost.node}
    assert list(nodes) == [pn.name for pn in plan.nodes]
    assert all(n.id == plan.index_of[n.name] and n.device == DEVICE for n in cost.node)
    uid = nodes["u"].id
    assert [(i.preceding_node, i.preceding_port) for i in nodes["y"].input_info] == [(uid, 0), (uid, 0)]
    assert [(i.preceding_node, i.preceding_port) for i in nodes["idx"].input_info] == [(uid, 1)]
    assert not nodes["big"].input_info and not nodes["u"].input_info  # fed and Const inputs are not nodes
    assert list(nodes["done"].control_input) == [nodes["nap"].id]
    timed = {ns.node_name: ns.all_end_rel_micros for ns in stats.dev_stats[0].node_stats}
    assert {n.name: n.compute_cost for n in cost.node} == timed
    assert {n.name: n.compute_time for n in cost.node} == timed
    assert nodes["nap"].compute_cost >= NAP_S * 1e6
    assert [(o.size, o.dtype, [d.size for d in o.shape.dim]) for o in nodes["u"].output_info] == [
        (12, types_pb2.DT_FLOAT, [3]),
        (16, types_pb2.DT_INT32, [4]),
    ]
    assert all(o.alias_input_port == -1 for n in cost.node for o in n.output_info)
    assert {n.name for n in cost.node if n.is_final} == {"y", "idx", "big"}  # the fetched nodes


def test_cost_graph_without_a_trace_has_the_estimates():
    b = GraphBuilder()
    x = b.placeholder("x", np.float32, (1, 1))
    b.add(b.matmul(x, x, name="mm"), x, name="y")
    plan = Plan(Graph(b.graph_def), [("x", 0)], [("y", 0)])
    plan.nodes[plan.index_of["mm"]].learn(1234.5)
    cost = cost_graph_pb2.CostGraphDef()
    fill_cost_graph(cost, plan, None)
    assert {n.name: n.compute_cost for n in cost.node} == {"mm": 1234, "y": 0}
    assert all(not n.output_info for n in cost.node)


def fed_identities(sizes):
    """A step whose nodes ``name`` each hold an output of ``sizes[name]`` bytes."""
    b = GraphBuilder()
    feeds = []
    for name in sizes:
        b.identity(b.placeholder(f"{name}_in", np.uint8, (None,)), name=name)
        feeds.append(np.zeros(sizes[name], np.uint8))
    plan = Plan(Graph(b.graph_def), [(f"{n}_in", 0) for n in sizes], [(n, 0) for n in sizes])
    return run_step(plan, feeds)


HEADER = f"Current usage from device: {DEVICE}, allocator: cpu"


def test_oom_report_lists_the_largest_first():
    report = oom_report(fed_identities({"a": 1536, "b": 2048, "c": 1023}))
    assert report.splitlines() == [HEADER, "  2.0KiB from b", "  1.5KiB from a", "  1023B from c"]


def test_oom_report_stops_at_99_percent_of_the_bytes():
    report = oom_report(fed_identities({"huge": 1_000_000, "small": 1000, "tiny": 8}))
    assert report.splitlines() == [HEADER, "  976.6KiB from huge", "  Remaining 2 nodes with 1008B"]


def test_oom_report_stops_after_100_nodes():
    lines = oom_report(fed_identities({f"n{i:03d}": 8 for i in range(105)})).splitlines()
    assert len(lines) == 102 and lines[0] == HEADER
    assert all(line.startswith("  8B from n") for line in lines[1:101])
    assert lines[-1] == "  Remaining 5 nodes with 40B"


def test_oom_report_sizes_in_mib():
    report = oom_report(fed_identities({"m": 3 << 19}))
    assert report.splitlines()[1:] == ["  1.5MiB from m"]


def test_oom_hint_names_the_run_option():
    """TensorFlow 2.21's hint, as its runtime library spells it."""
    assert OOM_HINT == (
        "Hint: If you want to see a list of allocated tensors when OOM happens, add "
        "report_tensor_allocations_upon_oom to RunOptions for current allocation info. "
        "This isn't available when running in Eager mode."
    )
