"""KServe v2 over gRPC: ``inference.GRPCInferenceService`` as Triton defines it, so tritonclient.grpc works.

ModelInfer is KServe's HTTP request in protobuf: the same ``DecodedRequest``, checked and turned into the
service's request by ``kserve.infer_request`` (datatypes, parameters ``priority``, ``timeout`` in
microseconds, ``trace``, ``use_run_handler_pool``). Inputs come as ``raw_input_contents`` (one entry per
input, in order: the binary extension's bytes) or as typed ``contents``, never both; outputs always go
back as ``raw_output_contents``, as Triton sends them. The trace a request asks for comes back as the
response parameter ``trace`` (Chrome trace JSON). Raw tensors skip protobuf's copies both ways
(``server.grpc_raw``): an input array is a view of the call's body, an output's memory is joined into the
answer's bytes once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc
import numpy as np
from google.protobuf import json_format

from poolserve.proto import grpc_service_pb2 as pb
from poolserve.proto import grpc_service_pb2_grpc
from poolserve.runtime.errors import InvalidArgumentError, NotFoundError, UnavailableError, UnimplementedError
from poolserve.runtime.types import Array
from poolserve.server import codec, kserve, kserve_config
from poolserve.server.grpc_raw import RawInferRequest, RawInferResponse, parse_request, serialize_response
from poolserve.server.grpc_server import GrpcAdapter, guarded, serve, serve_stream
from poolserve.server.kserve import DecodedRequest, RequestedOutput
from poolserve.server.models import ModelEntry
from poolserve.server.service import InferenceService, InferRequest, InferResult

Context = grpc.aio.ServicerContext[Any, Any]


def parameters(params: Mapping[str, pb.InferParameter]) -> dict[str, Any]:
    """InferParameters as the JSON values KServe's HTTP parameters hold."""
    out: dict[str, Any] = {}
    for key, param in params.items():
        kind = param.WhichOneof("parameter_choice")
        out[key] = getattr(param, kind) if kind else None
    return out


def version(raw: str) -> int | None:
    """A model version field: empty is the latest; otherwise digits (as a path's version over HTTP)."""
    return codec.parse_version(raw or None)


def _contents(where: str, tensor: pb.ModelInferRequest.InferInputTensor, shape: tuple[int, ...]) -> Array:
    dtype = kserve.DATATYPES[tensor.datatype]
    field = codec.KSERVE_CONTENTS.get(tensor.datatype)
    if field is None:
        raise InvalidArgumentError(
            f"{where}: datatype {tensor.datatype} has no typed contents: send it in raw_input_contents"
        )
    for given, _ in tensor.contents.ListFields():
        if given.name != field:
            raise InvalidArgumentError(
                f"{where}: datatype {tensor.datatype} takes its values in contents.{field}, "
                f"not contents.{given.name}"
            )
    return codec.from_values(where, getattr(tensor.contents, field), dtype, shape)


