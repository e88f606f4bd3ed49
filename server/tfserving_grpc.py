"""TF Serving over gRPC: ``tensorflow.serving.PredictionService`` and ``ModelService``, as
tensorflow-serving-api's stubs call them.

Predict is the REST :predict in protobuf: ``model_spec`` names the model, its version (a number, or the
label ``stable``: the latest) and the signature; inputs are TensorProtos by the signature's input names,
each of the input's dtype; ``output_filter`` picks outputs. The answer carries the outputs and the
``model_spec`` that served them. GetModelMetadata answers ``signature_def``; GetModelStatus the versions'
states. Classify and Regress feed the request's tf.Examples, serialized (a context Example's features
merged into each), to a classify or regress signature and read its results, by the rules the REST
``:classify`` and ``:regress`` share (``server.examples``). MultiInference runs several classify and
regress tasks of one model over the same examples in one step (``MultiInferenceAdapter``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import wrappers_pb2

from poolserve.proto import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    meta_graph_pb2,
    model_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
    status_pb2,
)
from poolserve.runtime.errors import InvalidArgumentError, UnimplementedError
from poolserve.runtime.signature import TensorSpec
from poolserve.runtime.tensor import shape_to_proto
from poolserve.runtime.types import Array
from poolserve.server import codec, examples, tfserving
from poolserve.server.grpc_server import GrpcAdapter, guarded, serve
from poolserve.server.models import ModelEntry
from poolserve.server.service import InferenceService, InferRequest, InferResult

Context = grpc.aio.ServicerContext[Any, Any]
SIGNATURE_DEF = "signature_def"
_STATE = get_model_status_pb2.ModelVersionStatus.State


def model_of(message: Any) -> tuple[str, int | str | None]:
    """The model and version a request's ``model_spec`` names: a number, a label, or None (the latest)."""
    if not message.HasField("model_spec"):
        raise InvalidArgumentError("Missing ModelSpec: the request must name the model in model_spec")
    spec: model_pb2.ModelSpec = message.model_spec
    if not spec.name:
        raise InvalidArgumentError("model_spec.name is empty: name the model")
    choice = spec.WhichOneof("version_choice")
    if choice == "version":
        return spec.name, spec.version.value
    if choice == "version_label":
        return spec.name, spec.version_label
    return spec.name, None


def resolved(service: InferenceService, message: Any) -> tuple[str, int | None]:
    """``model_of`` with a label turned into the version the config names for it."""
    name, version = model_of(message)
    if isinstance(version, str):
        return name, service.repository.label_version(name, version)
    return name, version


def model_spec(name: str, version: int, signature_name: str = "") -> model_pb2.ModelSpec:
    return model_pb2.ModelSpec(
        name=name, version=wrappers_pb2.Int64Value(value=version), signature_name=signature_name
    )


class PredictAdapter(GrpcAdapter[predict_pb2.PredictRequest, str, predict_pb2.PredictResponse]):
    """The context kept for the answer: the signature that served the request."""

    endpoint = "/tensorflow.serving.PredictionService/Predict"

    def __init__(self, max_request_bytes: int) -> None:
        self.max_request_bytes = max_request_bytes  # bounds what filled tensors expand to

    def model(self, message: predict_pb2.PredictRequest) -> tuple[str, int | str | None]:
        return model_of(message)

    def decode_size(self, message: predict_pb2.PredictRequest) -> int:
        # typed values (float_val, ...) convert one by one; tensor_content is raw bytes
        return sum(t.ByteSize() for t in message.inputs.values() if not t.tensor_content)

    def decode(self, message: predict_pb2.PredictRequest, entry: ModelEntry) -> tuple[InferRequest, str]:
        entry = entry.for_signature(message.model_spec.signature_name or None)
        if not message.inputs:
            raise InvalidArgumentError("PredictRequest.inputs is empty: no inputs found in the request")
        inputs: dict[str, Array] = {}
        named = [(f"input '{name}'", proto) for name, proto in message.inputs.items()]
        codec.check_tensor_protos(named, self.max_request_bytes)
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
        sd.method_name = entry.methods.get(name, examples.PREDICT_METHOD)
        for s in signature.inputs:
            sd.inputs[s.name].CopyFrom(_tensor_info(s))
        for s in signature.outputs:
            sd.outputs[s.name].CopyFrom(_tensor_info(s))
    return out


