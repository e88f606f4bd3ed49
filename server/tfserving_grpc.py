"""TF Serving over gRPC: ``tensorflow.serving.PredictionService`` and ``ModelService``, as
tensorflow-serving-api's stubs call them.

Predict is the REST :predict in protobuf: ``model_spec`` names the model, its version (a number, or the
label ``stable``: the latest) and the signature; inputs are TensorProtos by the signature's input names,
each of the input's dtype; ``output_filter`` picks outputs. The answer carries the outputs and the
``model_spec`` that served them. GetModelMetadata answers ``signature_def``; GetModelStatus the versions'
states. Classify and Regress feed tf.Examples to a classify/regress signature, which parses them with
ParseExample: the runtime has no such kernel, so they answer UNIMPLEMENTED, naming Predict instead.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import wrappers_pb2

from poolserve.proto import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    meta_graph_pb2,
    model_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.signature import TensorSpec
from poolserve.runtime.tensor import shape_to_proto
from poolserve.runtime.types import Array
from poolserve.server import codec, tfserving
from poolserve.server.grpc_server import GrpcAdapter, guarded, serve, unimplemented
from poolserve.server.models import ModelEntry
from poolserve.server.service import InferenceService, InferRequest, InferResult

Context = grpc.aio.ServicerContext[Any, Any]
SIGNATURE_DEF = "signature_def"
_STATE = get_model_status_pb2.ModelVersionStatus.State


def model_of(message: Any) -> tuple[str, int | None]:
    """The model and version a request's ``model_spec`` names (version None: the latest)."""
    if not message.HasField("model_spec"):
        raise InvalidArgumentError("Missing ModelSpec: the request must name the model in model_spec")
    spec: model_pb2.ModelSpec = message.model_spec
    if not spec.name:
        raise InvalidArgumentError("model_spec.name is empty: name the model")
    choice = spec.WhichOneof("version_choice")
    if choice == "version":
        return spec.name, spec.version.value
    if choice == "version_label":
        return spec.name, tfserving._label(spec.version_label)
    return spec.name, None


def model_spec(name: str, version: int, signature_name: str = "") -> model_pb2.ModelSpec:
    return model_pb2.ModelSpec(
        name=name, version=wrappers_pb2.Int64Value(value=version), signature_name=signature_name
    )


class PredictAdapter(GrpcAdapter[predict_pb2.PredictRequest, str, predict_pb2.PredictResponse]):
    """The context kept for the answer: the signature that served the request."""

    endpoint = "/tensorflow.serving.PredictionService/Predict"

    def model(self, message: predict_pb2.PredictRequest) -> tuple[str, int | None]:
        return model_of(message)

    def decode_size(self, message: predict_pb2.PredictRequest) -> int:
        # typed values (float_val, ...) convert one by one; tensor_content is raw bytes
        return sum(t.ByteSize() for t in message.inputs.values() if not t.tensor_content)

    def decode(self, message: predict_pb2.PredictRequest, entry: ModelEntry) -> tuple[InferRequest, str]:
        entry = entry.for_signature(message.model_spec.signature_name or None)
        if not message.inputs:
            raise InvalidArgumentError("PredictRequest.inputs is empty: no inputs found in the request")
        inputs: dict[str, Array] = {}
        for name, proto in message.inputs.items():
            spec = entry.input_spec(name)  # InvalidArgumentError listing the inputs
            inputs[name] = codec.from_tensor_proto(f"input '{name}'", proto, spec.dtype)
        infer = InferRequest(
            entry.name,
            inputs,
            fetches=list(message.output_filter),
            version=entry.version,
            signature_name=entry.signature_name,
        )
        return infer, entry.signature_name

    def encode(self, result: InferResult, context: str) -> predict_pb2.PredictResponse:
        response = predict_pb2.PredictResponse(model_spec=model_spec(result.model, result.version, context))
        for name, value in result.outputs.items():
            response.outputs[name].CopyFrom(codec.to_tensor_proto(value))
        return response


def _tensor_info(spec: TensorSpec) -> meta_graph_pb2.TensorInfo:
    return meta_graph_pb2.TensorInfo(
        name=spec.tensor,
        dtype=spec.dtype,  # type: ignore[arg-type]
        tensor_shape=shape_to_proto(spec.shape),
    )


def signature_defs(entry: ModelEntry) -> get_model_metadata_pb2.SignatureDefMap:
    """The model's signatures as SignatureDefs (every one a predict signature here)."""
    out = get_model_metadata_pb2.SignatureDefMap()
    for name, signature in entry.signatures.items():
        sd = out.signature_def[name]
        sd.method_name = tfserving.PREDICT_METHOD
        for s in signature.inputs:
            sd.inputs[s.name].CopyFrom(_tensor_info(s))
        for s in signature.outputs:
            sd.outputs[s.name].CopyFrom(_tensor_info(s))
    return out


class PredictionServicer:
    def __init__(self, service: InferenceService) -> None:
        self.service = service
        self.predict = PredictAdapter()
        self.GetModelMetadata = guarded(self._get_model_metadata)
        self.Classify = unimplemented(_no_examples("Classify"))
        self.Regress = unimplemented(_no_examples("Regress"))

    async def Predict(
        self, request: predict_pb2.PredictRequest, context: Context
    ) -> predict_pb2.PredictResponse:
        return await serve(self.predict, self.service, request, context)

    async def _get_model_metadata(
        self, request: get_model_metadata_pb2.GetModelMetadataRequest, context: Context
    ) -> get_model_metadata_pb2.GetModelMetadataResponse:
        fields = list(request.metadata_field)
        if not fields:
            raise InvalidArgumentError(
                f"GetModelMetadataRequest must specify at least one metadata_field (only '{SIGNATURE_DEF}')"
            )
        for field in fields:
            if field != SIGNATURE_DEF:
                raise InvalidArgumentError(
                    f"Metadata field {field} is not supported (only '{SIGNATURE_DEF}')"
                )
        name, version = model_of(request)
        entry = self.service.model(name, version)
        response = get_model_metadata_pb2.GetModelMetadataResponse(
            model_spec=model_spec(entry.name, entry.version)
        )
        response.metadata[SIGNATURE_DEF].Pack(signature_defs(entry))
        return response


def _no_examples(call: str) -> str:
    return (
        f"{call} feeds tf.Examples to a signature that parses them with ParseExample, which poolserve's "
        "runtime does not run: call Predict with the signature's input tensors instead"
    )


class ModelServicer:
    def __init__(self, service: InferenceService) -> None:
        self.service = service
        self.GetModelStatus = guarded(self._get_model_status)

    async def _get_model_status(
        self, request: get_model_status_pb2.GetModelStatusRequest, context: Context
    ) -> get_model_status_pb2.GetModelStatusResponse:
        name, version = model_of(request)
        if request.model_spec.WhichOneof("version_choice") == "version_label":
            version = self.service.model(name, version).version  # the label's version only
        self.service.model(name, version)  # NotFoundError naming the model or version
        versions = [version] if version is not None else sorted(self.service.models[name], reverse=True)
        state = _STATE.UNLOADING if self.service.draining else _STATE.AVAILABLE
        response = get_model_status_pb2.GetModelStatusResponse()
        for v in versions:
            response.model_version_status.add(version=v, state=state)
        return response


def add_to_server(server: grpc.aio.Server, service: InferenceService) -> None:
    # the generated registration functions are untyped
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(  # type: ignore[no-untyped-call]
        PredictionServicer(service), server
    )
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(  # type: ignore[no-untyped-call]
        ModelServicer(service), server
    )