def decode_infer(request: pb.ModelInferRequest | RawInferRequest) -> DecodedRequest:
    """A ModelInferRequest as KServe's decoded request (the errors name the input or field)."""
    if isinstance(request, pb.ModelInferRequest):
        request = RawInferRequest.of(request)
    message, raw = request.message, request.raw
    if not message.inputs:
        raise InvalidArgumentError("'inputs' must be a non-empty list")
    if raw and len(raw) != len(message.inputs):
        raise InvalidArgumentError(
            f"raw_input_contents has {len(raw)} entries but the request has {len(message.inputs)} inputs: "
            "give one per input, in the order of inputs"
        )
    inputs: dict[str, Array] = {}
    datatypes: dict[str, str] = {}
    for i, tensor in enumerate(message.inputs):
        name = tensor.name
        if not name:
            raise InvalidArgumentError(f"inputs[{i}] has no name")
        where = f"input '{name}'"
        if name in inputs:
            raise InvalidArgumentError(f"{where} appears more than once")
        dtype = kserve._check_datatype(where, tensor.datatype)
        shape = tuple(tensor.shape)
        if any(d < 0 for d in shape):
            raise InvalidArgumentError(
                f"{where}: 'shape' must be a list of non-negative integers, got {list(shape)}"
            )
        if "shared_memory_region" in tensor.parameters:
            raise UnimplementedError(f"{where}: {kserve.SHARED_MEMORY}")
        if raw:
            if tensor.HasField("contents"):
                raise InvalidArgumentError(
                    f"{where} has contents but the request carries raw_input_contents: use one or the other"
                )
            inputs[name] = codec.from_binary(where, raw[i], dtype, shape, f"raw_input_contents[{i}]")
        else:
            inputs[name] = _contents(where, tensor, shape)
        datatypes[name] = tensor.datatype
    outputs: list[RequestedOutput] = []
    for i, out in enumerate(message.outputs):
        if not out.name:
            raise InvalidArgumentError(f"outputs[{i}] has no name")
        where = f"output '{out.name}'"
        if any(o.name == out.name for o in outputs):
            raise InvalidArgumentError(f"{where} is requested more than once")
        if "shared_memory_region" in out.parameters:
            raise UnimplementedError(f"{where}: {kserve.SHARED_MEMORY}")
        if "classification" in out.parameters:
            raise UnimplementedError(f"{where}: the classification extension is not supported")
        outputs.append(RequestedOutput(out.name, True))
    return DecodedRequest(
        inputs=inputs,
        datatypes=datatypes,
        outputs=outputs or None,
        parameters=parameters(message.parameters),
        request_id=message.id or None,
        binary_output=True,
    )


def encode_infer(result: InferResult, decoded: DecodedRequest) -> RawInferResponse:
    """The answer; its ``raw`` outputs are the result's arrays themselves where their memory already is
    the raw bytes (``serialize`` copies them once, into the answer's bytes)."""
    response = RawInferResponse(
        pb.ModelInferResponse(
            model_name=result.model, model_version=str(result.version), id=decoded.request_id or ""
        )
    )
    for requested in decoded.outputs or ():
        value = np.asarray(result.outputs[requested.name])
        outputs = response.message.outputs
        outputs.add(name=requested.name, datatype=kserve.datatype_of(value.dtype), shape=value.shape)
        response.raw.append(codec.binary_data(f"output '{requested.name}'", value))
    if result.trace is not None:
        response.message.parameters["trace"].string_param = codec.dumps(result.trace).decode()
    return response


class ModelInferAdapter(GrpcAdapter[RawInferRequest, DecodedRequest, RawInferResponse]):
    endpoint = "/inference.GRPCInferenceService/ModelInfer"

    def model(self, request: RawInferRequest) -> tuple[str, int | None]:
        return request.message.model_name, version(request.message.model_version)

    def decode_size(self, request: RawInferRequest) -> int:
        if request.raw:  # no parsing, but for BYTES elements, read one by one in Python
            if sum(map(len, request.raw)) < codec.OFFLOAD_BYTES:
                return 0  # too few bytes to leave the loop for, whatever they are
            pairs = zip(request.message.inputs, request.raw, strict=False)  # decode names a mismatch
            return sum(len(r) for t, r in pairs if t.datatype == "BYTES")
        contents = codec.KSERVE_CONTENTS
        fields = (
            getattr(t.contents, contents.get(t.datatype, "bytes_contents")) for t in request.message.inputs
        )
        return sum(8 * len(values) for values in fields)

    def decode(self, request: RawInferRequest, entry: ModelEntry) -> tuple[InferRequest, DecodedRequest]:
        decoded = decode_infer(request)
        return kserve.infer_request(entry, decoded), decoded

    def encode(self, result: InferResult, context: DecodedRequest) -> RawInferResponse:
        return encode_infer(result, context)


class ModelStreamInferAdapter(ModelInferAdapter):
    endpoint = "/inference.GRPCInferenceService/ModelStreamInfer"


