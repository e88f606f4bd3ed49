"""KServe v2 / Open Inference Protocol: the /v2 routes, JSON tensors and the binary tensor data extension.

A binary request body is a JSON header (its length in the ``Inference-Header-Content-Length`` header)
followed by the raw little-endian, row-major bytes of every input whose ``parameters.binary_data_size`` is
set, in the order the inputs appear in the JSON. BYTES elements are a 4-byte little-endian length and the
bytes. Responses use the same layout for the outputs asked for in binary.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response

from poolserve.proto import config_pb2
from poolserve.runtime import dtypes
from poolserve.runtime.deadline import KSERVE_TIMEOUT
from poolserve.runtime.errors import (
    InvalidArgumentError,
    OpError,
    UnavailableError,
    UnimplementedError,
)
from poolserve.runtime.signature import TensorSpec
from poolserve.runtime.types import Array
from poolserve.server import codec
from poolserve.server.adapter import Adapter, Encoded, route
from poolserve.server.models import ModelEntry
from poolserve.server.protocol import header
from poolserve.server.routes import Route
from poolserve.server.service import InferenceService, InferRequest, InferResult

HEADER_LENGTH = "Inference-Header-Content-Length"
HEADER_KEY = HEADER_LENGTH.lower().encode("latin-1")

# what Triton's shared-memory and trace/log-settings calls get (501 over HTTP, UNIMPLEMENTED over gRPC)
SHARED_MEMORY = (
    "shared memory is not supported by poolserve (system or CUDA): send the tensors in the request, as JSON "
    "data or binary tensor data over HTTP, in raw_input_contents over gRPC"
)
TRACE_SETTINGS = (
    "poolserve does not support Triton's trace settings: a request asks for its own trace (the request "
    "parameter trace=true, sent back in the answer's parameters), [traces] sample_rate in the config traces "
    "a share of all requests, and GET /v1/traces/{request id} over HTTP gives any recorded trace (a gRPC "
    "call's id is its x-request-id metadata)"
)
LOG_SETTINGS = (
    "poolserve does not support Triton's log settings: its log level is set at start (poolserve serve "
    "--log-level, --access-log)"
)

# KServe datatype -> numpy dtype (the codec's table)
DATATYPES = codec.KSERVE_DATATYPES
datatype_of = codec.kserve_datatype


@dataclass
class RequestedOutput:
    name: str
    binary: bool | None = None  # None: the request's binary_data_output decides


@dataclass
class DecodedRequest:
    """An infer request body, decoded: the inputs as numpy arrays keyed by their (public) names."""

    inputs: dict[str, Array]
    datatypes: dict[str, str]
    outputs: list[RequestedOutput] | None  # None: every model output
    parameters: dict[str, Any] = field(default_factory=dict)
    request_id: str | None = None
    binary_output: bool = False

    def output_binary(self, output: RequestedOutput | None) -> bool:
        if output is None or output.binary is None:
            return self.binary_output
        return output.binary


@dataclass
class RawInput:
    """What a raw single-input request (header length 0) is taken to be: the model's only input."""

    name: str
    datatype: str
    shape: tuple[int, ...]


def _check_shape(where: str, shape: Any) -> tuple[int, ...]:
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise InvalidArgumentError(f"{where}: 'shape' must be a list of non-negative integers, got {shape!r}")
    return tuple(shape)


def _check_datatype(where: str, datatype: Any) -> np.dtype[Any]:
    dtype = DATATYPES.get(datatype) if isinstance(datatype, str) else None
    if dtype is None:
        raise InvalidArgumentError(
            f"{where}: unknown datatype {datatype!r}; expected one of {', '.join(DATATYPES)}"
        )
    return dtype


def _parse_header_length(value: str | None, body_size: int) -> int | None:
    if value is None:
        return None
    try:
        length = int(value)
    except ValueError:
        raise InvalidArgumentError(f"{HEADER_LENGTH} must be an integer, got {value!r}") from None
    if not 0 <= length <= body_size:
        raise InvalidArgumentError(f"{HEADER_LENGTH} is {length} but the body has {body_size} bytes")
    return length


def _object(where: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"{where} must be a JSON object, got {type(value).__name__}")
    return value


def _bool_parameter(where: str, params: dict[str, Any], key: str) -> bool | None:
    value = params.get(key)
    if value is None or isinstance(value, bool):
        return value
    raise InvalidArgumentError(f"{where}: parameter '{key}' must be a boolean, got {value!r}")


