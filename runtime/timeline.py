"""Chrome trace JSON from ``RunMetadata.step_stats``, drawn event for event as TensorFlow's ``timeline.py``
draws it (``tests/fixtures/timeline`` holds TensorFlow's drawings of a few steps to compare with).

Open the output in chrome://tracing or https://ui.perfetto.dev. Per device: a "Compute" process with one
"X" event per op on non-overlapping lanes, and a "Tensors" process; an "Allocators" process carries memory
counters. Arrows ("s"/"t" flow events) join a producer's end to its consumer's start across lanes.
``show_memory`` adds each output's life ("N" at its op's start, a snapshot "O", "D" at its last use) and a
counter per allocator of the bytes the live outputs requested.

Unlike TensorFlow's, a Timeline leaves the step_stats it draws as they are (TensorFlow writes each op's
lane into ``thread_id``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from poolserve.proto import step_stats_pb2

_LABEL = re.compile(r"^(?:\[[^\]]*\] )?(?P<name>.*?) = (?P<op>[^(]*)\((?P<inputs>.*)\)$")
# TensorFlow's own reading of a label, greedy as it is: it gives the op and the inputs drawn
_TF_LABEL = re.compile(r"(.*) = (.*)\((.*)\)")


def parse_label(label: str) -> tuple[str, str, list[str]]:
    """``"[cpu 1.0MB 1.0MB] x = MatMul(a, b:1)"`` -> ("x", "MatMul", ["a", "b:1"])."""
    m = _LABEL.match(label)
    if m is None:
        return label, "unknown", []
    inputs = [i.strip() for i in m.group("inputs").split(",") if i.strip()]
    return m.group("name"), m.group("op"), inputs


def _tf_label(label: str) -> tuple[str, list[str]]:
    """The op and inputs TensorFlow's timeline reads from a label ("unknown" and none if it cannot)."""
    m = _TF_LABEL.match(label)
    if m is None:
        return "unknown", []
    _, op, inputs = m.groups()
    return op, inputs.split(", ") if inputs else []


class AllocationMaximum(NamedTuple):
    """An allocator's highest total of live output bytes: when, how much, and which tensors were live."""

    timestamp: int
    num_bytes: int
    tensors: set[str]


class StepStatsAnalysis(NamedTuple):
    """``Timeline.analyze_step_stats``'s answer: the trace and each allocator's maximum."""

    chrome_trace: ChromeTrace
    allocator_maximums: dict[str, AllocationMaximum]