class PredictionServicer:
    def __init__(self, service: InferenceService) -> None:
        self.service = service
        self.predict = PredictAdapter(service.config.server.max_request_bytes)
        self.GetModelMetadata = guarded(self._get_model_metadata)
        self.classify = ClassifyAdapter()
        self.regress = RegressAdapter()
        self.multi_inference = MultiInferenceAdapter()

    async def Predict(
        self, request: predict_pb2.PredictRequest, context: Context
    ) -> predict_pb2.PredictResponse:
        return await serve(self.predict, self.service, request, context)

    async def Classify(
        self, request: classification_pb2.ClassificationRequest, context: Context
    ) -> classification_pb2.ClassificationResponse:
        response: classification_pb2.ClassificationResponse = await serve(
            self.classify, self.service, request, context
        )
        return response

    async def Regress(
        self, request: regression_pb2.RegressionRequest, context: Context
    ) -> regression_pb2.RegressionResponse:
        response: regression_pb2.RegressionResponse = await serve(
            self.regress, self.service, request, context
        )
        return response

    async def MultiInference(
        self, request: inference_pb2.MultiInferenceRequest, context: Context
    ) -> inference_pb2.MultiInferenceResponse:
        return await serve(self.multi_inference, self.service, request, context)

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
        name, version = resolved(self.service, request)
        entry = self.service.model(name, version)
        response = get_model_metadata_pb2.GetModelMetadataResponse(
            model_spec=model_spec(entry.name, entry.version)
        )
        response.metadata[SIGNATURE_DEF].Pack(signature_defs(entry))
        return response


def examples_of(message: Any) -> tuple[list[bytes], bytes]:
    """The request's Input: its tf.Examples serialized, and its context's (b"" without one)."""
    kind = message.input.WhichOneof("kind")
    if kind == "example_list":
        return [e.SerializeToString() for e in message.input.example_list.examples], b""
    if kind == "example_list_with_context":
        given = message.input.example_list_with_context
        return [e.SerializeToString() for e in given.examples], given.context.SerializeToString()
    return [], b""


@dataclass
class Task:
    """A MultiInference task: its method, signature, and outputs (public name -> graph tensor)."""

    method: str
    signature: str
    outputs: dict[str, str]


class ExamplesAdapter(GrpcAdapter[Any, str, Any]):
    """Classify and Regress: the request's examples through ``method`` (``server.examples``)."""

    method: examples.Method

    def model(self, message: Any) -> tuple[str, int | str | None]:
        return model_of(message)

    def decode(self, message: Any, entry: ModelEntry) -> tuple[InferRequest, str]:
        infer = self.method.request(entry, message.model_spec.signature_name, *examples_of(message))
        return infer, infer.signature_name or ""


class ClassifyAdapter(ExamplesAdapter):
    endpoint = "/tensorflow.serving.PredictionService/Classify"
    method = examples.CLASSIFY

    def encode(self, result: InferResult, context: str) -> classification_pb2.ClassificationResponse:
        response = classification_pb2.ClassificationResponse(
            model_spec=model_spec(result.model, result.version, context)
        )
        classification_result(result.outputs.get("classes"), result.outputs.get("scores"), response.result)
        return response


def classification_result(classes: Any, scores: Any, out: classification_pb2.ClassificationResult) -> None:
    """A classify signature's ``classes`` and ``scores`` (either may be None), as Classifications in
    ``out``."""
    for row in examples.classifications(classes, scores):
        classification = out.classifications.add()
        for label, score in row:
            classification.classes.add(label=label, score=float(score))


class RegressAdapter(ExamplesAdapter):
    endpoint = "/tensorflow.serving.PredictionService/Regress"
    method = examples.REGRESS

    def encode(self, result: InferResult, context: str) -> regression_pb2.RegressionResponse:
        response = regression_pb2.RegressionResponse(
            model_spec=model_spec(result.model, result.version, context)
        )
        regression_result(result.outputs["outputs"], response.result)
        return response


def regression_result(outputs: Any, out: regression_pb2.RegressionResult) -> None:
    """A regress signature's ``outputs``, as Regressions in ``out``."""
    for value in examples.regressions(outputs).tolist():
        out.regressions.add(value=value)


