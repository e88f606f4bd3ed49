"""Writes the protobuf wire fixtures under ``tests/fixtures/wire`` with TensorFlow (dev only).

Run with the TensorFlow environment, not the project's::

    /opt/tfenv/bin/python tools/make_wire_fixtures.py

Messages (serialized by TensorFlow's own modules; ``messages.json`` holds, for each, the expected values as
``json_format.MessageToDict`` gives them once the fields poolserve leaves undeclared are cleared, and the
paths of those undeclared fields):

- ``run_options.bin``: a RunOptions with every field set;
- ``config_proto.bin``: a ConfigProto with thread pools, timeouts, optimizer and rewriter options, the GPU,
  RPC and cluster settings poolserve reads and ignores, and a field it does not declare
  (experimental.coordination_config);
- ``run_metadata.bin``: a RunMetadata with step stats, a cost graph, partition and function graphs;
- ``graph_def.bin``: a GraphDef made by ``tf.Graph`` (Placeholder + Const + AddV2, a library function) with
  debug_info and a node's experimental_type (both undeclared).

TensorProtos (``tensor_<case>.bin``; ``tensors.json`` holds what TensorFlow's C++ ``ParseTensor`` decodes
each to): float32/int64/bool/string/half/complex64 as ``tensor_content`` (written by
``tf.io.serialize_tensor``) and as typed fields (``tf.make_tensor_proto``, or set by hand where TensorFlow
would pick tensor_content), plus a single value broadcast over the shape and a short typed field padded
with its last value.
Re-running rewrites identical files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from google.protobuf import json_format, message
from tensorflow.core.framework import (
    full_type_pb2,
    graph_pb2,
    tensor_pb2,
    types_pb2,
)
from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "wire"


def run_options() -> config_pb2.RunOptions:
    opts = config_pb2.RunOptions(
        trace_level=config_pb2.RunOptions.FULL_TRACE,
        timeout_in_ms=1500,
        inter_op_thread_pool=1,
        output_partition_graphs=True,
        report_tensor_allocations_upon_oom=True,
    )
    watch = opts.debug_options.debug_tensor_watch_opts.add(node_name="y", output_slot=0)
    watch.debug_ops.extend(["DebugIdentity", "DebugNumericSummary"])
    watch.debug_urls.append("file:///tmp/tfdbg")
    watch.tolerate_debug_op_creation_failures = True
    opts.debug_options.global_step = 42
    opts.debug_options.reset_disk_byte_usage = True
    opts.experimental.collective_graph_key = 9
    opts.experimental.use_run_handler_pool = True
    opts.experimental.run_handler_pool_options.priority = 7
    return opts


def config_proto() -> config_pb2.ConfigProto:
    config = config_pb2.ConfigProto(
        intra_op_parallelism_threads=2,
        inter_op_parallelism_threads=3,
        placement_period=10,
        allow_soft_placement=True,
        log_device_placement=True,
        operation_timeout_in_ms=2500,
        isolate_session_state=True,
        share_cluster_devices_in_session=True,
    )
    config.device_count["CPU"] = 1
    config.device_count["GPU"] = 0
    config.session_inter_op_thread_pool.add(num_threads=4, global_name="shared")
    config.session_inter_op_thread_pool.add(num_threads=1)
    config.device_filters.extend(["/job:localhost", "/job:worker/task:1"])
    graph = config.graph_options
    graph.enable_recv_scheduling = True
    graph.build_cost_model = 5
    graph.build_cost_model_after = 2
    graph.infer_shapes = True
    graph.place_pruned_graph = True
    graph.enable_bfloat16_sendrecv = True
    graph.timeline_step = 3
    opt = graph.optimizer_options
    opt.do_common_subexpression_elimination = True
    opt.do_constant_folding = True
    opt.max_folded_constant_in_bytes = 1024
    opt.do_function_inlining = True
    opt.opt_level = config_pb2.OptimizerOptions.L0
    opt.global_jit_level = config_pb2.OptimizerOptions.ON_1
    opt.cpu_global_jit = True
    rewrite = graph.rewrite_options
    rewrite.disable_meta_optimizer = True
    rewrite.constant_folding = rewriter_config_pb2.RewriterConfig.OFF
    rewrite.layout_optimizer = rewriter_config_pb2.RewriterConfig.AGGRESSIVE
    rewrite.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    rewrite.optimizers.extend(["constfold", "layout"])
    rewrite.custom_optimizers.add(name="custom").parameter_map["k"].i = 3
    # read and ignored by poolserve (one process, CPU only)
    config.gpu_options.allow_growth = True
    config.gpu_options.visible_device_list = "0"
    config.gpu_options.experimental.virtual_devices.add(memory_limit_mb=[512.0, 256.0])
    config.rpc_options.compression_algorithm = "gzip"
    config.rpc_options.num_channels_per_target = 2
    config.cluster_def.job.add(name="worker").tasks[0] = "localhost:2222"
    # Undeclared in poolserve: must survive as an unknown field.
    config.experimental.coordination_config.service_type = "standalone"
    exp = config.experimental
    exp.executor_type = "DEFAULT"
    exp.disable_thread_spinning = True
    exp.session_metadata.name = "model"
    exp.session_metadata.version = 3
    exp.mlir_bridge_rollout = config_pb2.ConfigProto.Experimental.MLIR_BRIDGE_ROLLOUT_DISABLED
    exp.xla_fusion_autotuner_thresh = 11
    exp.recv_buf_max_chunk = 4096
    return config


def graph_def() -> graph_pb2.GraphDef:
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
        c = tf.constant([1.0, 2.0], name="c")
        tf.raw_ops.AddV2(x=x, y=c, name="y")

        @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
        def double(a: tf.Tensor) -> tf.Tensor:
            return a * 2.0

        double.get_concrete_function().add_to_graph(g)
    gd = g.as_graph_def()
    # Undeclared in poolserve: kept as unknown fields.
    placeholder = next(n for n in gd.node if n.name == "x")
    placeholder.experimental_type.type_id = full_type_pb2.TFT_PRODUCT
    placeholder.experimental_type.args.add(type_id=full_type_pb2.TFT_TENSOR).args.add(
        type_id=full_type_pb2.TFT_FLOAT
    )
    gd.debug_info.files.append("model.py")
    frame = gd.debug_info.frames_by_id[1]
    frame.file_index, frame.line, frame.col, frame.func = 0, 12, 4, "build"
    gd.debug_info.traces_by_id[7].frame_id.append(1)
    gd.debug_info.name_to_trace_id["y"] = 7
    return gd


def run_metadata(graph: graph_pb2.GraphDef) -> config_pb2.RunMetadata:
    meta = config_pb2.RunMetadata()
    dev = meta.step_stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:CPU:0")
    dev.thread_names[12] = "inter_op_0"
    dev.thread_names[13] = "inter_op_1"
    node = dev.node_stats.add(
        node_name="y",
        all_start_micros=1_700_000_000_000_000,
        op_start_rel_micros=1,
        op_end_rel_micros=5,
        all_end_rel_micros=6,
        timeline_label="y = AddV2(x, c)",
        scheduled_micros=1_699_999_999_999_990,
        thread_id=12,
        all_start_nanos=1_700_000_000_000_000_123,
        op_start_rel_nanos=1_100,
        op_end_rel_nanos=5_200,
        all_end_rel_nanos=6_300,
        scheduled_nanos=1_699_999_999_999_990_000,
    )
    mem = node.memory.add(
        allocator_name="cpu", total_bytes=64, peak_bytes=48, live_bytes=16, allocator_bytes_in_use=128
    )
    mem.allocation_records.add(alloc_micros=3, alloc_bytes=16)
    mem.allocation_records.add(alloc_micros=4, alloc_bytes=-16)
    out = node.output.add(slot=0)
    out.tensor_description.dtype = types_pb2.DT_FLOAT
    out.tensor_description.shape.dim.add(size=3)
    out.tensor_description.shape.dim.add(size=2)
    alloc = out.tensor_description.allocation_description
    alloc.requested_bytes, alloc.allocated_bytes, alloc.allocator_name = 24, 32, "cpu"
    alloc.allocation_id, alloc.has_single_reference, alloc.ptr = 5, True, 0x7F00DEADBEEF
    node.referenced_tensor.add(requested_bytes=8, allocator_name="cpu", allocation_id=2)
    node.memory_stats.temp_memory_size = 256
    node.memory_stats.persistent_memory_size = 8
    node.memory_stats.persistent_tensor_alloc_ids.extend([2, 3])
    meta.step_stats.dev_stats.add(device="/job:localhost/replica:0/task:0/device:GPU:0")

    cost_node = meta.cost_graph.node.add(
        name="y",
        device="/job:localhost/replica:0/task:0/device:CPU:0",
        id=2,
        temporary_memory_size=0,
        persistent_memory_size=4,
        compute_cost=3,
        compute_time=2,
        memory_time=1,
        is_final=True,
        inaccurate=True,
    )
    cost_node.input_info.add(preceding_node=0, preceding_port=0)
    cost_node.input_info.add(preceding_node=1, preceding_port=0)
    output = cost_node.output_info.add(size=24, alias_input_port=-1, dtype=types_pb2.DT_FLOAT)
    output.shape.dim.add(size=-1)
    output.shape.dim.add(size=2)
    cost_node.control_input.extend([0, 1])
    meta.cost_graph.cost.add(cost=1.5, dimension="flops")

    meta.partition_graphs.add().CopyFrom(graph)
    fn = meta.function_graphs.add()
    fn.partition_graphs.add().CopyFrom(graph)
    fn.pre_optimization_graph.CopyFrom(graph)
    fn.post_optimization_graph.node.add(name="only", op="NoOp")
    meta.session_metadata.name = "model"
    meta.session_metadata.version = 3
    return meta


def clear_path(msg: message.Message, path: str) -> None:
    """Clears a field given as a dotted path; ``node[]`` clears it in every element of a repeated field."""
    head, _, rest = path.partition(".")
    if head.endswith("[]"):
        for item in getattr(msg, head[:-2]):
            clear_path(item, rest)
    elif rest:
        clear_path(getattr(msg, head), rest)
    else:
        msg.ClearField(head)


def expected_values(msg: message.Message, undeclared: list[str]) -> dict[str, Any]:
    declared = type(msg)()
    declared.CopyFrom(msg)
    for path in undeclared:
        clear_path(declared, path)
    return {
        "type": msg.DESCRIPTOR.name,
        "undeclared": undeclared,
        "values": json_format.MessageToDict(declared, preserving_proto_field_name=True),
    }


def tensor_cases() -> dict[str, tensor_pb2.TensorProto]:
    def serialized(value: Any, dtype: tf.DType) -> tensor_pb2.TensorProto:
        """tensor_content, as TensorFlow's C++ Tensor::AsProtoTensorContent writes it."""
        data = tf.io.serialize_tensor(tf.constant(value, dtype=dtype)).numpy()
        proto = tensor_pb2.TensorProto.FromString(data)
        assert proto.tensor_content, proto
        return proto

    def typed(dtype: int, shape: list[int], field: str, values: list[Any]) -> tensor_pb2.TensorProto:
        proto = tensor_pb2.TensorProto(dtype=dtype)
        for size in shape:
            proto.tensor_shape.dim.add(size=size)
        getattr(proto, field).extend(values)
        return proto

    half_bits = np.array([1.5, -2.0, 65504.0, 0.0001], np.float16).view(np.uint16).tolist()
    return {
        "float32_content": serialized([[1.5, -2.0, 3.25], [4.0, 1e-8, -7.5]], tf.float32),
        "float32_typed": typed(types_pb2.DT_FLOAT, [2, 3], "float_val", [1.5, -2.0, 3.25, 4.0, 1e-8, -7.5]),
        "float32_broadcast": tf.make_tensor_proto(2.5, dtype=tf.float32, shape=[2, 3]),
        "float32_padded": typed(types_pb2.DT_FLOAT, [5], "float_val", [1.0, 2.0]),
        "float32_empty": typed(types_pb2.DT_FLOAT, [2, 2], "float_val", []),
        "int64_content": serialized([[1, -2], [2**40, -(2**62)]], tf.int64),
        "int64_typed": typed(types_pb2.DT_INT64, [2, 2], "int64_val", [1, -2, 2**40, -(2**62)]),
        "bool_content": serialized([True, False, True, True], tf.bool),
        "bool_typed": tf.make_tensor_proto([True, False, True, True], dtype=tf.bool),
        "bool_broadcast": tf.make_tensor_proto(True, dtype=tf.bool, shape=[3]),
        "string_typed": tf.make_tensor_proto([[b"ab", b""], [b"\xff\x00z", "h\u00e9".encode()]]),
        "string_broadcast": tf.make_tensor_proto(b"x", dtype=tf.string, shape=[3]),
        "half_content": serialized([1.5, -2.0, 65504.0, 0.0001], tf.float16),
        "half_typed": typed(types_pb2.DT_HALF, [4], "half_val", half_bits),
        "complex64_content": serialized([1 + 2j, -3.5 - 4j, 0.25j], tf.complex64),
        "complex64_typed": tf.make_tensor_proto(
            np.array([1 + 2j, -3.5 - 4j, 0.25j], np.complex64), dtype=tf.complex64
        ),
        "complex64_broadcast": tf.make_tensor_proto(1 - 1j, dtype=tf.complex64, shape=[2, 2]),
    }