FINAL_RESPONSE = "triton_final_response"
ENABLE_FINAL_RESPONSE = "triton_enable_empty_final_response"


def stream_answer(
    request: RawInferRequest, answer: RawInferResponse | None, error: str
) -> pb.ModelStreamInferResponse:
    """A stream's answer to one request: its response, or its error with the request's id and model (so a
    client can tell which request failed). A request asking for Triton's final-response flag gets it on
    its one response (a poolserve model answers each request once)."""
    message = request.message
    if answer is None:
        response = pb.ModelInferResponse(
            model_name=message.model_name, model_version=message.model_version, id=message.id
        )
    else:
        response = answer.full()
    if ENABLE_FINAL_RESPONSE in message.parameters:
        response.parameters[FINAL_RESPONSE].bool_param = True
    return pb.ModelStreamInferResponse(error_message=error, infer_response=response)


class KServeServicer:
    """The GRPCInferenceService calls over ``service`` (method names as the service declares them)."""

    def __init__(self, service: InferenceService) -> None:
        self.service = service
        self.infer = ModelInferAdapter()
        self.stream_infer = ModelStreamInferAdapter()
        self.ServerLive = guarded(self._server_live)
        self.ServerReady = guarded(self._server_ready)
        self.ModelReady = guarded(self._model_ready)
        self.ServerMetadata = guarded(self._server_metadata)
        self.ModelMetadata = guarded(self._model_metadata)
        self.ModelConfig = guarded(self._model_config)
        self.ModelStatistics = guarded(self._model_statistics)
        self.RepositoryIndex = guarded(self._repository_index)
        self.RepositoryModelLoad = guarded(self._repository_load)
        self.RepositoryModelUnload = guarded(self._repository_unload)

    async def ModelInfer(self, request: RawInferRequest, context: Context) -> RawInferResponse:
        return await serve(self.infer, self.service, request, context)

    async def ModelStreamInfer(
        self, requests: AsyncIterator[RawInferRequest], context: Context
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        # an async generator function: grpc.aio tells a streaming handler by that
        answers = serve_stream(self.stream_infer, self.service, requests, context, stream_answer)
        async with contextlib.aclosing(answers):
            async for answer in answers:
                yield answer

    @property
    def _serving(self) -> bool:
        return self.service.ready and not self.service.draining

    async def _server_live(self, request: pb.ServerLiveRequest, context: Context) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def _server_ready(self, request: pb.ServerReadyRequest, context: Context) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=not self.service.not_ready())

    async def _model_ready(self, request: pb.ModelReadyRequest, context: Context) -> pb.ModelReadyResponse:
        # a model (or version) the server does not have is not ready, as Triton answers
        try:
            self.service.model(request.name, version(request.version))
        except (NotFoundError, UnavailableError):  # unknown, or known and not loaded
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=self._serving)

    async def _server_metadata(
        self, request: pb.ServerMetadataRequest, context: Context
    ) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(
            name="poolserve", version=kserve._server_version(), extensions=kserve.EXTENSIONS
        )

    async def _model_metadata(
        self, request: pb.ModelMetadataRequest, context: Context
    ) -> pb.ModelMetadataResponse:
        entry = self.service.model(request.name, version(request.version))
        Tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=entry.name,
            versions=[str(v) for v in sorted(self.service.models[entry.name])],
            platform=kserve.platform(entry),
            inputs=[Tensor(**kserve._tensor_metadata(s)) for s in entry.inputs],
            outputs=[Tensor(**kserve._tensor_metadata(s)) for s in entry.outputs],
        )

    async def _model_config(self, request: pb.ModelConfigRequest, context: Context) -> pb.ModelConfigResponse:
        return pb.ModelConfigResponse(
            config=kserve_config.model_config(self.service, request.name, version(request.version))
        )

    async def _model_statistics(
        self, request: pb.ModelStatisticsRequest, context: Context
    ) -> pb.ModelStatisticsResponse:
        report = kserve.statistics_report(self.service, request.name, request.version)
        return json_format.ParseDict(report, pb.ModelStatisticsResponse())

    async def _repository_index(
        self, request: pb.RepositoryIndexRequest, context: Context
    ) -> pb.RepositoryIndexResponse:
        _admin(self.service, context)
        rows = self.service.repository.index(request.ready)
        Index = pb.RepositoryIndexResponse.ModelIndex
        fields = ("name", "version", "state", "reason")  # the index's labels are HTTP's only
        return pb.RepositoryIndexResponse(models=[Index(**{k: r[k] for k in fields if k in r}) for r in rows])

    async def _repository_load(
        self, request: pb.RepositoryModelLoadRequest, context: Context
    ) -> pb.RepositoryModelLoadResponse:
        _admin(self.service, context)
        _no_parameters(request.parameters)
        # loading computes; with workers, every worker's or an error saying which did not apply it
        await asyncio.to_thread(self.service.repository.load, request.model_name)
        return pb.RepositoryModelLoadResponse()

    async def _repository_unload(
        self, request: pb.RepositoryModelUnloadRequest, context: Context
    ) -> pb.RepositoryModelUnloadResponse:
        _admin(self.service, context)
        _no_parameters(request.parameters)
        await asyncio.to_thread(self.service.repository.unload, request.model_name)
        return pb.RepositoryModelUnloadResponse()


