import json
from pathlib import Path

import pytest

from poolserve.proto import step_stats_pb2
from poolserve.runtime.timeline import Timeline, merge_chrome_traces, parse_label

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "timeline"


def stats():
    s = step_stats_pb2.StepStats()
    dev = s.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0")

    def add(name, op, inputs, start, dur, nbytes=0):
        ns = dev.node_stats.add(node_name=name, all_start_micros=start, all_end_rel_micros=dur)
        ns.timeline_label = f"{name} = {op}({', '.join(inputs)})"
        out = ns.output.add(slot=0)
        out.tensor_description.allocation_description.requested_bytes = nbytes
        out.tensor_description.allocation_description.allocated_bytes = nbytes
        out.tensor_description.allocation_description.allocator_name = "cpu"

    add("a", "MatMul", ["x", "w"], 100, 50, 1000)
    add("b", "MatMul", ["x", "w2"], 110, 50, 2000)  # overlaps a: second lane
    add("c", "AddV2", ["a", "b"], 170, 10, 500)
    return s


def test_parse_label():
    assert parse_label("[cpu 1.0MB 1.0MB] x = MatMul(a, b:1)") == ("x", "MatMul", ["a", "b:1"])
    assert parse_label("n = NoOp()") == ("n", "NoOp", [])


def test_chrome_trace_events():
    trace = json.loads(Timeline(stats()).generate_chrome_trace_format(show_memory=True))
    events = trace["traceEvents"]
    procs = {e["args"]["name"]: e["pid"] for e in events if e["ph"] == "M"}
    dev = "/job:localhost/replica:0/task:0/device:CPU:0"
    assert set(procs) == {"Allocators", f"{dev} Compute", f"{dev} Tensors"}
    ops = {e["args"]["name"]: e for e in events if e["ph"] == "X"}
    assert ops["a"]["name"] == "MatMul" and ops["a"]["cat"] == "Op"
    assert ops["a"]["ts"] == 100 and ops["a"]["dur"] == 50
    assert ops["a"]["args"] == {"name": "a", "op": "MatMul", "input0": "x", "input1": "w"}
    assert ops["a"]["tid"] != ops["b"]["tid"]  # overlapping ops on different lanes
    assert ops["c"]["pid"] == procs[f"{dev} Compute"]
    flows = [e for e in events if e.get("cat") == "DataFlow"]
    # c is on a's lane, so only the b -> c edge crosses lanes
    assert sorted(e["ph"] for e in flows) == ["s", "t"]
    start = next(e for e in flows if e["ph"] == "s")
    assert start["ts"] == 160 and start["tid"] == ops["b"]["tid"]
    # the bytes live: a and b until c, their last consumer, ends; c until its own end
    counters = [e for e in events if e["ph"] == "C"]
    assert [(c["ts"], c["args"]["cpu"]) for c in counters] == [
        (100, 1000),
        (110, 3000),
        (170, 3500),
        (179, 1500),
        (179, 500),
        (180, 0),
    ]
    assert all(c["pid"] == procs["Allocators"] for c in counters)
    deleted = {e["name"]: e["ts"] for e in events if e["ph"] == "D"}
    assert deleted == {"a": 179, "b": 179, "c": 180}


def test_tensors_drawn_only_with_show_memory():
    """TensorFlow draws outputs (N, O, D) and memory counters only when asked to show memory."""
    events = json.loads(Timeline(stats()).generate_chrome_trace_format())["traceEvents"]
    assert {e["ph"] for e in events} == {"M", "X", "s", "t"}


@pytest.mark.parametrize("name", ["mlp", "cnn", "v1_while", "synthetic"])
@pytest.mark.parametrize("show_memory", [False, True])
@pytest.mark.parametrize("show_dataflow", [False, True])
def test_same_trace_as_tensorflow(name: str, show_memory: bool, show_dataflow: bool) -> None:
    """Event for event what TensorFlow 2.21's ``timeline.Timeline`` drew from the same step_stats
    (``tools/make_timeline_fixtures.py``): TF's own steps (an MLP, a CNN, a v1 while loop whose nodes run
    three times) and a hand-made one with overlapping ops, second outputs and two devices."""
    stats = step_stats_pb2.StepStats.FromString((FIXTURES / f"{name}.step_stats.pb").read_bytes())
    before = stats.SerializeToString()
    expected = json.loads((FIXTURES / f"{name}.json").read_text())[f"{int(show_memory)},{int(show_dataflow)}"]
    text = Timeline(stats).generate_chrome_trace_format(show_dataflow=show_dataflow, show_memory=show_memory)
    assert json.loads(text)["traceEvents"] == expected
    assert stats.SerializeToString() == before  # the lanes are not written into the caller's step_stats


def test_allocator_maximums() -> None:
    """``analyze_step_stats(...).allocator_maximums``, TensorFlow's way to read a step's peak memory."""
    analysis = Timeline(stats()).analyze_step_stats(show_memory=True)
    peak = analysis.allocator_maximums["cpu"]
    assert (peak.timestamp, peak.num_bytes, peak.tensors) == (170, 3500, {"a", "b", "c"})
    assert json.loads(analysis.chrome_trace.format_to_string())["traceEvents"]


def test_no_dataflow_when_disabled_and_merge():
    t1 = Timeline(stats()).generate_chrome_trace_format(show_dataflow=False)
    assert not [e for e in json.loads(t1)["traceEvents"] if e.get("cat") == "DataFlow"]
    merged = merge_chrome_traces([t1, t1])
    n = len(json.loads(t1)["traceEvents"])
    assert len(merged["traceEvents"]) == 2 * n
    pids = {e["pid"] for e in merged["traceEvents"]}
    assert len(pids) == 6  # the second run's processes are moved apart