def decode_request(
    body: bytes | memoryview, header_length: str | None = None, raw: RawInput | None = None
) -> DecodedRequest:
    """Decodes an infer request body (``header_length``: the Inference-Header-Content-Length header).

    A header length of 0 makes the whole body the raw bytes of ``raw``, the model's single input (None
    when the model does not have exactly one input).
    """
    length = _parse_header_length(header_length, len(body))
    if length == 0:
        return _decode_raw(body, raw)
    view = memoryview(body)
    request = codec.loads_tensors(body if length is None else view[:length])
    if not isinstance(request, dict):
        raise InvalidArgumentError("the infer request must be a JSON object")

    request_id = request.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise InvalidArgumentError(f"'id' must be a string, got {request_id!r}")
    if request_id is not None and not request_id.isascii():  # isascii is O(1): the answer echoes it
        try:
            request_id.encode("utf-8")
        except UnicodeEncodeError:  # JSON's "\ud800": the answer could not be written
            raise InvalidArgumentError(
                f"'id' holds a lone surrogate, which is not text: {request_id!a}"
            ) from None
    params = _object("'parameters'", request.get("parameters"))
    binary_output = _bool_parameter("request", params, "binary_data_output")

    raw_inputs = request.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise InvalidArgumentError("'inputs' must be a non-empty list")
    inputs: dict[str, Array] = {}
    datatypes: dict[str, str] = {}
    offset = length if length is not None else len(body)
    for i, item in enumerate(raw_inputs):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise InvalidArgumentError(f"inputs[{i}] must be an object with a string 'name'")
        name = item["name"]
        where = f"input '{name}'"
        if name in inputs:
            raise InvalidArgumentError(f"{where} appears more than once")
        shape = _check_shape(where, item.get("shape"))
        dtype = _check_datatype(where, item.get("datatype"))
        in_params = _object(f"{where}: 'parameters'", item.get("parameters"))
        if "shared_memory_region" in in_params:
            raise UnimplementedError(f"{where}: {SHARED_MEMORY}")
        size = in_params.get("binary_data_size")
        if size is not None:
            if length is None:
                raise InvalidArgumentError(
                    f"{where} has binary_data_size but the request has no {HEADER_LENGTH} header"
                )
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise InvalidArgumentError(
                    f"{where}: binary_data_size must be a non-negative integer, got {size!r}"
                )
            if "data" in item:
                raise InvalidArgumentError(f"{where} has both 'data' and binary_data_size")
            if offset + size > len(body):
                raise InvalidArgumentError(
                    f"{where}: binary_data_size {size} goes past the end of the body "
                    f"({len(body) - offset} bytes of binary data remain)"
                )
            inputs[name] = codec.from_binary(where, view[offset : offset + size], dtype, shape)
            offset += size
        elif "data" in item:
            inputs[name] = codec.from_json(where, item["data"], dtype, shape)
        else:
            raise InvalidArgumentError(f"{where} has neither 'data' nor parameters.binary_data_size")
        datatypes[name] = item["datatype"]
    if offset != len(body):
        raise InvalidArgumentError(
            f"the body has {len(body) - offset} bytes of binary data that no input's binary_data_size claims"
        )
    return DecodedRequest(
        inputs=inputs,
        datatypes=datatypes,
        outputs=_decode_outputs(request.get("outputs")),
        parameters=params,
        request_id=request_id,
        binary_output=bool(binary_output),
    )


def _decode_outputs(raw_outputs: Any) -> list[RequestedOutput] | None:
    if raw_outputs is None:
        return None
    if not isinstance(raw_outputs, list):
        raise InvalidArgumentError("'outputs' must be a list")
    outputs: list[RequestedOutput] = []
    seen: set[str] = set()
    for i, item in enumerate(raw_outputs):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise InvalidArgumentError(f"outputs[{i}] must be an object with a string 'name'")
        name = item["name"]
        where = f"output '{name}'"
        if name in seen:
            raise InvalidArgumentError(f"{where} is requested more than once")
        seen.add(name)
        params = _object(f"{where}: 'parameters'", item.get("parameters"))
        if params.get("classification"):
            raise UnimplementedError(f"{where}: the classification extension is not supported")
        if "shared_memory_region" in params:
            raise UnimplementedError(f"{where}: {SHARED_MEMORY}")
        outputs.append(RequestedOutput(name, _bool_parameter(where, params, "binary_data")))
    return outputs