def _admin(service: InferenceService, context: Context) -> None:
    """The repository calls need the admin token, as over HTTP: ``authorization: Bearer <token>``."""
    metadata = {k.lower(): v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
    service.check_admin(metadata)


def _no_parameters(parameters: Any) -> None:
    unsupported = sorted(k for k in parameters if k == "config" or k.startswith("file:"))
    if unsupported:
        raise UnimplementedError(
            f"load parameters {unsupported} are not supported: change the model in the config file"
        )


# Triton's calls poolserve does not serve over gRPC (not declared in proto/grpc_service.proto):
# UNIMPLEMENTED saying why, where grpc alone would answer "Method not found!"
UNSUPPORTED = {
    **{
        f"{kind}SharedMemory{call}": kserve.SHARED_MEMORY
        for kind in ("System", "Cuda")
        for call in ("Status", "Register", "Unregister")
    },
    "TraceSetting": kserve.TRACE_SETTINGS,
    "LogSettings": kserve.LOG_SETTINGS,
}


def _unsupported(message: str) -> grpc.RpcMethodHandler[bytes, bytes]:
    """A call answered UNIMPLEMENTED with ``message``; its request is not read (no deserializer)."""

    async def answer(request: bytes, context: Context) -> bytes:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, message)
        raise AssertionError("abort raises")

    return grpc.unary_unary_rpc_method_handler(answer)


class _Handlers:
    """Stands in for the server to take the method handlers the generated code registers."""

    def __init__(self) -> None:
        self.name = ""
        self.handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass

    def add_registered_method_handlers(
        self, name: str, handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        self.name, self.handlers = name, handlers


def add_to_server(server: grpc.aio.Server, service: InferenceService) -> None:
    """The generated service's handlers, with the inference calls' messages read and written by
    ``server.grpc_raw`` instead of protobuf."""
    servicer = KServeServicer(service)
    taken = _Handlers()
    grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, taken)  # type: ignore[no-untyped-call]
    handlers = dict(taken.handlers)
    handlers["ModelInfer"] = grpc.unary_unary_rpc_method_handler(
        servicer.ModelInfer, request_deserializer=parse_request, response_serializer=serialize_response
    )
    handlers["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(
        servicer.ModelStreamInfer,
        request_deserializer=parse_request,
        response_serializer=pb.ModelStreamInferResponse.SerializeToString,
    )
    for method, message in UNSUPPORTED.items():
        handlers[method] = _unsupported(message)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(taken.name, handlers),))
    server.add_registered_method_handlers(taken.name, handlers)
