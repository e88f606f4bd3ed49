"""RunMetadata from a traced step: step_stats as TensorFlow's StepStatsCollector writes them, the cost graph,
and the live-tensor report that ``report_tensor_allocations_upon_oom`` asks for."""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.proto import cost_graph_pb2, graph_pb2, step_stats_pb2
from poolserve.runtime import dtypes
from poolserve.runtime.executor import DEVICE, Plan, Step, StepTrace
from poolserve.runtime.tensor import shape_to_proto

ALLOCATOR = "cpu"
_MB = 1048576.0


def _dtype_code(value: Any) -> int:
    try:
        return dtypes.from_numpy(np.asarray(value).dtype) if value is not None else 0
    except Exception:
        return 0


def fill_step_stats(stats: step_stats_pb2.StepStats, plan: Plan, trace: StepTrace) -> None:
    """One DeviceStepStats for the CPU device, a NodeExecStats per executed node, in start order."""
    dev = stats.dev_stats.add(device=DEVICE)
    for tid, name in trace.thread_names.items():
        dev.thread_names[tid & 0x7FFFFFFF] = name
    for rec in sorted(trace.records, key=lambda r: r.start_ns):
        name, label = (rec.name, rec.label) if rec.name else (plan.nodes[rec.index].name, "")
        label = label or plan.nodes[rec.index].label
        ns = dev.node_stats.add()
        ns.node_name = name
        start_us = rec.start_ns // 1000
        dur_ns = rec.end_ns - rec.start_ns
        ns.all_start_micros = start_us
        ns.all_start_nanos = rec.start_ns
        ns.op_start_rel_micros = 0
        ns.op_start_rel_nanos = 0
        ns.op_end_rel_micros = dur_ns // 1000
        ns.op_end_rel_nanos = dur_ns
        ns.all_end_rel_micros = dur_ns // 1000
        ns.all_end_rel_nanos = dur_ns
        ns.scheduled_micros = (rec.scheduled_ns or rec.start_ns) // 1000
        ns.scheduled_nanos = rec.scheduled_ns or rec.start_ns
        ns.thread_id = rec.thread_id & 0x7FFFFFFF
        total = 0
        for slot, value in enumerate(rec.outputs):
            # a kernel may give a 0-d result as a numpy scalar: its bytes count as an array's
            nbytes = int(value.nbytes) if isinstance(value, (np.ndarray, np.generic)) else 0
            total += nbytes
            out = ns.output.add(slot=slot)
            td = out.tensor_description
            td.dtype = _dtype_code(value)  # type: ignore[assignment]
            td.shape.CopyFrom(shape_to_proto(np.shape(value)))
            ad = td.allocation_description
            ad.requested_bytes = nbytes
            ad.allocated_bytes = nbytes
            ad.allocator_name = ALLOCATOR
        if total:
            mem = ns.memory.add(allocator_name=ALLOCATOR)
            mem.total_bytes = total
            mem.peak_bytes = total
            mem.live_bytes = total
            # the step's live bytes once this node's outputs were allocated: step_peak_bytes is their max
            mem.allocator_bytes_in_use = rec.bytes_in_use
            ns.memory_stats.temp_memory_size = 0
        prefix = f"[{ALLOCATOR} {total / _MB:.1f}MB {total / _MB:.1f}MB] " if total >= 0.1 * _MB else ""
        ns.timeline_label = prefix + label


def step_peak_bytes(stats: step_stats_pb2.StepStats) -> int:
    """The step's peak of live tensor bytes (what the memory limit is checked against), from step_stats:
    the highest ``allocator_bytes_in_use`` of the CPU allocator over its nodes' ``memory`` records."""
    return max(
        (
            m.allocator_bytes_in_use
            for dev in stats.dev_stats
            for ns in dev.node_stats
            for m in ns.memory
            if m.allocator_name == ALLOCATOR
        ),
        default=0,
    )


def fill_cost_graph(cost: cost_graph_pb2.CostGraphDef, plan: Plan, trace: StepTrace | None) -> None:
    """Per executed node: inputs, output sizes, shapes and dtypes, and compute cost in microseconds."""
    by_index = {rec.index: rec for rec in trace.records} if trace is not None else {}
    ids = {pn.name: pn.index for pn in plan.nodes}
    for pn in plan.nodes:
        node = cost.node.add(name=pn.name, device=DEVICE, id=pn.index)
        for src, port in pn.node.inputs:
            if src in ids:
                node.input_info.add(preceding_node=ids[src], preceding_port=port)
        node.control_input.extend(ids[c] for c in pn.node.control_inputs if c in ids)
        rec = by_index.get(pn.index)
        if rec is not None:
            micros = (rec.end_ns - rec.start_ns) // 1000
            node.compute_cost = micros
            node.compute_time = micros
            for value in rec.outputs:
                info = node.output_info.add()
                info.size = int(getattr(value, "nbytes", 0))
                info.alias_input_port = -1
                info.shape.CopyFrom(shape_to_proto(np.shape(value)))
                info.dtype = _dtype_code(value)  # type: ignore[assignment]
        else:
            node.compute_cost = int(pn.cost_us)
        node.is_final = any(pn.out_base <= s < pn.out_base + pn.num_outputs for s in plan.fetch_slots)