def _decode_raw(body: bytes | memoryview, raw: RawInput | None) -> DecodedRequest:
    if raw is None:
        raise InvalidArgumentError(
            f"{HEADER_LENGTH} 0 (a raw binary request) needs a model with exactly one input"
        )
    dtype, shape = DATATYPES[raw.datatype], raw.shape
    if -1 in shape:  # one variable dimension follows from the body's size
        known = math.prod([d for d in shape if d != -1]) * dtype.itemsize
        if dtype.kind == "O" or shape.count(-1) > 1 or known == 0 or len(body) % known:
            raise InvalidArgumentError(
                f"a raw request for input '{raw.name}' of shape {list(shape)} ({raw.datatype}) "
                f"cannot be {len(body)} bytes"
            )
        shape = tuple(len(body) // known if d == -1 else d for d in shape)
    array = codec.from_binary(f"input '{raw.name}'", memoryview(body), dtype, shape)
    return DecodedRequest(
        inputs={raw.name: array}, datatypes={raw.name: raw.datatype}, outputs=None, binary_output=True
    )


def encode_response(
    model_name: str,
    model_version: str,
    outputs: Sequence[tuple[str, Array, bool]],
    request_id: str | None = None,
    parameters: dict[str, Any] | None = None,
) -> tuple[bytes, int | None]:
    """Encodes ``outputs`` ((name, array, binary) triples) as a response body.

    Returns the body and the JSON header's length, or None when no output is binary (the body is JSON).
    """
    header, chunks = response_parts(model_name, model_version, outputs, request_id, parameters)
    if not chunks:
        return header, None
    return b"".join([header, *chunks]), len(header)


def response_parts(
    model_name: str,
    model_version: str,
    outputs: Sequence[tuple[str, Array, bool]],
    request_id: str | None = None,
    parameters: dict[str, Any] | None = None,
) -> tuple[bytes, list[bytes | memoryview]]:
    """``encode_response``'s body as the parts it is joined from: the JSON header (the whole body when no
    output is binary) and each binary output's bytes, a view of its array's memory where it is
    little-endian and contiguous (no copy: the server sends the parts one after another)."""
    response: dict[str, Any] = {"model_name": model_name, "model_version": model_version}
    if request_id is not None:
        response["id"] = request_id
    if parameters:
        response["parameters"] = parameters
    entries: list[dict[str, Any]] = []
    chunks: list[bytes | memoryview] = []
    for name, value, binary in outputs:
        array = np.asarray(value)
        entry: dict[str, Any] = {
            "name": name,
            "datatype": datatype_of(array.dtype),
            "shape": list(array.shape),
        }
        where = f"output '{name}'"
        if binary:
            data = codec.binary_data(where, array)
            chunk = data if isinstance(data, bytes) else data.reshape(-1).view(np.uint8).data
            entry["parameters"] = {"binary_data_size": len(chunk)}
            chunks.append(chunk)
        else:
            try:
                entry["data"] = codec.to_json(where, array, flat=True, strings="text")
            except InvalidArgumentError as e:
                if "not UTF-8" not in e.message:
                    raise
                raise InvalidArgumentError(
                    f"{e.message}; ask for it with parameters.binary_data=true"
                ) from None
        entries.append(entry)
    response["outputs"] = entries
    return codec.dumps(response), chunks


# --- the routes -----------------------------------------------------------------------------------------

GRAPH_DEF = "tensorflow_graphdef"
SAVED_MODEL = "tensorflow_savedmodel"
# what Triton lists for the same features: the binary tensor extension, the repository calls, the model
# configuration, request parameters, the schedule policy (the request parameters priority and timeout),
# and the statistics (over HTTP; gRPC's ModelStatistics is not in our proto: see kserve_grpc.UNSUPPORTED)
EXTENSIONS = [
    "binary_tensor_data",
    "model_repository",
    "model_configuration",
    "parameters",
    "schedule_policy",
    "statistics",
]


def statistics_report(service: InferenceService, model: str | None, version: str | None) -> dict[str, Any]:
    """Triton's statistics (its JSON) of every model (``model`` None), every version of one (``version``
    None or empty) or one version: HTTP's /stats routes and gRPC's ModelStatistics answer it."""
    if not model:
        entries = service.list_models()
    else:
        number = codec.parse_version(version or None)
        entry = service.model(model, number)  # NotFoundError, or UnavailableError when unloaded
        versions = service.models[entry.name]
        entries = [entry] if number is not None else [versions[v] for v in sorted(versions)]
    return service.statistics.report((e.name, e.version, e.stats) for e in entries)


def platform(entry: ModelEntry) -> str:
    """Triton's platform name for a served model: a SavedModel's (its signatures have methods) or a
    GraphDef's."""
    return SAVED_MODEL if entry.methods else GRAPH_DEF


def _server_version() -> str:
    try:
        return importlib.metadata.version("poolserve")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def kserve_datatype(dtype: int) -> str:
    """The KServe datatype of a TensorFlow DataType ("INVALID" when it has none or is unknown)."""
    try:
        return datatype_of(dtypes.as_numpy_dtype(dtype)) if dtype else "INVALID"
    except OpError:
        return "INVALID"


def _tensor_metadata(spec: TensorSpec) -> dict[str, Any]:
    # an unknown rank cannot be written as a KServe shape: [-1] is the closest (any 1-d length)
    shape = list(spec.shape) if spec.shape is not None else [-1]
    return {"name": spec.name, "datatype": kserve_datatype(spec.dtype), "shape": shape}


def _raw_input(entry: ModelEntry) -> RawInput | None:
    if len(entry.inputs) != 1:
        return None
    spec = entry.inputs[0]
    datatype = kserve_datatype(spec.dtype)
    if datatype == "INVALID" or spec.shape is None:
        raise InvalidArgumentError(
            f"a raw request needs the datatype and rank of input '{spec.name}', which model "
            f"'{entry.name}' does not declare"
        )
    return RawInput(spec.name, datatype, spec.shape)


# Priority levels past this one are all the lowest (Triton's are uint64; the pool's int64)
_LOWEST_LEVEL = 1 << 31


def pool_priority(level: int) -> int:
    """The pool's priority (larger first, TensorFlow's ``RunHandlerPoolOptions.priority``) for a KServe
    request's ``priority`` parameter (Triton's schedule policy: 1 is the highest level, then 2, 3, ...;
    0 is the model's default level). The default level is 2, as in a Triton model configured with
    ``default_priority_level: 2``: 1 goes ahead of requests that set no priority, 3 and on after them."""
    if level == 0:
        return 0
    return 2 - min(level, _LOWEST_LEVEL)


def _run_options(params: dict[str, Any]) -> config_pb2.RunOptions | None:
    options = config_pb2.RunOptions()
    timeout = params.get("timeout")
    if timeout is not None:
        if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 0:
            raise InvalidArgumentError(
                f"parameter 'timeout' must be a non-negative integer (microseconds), got {timeout!r}"
            )
        # 0 leaves the server's default; any positive timeout is at least 1 ms (0 ms would mean none)
        options.timeout_in_ms = math.ceil(timeout / 1000)
    priority = params.get("priority")
    if priority is not None:
        if not isinstance(priority, int) or isinstance(priority, bool) or priority < 0:
            raise InvalidArgumentError(
                f"parameter 'priority' must be a non-negative integer (1 is the highest), got {priority!r}"
            )
        options.experimental.run_handler_pool_options.priority = pool_priority(priority)
    if params.get("sequence_id"):
        raise UnimplementedError("sequence batching (parameter 'sequence_id') is not supported")
    return options if options.ByteSize() else None


def _check_datatypes(entry: ModelEntry, decoded: DecodedRequest) -> None:
    for name, datatype in decoded.datatypes.items():
        expected = kserve_datatype(entry.input_spec(name).dtype)
        if expected != "INVALID" and datatype != expected:
            raise InvalidArgumentError(
                f"input '{name}' has datatype {datatype} but model '{entry.name}' expects {expected}"
            )


def infer_request(entry: ModelEntry, decoded: DecodedRequest) -> InferRequest:
    """The service's request for a decoded KServe request (HTTP or gRPC): datatypes checked against the
    model's, the request parameters read (priority, timeout, trace, use_run_handler_pool). Fills
    ``decoded.outputs`` with every model output when the request names none."""
    _check_datatypes(entry, decoded)
    params = decoded.parameters
    infer = InferRequest(
        model=entry.name,
        version=entry.version,
        feeds=decoded.inputs,
        fetches=[o.name for o in decoded.outputs or ()],
        run_options=_run_options(params),
        trace=bool(_bool_parameter("request", params, "trace")),
        use_run_handler_pool=_bool_parameter("request", params, "use_run_handler_pool"),
    )
    if infer.run_options is not None and infer.run_options.timeout_in_ms > 0:
        infer.timeout_source = KSERVE_TIMEOUT
    if not decoded.outputs:  # every model output
        decoded.outputs = [RequestedOutput(s.name) for s in entry.outputs]
    return infer


class KServeAdapter(Adapter[DecodedRequest]):
    """JSON, or a JSON header and binary tensors; the answer likewise, for the outputs asked in binary."""

    def decode_size(self, request: Request, body: bytes | memoryview) -> int:
        length = _parse_header_length(header(request.scope, HEADER_KEY), len(body))
        if length is None:
            return len(body)
        # binary tensors cost no parsing, but BYTES elements are read one by one in Python (a million
        # took 0.6-0.9 s): a header naming BYTES sizes the whole body
        head = body if isinstance(body, bytes) else bytes(body[:length])  # a view has no find()
        return len(body) if head.find(b'"BYTES"', 0, length) >= 0 else length

    def decode(
        self, request: Request, body: bytes | memoryview, entry: ModelEntry
    ) -> tuple[InferRequest, DecodedRequest]:
        header_length = header(request.scope, HEADER_KEY)
        raw = _raw_input(entry) if _parse_header_length(header_length, len(body)) == 0 else None
        decoded = decode_request(body, header_length, raw)
        return infer_request(entry, decoded), decoded

    def _outputs(self, result: InferResult, decoded: DecodedRequest) -> list[tuple[str, Array, bool]]:
        return [(o.name, result.outputs[o.name], decoded.output_binary(o)) for o in decoded.outputs or ()]

    def encode_size(self, result: InferResult, context: DecodedRequest) -> int:
        return sum(np.asarray(v).nbytes for _, v, binary in self._outputs(result, context) if not binary)

    def encode(self, request: Request, result: InferResult, context: DecodedRequest) -> Encoded:
        params = {"trace": codec.dumps(result.trace).decode()} if result.trace is not None else None
        outputs = self._outputs(result, context)
        header, chunks = response_parts(
            result.model, str(result.version), outputs, context.request_id, params
        )
        if not chunks:
            return Encoded(header)
        return Encoded([header, *chunks], "application/octet-stream", {HEADER_LENGTH: str(len(header))})


def inference_routes(service: InferenceService) -> list[Route]:
    """The infer routes, as plain Starlette routes (see ``server.app``)."""
    adapter = KServeAdapter()
    return [
        route("/v2/models/{model}/infer", adapter, service),
        route("/v2/models/{model}/versions/{version}/infer", adapter, service),
    ]


def router(service: InferenceService) -> APIRouter:
    """The KServe v2 routes over ``service``. Errors are raised as OpErrors for the app's handlers."""
    api = APIRouter(tags=["kserve-v2"])
    server_metadata = {"name": "poolserve", "version": _server_version(), "extensions": EXTENSIONS}

    @api.get("/v2")
    async def metadata() -> dict[str, Any]:
        return server_metadata

    @api.get("/v2/health/live")
    async def live() -> Response:
        return Response(status_code=200)

    @api.get("/v2/health/ready")
    async def ready() -> Response:
        reason = service.not_ready()
        if not reason:
            return Response(status_code=200)
        raise UnavailableError(reason)

    # --- the statistics extension (server/statistics.py); /v2/models/stats before the routes of a model
    # named "stats", as in Triton ---

    def statistics(model: str | None, version: str | None) -> Response:
        report = statistics_report(service, model, version)
        return Response(codec.dumps(report), media_type="application/json")

    @api.get("/v2/models/stats")
    async def all_statistics() -> Response:
        return statistics(None, None)

    @api.get("/v2/models/{model}/stats")
    async def model_statistics(model: str) -> Response:
        return statistics(model, None)

    @api.get("/v2/models/{model}/versions/{version}/stats")
    async def model_version_statistics(model: str, version: str) -> Response:
        return statistics(model, version)

    def model_metadata(model: str, version: str | None) -> dict[str, Any]:
        entry = service.model(model, codec.parse_version(version))
        return {
            "name": entry.name,
            "versions": [str(v) for v in sorted(service.models[entry.name])],
            "platform": platform(entry),
            "inputs": [_tensor_metadata(s) for s in entry.inputs],
            "outputs": [_tensor_metadata(s) for s in entry.outputs],
        }

    @api.get("/v2/models/{model}")
    async def get_model(model: str) -> dict[str, Any]:
        return model_metadata(model, None)

    @api.get("/v2/models/{model}/versions/{version}")
    async def get_model_version(model: str, version: str) -> dict[str, Any]:
        return model_metadata(model, version)

    from poolserve.server import kserve_config  # Triton's model configuration; it builds on this module

    @api.get("/v2/models/{model}/config")
    async def get_model_config(model: str) -> dict[str, Any]:
        return kserve_config.to_json(kserve_config.model_config(service, model, None))

    @api.get("/v2/models/{model}/versions/{version}/config")
    async def get_model_version_config(model: str, version: str) -> dict[str, Any]:
        return kserve_config.to_json(kserve_config.model_config(service, model, codec.parse_version(version)))

    def model_ready(model: str, version: str | None) -> Response:
        service.model(model, codec.parse_version(version))
        if not service.ready or service.draining:
            raise UnavailableError(f"Model '{model}' is not ready: the server is not serving")
        return Response(status_code=200)

    # --- the model repository extension (Triton's): index, load, unload; the admin token guards them ---

    async def _body(request: Request) -> dict[str, Any]:
        raw = await request.body()
        body = _object("the request body", codec.loads(raw, codec.SETTINGS_DEPTH)) if raw.strip() else {}
        params = _object("'parameters'", body.get("parameters"))
        unsupported = sorted(k for k in params if k == "config" or k.startswith("file:"))
        if unsupported:
            raise UnimplementedError(
                f"load parameters {unsupported} are not supported: change the model in the config file"
            )
        return body

    @api.post("/v2/repository/index")
    async def repository_index(request: Request) -> Response:
        service.check_admin(request.headers)
        ready = (await _body(request)).get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidArgumentError(f"'ready' must be a boolean, got {ready!r}")
        return Response(codec.dumps(service.repository.index(ready)), media_type="application/json")

    @api.post("/v2/repository/models/{model}/load")
    async def repository_load(model: str, request: Request) -> Response:
        service.check_admin(request.headers)
        await _body(request)
        # loading computes: off the event loop. A worker of several answers what every worker made of it
        report = await asyncio.to_thread(service.repository.load, model)
        return _repository_answer(report)

    @api.post("/v2/repository/models/{model}/unload")
    async def repository_unload(model: str, request: Request) -> Response:
        service.check_admin(request.headers)
        await _body(request)
        report = await asyncio.to_thread(service.repository.unload, model)
        return _repository_answer(report)

    @api.get("/v2/models/{model}/ready")
    async def get_model_ready(model: str) -> Response:
        return model_ready(model, None)

    @api.get("/v2/models/{model}/versions/{version}/ready")
    async def get_model_version_ready(model: str, version: str) -> Response:
        return model_ready(model, version)

    unsupported_routes(api)
    return api


def _repository_answer(report: dict[str, Any] | None) -> Response:
    """A load or unload call's 200: empty, as Triton's; with workers, which ones applied it."""
    if report is None:
        return Response(status_code=200)
    return Response(codec.dumps(report), media_type="application/json")


# Triton's calls poolserve does not serve, each answered 501 saying why and what to do instead (a bare 404
# read as a missing model or a wrong address)
UNSUPPORTED: dict[str, tuple[list[str], str]] = {
    **{
        f"/v2/{kind}{path}": (methods, SHARED_MEMORY)
        for kind in ("systemsharedmemory", "cudasharedmemory")
        for path, methods in (
            ("/status", ["GET"]),
            ("/region/{region}/status", ["GET"]),
            ("/region/{region}/register", ["POST"]),
            ("/region/{region}/unregister", ["POST"]),
            ("/unregister", ["POST"]),
        )
    },
    "/v2/trace/setting": (["GET", "POST"], TRACE_SETTINGS),
    "/v2/models/{model}/trace/setting": (["GET", "POST"], TRACE_SETTINGS),
    "/v2/logging": (["GET", "POST"], LOG_SETTINGS),
}


def unsupported_routes(api: APIRouter) -> None:
    for path, (methods, message) in UNSUPPORTED.items():
        for method in methods:  # a route each: each its own operation in the OpenAPI document
            api.add_api_route(
                path,
                _unsupported(message),
                methods=[method],
                summary="Triton's, not supported by poolserve: answers 501 saying why",
            )


def _unsupported(message: str) -> Callable[[], Awaitable[Response]]:
    async def unsupported() -> Response:
        raise UnimplementedError(message)

    return unsupported
