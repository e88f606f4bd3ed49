import json

from poolserve.proto import step_stats_pb2
from poolserve.runtime.timeline import Timeline, merge_chrome_traces, parse_label


def stats():
    s = step_stats_pb2.StepStats()
    dev = s.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0")

    def add(name, op, inputs, start, dur, nbytes=0):
        ns = dev.node_stats.add(node_name=name, all_start_micros=start, all_end_rel_micros=dur)
        ns.timeline_label = f"{name} = {op}({', '.join(inputs)})"
        out = ns.output.add(slot=0)
        out.tensor_description.allocation_description.allocated_bytes = nbytes
        out.tensor_description.allocation_description.allocator_name = "cpu"

    add("a", "MatMul", ["x", "w"], 100, 50, 1000)
    add("b", "MatMul", ["x", "w2"], 110, 50, 2000)  # overlaps a: second lane
    add("c", "AddV2", ["a", "b:0"], 170, 10, 500)
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
    counters = [e for e in events if e["ph"] == "C"]
    assert [c["args"]["cpu"] for c in counters] == [1000, 3000, 3500]
    assert all(c["pid"] == procs["Allocators"] for c in counters)


def test_no_dataflow_when_disabled_and_merge():
    t1 = Timeline(stats()).generate_chrome_trace_format(show_dataflow=False)
    assert not [e for e in json.loads(t1)["traceEvents"] if e.get("cat") == "DataFlow"]
    merged = merge_chrome_traces([t1, t1])
    n = len(json.loads(t1)["traceEvents"])
    assert len(merged["traceEvents"]) == 2 * n
    pids = {e["pid"] for e in merged["traceEvents"]}
    assert len(pids) == 6  # the second run's processes are moved apart
