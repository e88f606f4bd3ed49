"""Generates ``tests/fixtures/timeline`` (dev only): TensorFlow's own step_stats and what TensorFlow's
``timeline.Timeline`` draws from them, so that ``runtime.timeline`` can be checked against it without
TensorFlow.

Run with the TensorFlow environment, not the project's::

    /opt/tfenv/bin/python tools/make_timeline_fixtures.py

For each graph (the example MLP and CNN of ``configs/models``, and
``tests/fixtures/control_flow/v1_while.pb``, a v1 while loop of three iterations, whose nodes run once per
iteration) it runs one ``tf.compat.v1.Session`` step with ``RunOptions(trace_level=FULL_TRACE)`` and
writes ``<name>.step_stats.pb`` (the RunMetadata's step_stats) and ``<name>.json``:
``{"<show_memory>,<show_dataflow>": traceEvents}`` for the four combinations of
``Timeline(step_stats).generate_chrome_trace_format(show_memory=..., show_dataflow=...)``; and the same
for ``synthetic``, a hand-made step_stats with the cases a CPU step rarely shows (see ``synthetic()``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import step_stats_pb2, types_pb2
from tensorflow.python.client import timeline

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "tests" / "fixtures" / "timeline"
tf1 = tf.compat.v1


def placeholder_feeds(graph: tf.Graph, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for op in graph.get_operations():
        if op.type == "Placeholder":
            t = op.outputs[0]
            dims = [2 if d is None else d for d in t.shape.as_list()]
            feeds[t.name] = rng.standard_normal(dims).astype(t.dtype.as_numpy_dtype)
    return feeds


def trace(name: str, path: Path, fetches: list[str], feeds: dict[str, np.ndarray] | None = None) -> None:
    graph_def = tf1.GraphDef()
    graph_def.ParseFromString(path.read_bytes())
    graph = tf.Graph()
    with graph.as_default():
        tf1.import_graph_def(graph_def, name="")
    if feeds is None:
        feeds = placeholder_feeds(graph, np.random.default_rng(7))
    options = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
    metadata = tf1.RunMetadata()
    with tf1.Session(graph=graph) as sess:
        sess.run(fetches, feeds)  # warm up: the traced step is a steady one
        sess.run(fetches, feeds, options=options, run_metadata=metadata)
    draw(name, metadata.step_stats)


def synthetic() -> step_stats_pb2.StepStats:
    """What a real CPU step rarely shows: overlapping ops, an op starting exactly where another ends, a
    second output (``split:1``), an allocation-prefixed and an empty label, a second allocator, an input
    renamed by partitioning (``w/_3``), and a second device."""
    stats = step_stats_pb2.StepStats()
    dev = stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0")

    def node(name: str, label: str, start: int, dur: int, outputs: list[tuple[int, str]]) -> None:
        ns = dev.node_stats.add(node_name=name, all_start_micros=start, all_end_rel_micros=dur)
        ns.timeline_label = label
        for slot, (nbytes, allocator) in enumerate(outputs):
            td = ns.output.add(slot=slot).tensor_description
            td.dtype = types_pb2.DT_FLOAT
            td.shape.dim.add(size=nbytes // 4)
            td.allocation_description.requested_bytes = nbytes
            td.allocation_description.allocated_bytes = nbytes
            td.allocation_description.allocator_name = allocator

    node("x", "x = _Arg()", 100, 2, [(64, "cpu")])
    node("w", "w = Const()", 100, 1, [(256, "cpu")])
    node("split", "split = Split(x)", 103, 10, [(32, "cpu"), (32, "cpu")])
    node("a", "[cpu 0.1MB 0.1MB] a = MatMul(split, w/_3)", 113, 20, [(131072, "cpu")])
    node("b", "b = MatMul(split:1, w)", 115, 20, [(4096, "cpu_pinned")])
    node("c", "c = AddV2(a, b)", 135, 5, [(4096, "cpu")])
    node("d", "", 133, 2, [])
    node("e", "e = Identity(c)", 140, 1, [(4096, "cpu")])
    other = stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:1")
    ns = other.node_stats.add(node_name="f", all_start_micros=142, all_end_rel_micros=3)
    ns.timeline_label = "f = Neg(e)"
    return stats


def draw(name: str, stats: step_stats_pb2.StepStats) -> None:
    (OUT_DIR / f"{name}.step_stats.pb").write_bytes(stats.SerializeToString())
    drawn = {}
    for show_memory in (False, True):
        for show_dataflow in (False, True):
            # Timeline writes lanes into the step_stats it is given: each drawing gets a fresh copy
            copy = type(stats)()
            copy.CopyFrom(stats)
            text = timeline.Timeline(copy).generate_chrome_trace_format(
                show_memory=show_memory, show_dataflow=show_dataflow
            )
            drawn[f"{int(show_memory)},{int(show_dataflow)}"] = json.loads(text)["traceEvents"]
    (OUT_DIR / f"{name}.json").write_text(json.dumps(drawn, separators=(",", ":")) + "\n")
    print(name, sum(len(d.node_stats) for d in stats.dev_stats), "nodes")


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    draw("synthetic", synthetic())
    trace("mlp", ROOT / "configs" / "models" / "mlp.pb", ["probabilities:0"])
    trace("cnn", ROOT / "configs" / "models" / "cnn.pb", ["probabilities:0"])
    cases = np.load(ROOT / "tests" / "fixtures" / "control_flow" / "v1_while.npz")
    feeds = {k.split("/in/")[1]: v for k, v in cases.items() if k.startswith("one/in/")}
    feeds["n:0"] = np.array(3, np.int32)  # three iterations: the loop's nodes appear three times each
    fetches = [k.split("/out/")[1] for k in cases if k.startswith("one/out/")]
    trace("v1_while", ROOT / "tests" / "fixtures" / "control_flow" / "v1_while.pb", fetches, feeds)


if __name__ == "__main__":
    main()
