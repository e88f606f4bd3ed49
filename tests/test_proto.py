"""The generated protobuf modules: not stale, and wire compatible with what TensorFlow writes.

The fixtures under ``fixtures/wire`` are written by ``tools/make_wire_fixtures.py`` with TensorFlow.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor, json_format, message, text_format, unknown_fields

from poolserve.proto import config_pb2, generate, graph_pb2

WIRE = Path(__file__).parent / "fixtures" / "wire"
EXPECTED = json.loads((WIRE / "messages.json").read_text())
MESSAGES: dict[str, type[message.Message]] = {
    "run_options": config_pb2.RunOptions,
    "config_proto": config_pb2.ConfigProto,
    "run_metadata": config_pb2.RunMetadata,
    "graph_def": graph_pb2.GraphDef,
}


def load(name: str) -> tuple[bytes, Any]:
    data = (WIRE / f"{name}.bin").read_bytes()
    return data, MESSAGES[name].FromString(data)


# --- staleness ----------------------------------------------------------------------------------------------


def test_generated_modules_are_up_to_date(tmp_path: Path) -> None:
    generate.generate(tmp_path)
    fresh = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.suffix in (".py", ".pyi")}
    committed = {
        p.name: p.read_bytes()
        for p in generate.PROTO_DIR.iterdir()
        if p.name.endswith(("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"))
    }
    hint = "the generated protobuf modules are stale: run `python -m poolserve.proto.generate`"
    assert sorted(fresh) == sorted(committed), hint
    stale = sorted(name for name in fresh if fresh[name] != committed[name])
    assert not stale, f"{hint} ({', '.join(stale)} differ)"


def test_every_source_is_generated() -> None:
    for source in generate.sources():
        for suffix in ("_pb2.py", "_pb2.pyi"):
            assert (generate.PROTO_DIR / f"{source.stem}{suffix}").is_file(), source.name


def test_services_have_grpc_modules_with_upstream_names() -> None:
    assert [p.name for p in generate.services()] == [
        "grpc_service.proto",
        "model_service.proto",
        "prediction_service.proto",
    ]
    from poolserve.proto import grpc_service_pb2, model_service_pb2, prediction_service_pb2

    # the method paths clients call: /<package>.<service>/<method>
    names = {
        "inference.GRPCInferenceService": grpc_service_pb2,
        "tensorflow.serving.PredictionService": prediction_service_pb2,
        "tensorflow.serving.ModelService": model_service_pb2,
    }
    for full_name, module in names.items():
        assert module.DESCRIPTOR.services_by_name[full_name.rsplit(".", 1)[1]].full_name == full_name


# --- wire compatibility -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_fixture_values(name: str) -> None:
    _, msg = load(name)
    assert EXPECTED[name]["type"] == msg.DESCRIPTOR.name
    assert json_format.MessageToDict(msg, preserving_proto_field_name=True) == EXPECTED[name]["values"]


def test_run_options_fields() -> None:
    _, opts = load("run_options")
    assert opts.trace_level == config_pb2.RunOptions.FULL_TRACE == 3
    assert opts.timeout_in_ms == 1500
    assert opts.inter_op_thread_pool == 1
    assert opts.output_partition_graphs and opts.report_tensor_allocations_upon_oom
    watch = opts.debug_options.debug_tensor_watch_opts[0]
    assert (watch.node_name, watch.output_slot) == ("y", 0)
    assert list(watch.debug_ops) == ["DebugIdentity", "DebugNumericSummary"]
    assert list(watch.debug_urls) == ["file:///tmp/tfdbg"]
    assert watch.tolerate_debug_op_creation_failures
    assert opts.debug_options.global_step == 42
    assert opts.experimental.collective_graph_key == 9
    assert opts.experimental.use_run_handler_pool
    assert opts.experimental.run_handler_pool_options.priority == 7


def test_trace_level_values() -> None:
    names = ("NO_TRACE", "SOFTWARE_TRACE", "HARDWARE_TRACE", "FULL_TRACE")
    assert [config_pb2.RunOptions.TraceLevel.Value(n) for n in names] == [0, 1, 2, 3]


def test_config_proto_fields() -> None:
    _, config = load("config_proto")
    assert dict(config.device_count) == {"CPU": 1, "GPU": 0}
    assert (config.intra_op_parallelism_threads, config.inter_op_parallelism_threads) == (2, 3)
    pools = [(p.num_threads, p.global_name) for p in config.session_inter_op_thread_pool]
    assert pools == [(4, "shared"), (1, "")]
    assert config.operation_timeout_in_ms == 2500
    opt = config.graph_options.optimizer_options
    assert opt.opt_level == config_pb2.OptimizerOptions.L0 == -1
    assert opt.global_jit_level == config_pb2.OptimizerOptions.ON_1
    assert opt.max_folded_constant_in_bytes == 1024
    assert config.experimental.session_metadata.name == "model"
    assert config.experimental.session_metadata.version == 3
    # TensorFlow's GPU, RPC, cluster and rewriter settings are read (and ignored): a config written for
    # TensorFlow parses as it is, in bytes or text
    assert (config.gpu_options.allow_growth, config.gpu_options.visible_device_list) == (True, "0")
    assert list(config.gpu_options.experimental.virtual_devices[0].memory_limit_mb) == [512.0, 256.0]
    assert (config.rpc_options.compression_algorithm, config.rpc_options.num_channels_per_target) == (
        "gzip",
        2,
    )
    assert [(j.name, dict(j.tasks)) for j in config.cluster_def.job] == [("worker", {0: "localhost:2222"})]
    rewrite = config.graph_options.rewrite_options
    assert rewrite.constant_folding == config_pb2.RewriterConfig.OFF
    assert rewrite.layout_optimizer == config_pb2.RewriterConfig.AGGRESSIVE
    assert list(rewrite.optimizers) == ["constfold", "layout"]
    assert rewrite.custom_optimizers[0].parameter_map["k"].i == 3
    text = "gpu_options { allow_growth: true } graph_options { rewrite_options { constant_folding: OFF } }"
    parsed = text_format.Parse(text, config_pb2.ConfigProto())
    assert parsed.gpu_options.allow_growth and parsed.graph_options.rewrite_options.constant_folding == 2


def test_run_metadata_fields() -> None:
    _, meta = load("run_metadata")
    dev = meta.step_stats.dev_stats[0]
    assert dev.device.endswith("device:CPU:0")
    assert dict(dev.thread_names) == {12: "inter_op_0", 13: "inter_op_1"}
    stats = dev.node_stats[0]
    assert (stats.node_name, stats.thread_id, stats.op_end_rel_micros) == ("y", 12, 5)
    assert stats.all_start_nanos == 1_700_000_000_000_000_123
    out = stats.output[0].tensor_description
    assert [d.size for d in out.shape.dim] == [3, 2]
    assert out.allocation_description.ptr == 0x7F00DEADBEEF
    assert meta.cost_graph.node[0].output_info[0].alias_input_port == -1
    assert [n.op for n in meta.partition_graphs[0].node] == ["Placeholder", "Const", "AddV2"]
    assert meta.function_graphs[0].post_optimization_graph.node[0].op == "NoOp"
    assert meta.session_metadata.version == 3


def test_graph_def_fields() -> None:
    _, graph = load("graph_def")
    nodes = {n.name: n for n in graph.node}
    assert list(nodes["y"].input) == ["x", "c"]
    assert nodes["x"].attr["dtype"].type == 1
    assert len(graph.library.function) == 1
    assert graph.library.function[0].signature.name.startswith("__inference_double")


def _unknown_numbers(msg: message.Message) -> list[int]:
    return [f.field_number for f in unknown_fields.UnknownFieldSet(msg)]


def test_undeclared_fields_are_kept_as_unknown() -> None:
    _, config = load("config_proto")
    assert _unknown_numbers(config) == []
    assert _unknown_numbers(config.graph_options) == []
    assert _unknown_numbers(config.experimental) == [23]  # coordination_config
    _, graph = load("graph_def")
    assert _unknown_numbers(graph) == [5]  # debug_info
    assert [_unknown_numbers(n) for n in graph.node] == [[7], [], []]  # experimental_type on "x"
    _, opts = load("run_options")
    assert _unknown_numbers(opts) == []


@pytest.mark.parametrize("name", ["run_options", "run_metadata", "graph_def"])
def test_reserialization_is_byte_identical(name: str) -> None:
    data, msg = load(name)
    assert msg.SerializeToString(deterministic=True) == data


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _canonical(data: bytes, desc: descriptor.Descriptor | None) -> list[tuple[int, Any]]:
    """A message's fields in field-number order, recursing into known sub-messages; map entries sorted.

    protobuf writes unknown fields after the known ones, so a message whose unknown fields sit between
    known ones re-serializes to the same fields in another order; this form ignores that order only.
    """
    fields: list[tuple[int, Any]] = []
    pos = 0
    while pos < len(data):
        tag, pos = _read_varint(data, pos)
        number, wire_type = tag >> 3, tag & 7
        start = pos
        if wire_type == 0:
            _, pos = _read_varint(data, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            size, start = _read_varint(data, pos)
            pos = start + size
        else:
            raise AssertionError(f"unexpected wire type {wire_type}")
        raw = data[start:pos]
        field = desc.fields_by_number.get(number) if desc is not None else None
        if wire_type == 2 and field is not None and field.message_type is not None:
            fields.append((number, _canonical(raw, field.message_type)))
        else:
            fields.append((number, (wire_type, raw)))
    out: list[tuple[int, Any]] = []
    for number in sorted({n for n, _ in fields}):
        values = [v for n, v in fields if n == number]
        field = desc.fields_by_number.get(number) if desc is not None else None
        if field is not None and field.message_type is not None and field.message_type.GetOptions().map_entry:
            values.sort(key=repr)
        out.extend((number, v) for v in values)
    return out


def test_reserialization_keeps_unknown_fields() -> None:
    data, config = load("config_proto")
    again = config.SerializeToString(deterministic=True)
    # Same fields; an unknown one is written after its message's known ones (coordination_config, 23, is
    # Experimental's last-numbered field anyway)
    assert len(again) == len(data)
    assert _canonical(again, config.DESCRIPTOR) == _canonical(data, config.DESCRIPTOR)
    reparsed = config_pb2.ConfigProto.FromString(again)
    assert reparsed == config
    assert reparsed.SerializeToString(deterministic=True) == again


def test_canonical_form_sees_differences() -> None:
    data, config = load("config_proto")
    config.experimental.session_metadata.version = 4
    changed = config.SerializeToString(deterministic=True)
    assert _canonical(changed, config.DESCRIPTOR) != _canonical(data, config.DESCRIPTOR)
    _, stripped = load("config_proto")
    stripped.DiscardUnknownFields()
    dropped = stripped.SerializeToString(deterministic=True)
    assert _canonical(dropped, config.DESCRIPTOR) != _canonical(data, config.DESCRIPTOR)