class MultiInferenceAdapter(
    GrpcAdapter[inference_pb2.MultiInferenceRequest, list[Task], inference_pb2.MultiInferenceResponse]
):
    """MultiInference, as TF Serving runs it: the tasks' signatures (each classify or regress, each once)
    must share their input tensor; one step fetches every task's outputs, and each task's result is read
    from them."""

    endpoint = "/tensorflow.serving.PredictionService/MultiInference"

    def model(self, message: inference_pb2.MultiInferenceRequest) -> tuple[str, int | str | None]:
        if not message.tasks:
            raise InvalidArgumentError("MultiInferenceRequest has no tasks: give at least one")
        for task in message.tasks:
            if not task.model_spec.name:
                raise InvalidArgumentError("Found ModelSpec with an empty model name.")
            if task.model_spec.name != message.tasks[0].model_spec.name:
                raise InvalidArgumentError(
                    "All ModelSpecs in a MultiInferenceRequest must access the same model name."
                )
        return model_of(message.tasks[0])

    def decode(
        self, message: inference_pb2.MultiInferenceRequest, entry: ModelEntry
    ) -> tuple[InferRequest, list[Task]]:
        tasks: list[Task] = []
        input_tensor = ""
        for task in message.tasks:
            signature = entry.for_signature(task.model_spec.signature_name or None)
            if any(t.signature == signature.signature_name for t in tasks):
                raise InvalidArgumentError(f"Duplicate evaluation of signature: {signature.signature_name}")
            method = examples.METHODS.get(task.method_name)
            if method is None:
                raise UnimplementedError(
                    f"Unsupported signature method_name: {task.method_name!r} (tensorflow/serving/classify "
                    "or tensorflow/serving/regress)"
                )
            names = method.fetches(signature)
            tensor = signature.input_spec(examples.INPUT).tensor
            if input_tensor and tensor != input_tensor:
                raise InvalidArgumentError("Input tensor must be the same for all Signatures.")
            input_tensor = tensor
            outputs = {name: signature.output_spec(name).tensor for name in names}
            tasks.append(Task(task.method_name, signature.signature_name, outputs))
        fetches = list(dict.fromkeys(t for task in tasks for t in task.outputs.values()))
        infer = InferRequest(
            entry.name,
            {input_tensor: examples.serialized(*examples_of(message))},
            fetches=fetches,
            version=entry.version,
            signature_name=tasks[0].signature,
        )
        return infer, tasks

    def encode(self, result: InferResult, context: list[Task]) -> inference_pb2.MultiInferenceResponse:
        response = inference_pb2.MultiInferenceResponse()
        for task in context:
            out = response.results.add(model_spec=model_spec(result.model, result.version, task.signature))
            values = {name: result.outputs[tensor] for name, tensor in task.outputs.items()}
            if task.method == examples.CLASSIFY_METHOD:
                classes, scores = values.get("classes"), values.get("scores")
                classification_result(classes, scores, out.classification_result)
            else:
                regression_result(values["outputs"], out.regression_result)
        return response


class ModelServicer:
    def __init__(self, service: InferenceService) -> None:
        self.service = service
        self.GetModelStatus = guarded(self._get_model_status)

    async def _get_model_status(
        self, request: get_model_status_pb2.GetModelStatusRequest, context: Context
    ) -> get_model_status_pb2.GetModelStatusResponse:
        name, version = resolved(self.service, request)
        # the repository's states (LOADING, AVAILABLE, UNLOADING, END) and load errors, as over REST
        statuses = tfserving.model_status(self.service, name, version)["model_version_status"]
        response = get_model_status_pb2.GetModelStatusResponse()
        for st in statuses:
            response.model_version_status.add(
                version=int(st["version"]),
                state=_STATE.Value(st["state"]),
                status=status_pb2.StatusProto(
                    error_code=st["status"]["error_code"],
                    error_message=st["status"]["error_message"],
                ),
            )
        return response


def add_to_server(server: grpc.aio.Server, service: InferenceService) -> None:
    # the generated registration functions are untyped
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(  # type: ignore[no-untyped-call]
        PredictionServicer(service), server
    )
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(  # type: ignore[no-untyped-call]
        ModelServicer(service), server
    )
