"""TensorFlow Serving's REST API: /v1/models/{m}[/versions/{v}|/labels/{l}][:predict|/metadata].

Requests are TF Serving's JSON: ``instances`` (row format: one entry per batch item, either the value of
the model's only input or an object naming the inputs) or ``inputs`` (columnar: one tensor, or an object
of tensors by input name), never both. Row-format answers carry ``predictions`` (one entry per batch item,
an object of outputs when there are several), columnar ones ``outputs``. Strings travel as UTF-8 text or
as ``{"b64": "..."}``; string outputs whose name ends in ``_bytes`` are always sent base64-encoded.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response

from poolserve.proto import types_pb2
from poolserve.runtime import dtypes
from poolserve.runtime.errors import InvalidArgumentError, NotFoundError, UnimplementedError
from poolserve.runtime.signature import TensorSpec
from poolserve.runtime.types import Array
from poolserve.server.models import ModelEntry
from poolserve.server.routes import Route
from poolserve.server.service import InferenceService, InferRequest, request_info

DEFAULT_SIGNATURE = "serving_default"
STABLE_LABEL = "stable"
PREDICT_METHOD = "tensorflow/serving/predict"
# bodies and outputs from this size on are decoded/encoded off the event loop (JSON is slow to parse/write)
_OFFLOAD_BYTES = 256 * 1024

# numpy kinds of parsed JSON each target kind accepts (ints for a float input are fine, text is not)
_ACCEPTS = {"f": "iuf", "c": "iuf", "i": "iuf", "u": "iuf", "b": "b"}


@dataclass
class PredictRequest:
    """A decoded :predict body: input arrays by public name, and which format to answer in."""

    inputs: dict[str, Array]
    row_format: bool
    signature_name: str


# --- request -----------------------------------------------------------------------------------------------


def parse_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidArgumentError(f"JSON Parse error: {e}") from None


def decode_predict(body: Any, entry: ModelEntry) -> PredictRequest:
    """A :predict body -> the model's input arrays, cast to the inputs' dtypes."""
    if not isinstance(body, dict):
        raise InvalidArgumentError("Request body must be a JSON object")
    signature = body.get("signature_name", "")
    if not isinstance(signature, str):
        raise InvalidArgumentError("'signature_name' must be a string")
    entry = entry.for_signature(signature or None)  # the signature's inputs decode the request
    has_instances, has_inputs = "instances" in body, "inputs" in body
    if has_instances and has_inputs:
        raise InvalidArgumentError("Not allowed to have both 'instances' and 'inputs' keys in the request")
    if has_instances:
        inputs = _decode_instances(body["instances"], entry)
    elif has_inputs:
        inputs = _decode_columns(body["inputs"], entry)
    else:
        raise InvalidArgumentError("Missing 'instances' or 'inputs' key in the request")
    return PredictRequest(inputs, has_instances, entry.signature_name)


def _is_b64(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and "b64" in value


def _only_input(entry: ModelEntry, where: str) -> TensorSpec:
    if len(entry.inputs) != 1:
        names = ", ".join(s.name for s in entry.inputs)
        raise InvalidArgumentError(
            f"Model '{entry.name}' has {len(entry.inputs)} inputs ({names}): {where} must be "
            "an object naming them"
        )
    return entry.inputs[0]


def _decode_instances(instances: Any, entry: ModelEntry) -> dict[str, Array]:
    if not isinstance(instances, list):
        raise InvalidArgumentError("'instances' must be a list")
    if not instances:
        raise InvalidArgumentError("'instances' is empty: no instances found in the request")
    first = instances[0]
    if not isinstance(first, dict) or _is_b64(first):
        spec = _only_input(entry, "each of 'instances'")
        return {spec.name: _instances_array(instances, spec)}
    specs = [entry.input_spec(name) for name in first]  # InvalidArgumentError for an unknown name
    for i, inst in enumerate(instances):
        if not isinstance(inst, dict) or _is_b64(inst):
            raise InvalidArgumentError(
                f"Expecting object but got {_json_kind(inst)} at item {i} of 'instances': "
                "every instance must name the inputs when the first one does"
            )
        if inst.keys() != first.keys():
            raise InvalidArgumentError(
                f"Instance {i} names inputs [{', '.join(inst)}] but instance 0 names "
                f"[{', '.join(first)}]: every instance must give the same inputs"
            )
    return {
        name: _instances_array([inst[name] for inst in instances], spec)
        for name, spec in zip(first, specs, strict=True)
    }


def _instances_array(values: list[Any], spec: TensorSpec) -> Array:
    """The batch of one input, each instance one row; instances of different shapes are refused."""
    try:
        return to_array(values, spec.dtype, f"input '{spec.name}'")
    except InvalidArgumentError:
        shapes = [_shape_of(v) for v in values]
        for i, s in enumerate(shapes):
            if s != shapes[0]:
                raise InvalidArgumentError(
                    f"Instances of input '{spec.name}' have different shapes: instance {i} is "
                    f"{_shape_text(s)} but instance 0 is {_shape_text(shapes[0])} (in the row format "
                    "every instance is one row of each input)"
                ) from None
        raise


def _decode_columns(inputs: Any, entry: ModelEntry) -> dict[str, Array]:
    if isinstance(inputs, dict) and not _is_b64(inputs):
        if not inputs:
            raise InvalidArgumentError("'inputs' is an empty object: no inputs found in the request")
        out = {}
        for name, value in inputs.items():
            spec = entry.input_spec(name)  # InvalidArgumentError for an unknown name
            out[name] = to_array(value, spec.dtype, f"input '{name}'")
        return out
    spec = _only_input(entry, "'inputs'")
    return {spec.name: to_array(inputs, spec.dtype, f"input '{spec.name}'")}


def to_array(value: Any, code: int, where: str) -> Array:
    """JSON (nested lists, numbers, bools, text, ``{"b64": ...}``) -> an array of DataType ``code``.

    ``code`` DT_INVALID (an input whose dtype the graph does not tell) keeps JSON's own types, with
    floats as float32 (TensorFlow's default float)."""
    untyped = code == types_pb2.DT_INVALID
    if code == types_pb2.DT_STRING or (untyped and _has_text(value)):
        return _string_array(value, where)
    try:
        arr = np.asarray(value)
    except ValueError:
        raise InvalidArgumentError(
            f"{where}: ragged nested lists (every list at one level must have the same length): "
            f"{_shape_text(_shape_of(value))}"
        ) from None
    kind = arr.dtype.kind
    if untyped:
        if kind not in "biuf":
            raise InvalidArgumentError(
                f"{where}: expected numbers, true/false or text, got {_found(value, kind)}"
            )
        return arr.astype(np.float32) if kind == "f" else arr
    dtype = dtypes.as_numpy_dtype(code)
    if arr.size == 0:
        return arr.astype(dtype)
    if kind not in _ACCEPTS.get(dtype.kind, ""):
        raise InvalidArgumentError(
            f"{where}: expected {_expected(dtype)} for dtype {dtypes.name(code)}, got {_found(value, kind)}"
        )
    if dtype.kind in "iu":
        return _to_int(arr, dtype, code, where)
    return arr.astype(dtype)


def _has_text(value: Any) -> bool:
    while isinstance(value, list) and value:
        value = value[0]
    return isinstance(value, str) or _is_b64(value)


def _to_int(arr: Array, dtype: np.dtype[Any], code: int, where: str) -> Array:
    if arr.dtype.kind == "f" and (not np.isfinite(arr).all() or (np.floor(arr) != arr).any()):
        raise InvalidArgumentError(
            f"{where}: expected integers for dtype {dtypes.name(code)}, got a fractional or non-finite number"
        )
    info = np.iinfo(dtype)
    if (arr < info.min).any() or (arr > info.max).any():
        raise InvalidArgumentError(
            f"{where}: value out of range for dtype {dtypes.name(code)} [{info.min}, {info.max}]"
        )
    return arr.astype(dtype)


def _string_array(value: Any, where: str) -> Array:
    flat: list[bytes] = []
    shape = _walk_strings(value, flat, where)
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(shape)


def _walk_strings(value: Any, flat: list[bytes], where: str) -> tuple[int, ...]:
    if isinstance(value, list):
        shapes = [_walk_strings(v, flat, where) for v in value]
        if any(s != shapes[0] for s in shapes[1:]):
            raise InvalidArgumentError(
                f"{where}: ragged nested lists (every list at one level must have the same length)"
            )
        return (len(value), *(shapes[0] if shapes else ()))
    if isinstance(value, str):
        flat.append(value.encode("utf-8"))
    elif _is_b64(value) and isinstance(value["b64"], str):
        try:
            flat.append(base64.b64decode(value["b64"], validate=True))
        except binascii.Error as e:
            raise InvalidArgumentError(f"{where}: invalid base64 in a b64 value: {e}") from None
    else:
        raise InvalidArgumentError(
            f'{where}: expected text or {{"b64": "..."}} for dtype string, got {_json_kind(value)}'
        )
    return ()


def _shape_of(value: Any) -> tuple[int, ...] | None:
    """The shape of nested lists, None when ragged."""
    if not isinstance(value, list):
        return ()
    inner = [_shape_of(v) for v in value]
    first = inner[0] if inner else ()
    if first is None or any(s != first for s in inner):
        return None
    return (len(value), *first)


def _shape_text(shape: tuple[int, ...] | None) -> str:
    if shape is None:
        return "a ragged nested list"
    return "[" + ",".join(map(str, shape)) + "]"


def _expected(dtype: np.dtype[Any]) -> str:
    return {"b": "true/false", "i": "integers", "u": "integers"}.get(dtype.kind, "numbers")


def _found(value: Any, kind: str) -> str:
    if kind in "US":
        return "text"
    if kind == "b":
        return "true/false"
    if kind in "iuf":
        return "numbers"
    if _contains_b64(value):
        return 'a {"b64": ...} value (base64 is for string inputs)'
    return "a mix of types (objects, nulls or text)"


def _contains_b64(value: Any) -> bool:
    if isinstance(value, list):
        return any(_contains_b64(v) for v in value)
    return _is_b64(value)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "true/false",
        int: "a number",
        float: "a number",
        str: "text",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)


