"""Chrome trace JSON from ``RunMetadata.step_stats``, drawn as TensorFlow's ``timeline.py`` draws it.

Open the output in chrome://tracing or https://ui.perfetto.dev. Per device: a "Compute" process with one
"X" event per op on non-overlapping lanes, and a "Tensors" process; an "Allocators" process carries memory
counters. Arrows ("s"/"t" flow events) join a producer's end to its consumer's start across lanes.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable
from typing import Any

from poolserve.proto import step_stats_pb2

_LABEL = re.compile(r"^(?:\[[^\]]*\] )?(?P<name>.*?) = (?P<op>[^(]*)\((?P<inputs>.*)\)$")


def parse_label(label: str) -> tuple[str, str, list[str]]:
    """``"[cpu 1.0MB 1.0MB] x = MatMul(a, b:1)"`` -> ("x", "MatMul", ["a", "b:1"])."""
    m = _LABEL.match(label)
    if m is None:
        return label, "unknown", []
    inputs = [i.strip() for i in m.group("inputs").split(",") if i.strip()]
    return m.group("name"), m.group("op"), inputs


class Timeline:
    """A step's trace. ``generate_chrome_trace_format`` returns the JSON text."""

    def __init__(self, step_stats: step_stats_pb2.StepStats) -> None:
        self._step_stats = step_stats
        self._events: list[dict[str, Any]] = []
        self._next_pid = 0
        self._flow_ids = itertools.count()

    def _process(self, name: str) -> int:
        pid = self._next_pid
        self._next_pid += 1
        self._events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}})
        return pid

    def _lanes(self, stats: Iterable[step_stats_pb2.NodeExecStats]) -> dict[str, int]:
        """Greedy packing: each op goes to the first lane free at its start."""
        lane_ends: list[int] = []
        lanes: dict[str, int] = {}
        for ns in sorted(stats, key=lambda s: (s.all_start_micros, s.node_name)):
            start, end = ns.all_start_micros, ns.all_start_micros + ns.all_end_rel_micros
            for lane, lane_end in enumerate(lane_ends):
                if lane_end <= start:
                    lane_ends[lane] = max(end, start + 1)
                    break
            else:
                lane = len(lane_ends)
                lane_ends.append(max(end, start + 1))
            lanes[ns.node_name] = lane
        return lanes

    def generate_chrome_trace_format(self, show_dataflow: bool = True, show_memory: bool = False) -> str:
        return json.dumps(self.chrome_trace(show_dataflow, show_memory))

    def chrome_trace(self, show_dataflow: bool = True, show_memory: bool = False) -> dict[str, Any]:
        """The trace as a dict (``{"traceEvents": [...]}``)."""
        self._events = []
        self._next_pid = 0
        allocators_pid = self._process("Allocators")
        memory: dict[str, list[tuple[int, int]]] = {}
        for dev in self._step_stats.dev_stats:
            compute_pid = self._process(f"{dev.device} Compute")
            tensors_pid = self._process(f"{dev.device} Tensors")
            lanes = self._lanes(dev.node_stats)
            ends: dict[str, tuple[int, int]] = {}
            for ns in dev.node_stats:
                _, op, inputs = (
                    parse_label(ns.timeline_label) if ns.timeline_label else (ns.node_name, "", [])
                )
                args: dict[str, Any] = {"name": ns.node_name, "op": op or ns.node_name}
                for i, inp in enumerate(inputs):
                    args[f"input{i}"] = inp
                lane = lanes[ns.node_name]
                self._events.append(
                    {
                        "ph": "X",
                        "cat": "Op",
                        "name": op or ns.node_name,
                        "pid": compute_pid,
                        "tid": lane,
                        "ts": ns.all_start_micros,
                        "dur": ns.all_end_rel_micros,
                        "args": args,
                    }
                )
                ends[ns.node_name] = (ns.all_start_micros + ns.all_end_rel_micros, lane)
                for out in ns.output:
                    ad = out.tensor_description.allocation_description
                    tensor = f"{ns.node_name}:{out.slot}"
                    snapshot = {"tensor_description": str(out.tensor_description).replace("\n", " ").strip()}
                    obj = {"cat": "Tensor", "name": tensor, "pid": tensors_pid, "tid": 0, "id": tensor}
                    self._events.append({**obj, "ph": "N", "ts": ns.all_start_micros})
                    self._events.append(
                        {**obj, "ph": "O", "ts": ns.all_start_micros, "args": {"snapshot": snapshot}}
                    )
                    if ad.allocated_bytes:
                        memory.setdefault(ad.allocator_name or "cpu", []).append(
                            (ns.all_start_micros, ad.allocated_bytes)
                        )
            if show_dataflow:
                for ns in dev.node_stats:
                    _, _, inputs = parse_label(ns.timeline_label)
                    for inp in inputs:
                        producer = inp.lstrip("^").split(":")[0]
                        if producer not in ends:
                            continue
                        end_ts, producer_lane = ends[producer]
                        lane = lanes[ns.node_name]
                        if producer_lane == lane:
                            continue
                        flow = next(self._flow_ids)
                        common = {"cat": "DataFlow", "name": "dataflow", "pid": compute_pid, "id": flow}
                        self._events.append({**common, "ph": "s", "tid": producer_lane, "ts": end_ts})
                        self._events.append({**common, "ph": "t", "tid": lane, "ts": ns.all_start_micros})
        if show_memory:
            for allocator, allocations in memory.items():
                total = 0
                for ts, nbytes in sorted(allocations):
                    total += nbytes
                    self._events.append(
                        {
                            "ph": "C",
                            "cat": "Memory",
                            "name": allocator,
                            "pid": allocators_pid,
                            "ts": ts,
                            "args": {allocator: total},
                        }
                    )
        return {"traceEvents": self._events}


def merge_chrome_traces(traces: Iterable[str | dict[str, Any]]) -> dict[str, Any]:
    """One trace from several: their events appended, each run's process ids moved apart."""
    events: list[dict[str, Any]] = []
    offset = 0
    for trace in traces:
        data = json.loads(trace) if isinstance(trace, str) else trace
        pids = [e.get("pid", 0) for e in data.get("traceEvents", [])]
        for e in data.get("traceEvents", []):
            moved = dict(e)
            if "pid" in moved:
                moved["pid"] = moved["pid"] + offset
            events.append(moved)
        offset += (max(pids) + 1) if pids else 0
    return {"traceEvents": events}