def oom_report(step: Step) -> str:
    """TensorFlow's list of live tensors by size: stop after 100 nodes or 99% of the bytes."""
    live = step.live_tensors()
    total = sum(b for b, _ in live)
    lines = [f"Current usage from device: {DEVICE}, allocator: {ALLOCATOR}"]
    shown = 0
    for count, (nbytes, name) in enumerate(live):
        if count >= 100 or (total and shown >= 0.99 * total):
            rest = live[count:]
            lines.append(f"  Remaining {len(rest)} nodes with {_human(sum(b for b, _ in rest))}")
            break
        lines.append(f"  {_human(nbytes)} from {name}")
        shown += nbytes
    return "\n".join(lines)


# TensorFlow 2.21's text, word for word (libtensorflow_framework.so.2)
OOM_HINT = (
    "Hint: If you want to see a list of allocated tensors when OOM happens, add "
    "report_tensor_allocations_upon_oom to RunOptions for current allocation info. "
    "This isn't available when running in Eager mode."
)


def _human(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.1f}{unit}" if unit != "B" else f"{int(nbytes)}B"
        nbytes /= 1024
    return f"{nbytes:.1f}GiB"


def plan_graph_def(plan: Plan) -> graph_pb2.GraphDef:
    """The GraphDef a plan runs, whole as TensorFlow's partition graphs are (``tf.import_graph_def`` takes
    it): its executed nodes on the CPU device, folded constants as Const nodes, each fed tensor as a
    Placeholder, and the graph's function library. TensorFlow feeds through ``_Arg`` nodes
    (``_arg_x_0_0``); here a fed tensor keeps the name the step_stats labels give it. A tensor that is not
    its node's only output, or whose node ran too, is a node of its own, ``<node>/_port<n>``, and its
    readers read that."""
    from poolserve.runtime.builder import attr_value
    from poolserve.runtime.node import parse_input
    from poolserve.runtime.tensor import from_ndarray

    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(plan.graph.graph_def.versions)
    out.library.CopyFrom(plan.graph.graph_def.library)  # as TensorFlow's: what If, While, calls run
    executed = {pn.name for pn in plan.nodes}
    feeds = set(plan.feeds)
    held: dict[tuple[str, int], str] = {}  # a tensor no executed node gives -> the node that holds it
    for pn in plan.nodes:
        for tensor in pn.node.inputs:
            src, port = tensor
            if tensor in held or (src in executed and tensor not in feeds):
                continue
            alone = plan.graph.num_outputs[src] == 1 and src not in executed
            name = src if alone else f"{src}/_port{port}"
            if tensor in feeds:
                nd = out.node.add(name=name, op="Placeholder", device=DEVICE)
                feed_spec = plan.graph.feed_spec(tensor)
                if feed_spec is not None:
                    nd.attr["dtype"].type = feed_spec[0]  # type: ignore[assignment]
                    if feed_spec[2] is not None:
                        nd.attr["shape"].shape.CopyFrom(shape_to_proto(feed_spec[2]))
            else:
                slot = plan.slot_of.get(tensor)
                if slot is None or plan.template[slot] is None:
                    continue
                nd = out.node.add(name=name, op="Const", device=DEVICE)
                value = np.asarray(plan.template[slot])
                nd.attr["dtype"].CopyFrom(attr_value(value.dtype))
                nd.attr["value"].tensor.CopyFrom(from_ndarray(value))
                if plan.graph.nodes[src].op != "Const":
                    nd.experimental_debug_info.original_node_names.append(src)
            held[tensor] = name
    for pn in plan.nodes:
        nd = out.node.add()
        nd.CopyFrom(pn.node.node_def)
        nd.device = DEVICE
        inputs = []
        for spec in nd.input:
            src, port, control = parse_input(spec)
            if control:
                if src in executed:  # a control input on a node that did not run (folded) is gone
                    inputs.append(spec)
            else:
                inputs.append(held.get((src, port), spec))
        del nd.input[:]
        nd.input.extend(inputs)
    return out
