"""TensorFlow Serving's REST API: /v1/models/{m}[/versions/{v}|/labels/{l}][:predict|/metadata].

Requests are TF Serving's JSON: ``instances`` (row format: one entry per batch item, either the value of
the model's only input or an object naming the inputs) or ``inputs`` (columnar: one tensor, or an object
of tensors by input name), never both. Row-format answers carry ``predictions`` (one entry per batch item,
an object of outputs when there are several), columnar ones ``outputs``. Strings travel as UTF-8 text or
as ``{"b64": "..."}``; string outputs whose name ends in ``_bytes`` are always sent base64-encoded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import APIRouter, Request, Response

from poolserve.proto import types_pb2
from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.signature import TensorSpec
from poolserve.runtime.types import Array
from poolserve.server import codec
from poolserve.server.adapter import Adapter, Encoded, route
from poolserve.server.models import ModelEntry
from poolserve.server.routes import Route
from poolserve.server.service import InferenceService, InferRequest, InferResult

DEFAULT_SIGNATURE = "serving_default"
PREDICT_METHOD = "tensorflow/serving/predict"


@dataclass
class PredictRequest:
    """A decoded :predict body: input arrays by public name, and which format to answer in."""

    inputs: dict[str, Array]
    row_format: bool
    signature_name: str


# --- request -----------------------------------------------------------------------------------------------


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


def _only_input(entry: ModelEntry, where: str) -> TensorSpec:
    if len(entry.inputs) != 1:
        names = ", ".join(s.name for s in entry.inputs)
        raise InvalidArgumentError(
            f"Model '{entry.name}' has {len(entry.inputs)} inputs ({names}): {where} must be "
            "an object naming them"
        )
    return entry.inputs[0]


def _decode_instances(instances: Any, entry: ModelEntry) -> dict[str, Array]:
    if isinstance(instances, np.ndarray):  # rows of numbers, read as one array (codec.loads_tensors)
        spec = _only_input(entry, "each of 'instances'")
        return {spec.name: _instances_array(instances, spec)}
    if not isinstance(instances, list):
        raise InvalidArgumentError("'instances' must be a list")
    if not instances:
        raise InvalidArgumentError("'instances' is empty: no instances found in the request")
    first = instances[0]
    if not isinstance(first, dict) or codec.is_b64(first):
        spec = _only_input(entry, "each of 'instances'")
        return {spec.name: _instances_array(instances, spec)}
    specs = [entry.input_spec(name) for name in first]  # InvalidArgumentError for an unknown name
    for i, inst in enumerate(instances):
        if not isinstance(inst, dict) or codec.is_b64(inst):
            raise InvalidArgumentError(
                f"Expecting object but got {codec.json_kind(inst)} at item {i} of 'instances': "
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


def _instances_array(values: list[Any] | Array, spec: TensorSpec) -> Array:
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
    if isinstance(inputs, dict) and not codec.is_b64(inputs):
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
    """JSON (nested lists, numbers, bools, text, ``{"b64": ...}``) -> an array of DataType ``code`` (the
    codec's rules; DT_INVALID: the graph does not tell)."""
    return codec.from_json(where, value, codec.spec_dtype(code))


def _shape_of(value: Any, depth: int = 0) -> tuple[int, ...] | None:
    """The shape of nested lists (or of an array ``codec.loads_tensors`` read), None when ragged or
    deeper than an array can be (``codec.MAX_RANK``: the recursion stops there, far within Python's)."""
    if isinstance(value, np.ndarray):
        return tuple(value.shape)
    if not isinstance(value, list):
        return ()
    if depth == codec.MAX_RANK:
        return None
    inner = [_shape_of(v, depth + 1) for v in value]
    first = inner[0] if inner else ()
    if first is None or any(s != first for s in inner):
        return None
    return (len(value), *first)


def _shape_text(shape: tuple[int, ...] | None) -> str:
    if shape is None:
        return "a ragged or too deeply nested list"
    return "[" + ",".join(map(str, shape)) + "]"


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
    return codec.dumps(body)


def _rows(outputs: Mapping[str, Array]) -> Any:
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
    if len(outputs) == 1:
        name, arr = next(iter(outputs.items()))
        return to_json(arr, name)
    arrays = {name: np.asarray(arr) for name, arr in outputs.items()}
    return [{name: to_json(arr[i], name) for name, arr in arrays.items()} for i in range(batch or 0)]


def to_json(arr: Array, name: str) -> Any:
    """An array as JSON values; strings as text, or base64 when binary or named ``*_bytes``."""
    return codec.to_json(f"Output '{name}'", arr, strings="b64" if name.endswith("_bytes") else "text_or_b64")


# --- routes ------------------------------------------------------------------------------------------------


def _version(version: str | None) -> int | None:
    return codec.parse_version(version)


def _label(service: InferenceService, model: str, label: str) -> int:
    """The version a label names: the model's ``labels`` in the config; "stable" is the latest version
    unless the config names it."""
    return service.repository.label_version(model, label)


def model_status(service: InferenceService, model: str, version: int | None) -> dict[str, Any]:
    """GET /v1/models/{m}[/versions/{v}]: every version (or the one asked for) with its state and, for a
    version that failed to load, the error."""
    statuses = service.repository.status(model, version)
    if service.draining:
        for s in statuses:
            if s["state"] == "AVAILABLE":
                s["state"] = "UNLOADING"
    return {"model_version_status": statuses}


def model_metadata(entry: ModelEntry) -> dict[str, Any]:
    """GET /v1/models/{m}/metadata: the model spec and its signatures, in TF Serving's JSON."""
    signatures = {
        name: {
            "inputs": {s.name: _tensor_info(s) for s in sig.inputs},
            "outputs": {s.name: _tensor_info(s) for s in sig.outputs},
            "method_name": entry.methods.get(name, PREDICT_METHOD),
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
    return Response(codec.dumps(body), media_type="application/json")


class TFServingAdapter(Adapter[bool]):
    """TF Serving's JSON; the answer in the request's format (the context: row format or not)."""

    def decode(self, request: Request, body: bytes, entry: ModelEntry) -> tuple[InferRequest, bool]:
        decoded = decode_predict(codec.loads_tensors(body), entry)
        infer = InferRequest(
            entry.name, decoded.inputs, version=entry.version, signature_name=decoded.signature_name
        )
        return infer, decoded.row_format

    def encode(self, request: Request, result: InferResult, context: bool) -> Encoded:
        return Encoded(encode_predict(result.outputs, context))


def inference_routes(service: InferenceService) -> list[Route]:
    """The predict routes, as plain Starlette routes (see ``server.app``)."""
    adapter = TFServingAdapter()
    return [
        route("/v1/models/{model}:predict", adapter, service),
        route("/v1/models/{model}/versions/{version}:predict", adapter, service),
        route(
            "/v1/models/{model}/labels/{label}:predict",
            adapter,
            service,
            lambda r: _label(service, r.path_params["model"], r.path_params["label"]),
        ),
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
        return _json_response(model_status(service, model, _label(service, model, label)))

    @api.get("/v1/models/{model}/metadata")
    async def metadata_latest(model: str) -> Response:
        return _json_response(model_metadata(service.model(model)))

    @api.get("/v1/models/{model}/versions/{version}/metadata")
    async def metadata_version(model: str, version: str) -> Response:
        return _json_response(model_metadata(service.model(model, _version(version))))

    @api.get("/v1/models/{model}/labels/{label}/metadata")
    async def metadata_label(model: str, label: str) -> Response:
        return _json_response(model_metadata(service.model(model, _label(service, model, label))))

    return api
