"""A model's configuration in Triton's form: the KServe ``ModelConfig`` gRPC call and its HTTP twin
``GET /v2/models/{name}[/versions/{v}]/config``.

poolserve has no ``config.pbtxt``: the answer describes what is served, from the loaded version and its
``[[models]]`` entry. ``platform`` is ``tensorflow_savedmodel`` or ``tensorflow_graphdef``;
``max_batch_size`` is ``[models.batching] max_batch_size`` (0 without batching, as Triton writes a model
that does not batch), and then ``dims`` leave out the batch dimension, as in Triton's configs;
``dynamic_batching`` carries the batching settings (a ``max_queue_delay_us = "auto"`` reads 0, with the
parameter ``max_queue_delay_us = "auto"`` saying so); ``version_policy`` is the SavedModel base path's
policy (TF Serving's default: the latest 1), or the configured versions for files named one by one.

One builder makes the protobuf; the HTTP form is its JSON as Triton prints it (field names as declared,
every field, enums by name, 64-bit integers as numbers).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from poolserve.proto import model_config_pb2 as mc_pb
from poolserve.runtime.signature import TensorSpec
from poolserve.server import kserve
from poolserve.server.config import ModelConfig
from poolserve.server.service import InferenceService


def data_type(spec: TensorSpec) -> int:
    """Triton's DataType of a tensor: ``TYPE_`` and its KServe datatype (BYTES is Triton's TYPE_STRING)."""
    datatype = kserve.kserve_datatype(spec.dtype)
    name = "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
    try:
        return mc_pb.DataType.Value(name)
    except ValueError:  # INVALID: a dtype KServe has no datatype for
        return mc_pb.TYPE_INVALID


def dims(spec: TensorSpec, batching: bool) -> list[int]:
    """The shape as Triton's ``dims``: without dimension 0 when the model batches; [-1] for an unknown rank
    (as the metadata writes it)."""
    if spec.shape is None:
        return [-1]
    return list(spec.shape[1:] if batching and spec.shape else spec.shape)


def _configs(service: InferenceService, name: str) -> list[ModelConfig]:
    return [mc for mc in service.config.models if mc.name == name]


def _version_policy(configs: list[ModelConfig], served: list[int]) -> mc_pb.ModelVersionPolicy:
    policy = mc_pb.ModelVersionPolicy()
    given = configs[0].version_policy if len(configs) == 1 else None
    if given is not None and given.latest is not None:
        policy.latest.num_versions = given.latest
    elif given is not None and given.all:
        policy.all.SetInParent()
    elif given is not None:
        policy.specific.versions.extend(sorted(given.specific or ()))
    elif len(configs) == 1 and _base_path(configs[0]):
        policy.latest.num_versions = 1  # TF Serving's default for a base path
    else:  # each version named by its own [[models]] entry
        policy.specific.versions.extend(served)
    return policy


def _base_path(mc: ModelConfig) -> bool:
    """A SavedModel base path (numbered version folders) with no version pinned in the config."""
    path = mc.path
    if not path.is_dir() or any((path / f).is_file() for f in ("saved_model.pb", "saved_model.pbtxt")):
        return False
    return "version" not in mc.model_fields_set


def model_config(service: InferenceService, name: str, version: int | None) -> mc_pb.ModelConfig:
    """The configuration of a served model version (the latest by default); NotFoundError/UnavailableError
    as a metadata call answers for a model or version the server does not have."""
    entry = service.model(name, version)
    batcher = entry.batcher
    config = mc_pb.ModelConfig(
        name=entry.name,
        platform=kserve.platform(entry),
        max_batch_size=batcher.max_batch_size if batcher is not None else 0,
    )
    batching = batcher is not None
    for spec in entry.inputs:
        config.input.add(name=spec.name, data_type=data_type(spec), dims=dims(spec, batching))
    for spec in entry.outputs:
        config.output.add(name=spec.name, data_type=data_type(spec), dims=dims(spec, batching))
    if batcher is not None:
        dynamic = config.dynamic_batching
        dynamic.preferred_batch_size.extend(sorted(batcher.preferred))
        if batcher.delay is None:
            dynamic.max_queue_delay_microseconds = 0
            config.parameters["max_queue_delay_us"].string_value = "auto"
        else:
            dynamic.max_queue_delay_microseconds = round(batcher.delay * 1e6)
        config.parameters["max_concurrent_batches"].string_value = str(batcher.max_concurrent)
    if entry.methods:
        config.parameters["signature_name"].string_value = entry.signature_name
    served = sorted(service.models.get(entry.name, {}))
    configs = _configs(service, entry.name)
    if configs:
        config.version_policy.CopyFrom(_version_policy(configs, served))
    config.instance_group.add(name=entry.name, kind=mc_pb.ModelInstanceGroup.KIND_CPU, count=1)
    return config


_INT64 = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}


def _numbers(message: Message, value: dict[str, Any]) -> dict[str, Any]:
    """``value`` (``message`` as JSON) with its 64-bit integers as numbers: protobuf's JSON writes them as
    strings, Triton's HTTP answers as numbers."""
    for field in message.DESCRIPTOR.fields:
        if field.name not in value:
            continue
        if field.type in _INT64:
            got = value[field.name]
            value[field.name] = [int(v) for v in got] if isinstance(got, list) else int(got)
        elif field.message_type is not None and not field.message_type.GetOptions().map_entry:
            sub = getattr(message, field.name)
            if isinstance(value[field.name], list):
                value[field.name] = [_numbers(m, v) for m, v in zip(sub, value[field.name], strict=True)]
            else:
                value[field.name] = _numbers(sub, value[field.name])
    return value


def to_json(config: mc_pb.ModelConfig) -> dict[str, Any]:
    """Triton's JSON form of a ModelConfig: every field, names as declared, enums by name, int64s as
    numbers."""
    value = json_format.MessageToDict(
        config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _numbers(config, value)