def decoded(proto: tensor_pb2.TensorProto) -> dict[str, Any]:
    """What TensorFlow's C++ decoder makes of a TensorProto, as JSON."""
    dtype = tf.dtypes.as_dtype(proto.dtype)
    arr = tf.io.parse_tensor(proto.SerializeToString(), dtype).numpy()
    flat = arr.reshape(-1)
    values: list[Any]
    if dtype == tf.string:
        values = [v.hex() for v in flat]
    elif dtype.is_complex:
        values = [[float(v.real), float(v.imag)] for v in flat]
    else:
        values = flat.tolist()
    return {
        "dtype": arr.dtype.name if dtype != tf.string else "string",
        "shape": list(arr.shape),
        "values": values,
    }


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    graph = graph_def()
    graph_undeclared = ["debug_info", "node[].experimental_type"]
    messages: dict[str, tuple[message.Message, list[str]]] = {
        "run_options": (run_options(), []),
        "config_proto": (
            config_proto(),
            ["experimental.coordination_config"],
        ),
        "run_metadata": (
            run_metadata(graph),
            [
                f"{where}.{field}"
                for where in (
                    "partition_graphs[]",
                    "function_graphs[].partition_graphs[]",
                    "function_graphs[].pre_optimization_graph",
                )
                for field in graph_undeclared
            ],
        ),
        "graph_def": (graph, graph_undeclared),
    }
    expected: dict[str, Any] = {}
    for name, (msg, undeclared) in messages.items():
        (OUT_DIR / f"{name}.bin").write_bytes(msg.SerializeToString(deterministic=True))
        expected[name] = expected_values(msg, undeclared)
    (OUT_DIR / "messages.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")

    tensors: dict[str, Any] = {}
    for name, proto in tensor_cases().items():
        (OUT_DIR / f"tensor_{name}.bin").write_bytes(proto.SerializeToString(deterministic=True))
        tensors[name] = decoded(proto)
    (OUT_DIR / "tensors.json").write_text(json.dumps(tensors, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(messages)} messages and {len(tensors)} tensors to {OUT_DIR}")


if __name__ == "__main__":
    main()