@dataclass
class ChromeTrace:
    """The events of a trace: metadata ("M") first, then the rest in the order they were made."""

    metadata: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"traceEvents": self.metadata + self.events}

    def format_to_string(self, pretty: bool = False) -> str:
        if pretty:
            return json.dumps(self.as_dict(), indent=4, separators=(",", ": "))
        return json.dumps(self.as_dict(), separators=(",", ":"))

    def event(self, ph: str, cat: str, name: str, pid: int, tid: int, ts: int, **extra: Any) -> None:
        self.events.append({"ph": ph, "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, **extra})


@dataclass
class _Tensor:
    name: str
    object_id: int
    create_time: int
    pid: int
    allocator: str
    num_bytes: int
    unrefs: list[int] = field(default_factory=list)


class Timeline:
    """A step's trace. ``generate_chrome_trace_format`` returns the JSON text. ``graph`` is accepted for
    TensorFlow's signature and not used (TensorFlow does not use it either)."""

    def __init__(self, step_stats: step_stats_pb2.StepStats, graph: Any = None) -> None:
        self._step_stats = step_stats

    def generate_chrome_trace_format(
        self, show_dataflow: bool = True, show_memory: bool = False, op_time: str = "schedule"
    ) -> str:
        """The trace as TensorFlow writes it (indented JSON). ``op_time`` only moves ops on GPU streams,
        which a CPU step has none of."""
        return self.analyze_step_stats(show_dataflow, show_memory, op_time).chrome_trace.format_to_string(
            True
        )

    def chrome_trace(self, show_dataflow: bool = True, show_memory: bool = False) -> dict[str, Any]:
        """The trace as a dict (``{"traceEvents": [...]}``)."""
        return self.analyze_step_stats(show_dataflow, show_memory).chrome_trace.as_dict()

    def analyze_step_stats(
        self, show_dataflow: bool = True, show_memory: bool = True, op_time: str = "schedule"
    ) -> StepStatsAnalysis:
        """The trace and, with ``show_memory``, each allocator's maximum of live bytes."""
        if op_time not in ("schedule", "gpu", "all"):
            raise ValueError(f"op_time must be 'schedule', 'gpu' or 'all', got {op_time!r}")
        trace = ChromeTrace()
        devices = list(self._step_stats.dev_stats)
        trace.metadata.append(_process(0, "Allocators"))
        pids: dict[str, tuple[int, int]] = {}
        for dev in devices:
            pids[dev.device] = (len(trace.metadata), len(trace.metadata) + 1)
            trace.metadata.append(_process(len(trace.metadata), f"{dev.device} Compute"))
            trace.metadata.append(_process(len(trace.metadata), f"{dev.device} Tensors"))
        lanes = [_lanes(dev.node_stats) for dev in devices]
        tensors: dict[str, _Tensor] = {}
        flow_starts: dict[str, tuple[int, int, int]] = {}
        for dev, dev_lanes in zip(devices, lanes, strict=True):  # every device's outputs first, as TF does
            compute_pid, tensors_pid = pids[dev.device]
            for ns, tid in zip(dev.node_stats, dev_lanes, strict=True):
                start, end = ns.all_start_micros, ns.all_start_micros + ns.all_end_rel_micros
                for index, output in enumerate(ns.output):
                    name = f"{ns.node_name}:{index}" if index else ns.node_name
                    alloc = output.tensor_description.allocation_description
                    tensor = _Tensor(
                        name, len(tensors), start, tensors_pid, alloc.allocator_name, alloc.requested_bytes
                    )
                    tensors[name] = tensor
                    tensor.unrefs.append(end)
                    flow_starts[name] = (end, compute_pid, tid)
                    if show_memory:
                        oid = tensor.object_id
                        trace.event("N", "Tensor", name, tensors_pid, tid, start, id=oid)
                        snapshot = {"tensor_description": str(output.tensor_description).replace('"', "")}
                        trace.event(
                            "O",
                            "Tensor",
                            name,
                            tensors_pid,
                            tid,
                            end - 1,
                            id=oid,
                            args={"snapshot": snapshot},
                        )
        flow_ids = 0
        for dev, dev_lanes in zip(devices, lanes, strict=True):
            compute_pid = pids[dev.device][0]
            for ns, tid in zip(dev.node_stats, dev_lanes, strict=True):
                start, end = ns.all_start_micros, ns.all_start_micros + ns.all_end_rel_micros
                op, inputs = _tf_label(ns.timeline_label)
                args: dict[str, Any] = {"name": ns.node_name, "op": op}
                args.update((f"input{i}", name) for i, name in enumerate(inputs))
                trace.event("X", "Op", op, compute_pid, tid, start, dur=ns.all_end_rel_micros, args=args)
                for name in inputs:
                    if name not in tensors and name.rfind("/_") > 0:
                        name = name[: name.rfind("/_")]  # a Recv's input: drawn from the original node
                    if name not in tensors:
                        continue
                    tensors[name].unrefs.append(end - 1)
                    producer_end, producer_pid, producer_tid = flow_starts[name]
                    if show_dataflow and (producer_pid != compute_pid or producer_tid != tid):
                        trace.event(
                            "s", "DataFlow", name, producer_pid, producer_tid, producer_end, id=flow_ids
                        )
                        trace.event("t", "DataFlow", name, compute_pid, tid, start, id=flow_ids)
                        flow_ids += 1
        maximums = _memory(trace, tensors) if show_memory else {}
        return StepStatsAnalysis(trace, maximums)


def _process(pid: int, name: str) -> dict[str, Any]:
    return {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}


def _lanes(stats: Iterable[step_stats_pb2.NodeExecStats]) -> list[int]:
    """TensorFlow's packing, in the order the ops were recorded: each op goes to the first lane whose last
    op ended strictly before it started."""
    lane_ends = [0]
    out = []
    for ns in stats:
        lane = next((i for i, end in enumerate(lane_ends) if ns.all_start_micros > end), len(lane_ends))
        if lane == len(lane_ends):
            lane_ends.append(0)
        lane_ends[lane] = ns.all_start_micros + ns.all_end_rel_micros
        out.append(lane)
    return out


def _memory(trace: ChromeTrace, tensors: dict[str, _Tensor]) -> dict[str, AllocationMaximum]:
    """Each output's end ("D" at its last use), then per allocator a counter of the bytes live."""
    changes: dict[str, list[tuple[int, int, str]]] = {}
    for name, tensor in tensors.items():
        last = max(tensor.unrefs)
        trace.event("D", "Tensor", name, tensor.pid, 0, last, id=tensor.object_id)
        changes.setdefault(tensor.allocator, []).append((tensor.create_time, tensor.num_bytes, name))
        changes[tensor.allocator].append((last, -tensor.num_bytes, name))
    maximums = {}
    for allocator, moves in changes.items():
        total = 0
        live: set[str] = set()
        best = AllocationMaximum(0, 0, set())
        for ts, nbytes, name in sorted(moves):
            total += nbytes
            if nbytes < 0:
                live.discard(name)
            else:
                live.add(name)
            if total > best.num_bytes:
                best = AllocationMaximum(ts, total, set(live))
            trace.event("C", "Memory", allocator, 0, 0, ts, args={allocator: total})
        maximums[allocator] = best
    return maximums


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