# --- response ----------------------------------------------------------------------------------------------


def encode_predict(outputs: Mapping[str, Array], row_format: bool) -> bytes:
    """Output arrays by public name -> the response body ("predictions" or "outputs")."""
    if row_format:
        body: dict[str, Any] = {"predictions": _rows(outputs)}
    elif len(outputs) == 1:
        name, arr = next(iter(outputs.items()))
        body = {"outputs": to_json(arr, name)}
    else:
        body = {"outputs": {name: to_json(arr, name) for name, arr in outputs.items()}}
    return dump_json(body)


# one encoder for every answer: json.dumps with non-default arguments builds a new one per call
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dump_json(body: Any) -> bytes:
    # TF Serving writes NaN and Infinity as such (its parser reads them too), as Python's json does
    return _ENCODER.encode(body).encode("utf-8")


def _rows(outputs: Mapping[str, Array]) -> list[Any]:
    batch = None
    for name, arr in outputs.items():
        if np.ndim(arr) == 0:
            raise InvalidArgumentError(
                f"Output '{name}' is a scalar: it has no batch dimension for the row format "
                "('instances'); use the columnar format ('inputs')"
            )
        if batch is None:
            batch, first = len(arr), name
        elif len(arr) != batch:
            raise InvalidArgumentError(
                f"Output '{name}' has inconsistent batch size {len(arr)}, expecting {batch} "
                f"(as output '{first}'): use the columnar format ('inputs')"
            )
    columns = {name: to_json(arr, name) for name, arr in outputs.items()}
    if len(columns) == 1:
        return next(iter(columns.values()))
    return [{name: col[i] for name, col in columns.items()} for i in range(batch or 0)]


