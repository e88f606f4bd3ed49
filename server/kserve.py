"""KServe v2 / Open Inference Protocol: the /v2 routes, JSON tensors and the binary tensor data extension.

A binary request body is a JSON header (its length in the ``Inference-Header-Content-Length`` header)
followed by the raw little-endian, row-major bytes of every input whose ``parameters.binary_data_size`` is
set, in the order the inputs appear in the JSON. BYTES elements are a 4-byte little-endian length and the
bytes. Responses use the same layout for the outputs asked for in binary.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response

from poolserve.proto import config_pb2
from poolserve.runtime import dtypes
from poolserve.runtime.errors import (
    InvalidArgumentError,
    NotFoundError,
    OpError,
    UnavailableError,
    UnimplementedError,
)
from poolserve.runtime.signature import TensorSpec
from poolserve.runtime.types import Array
from poolserve.server.models import ModelEntry
from poolserve.server.routes import Route
from poolserve.server.service import InferenceService, InferRequest, request_info

HEADER_LENGTH = "Inference-Header-Content-Length"

# KServe datatype -> numpy dtype (BYTES: object arrays of ``bytes``, as the service holds DT_STRING).
DATATYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(object),
}
_NAMES: dict[np.dtype[Any], str] = {dt: name for name, dt in DATATYPES.items()}

# numpy kinds of parsed JSON data that BOOL and the FP types accept (empty data is accepted for every type).
_JSON_KINDS = {"b": "b", "f": "iuf"}
_KIND_NAMES = {
    "b": "booleans",
    "i": "integers",
    "u": "integers",
    "f": "floating-point numbers",
    "U": "strings",
}
_U32 = struct.Struct("<I")


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


def datatype_of(dtype: np.dtype[Any]) -> str:
    """The KServe datatype of a numpy dtype (``bytes``/``str``/object arrays are BYTES)."""
    if dtype.kind in "SUO":
        return "BYTES"
    name = _NAMES.get(dtype.newbyteorder("=") if dtype.byteorder not in "=|" else dtype)
    if name is None:
        raise UnimplementedError(f"dtype {dtype} has no KServe v2 datatype")
    return name


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


def _json_array(where: str, data: Any, datatype: str, dtype: np.dtype[Any], shape: tuple[int, ...]) -> Array:
    """JSON data (flat or nested, row-major) -> an array of ``shape``, without a Python loop over numbers."""
    count = math.prod(shape)
    if dtype.kind == "O":
        return _json_bytes(where, data, shape, count)
    try:
        parsed = np.asarray(data)
    except ValueError:
        raise InvalidArgumentError(f"{where}: 'data' is not a rectangular nested list") from None
    if parsed.size != count:
        raise InvalidArgumentError(
            f"{where}: shape {list(shape)} needs {count} elements but 'data' holds {parsed.size}"
        )
    if count == 0:
        return np.empty(shape, dtype)
    if dtype.kind in "iu":
        return _json_integers(where, parsed, data, datatype, dtype).reshape(shape)
    if parsed.dtype.kind not in _JSON_KINDS[dtype.kind]:
        wanted = "booleans" if dtype.kind == "b" else "numbers"
        raise InvalidArgumentError(f"{where}: {datatype} data must hold {wanted}, got {_describe(parsed)}")
    with np.errstate(over="ignore"):  # a float64 beyond FP32/FP16's range becomes inf, as a cast does
        return parsed.astype(dtype, copy=False).reshape(shape)


def _json_integers(where: str, parsed: Array, data: Any, datatype: str, dtype: np.dtype[Any]) -> Array:
    exact = None
    if parsed.dtype.kind in "fO":
        # numpy makes floats or objects of ints beyond int64 mixed with other ints: look at the ints
        exact = np.asarray(data, dtype=object).ravel()
        if not all(type(v) is int for v in exact):
            raise InvalidArgumentError(
                f"{where}: {datatype} data must hold integers, got {_describe(parsed)}"
            )
        low, high = min(exact), max(exact)
    elif parsed.dtype.kind in "iu":
        if parsed.dtype == dtype:
            return parsed
        low, high = int(parsed.min()), int(parsed.max())
    else:
        raise InvalidArgumentError(f"{where}: {datatype} data must hold integers, got {_describe(parsed)}")
    info = np.iinfo(dtype)
    if low < info.min or high > info.max:
        raise InvalidArgumentError(
            f"{where}: value {low if low < info.min else high} is out of range for {datatype}"
        )
    return np.array(exact.tolist(), dtype) if exact is not None else parsed.astype(dtype)


def _describe(parsed: Array) -> str:
    return _KIND_NAMES.get(parsed.dtype.kind, "values of mixed or non-numeric types")


def _json_bytes(where: str, data: Any, shape: tuple[int, ...], count: int) -> Array:
    flat: list[Any] = []
    _flatten(data, flat)
    if len(flat) != count:
        raise InvalidArgumentError(
            f"{where}: shape {list(shape)} needs {count} elements but 'data' holds {len(flat)}"
        )
    out = np.empty(count, dtype=object)
    for i, item in enumerate(flat):
        if not isinstance(item, str):
            raise InvalidArgumentError(f"{where}: BYTES data must hold strings, got {item!r}")
        out[i] = item.encode("utf-8")
    return out.reshape(shape)


def _flatten(data: Any, out: list[Any]) -> None:
    if isinstance(data, list):
        for item in data:
            _flatten(item, out)
    else:
        out.append(data)


def _binary_array(where: str, buf: memoryview, dtype: np.dtype[Any], shape: tuple[int, ...]) -> Array:
    """Raw little-endian bytes -> an array of ``shape``; a zero-copy view of the body where possible."""
    count = math.prod(shape)
    if dtype.kind == "O":
        return _binary_bytes(where, buf, shape, count)
    expected = count * dtype.itemsize
    if len(buf) != expected:
        raise InvalidArgumentError(
            f"{where}: binary_data_size is {len(buf)} bytes but shape {list(shape)} of "
            f"{_NAMES[dtype]} needs {expected}"
        )
    if dtype.kind == "b":  # any non-zero byte is true; a bool view of other bytes is not a valid bool
        return np.frombuffer(buf, np.uint8).astype(np.bool_).reshape(shape)
    return np.frombuffer(buf, dtype.newbyteorder("<")).reshape(shape)


def _binary_bytes(where: str, buf: memoryview, shape: tuple[int, ...], count: int) -> Array:
    out = np.empty(count, dtype=object)
    pos, end = 0, len(buf)
    for i in range(count):
        if pos + 4 > end:
            raise InvalidArgumentError(
                f"{where}: binary BYTES data ends after {i} of the {count} elements shape {list(shape)} needs"
            )
        (length,) = _U32.unpack_from(buf, pos)
        pos += 4
        if pos + length > end:
            raise InvalidArgumentError(
                f"{where}: BYTES element {i} claims {length} bytes but only {end - pos} remain"
            )
        out[i] = bytes(buf[pos : pos + length])
        pos += length
    if pos != end:
        raise InvalidArgumentError(
            f"{where}: binary_data_size is {end} bytes but the {count} BYTES elements use {pos}"
        )
    return out.reshape(shape)


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
    body: bytes, header_length: str | None = None, raw: RawInput | None = None
) -> DecodedRequest:
    """Decodes an infer request body (``header_length``: the Inference-Header-Content-Length header).

    A header length of 0 makes the whole body the raw bytes of ``raw``, the model's single input (None
    when the model does not have exactly one input).
    """
    length = _parse_header_length(header_length, len(body))
    if length == 0:
        return _decode_raw(body, raw)
    view = memoryview(body)
    try:
        request = json.loads(body if length is None else bytes(view[:length]))
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(f"the request body is not valid JSON: {e}") from None
    if not isinstance(request, dict):
        raise InvalidArgumentError("the infer request must be a JSON object")

    request_id = request.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise InvalidArgumentError(f"'id' must be a string, got {request_id!r}")
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
            raise UnimplementedError(f"{where}: shared memory is not supported")
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
            inputs[name] = _binary_array(where, view[offset : offset + size], dtype, shape)
            offset += size
        elif "data" in item:
            inputs[name] = _json_array(where, item["data"], item["datatype"], dtype, shape)
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
            raise UnimplementedError(f"{where}: shared memory is not supported")
        outputs.append(RequestedOutput(name, _bool_parameter(where, params, "binary_data")))
    return outputs


def _decode_raw(body: bytes, raw: RawInput | None) -> DecodedRequest:
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
    array = _binary_array(f"input '{raw.name}'", memoryview(body), dtype, shape)
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
    response: dict[str, Any] = {"model_name": model_name, "model_version": model_version}
    if request_id is not None:
        response["id"] = request_id
    if parameters:
        response["parameters"] = parameters
    entries: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    for name, value, binary in outputs:
        array = np.asarray(value)
        datatype = datatype_of(array.dtype)
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary:
            chunk = _to_bytes(name, array, datatype)
            entry["parameters"] = {"binary_data_size": len(chunk)}
            chunks.append(chunk)
        else:
            entry["data"] = _to_json(name, array, datatype)
        entries.append(entry)
    response["outputs"] = entries
    header = json.dumps(response, separators=(",", ":")).encode()
    if not chunks:
        return header, None
    return b"".join([header, *chunks]), len(header)


def _to_bytes(name: str, array: Array, datatype: str) -> bytes:
    if datatype == "BYTES":
        parts: list[bytes] = []
        for item in array.ravel():
            data = _as_bytes(name, item)
            parts.append(_U32.pack(len(data)))
            parts.append(data)
        return b"".join(parts)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return np.ascontiguousarray(array).tobytes()


def _to_json(name: str, array: Array, datatype: str) -> list[Any]:
    if datatype != "BYTES":
        flat: list[Any] = array.ravel().tolist()
        return flat
    out: list[Any] = []
    for item in array.ravel():
        try:
            out.append(_as_bytes(name, item).decode("utf-8"))
        except UnicodeDecodeError:
            raise InvalidArgumentError(
                f"output '{name}' holds bytes that are not UTF-8; ask for it with parameters.binary_data=true"
            ) from None
    return out


def _as_bytes(name: str, item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    raise InvalidArgumentError(f"output '{name}' holds a {type(item).__name__}, not bytes")


# --- the routes -----------------------------------------------------------------------------------------

PLATFORM = "tensorflow_graphdef"
EXTENSIONS = ["binary_tensor_data"]
# JSON texts and JSON outputs from this size on are decoded/encoded off the event loop
_OFFLOAD_BYTES = 256 * 1024


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


def _version(model: str, version: str | None) -> int | None:
    if version is None:
        return None
    try:
        return int(version)
    except ValueError:
        raise NotFoundError(f"Model '{model}' has no version '{version}' (versions are integers)") from None


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
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise InvalidArgumentError(f"parameter 'priority' must be an integer, got {priority!r}")
        options.experimental.run_handler_pool_options.priority = priority
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


async def _infer(service: InferenceService, model: str, version: str | None, request: Request) -> Response:
    entry = service.model(model, _version(model, version))
    body = await request.body()
    header_length = request.headers.get(HEADER_LENGTH)
    length = _parse_header_length(header_length, len(body))
    json_size = len(body) if length is None else length
    raw = _raw_input(entry) if length == 0 else None
    if json_size >= _OFFLOAD_BYTES:  # parsing a big JSON text would hold up the event loop
        decoded = await asyncio.to_thread(decode_request, body, header_length, raw)
    else:
        decoded = decode_request(body, header_length, raw)
    _check_datatypes(entry, decoded)
    params = decoded.parameters
    trace = _bool_parameter("request", params, "trace")
    result = await service.infer(
        InferRequest(
            model=entry.name,
            version=entry.version,
            feeds=decoded.inputs,
            fetches=[o.name for o in decoded.outputs or ()],
            run_options=_run_options(params),
            trace=bool(trace),
            use_run_handler_pool=_bool_parameter("request", params, "use_run_handler_pool"),
            **request_info(request.scope)._asdict(),
        )
    )
    requested = decoded.outputs or [RequestedOutput(s.name) for s in entry.outputs]
    outputs = [(o.name, result.outputs[o.name], decoded.output_binary(o)) for o in requested]
    response_params = {"trace": json.dumps(result.trace)} if result.trace is not None else None
    args = (result.model, str(result.version), outputs, decoded.request_id, response_params)
    if sum(np.asarray(v).nbytes for _, v, binary in outputs if not binary) >= _OFFLOAD_BYTES:
        content, length = await asyncio.to_thread(encode_response, *args)
    else:
        content, length = encode_response(*args)
    if length is None:
        return Response(content, media_type="application/json")
    return Response(content, media_type="application/octet-stream", headers={HEADER_LENGTH: str(length)})


def inference_routes(service: InferenceService) -> list[Route]:
    """The infer routes, as plain Starlette routes (see ``server.app``)."""

    async def latest(request: Request) -> Response:
        return await _infer(service, request.path_params["model"], None, request)

    async def version(request: Request) -> Response:
        return await _infer(service, request.path_params["model"], request.path_params["version"], request)

    return [
        Route("/v2/models/{model}/infer", latest, methods=["POST"]),
        Route("/v2/models/{model}/versions/{version}/infer", version, methods=["POST"]),
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
        if service.ready and not service.draining:
            return Response(status_code=200)
        raise UnavailableError(
            "the server is shutting down" if service.draining else "the server is not ready"
        )

    def model_metadata(model: str, version: str | None) -> dict[str, Any]:
        entry = service.model(model, _version(model, version))
        return {
            "name": entry.name,
            "versions": [str(v) for v in sorted(service.models[entry.name])],
            "platform": PLATFORM,
            "inputs": [_tensor_metadata(s) for s in entry.inputs],
            "outputs": [_tensor_metadata(s) for s in entry.outputs],
        }

    @api.get("/v2/models/{model}")
    async def get_model(model: str) -> dict[str, Any]:
        return model_metadata(model, None)

    @api.get("/v2/models/{model}/versions/{version}")
    async def get_model_version(model: str, version: str) -> dict[str, Any]:
        return model_metadata(model, version)

    def model_ready(model: str, version: str | None) -> Response:
        service.model(model, _version(model, version))
        if not service.ready or service.draining:
            raise UnavailableError(f"Model '{model}' is not ready: the server is not serving")
        return Response(status_code=200)

    @api.get("/v2/models/{model}/ready")
    async def get_model_ready(model: str) -> Response:
        return model_ready(model, None)

    @api.get("/v2/models/{model}/versions/{version}/ready")
    async def get_model_version_ready(model: str, version: str) -> Response:
        return model_ready(model, version)

    return api