def to_json(arr: Array, name: str) -> Any:
    """An array as JSON values; strings as text, or base64 when binary or named ``*_bytes``."""
    arr = np.asarray(arr)
    kind = arr.dtype.kind
    if kind == "O" or kind == "S":
        always_b64 = name.endswith("_bytes")
        flat = [_string_json(v, always_b64) for v in arr.reshape(-1).tolist()]
        out = np.empty(len(flat), dtype=object)
        out[:] = flat
        return out.reshape(arr.shape).tolist()
    if kind == "c":
        raise UnimplementedError(f"Output '{name}' has dtype {arr.dtype}: complex values have no JSON form")
    return arr.tolist()


def _string_json(value: Any, always_b64: bool) -> Any:
    if isinstance(value, str):
        value = value.encode("utf-8")
    if not always_b64:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            pass  # not text: only base64 survives JSON
    return {"b64": base64.b64encode(value).decode("ascii")}


# --- routes ------------------------------------------------------------------------------------------------


def _version(version: str | None) -> int | None:
    if version is None:
        return None
    if not (version.isascii() and version.isdigit()) or int(version) < 1:
        raise InvalidArgumentError(f"Malformed request: version '{version}' is not a positive integer")
    return int(version)


def _label(label: str) -> int | None:
    """Version labels: "stable" is the latest version; no other label is assigned."""
    if label == STABLE_LABEL:
        return None
    raise NotFoundError(f"Unrecognized servable version label: {label} (the labels: {STABLE_LABEL})")


def model_status(service: InferenceService, model: str, version: int | None) -> dict[str, Any]:
    """GET /v1/models/{m}[/versions/{v}]: every version (or the one asked for) with its state."""
    service.model(model, version)  # NotFoundError naming the model or version
    versions = [version] if version is not None else sorted(service.models[model], reverse=True)
    state = "UNLOADING" if service.draining else "AVAILABLE"
    return {
        "model_version_status": [
            {"version": str(v), "state": state, "status": {"error_code": "OK", "error_message": ""}}
            for v in versions
        ]
    }


def model_metadata(entry: ModelEntry) -> dict[str, Any]:
    """GET /v1/models/{m}/metadata: the model spec and its signatures, in TF Serving's JSON."""
    signatures = {
        name: {
            "inputs": {s.name: _tensor_info(s) for s in sig.inputs},
            "outputs": {s.name: _tensor_info(s) for s in sig.outputs},
            "method_name": PREDICT_METHOD,
        }
        for name, sig in entry.signatures.items()
    }
    return {
        "model_spec": {"name": entry.name, "signature_name": "", "version": str(entry.version)},
        "metadata": {"signature_def": {"signature_def": signatures}},
    }


def _tensor_info(spec: TensorSpec) -> dict[str, Any]:
    if spec.shape is None:
        shape: dict[str, Any] = {"dim": [], "unknown_rank": True}
    else:
        shape = {"dim": [{"size": str(d), "name": ""} for d in spec.shape], "unknown_rank": False}
    return {"dtype": types_pb2.DataType.Name(spec.dtype), "tensor_shape": shape, "name": spec.tensor}


def _json_response(body: Any) -> Response:
    return Response(dump_json(body), media_type="application/json")


def _decode_body(body: bytes, entry: ModelEntry) -> PredictRequest:
    return decode_predict(parse_json(body), entry)


async def _predict(service: InferenceService, model: str, version: int | None, request: Request) -> Response:
    entry = service.model(model, version)
    body = await request.body()
    if len(body) >= _OFFLOAD_BYTES:
        decoded = await asyncio.to_thread(_decode_body, body, entry)
    else:
        decoded = _decode_body(body, entry)
    info = request_info(request.scope)
    result = await service.infer(
        InferRequest(
            entry.name,
            decoded.inputs,
            version=entry.version,
            signature_name=decoded.signature_name,
            **info._asdict(),
        )
    )
    if sum(np.asarray(v).nbytes for v in result.outputs.values()) >= _OFFLOAD_BYTES:
        content = await asyncio.to_thread(encode_predict, result.outputs, decoded.row_format)
    else:
        content = encode_predict(result.outputs, decoded.row_format)
    return Response(content, media_type="application/json")


def inference_routes(service: InferenceService) -> list[Route]:
    """The predict routes, as plain Starlette routes (see ``server.app``)."""

    async def latest(request: Request) -> Response:
        return await _predict(service, request.path_params["model"], None, request)

    async def version(request: Request) -> Response:
        return await _predict(
            service, request.path_params["model"], _version(request.path_params["version"]), request
        )

    async def label(request: Request) -> Response:
        return await _predict(
            service, request.path_params["model"], _label(request.path_params["label"]), request
        )

    return [
        Route("/v1/models/{model}:predict", latest, methods=["POST"]),
        Route("/v1/models/{model}/versions/{version}:predict", version, methods=["POST"]),
        Route("/v1/models/{model}/labels/{label}:predict", label, methods=["POST"]),
    ]


def router(service: InferenceService) -> APIRouter:
    """The TF Serving REST routes over ``service`` other than predict (``inference_routes``)."""
    api = APIRouter(tags=["tfserving"])

    @api.get("/v1/models/{model}")
    async def status_latest(model: str) -> Response:
        return _json_response(model_status(service, model, None))

    @api.get("/v1/models/{model}/versions/{version}")
    async def status_version(model: str, version: str) -> Response:
        return _json_response(model_status(service, model, _version(version)))

    @api.get("/v1/models/{model}/labels/{label}")
    async def status_label(model: str, label: str) -> Response:
        version = _label(label)
        return _json_response(model_status(service, model, service.model(model, version).version))

    @api.get("/v1/models/{model}/metadata")
    async def metadata_latest(model: str) -> Response:
        return _json_response(model_metadata(service.model(model)))

    @api.get("/v1/models/{model}/versions/{version}/metadata")
    async def metadata_version(model: str, version: str) -> Response:
        return _json_response(model_metadata(service.model(model, _version(version))))

    @api.get("/v1/models/{model}/labels/{label}/metadata")
    async def metadata_label(model: str, label: str) -> Response:
        return _json_response(model_metadata(service.model(model, _label(label))))

    return api
